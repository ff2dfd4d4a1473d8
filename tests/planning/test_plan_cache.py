"""dpsql.planning.plan_cache: planning decisions and statement groupings reused, never trusted blindly."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql import engine
from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.plan import grouping, vector_plans
from dpsql.matrix import workloads
from dpsql.planning import accuracy, plan_cache, planner
from dpsql.schema import Grid, Ordered, Schema


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DPSQL_CACHE_DIR", str(tmp_path))
    return tmp_path


def _no_scoring(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> float:
        raise AssertionError("a cached decision was scored again")

    monkeypatch.setattr(accuracy, "expected_error", refuse)


def test_a_workload_planned_before_is_not_scored_again(monkeypatch: pytest.MonkeyPatch) -> None:
    W = workloads.VStack([workloads.Kron([workloads.AllRange(6), workloads.Total(5)]),
                          workloads.Kron([workloads.Total(6), workloads.Prefix(5)])])
    first = planner.plan(W, noise="laplace", sizes=[6, 5])
    plan_cache.clear_memory()  # from disk, as in a new process
    _no_scoring(monkeypatch)
    again = planner.plan(W, noise="laplace", sizes=[6, 5])
    assert again.name == first.name and again.candidates == first.candidates
    np.testing.assert_array_equal(again.strategy.dense(), first.strategy.dense())
    assert planner.expected_error(W, noise="laplace", sizes=[6, 5]) == first.expected_error


def test_different_workloads_and_options_get_different_decisions() -> None:
    keys = {plan_cache.decision_key(W, noise=noise, options=options, extra={})
            for W in (workloads.Prefix(8), workloads.AllRange(8), workloads.Ranges(8, [(0, 3)]),
                      workloads.Ranges(8, [(0, 4)]),
                      workloads.Weighted(2.0, workloads.Prefix(8)), workloads.Explicit(np.eye(8)))
            for noise in ("laplace", "gaussian") for options in (["quick=True"], ["quick=False"])}
    assert len(keys) == 6 * 2 * 2
    extra = plan_cache.decision_key(workloads.Prefix(8), noise="laplace", options=[],
                                    extra={"x": workloads.Identity(8)})
    assert extra != plan_cache.decision_key(workloads.Prefix(8), noise="laplace", options=[], extra={})


def test_a_damaged_or_inconsistent_entry_is_planned_again(private_cache: Path) -> None:
    W = workloads.Prefix(16)
    first = planner.plan(W, noise="laplace")
    (entry,) = (private_cache / "plans").glob("*.json")
    for damage in ("{not json", '{"name": "nonesuch", "candidates": {"H2": 1.0}, "notes": []}',
                   '{"name": "H2", "candidates": {"H2": -1.0}, "notes": []}'):
        entry.write_text(damage)
        plan_cache.clear_memory()
        again = planner.plan(W, noise="laplace")
        assert again.name == first.name and again.candidates == pytest.approx(first.candidates, rel=1e-12)


def test_a_cached_decision_never_changes_the_noise_calibration(private_cache: Path) -> None:
    """A tampered entry can name another strategy (accuracy), never change the privacy: the
    sensitivity the mechanism calibrates to is the measured strategy's own."""
    W = workloads.Prefix(16)
    planner.plan(W, noise="laplace")
    (entry,) = (private_cache / "plans").glob("*.json")
    entry.write_text('{"name": "identity", "candidates": {"identity": 1e-9}, "notes": []}')
    plan_cache.clear_memory()
    tampered = planner.plan(W, noise="laplace")
    assert tampered.name == "identity" and tampered.strategy.sensitivity("l1") == 1.0


#: A table and a batch of three statements that the grouping search splits into groups.
GROUPED_SCHEMA = {"tables": {"t": {"columns": {
    "x": {"type": "integer", "lower": 0, "upper": 31, "bin_width": 4, "resolution": 1},
    "g": {"type": "categorical", "values": ["a", "b", "c"]}}}}}
GROUPED_BATCH = ("SELECT g, COUNT(*) FROM t GROUP BY g; SELECT x, COUNT(*) FROM t GROUP BY x; "
                 "SELECT COUNT(*) FROM t WHERE x < 10 AND g = 'a'")


def test_a_batch_is_grouped_once(monkeypatch: pytest.MonkeyPatch) -> None:
    schema, batch = Schema.load(GROUPED_SCHEMA), GROUPED_BATCH
    first = engine.prepare(batch, schema, PrivacyCost(epsilon=1.0))
    plan_cache.clear_memory()
    searched: list[int] = []
    monkeypatch.setattr(grouping, "search_partition", lambda *args: searched.append(1) or [[0], [1], [2]])
    again = engine.prepare(batch, schema, PrivacyCost(epsilon=1.0))
    assert searched == []
    assert [s.group for s in again.groups.compiled.statements] == [s.group for s in first.groups.compiled.statements]
    engine.prepare(batch.replace("x < 10", "x < 11"), schema, PrivacyCost(epsilon=1.0))
    assert searched == [1]  # another batch is grouped afresh


def test_a_batch_is_grouped_once_wherever_its_statements_stand_in_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """The partition is keyed by what the statements ask (their digests), not by their spans."""
    schema, batch = Schema.load(GROUPED_SCHEMA), GROUPED_BATCH
    engine.prepare(batch, schema, PrivacyCost(epsilon=1.0))
    plan_cache.clear_memory()
    searched: list[int] = []
    monkeypatch.setattr(grouping, "search_partition", lambda *args: searched.append(1) or [[0], [1], [2]])
    engine.prepare("\n  " + batch.replace("; ", ";\n\n   "), schema, PrivacyCost(epsilon=1.0))
    assert searched == []


def test_statement_digests_are_memoised_exactly() -> None:
    from dpsql.sql.parse import parse_batch

    batch = parse_batch("SELECT COUNT(*) FROM t; SELECT COUNT(*) FROM t WHERE x < 3;  SELECT COUNT(*) FROM t", None)
    fresh = [grouping.statement_digest.__wrapped__(s) for s in batch.statements]
    assert grouping.statement_digests(batch) == grouping.statement_digests(batch) == fresh
    assert fresh[0] == fresh[2] != fresh[1]


def test_each_blocks_expected_error_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-statement errors the objective and the guard need are kept with the decisions: a
    batch prepared again (as in a new process) computes no pseudo-inverse."""
    schema = Schema.load({"tables": {"t": {"columns": {
        "x": {"type": "integer", "lower": 0, "upper": 31, "bin_width": 4, "resolution": 1},
        "g": {"type": "categorical", "values": ["a", "b", "c"]}}}}})
    batch = ("SELECT g, COUNT(*) FROM t GROUP BY g; SELECT COUNT(*) FROM t WHERE x < 10; "
             "SELECT x, COUNT(*) FROM t GROUP BY x")
    first = engine.prepare(batch, schema, PrivacyCost(epsilon=1.0))
    plan_cache.clear_memory()
    _no_scoring(monkeypatch)
    monkeypatch.setattr(vector_plans, "pinv_gram",
                        lambda *args: (_ for _ in ()).throw(AssertionError("computed again")))
    again = engine.prepare(batch, schema, PrivacyCost(epsilon=1.0))
    assert [m.block_totals for m in again.groups.measurements] == [m.block_totals for m in first.groups.measurements]


# ---------------------------------------------------------------------------- domains by declaration
INCOME = {"type": "integer", "lower": 0, "upper": 500_000, "bin_width": 10_000, "resolution": 1}


def _table_key(**columns: dict[str, object]) -> str:
    table = Schema.load({"tables": {"t": {"columns": columns}}}).table("t")
    return plan_cache.object_key("partition", "laplace", table)


def test_equal_declarations_share_a_key_in_every_process() -> None:
    columns = {"income": INCOME, "day": {"type": "date", "lower": "2020-01-01", "upper": "2024-12-31", "bin_width": 7},
               "x": {"type": "numeric", "lower": 0, "upper": 1, "resolution": 0.1, "out_of_domain": "clamp"}}
    key = _table_key(**columns)
    assert _table_key(**{name: dict(spec) for name, spec in columns.items()}) == key
    program = ("import json, sys; from dpsql.schema import Schema; from dpsql.planning import plan_cache; "
               "table = Schema.load({'tables': {'t': {'columns': json.loads(sys.argv[1])}}}).table('t'); "
               "print(plan_cache.object_key('partition', 'laplace', table))")
    other = subprocess.run([sys.executable, "-c", program, json.dumps(columns)], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert other.stdout.strip() == key  # the on-disk cache is shared across processes


@pytest.mark.parametrize("change", [
    {"lower": 1}, {"upper": 499_999}, {"resolution": 2}, {"bin_width": 5_000}, {"type": "numeric"},
    {"out_of_domain": "clamp"}, {"out_of_domain": "exclude"}, {"edges": [0, 10, 500_000]}])
def test_any_different_declaration_gets_another_key(change: dict[str, object]) -> None:
    spec = {**INCOME, **change}
    if "edges" in change:
        spec = {key: value for key, value in spec.items() if key not in ("lower", "upper", "bin_width", "resolution")}
    assert _table_key(income=spec) != _table_key(income=INCOME)


def test_every_field_of_a_grid_declaration_is_in_the_key() -> None:
    base = {"lower": 0.0, "step": 1.0, "cells": 10, "top": 10.0, "per_bin": 1}
    variants = [dict(base), {**base, "lower": -1.0}, {**base, "step": 2.0}, {**base, "cells": 9},
                {**base, "top": 9.5}, {**base, "per_bin": 2}]
    domains = [Ordered(kind="numeric", grid=Grid(**grid)) for grid in variants]  # type: ignore[arg-type]
    domains += [Ordered(kind="integer", grid=Grid(**base)), Ordered(kind="numeric", grid=Grid(**base), clamp=True),  # type: ignore[arg-type]
                Ordered(kind="date", grid=Grid(**base), unit="day")]  # type: ignore[arg-type]
    keys = {plan_cache.object_key(domain) for domain in domains}
    assert len(keys) == len(domains)
    assert len({domain for domain in domains}) == len(domains)  # ... and they are different domains


def test_a_domain_is_keyed_without_enumerating_its_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key reads the declaration, not the 500,001 boundaries: the bytes hashed do not grow with
    the number of cells (enumerated, they would be 4 MB)."""
    fed: list[int] = []
    sha256 = hashlib.sha256

    class Counting:
        def __init__(self, data: bytes) -> None:
            self.digest = sha256(data)

        def update(self, data: bytes) -> None:
            fed.append(len(data))
            self.digest.update(data)

        def hexdigest(self) -> str:
            return self.digest.hexdigest()

    monkeypatch.setattr(hashlib, "sha256", Counting)

    def hashed(upper: int) -> int:
        table = Schema.load({"tables": {"t": {"columns": {"income": {**INCOME, "upper": upper}}}}}).table("t")
        fed.clear()
        plan_cache.object_key("partition", "laplace", table)
        return sum(fed)

    small, large = hashed(100), hashed(500_000)
    assert large - small <= 8 and large < 2_000


def test_a_domain_on_a_grid_is_the_domain_of_its_boundaries() -> None:
    grid = Ordered(kind="integer", grid=Grid(lower=0.0, step=2.0, cells=3, top=6.0, per_bin=2))
    assert grid.boundaries == (0.0, 2.0, 4.0, 6.0) and grid.bin_starts == (0, 2) and grid.uniform_step == 2.0
    assert grid == Ordered(kind="integer", boundaries=(0.0, 2.0, 4.0, 6.0), bin_starts=(0, 2), uniform_step=2.0)
    assert dataclasses.replace(grid, clamp=True).boundaries is grid.boundaries  # replace passes the grid's own
    with pytest.raises(ValueError, match="pass only grid"):
        Ordered(kind="integer", boundaries=(0.0, 2.0), grid=Grid(lower=0.0, step=1.0, cells=1, top=1.0))


@dataclasses.dataclass(frozen=True)
class _Pair:
    name: str
    value: object


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=8), st.integers(), st.floats(), st.booleans(), st.none()))
def test_object_key_feeds_scalars_and_dataclass_fields_in_one_format(value: object) -> None:
    """A scalar is fed as <type:repr> (unless its type is omitted), a dataclass field by field in
    declaration order: the keys written to the cache folder do not depend on how they are computed."""
    def expected(*pieces: str) -> str:
        return hashlib.sha256((f"object|{plan_cache.DECISION_FORMAT}" + "".join(pieces)).encode()).hexdigest()

    scalar = f"<{type(value).__name__}:{value!r}>"
    assert plan_cache.object_key(value) == expected(scalar)
    assert plan_cache.object_key(value, omit=(type(value),)) == expected(f"<omitted {type(value).__qualname__}>")
    assert plan_cache.object_key(_Pair("a", value)) == expected(f"<{_Pair.__qualname__}", "name=<str:'a'>",
                                                                 "value=", scalar, ">")
