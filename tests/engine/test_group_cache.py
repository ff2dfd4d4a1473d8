"""Statement groups' plans cached by group (issue 31, item 3): a batch sharing groups with an earlier
one reuses their candidate scores, and its plan is exactly the plan it gets cold. Identical statements
of one batch (a batch of 1,000 repeats many) are compiled once in the group search, each copy keeping
its own statement, and the plan is exactly the plan found compiling every copy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsql import engine
from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.plan import grouping
from dpsql.engine.plan.routes import Prepared
from dpsql.engine.plan.weighing import Weighing
from dpsql.planning import plan_cache
from dpsql.schema import Schema
from dpsql.sql.compile import StatementMemo, batch_table, compile_group
from dpsql.sql.parse import parse_batch

COLUMNS: dict[str, dict[str, Any]] = {
    "x": {"type": "integer", "lower": 0, "upper": 63, "bin_width": 4, "resolution": 1},
    "y": {"type": "integer", "lower": 0, "upper": 15, "bin_width": 2, "resolution": 1},
    "g": {"type": "categorical", "values": ["a", "b", "c"]},
    "v": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1},
}
FIRST = [
    "SELECT COUNT(*) AS n FROM t WHERE x BETWEEN 3 AND 40",
    "SELECT COUNT(*) AS n FROM t WHERE x >= 20",
    "SELECT g, COUNT(*) AS n FROM t WHERE x < 30 GROUP BY g",
    "SELECT g, AVG(v) AS a FROM t WHERE x BETWEEN 10 AND 50 GROUP BY g",
    "SELECT y, COUNT(*) AS n FROM t WHERE x < 45 GROUP BY y",
    "SELECT g, y, COUNT(*) AS n FROM t GROUP BY g, y",
    "SELECT COUNT(*) AS n FROM t WHERE y BETWEEN 2 AND 9",
]
#: FIRST with one range changed (and its text a different length: every later statement moves).
CHANGED = [FIRST[0].replace("40", "039"), *FIRST[1:]]
ADDED = [*FIRST, "SELECT COUNT(*) AS n FROM t WHERE x BETWEEN 8 AND 17"]


def _schema(columns: dict[str, dict[str, Any]] | None = None, unit: dict[str, Any] | None = None) -> Schema:
    table: dict[str, Any] = {"columns": dict(columns or COLUMNS)}
    if unit is not None:
        table["columns"]["pid"] = {"type": "integer", "lower": 0, "upper": 10**6}
        table["privacy_unit"] = unit
    return Schema.load({"tables": {"t": table}})


def _prepare(statements: list[str], schema: Schema | None = None, cost: PrivacyCost | None = None,
             weights: list[float] | None = None) -> Prepared:
    return engine.prepare(";\n".join(statements), schema or _schema(), cost or PrivacyCost(epsilon=1.0),
                          weights=weights)


def _summary(prepared: Prepared) -> list[tuple[object, ...]]:
    """Everything a group plan decides: the groups, each measurement's strategy, every candidate's
    expected error, its errors per block, its share and noise scale (exactly)."""
    plan = prepared.groups
    groups = [s.group for s in plan.compiled.statements]
    return [(groups, m.group, m.vector, m.plan.name, m.plan.candidates, m.plan.notes, m.block_totals, m.cell_bounds,
             m.share, m.noise_scale, m.row_scale) for m in plan.measurements]


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DPSQL_CACHE_DIR", str(tmp_path / "cache"))
    plan_cache.clear_memory()
    yield tmp_path
    plan_cache.clear_memory()


def _cold(statements: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dedup: bool = True,
          **options: Any) -> Prepared:
    """``statements`` planned with empty caches (another cache folder, nothing in memory); ``dedup``
    False: every statement compiled on its own in the group search, copies too."""
    with monkeypatch.context() as local:
        local.setenv("DPSQL_CACHE_DIR", str(tmp_path / f"cold-{len(list(tmp_path.iterdir()))}"))
        if not dedup:
            local.setattr(grouping, "same_statements", lambda digests: list(range(len(digests))))
        plan_cache.clear_memory()
        prepared = _prepare(statements, **options)
    plan_cache.clear_memory()
    return prepared


@pytest.mark.parametrize("second", [CHANGED, ADDED], ids=["one range changed", "one statement added"])
@pytest.mark.parametrize("new_process", [False, True])
@pytest.mark.parametrize("noise", ["epsilon", "rho"])
def test_a_batch_after_one_sharing_its_groups_is_planned_as_it_is_cold(
        second: list[str], new_process: bool, noise: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cost = PrivacyCost.of(noise, 1.0)  # type: ignore[arg-type]
    cold = _cold(second, tmp_path, monkeypatch, cost=cost)
    _prepare(FIRST, cost=cost)
    if new_process:
        plan_cache.clear_memory()  # the on-disk cache only
    after = _prepare(second, cost=cost)
    assert _summary(after) == _summary(cold)


def test_only_the_candidate_groups_holding_the_change_are_scored_again(monkeypatch: pytest.MonkeyPatch) -> None:
    _prepare(FIRST)
    plan_cache.clear_memory()  # as in a new process
    scored: list[list[str]] = []
    original = grouping.candidate_errors

    def counting(batch: Any, table: Any, members: list[int], weighing: Weighing, *memo: Any) -> Any:
        scored.append([batch.statements[i].text for i in members])
        return original(batch, table, members, weighing, *memo)

    monkeypatch.setattr(grouping, "candidate_errors", counting)
    _prepare(CHANGED)
    assert scored and all(CHANGED[0] in texts for texts in scored)
    scored.clear()
    _prepare(CHANGED)
    assert scored == []


def _key(statements: list[str], members: list[int], *, schema: Schema | None = None, noise: str = "laplace",
         weights: list[float] | None = None) -> str:
    batch = parse_batch(";\n".join(statements), None)
    table = (schema or _schema()).table("t")
    weighing = Weighing(weights=tuple(weights or [1.0] * len(statements)), noise=noise)  # type: ignore[arg-type]
    return grouping.group_key("candidate group", batch, table, members, weighing)


def test_a_group_is_keyed_by_what_its_statements_ask_not_where_they_are() -> None:
    key = _key(FIRST, [1, 2])
    assert _key(CHANGED, [1, 2]) == key  # statement 0's text changed length: the others moved
    assert _key(["SELECT COUNT(*) AS total FROM t", *FIRST], [2, 3]) == key
    assert _key(FIRST, [2, 1]) != key  # the order of the blocks
    assert _key(FIRST, [1, 3]) != key


@pytest.mark.parametrize("change", [
    {"noise": "gaussian"},
    {"weights": [1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]},
    {"schema": _schema({**COLUMNS, "x": {**COLUMNS["x"], "upper": 62}})},
    {"schema": _schema({**COLUMNS, "x": {**COLUMNS["x"], "bin_width": 8}})},
    {"schema": _schema({**COLUMNS, "g": {"type": "categorical", "values": ["a", "b", "c", "d"]}})},
    {"schema": _schema({**COLUMNS, "v": {**COLUMNS["v"], "upper": 199}})},
    {"schema": _schema(unit={"column": "pid", "max_rows": 2})},
], ids=["noise family", "weights", "domain bounds", "domain bins", "categories", "measure bound", "unit bound"])
def test_anything_a_group_plan_depends_on_changes_its_key(change: dict[str, Any]) -> None:
    assert _key(FIRST, [1, 2, 3], **change) != _key(FIRST, [1, 2, 3])


@pytest.mark.parametrize("change", [
    {"cost": PrivacyCost(rho=0.5)},
    {"weights": [1.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0]},
    {"schema": _schema({**COLUMNS, "x": {**COLUMNS["x"], "bin_width": 8}})},
    {"schema": _schema(unit={"column": "pid", "max_rows": 3})},
], ids=["noise family", "weights", "domain", "unit bound"])
def test_a_change_the_plan_depends_on_misses_the_cache(change: dict[str, Any], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _prepare(FIRST)
    after = _prepare(CHANGED, **change)
    assert _summary(after) == _summary(_cold(CHANGED, tmp_path, monkeypatch, **change))


def test_a_damaged_group_entry_is_scored_again(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = _summary(_cold(CHANGED, private_cache, monkeypatch))
    _prepare(FIRST)
    damaged = 0
    for path in (private_cache / "cache" / "plans").glob("*.json"):
        if '"errors"' in path.read_text():
            path.write_text('{"errors": [NaN], "sizes": [[-1]]}')
            damaged += 1
    assert damaged
    plan_cache.clear_memory()
    assert _summary(_prepare(CHANGED)) == cold


#: Statements over ``t`` sampled with repeats.
POOL = ["SELECT g, COUNT(*) AS n FROM t GROUP BY g", "SELECT y, COUNT(*) AS n FROM t GROUP BY y", *FIRST]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(statements=st.lists(st.sampled_from(POOL), min_size=2, max_size=12))
def test_a_batch_with_repeated_statements_is_planned_as_without_deduplication(
        statements: list[str], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path_factory.mktemp("dedup")
    deduplicated = _cold(statements, folder, monkeypatch)
    every_copy = _cold(statements, folder, monkeypatch, dedup=False)
    assert _summary(deduplicated) == _summary(every_copy)
    assert deduplicated.groups.weights == every_copy.groups.weights
    assert deduplicated.groups.guard_notes == every_copy.groups.guard_notes
    assert [repr(e) for e in deduplicated.groups.statement_errors()] == \
        [repr(e) for e in every_copy.groups.statement_errors()]  # each statement's own expected error
    own = parse_batch(";\n".join(statements), None).statements
    assert [c.statement for c in deduplicated.groups.compiled.statements] == list(own)


def test_copies_of_a_statement_are_compiled_once_in_the_group_search(monkeypatch: pytest.MonkeyPatch) -> None:
    memos: list[StatementMemo] = []

    class Counting(StatementMemo):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            memos.append(self)

    copies = 20
    monkeypatch.setattr(grouping, "StatementMemo", Counting)  # every memo of the batch is made by grouping.batch_memo
    _prepare([POOL[0]] * copies + [FIRST[0]] * copies + [FIRST[1]])
    compiled = {key for memo in memos for key in memo.compiled}
    assert memos and {index for index, _ in compiled} == {0, copies, 2 * copies}  # each statement's first copy
    own = {key for memo in memos for key in memo.own}
    assert {index for index, _ in own} <= {0, copies, 2 * copies}
    assert sum(memo.compilations for memo in memos) <= len(compiled | own)


def test_the_memo_compiles_identical_statements_once_each_copy_keeping_its_own_statement() -> None:
    batch = parse_batch(";\n".join([POOL[0], FIRST[0], POOL[0], POOL[0]]), None)
    table = batch_table(batch, _schema())
    digests = grouping.statement_digests(batch)
    assert digests[0] == digests[2] == digests[3] != digests[1]
    assert grouping.same_statements(digests) == [0, 1, 0, 0]
    memo = StatementMemo(grouping.same_statements(digests))
    group, compiled = compile_group(batch, table, [0, 1, 2, 3], memo=memo)
    assert memo.compilations == 2
    plain, expected = compile_group(batch, table, [0, 1, 2, 3])
    assert [c.statement for c in compiled] == list(batch.statements)  # each its own spans
    assert [a.aggregate for c in compiled for a in c.aggregates] == [a for s in batch.statements for a in s.aggregates]
    assert [(c.group, c.group_axes, c.aggregates) for c in compiled] == \
        [(c.group, c.group_axes, c.aggregates) for c in expected]
    assert [(b.data, b.kind, b.scale, b.bias) for b in group.blocks] == \
        [(b.data, b.kind, b.scale, b.bias) for b in plain.blocks]


def test_a_groups_key_is_the_same_from_the_batchs_digests() -> None:
    batch = parse_batch(";\n".join([POOL[0], FIRST[0], POOL[0]]), None)
    weighing = Weighing(weights=(1.0, 1.0, 1.0), noise="laplace")
    table = batch_table(batch, _schema())
    assert grouping.group_key("g", batch, table, [0, 1], weighing) == \
        grouping.group_key("g", batch, table, [2, 1], weighing, digests=grouping.statement_digests(batch))
