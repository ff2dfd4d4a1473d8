"""dpsql.planning.plan_cache: planning decisions and statement groupings reused, never trusted blindly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpsql import engine
from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.plan import grouping, vector_plans
from dpsql.matrix import workloads
from dpsql.planning import accuracy, plan_cache, planner
from dpsql.schema import Schema


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


def test_a_batch_is_grouped_once(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = Schema.load({"tables": {"t": {"columns": {
        "x": {"type": "integer", "lower": 0, "upper": 31, "bin_width": 4, "resolution": 1},
        "g": {"type": "categorical", "values": ["a", "b", "c"]}}}}})
    batch = ("SELECT g, COUNT(*) FROM t GROUP BY g; SELECT x, COUNT(*) FROM t GROUP BY x; "
             "SELECT COUNT(*) FROM t WHERE x < 10 AND g = 'a'")
    first = engine.prepare(batch, schema, PrivacyCost(epsilon=1.0))
    plan_cache.clear_memory()
    searched: list[int] = []
    monkeypatch.setattr(grouping, "search_partition", lambda *args: searched.append(1) or [[0], [1], [2]])
    again = engine.prepare(batch, schema, PrivacyCost(epsilon=1.0))
    assert searched == []
    assert [s.group for s in again.groups.compiled.statements] == [s.group for s in first.groups.compiled.statements]
    engine.prepare(batch.replace("x < 10", "x < 11"), schema, PrivacyCost(epsilon=1.0))
    assert searched == [1]  # another batch is grouped afresh


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
