"""compile.StatementMemo: a statement compiled once per distinct cells of its own columns, and a
group compiled through the memo equal to one compiled without it (issue 31)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.cli.demo import SCHEMA
from dpsql.planning import plan_cache
from dpsql.schema import Schema
from dpsql.sql.compile import StatementMemo, batch_table, compile_group
from dpsql.sql.parse import parse_batch

STATEMENTS = [
    "SELECT age, COUNT(*) AS n FROM census GROUP BY age",
    "SELECT sex, COUNT(*) AS n FROM census GROUP BY sex",
    "SELECT COUNT(*) AS n FROM census WHERE age BETWEEN 10 AND 42",
    "SELECT education, AVG(income) AS a FROM census WHERE age BETWEEN 3 AND 57 GROUP BY education",
    "SELECT sex, SUM(income) AS s FROM census WHERE hours < 40 GROUP BY sex",
    "SELECT COUNT(*) AS n FROM census WHERE hours >= 20 AND sex = 'F'",
    "SELECT COUNT(*) AS n FROM census WHERE age >= 50 AND age < 60",
]


def _same(left, right) -> None:  # type: ignore[no-untyped-def]
    (group_a, statements_a), (group_b, statements_b) = left, right
    assert [a.column.name for a in group_a.axes] == [b.column.name for b in group_b.axes]
    for a, b in zip(group_a.axes, group_b.axes):
        np.testing.assert_array_equal(a.cell_of_base, b.cell_of_base)
    assert len(group_a.blocks) == len(group_b.blocks)
    for a, b in zip(group_a.blocks, group_b.blocks):
        assert (a.data, a.kind, a.scale, a.bias) == (b.data, b.kind, b.scale, b.bias)
        assert type(a.workload) is type(b.workload)
        np.testing.assert_array_equal(a.workload.dense(), b.workload.dense())
        # the exact structure (every factor's entries), as the plan cache keys decisions by it
        assert plan_cache.decision_key(a.workload, noise="laplace", options=[], extra={}) == \
            plan_cache.decision_key(b.workload, noise="laplace", options=[], extra={})
    for a, b in zip(statements_a, statements_b):
        assert (a.group, a.group_axes) == (b.group, b.group_axes)
        # an order statistic's plan holds arrays: compared by its text
        assert [(x.aggregate, x.blocks, x.column, repr(x.quantile)) for x in a.aggregates] == \
            [(x.aggregate, x.blocks, x.column, repr(x.quantile)) for x in b.aggregates]
        np.testing.assert_array_equal(a.block_rows, b.block_rows)


def test_groups_compiled_through_the_memo_equal_those_compiled_without() -> None:
    schema = Schema.load(SCHEMA)
    batch = parse_batch(";\n".join(STATEMENTS))
    table = batch_table(batch, schema)
    memo = StatementMemo()
    candidates = [[0], [1], [0, 1], [1, 0, 4], [2, 3], [0, 2, 3], [4, 5], [1, 4, 5], [0, 1, 2, 3, 4, 5], [3, 5]]
    for index, members in enumerate(candidates):
        _same(compile_group(batch, table, members, index, memo=memo), compile_group(batch, table, members, index))
    assert memo.compilations < sum(len(m) for m in candidates)


def test_a_statement_is_compiled_once_per_cells_of_its_own_columns() -> None:
    schema = Schema.load(SCHEMA)
    batch = parse_batch(";\n".join(STATEMENTS))
    table = batch_table(batch, schema)
    memo = StatementMemo()
    compile_group(batch, table, [1, 4], memo=memo)  # sex, and hours for the SUM's WHERE
    assert memo.compilations == 2
    compile_group(batch, table, [1, 4], 3, memo=memo)
    assert memo.compilations == 2  # the same cells in another group
    compile_group(batch, table, [0, 1, 4], memo=memo)
    assert memo.compilations == 3  # a new axis: only statement 0 is compiled; 1 and 4 get a row of ones on it
    grown, _ = compile_group(batch, table, [0, 1, 4, 6], memo=memo)  # its range falls on the age bands' edges
    assert memo.compilations == 4  # so only the new statement is compiled
    _same((grown, _), compile_group(batch, table, [0, 1, 4, 6]))


def test_each_statement_s_masks_and_keys_are_read_once_per_column() -> None:
    """The memo keeps each statement's atoms' masks and group keys per column (``axis_masks``, ``axis_keys``):
    candidate groups holding it build their cells from them, identically to compiling without the memo."""
    schema = Schema.load(SCHEMA)
    batch = parse_batch(";\n".join(STATEMENTS + STATEMENTS[2:4]))  # the last two repeat statements 2 and 3
    table = batch_table(batch, schema)
    memo = StatementMemo(same=[0, 1, 2, 3, 4, 5, 6, 2, 3])
    for members in ([0, 2, 6], [2, 3, 7, 8], [0, 1, 2, 3, 4, 5, 6, 7, 8], [4, 8]):
        _same(compile_group(batch, table, members, memo=memo), compile_group(batch, table, members))
    assert all(index not in (7, 8) for index, _ in memo.masks)  # copies read the first statement's masks
    assert {"age", "hours"} <= {column for _, column in memo.masks} and set(memo.keys) >= set(memo.masks)


#: Statements of many shapes: OR and NOT (disjoint boxes), IN, IS NULL, FILTER, COUNT(col), a WHERE never
#: TRUE, a scaled aggregate, an order statistic, GROUP BY of one and two columns, a statement on no column.
VARIED = [
    *STATEMENTS,
    "SELECT COUNT(*) AS n FROM census WHERE age < 20 OR hours >= 60",
    "SELECT sex, COUNT(*) AS n FROM census WHERE NOT (age BETWEEN 20 AND 29) GROUP BY sex",
    "SELECT COUNT(*) AS n FROM census WHERE state IN ('CA', 'NY', 'TX') AND race <> 'other'",
    "SELECT COUNT(*) AS n FROM census WHERE income IS NULL OR hours IS NOT NULL",
    "SELECT COUNT(*) FILTER (WHERE sex = 'F') AS f, COUNT(hours) AS h FROM census WHERE age >= 30",
    "SELECT COUNT(*) AS n FROM census WHERE age > 40 AND age < 30",
    "SELECT 2 * COUNT(*) AS n FROM census WHERE age >= 18",
    "SELECT MEDIAN(age) AS m FROM census WHERE sex = 'M'",
    "SELECT education, race, COUNT(*) AS n FROM census WHERE age BETWEEN 25 AND 64 GROUP BY education, race",
    "SELECT COUNT(*) AS n FROM census",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, len(VARIED) - 1), min_size=1, max_size=6, unique=True), min_size=1,
                max_size=6))
def test_candidate_groups_through_the_memo_equal_those_compiled_without(candidates: list[list[int]]) -> None:
    """Statements extended with rows of ones onto a group's other axes (``StatementMemo._extended``) are exactly
    what compiling them over every axis gives, whatever groups came before."""
    schema = Schema.load(SCHEMA)
    batch = parse_batch(";\n".join(VARIED))
    table = batch_table(batch, schema)
    memo = StatementMemo()
    for index, members in enumerate(candidates):
        _same(compile_group(batch, table, members, index, memo=memo), compile_group(batch, table, members, index))


def test_a_group_of_the_same_members_is_compiled_once_and_renumbered() -> None:
    """compile_group through the memo returns a group of members compiled before as it was, its statements
    numbered with the new index: equal to compiling it afresh there. Its workloads are built once per data
    vector, so what planning keeps per workload object (partition form, Gram, digest) is found once."""
    schema = Schema.load(SCHEMA)
    batch = parse_batch(";\n".join(STATEMENTS))
    table = batch_table(batch, schema)
    memo = StatementMemo()
    first, _ = compile_group(batch, table, [0, 3, 4], 0, memo=memo)
    again = compile_group(batch, table, [0, 3, 4], 5, memo=memo)
    assert again[0] is first
    _same(again, compile_group(batch, table, [0, 3, 4], 5))
    counts, _ = compile_group(batch, table, [0, 1], memo=memo)  # two count blocks: GROUP BY age, GROUP BY sex
    (vector,) = counts.data_kinds()
    assert counts.workload(vector) is counts.workload(vector)
    fewer = dataclasses.replace(counts, blocks=counts.blocks[:1])  # a new group: its own workloads
    assert fewer.workload(vector).shape[0] == counts.blocks[0].workload.shape[0] < counts.workload(vector).shape[0]
