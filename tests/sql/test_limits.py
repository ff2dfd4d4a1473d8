"""Bounded work, clear errors (issue 14 item 11): every limit of docs/sql.md "Limits" refuses its input
with a ProgrammingError / NotSupportedError naming the limit and the place, before anything is
planned or charged — explain included."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.errors import (
    InvalidQueryError,
    NotSupportedError,
    ParameterError,
    PrivacyParameterError,
    ProgrammingError,
    UnsupportedQueryError,
)
from dpsql.schema import Schema
from dpsql.sql import boxes, ir
from dpsql.sql import compile as sql_compile
from dpsql.sql import parse as sql_parse
from dpsql.sql.compile import compile_batch
from dpsql.sql.parse import parse_batch

SCHEMA = Schema.load({"tables": {"t": {"columns": {c: {"type": "integer", "lower": 0, "upper": 9} for c in "abcd"}}}})
COUNT = "SELECT COUNT(*) FROM t WHERE "


@pytest.fixture()
def connection() -> Iterator[dpsql.Connection]:
    data = duckdb.connect()
    data.execute("CREATE TABLE t AS SELECT i % 10 AS a, i // 10 % 10 AS b, i // 100 % 10 AS c, i // 1000 AS d "
                 "FROM range(10000) r(i)")
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0)) as opened:
        yield opened
    data.close()


@pytest.mark.parametrize("sql", [COUNT + "NOT " * 2000 + "a = 1",
                                 COUNT + "(" * 3000 + "a = 1" + ")" * 3000,
                                 COUNT + "NOT (" * 1000 + "a = 1" + ")" * 1000],
                         ids=["2000 NOTs", "3000 parentheses", "NOT ( nested"])
def test_deep_nesting_is_a_programming_error_not_a_recursion_error(sql: str, connection: dpsql.Connection) -> None:
    with pytest.raises(InvalidQueryError, match=r"nests deeper than MAX_NESTING = 32 levels .*\(line 1, col \d+"):
        parse_batch(sql)
    with pytest.raises(InvalidQueryError, match="MAX_NESTING"):
        connection.cursor().explain(sql, epsilon=0.5)  # explain is bounded too
    assert connection.budget.spent == 0.0


def test_nesting_within_the_limit_still_parses() -> None:
    depth = sql_parse.MAX_NESTING
    where = parse_batch(COUNT + "(" * (depth - 1) + "NOT a = 1" + ")" * (depth - 1)).statements[0].where
    assert isinstance(where, ir.Not) and where.span.describe() == f"line 1, col {len(COUNT) + depth}"


def test_a_63_digit_limit_is_refused_before_the_charge(connection: dpsql.Connection) -> None:
    """Before: OverflowError from the result table's slice, after the budget was charged."""
    cursor = connection.cursor()
    with pytest.raises(InvalidQueryError, match=r"LIMIT 1e\+62 is above MAX_LIMIT = 2\^63 − 1 \(line 1, col 44"):
        cursor.execute("SELECT a, COUNT(*) FROM t GROUP BY a LIMIT 1" + "0" * 62, epsilon=0.5)
    assert connection.budget.spent == 0.0


@pytest.mark.parametrize("tail, word", [(" LIMIT 1" + "0" * 62, "LIMIT"), (" LIMIT 1 OFFSET 1" + "0" * 62, "OFFSET")])
def test_a_63_digit_count_after_union_all_is_refused_before_the_charge(connection: dpsql.Connection, tail: str,
                                                                       word: str) -> None:
    """Before: the UNION ALL's LIMIT had no bound, so an OverflowError came from the slice of the result,
    after the budget was charged."""
    sql = "SELECT COUNT(*) AS n FROM t UNION ALL SELECT COUNT(*) FROM t WHERE a = 1" + tail
    with pytest.raises(InvalidQueryError, match=rf"{word} 1e\+62 is above MAX_LIMIT = 2\^63 − 1"):
        connection.cursor().execute(sql, epsilon=0.5)
    assert connection.budget.spent == 0.0


@pytest.mark.parametrize("literal", ["1" + "0" * 400, "1e400", "-1e999"])
def test_numbers_beyond_a_double_name_their_position(literal: str) -> None:
    """Before: OverflowError from the domain (an IN list), or a silent infinity."""
    for sql in (COUNT + f"a IN (1, {literal})", COUNT + f"a < {literal}"):
        with pytest.raises(InvalidQueryError, match=r"number is outside the range of a double .*\(line 1, col \d+"):
            compile_batch(parse_batch(sql), SCHEMA)
    with pytest.raises(ParameterError, match=r"parameters\[0\] is an integer outside the range of a double"):
        parse_batch(COUNT + "a < ?", [10**400])


def test_a_cost_beyond_max_batch_cost_is_refused_before_planning(connection: dpsql.Connection) -> None:
    """A cost so large that the planner's noise variances would underflow a double (1e300 did)."""
    for cost in ({"epsilon": 1e300}, {"rho": 1e300}):
        with pytest.raises(PrivacyParameterError, match="MAX_BATCH_COST"):
            connection.cursor().explain(COUNT + "a = 1", **cost)
    with pytest.raises(PrivacyParameterError, match="MAX_BATCH_COST"):
        connection.cursor().explain("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1e300) COUNT(*) FROM t")
    assert "Cost: ε=1e+09" in connection.cursor().explain(COUNT + "a = 1", epsilon=1e9)  # the limit itself plans


def test_batch_size_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql_parse, "MAX_SQL_LENGTH", 100)
    with pytest.raises(InvalidQueryError, match="has 101 characters; the limit is MAX_SQL_LENGTH = 100"):
        parse_batch(COUNT + "a = 1" + " " * (101 - len(COUNT) - 5))
    monkeypatch.setattr(sql_parse, "MAX_SQL_LENGTH", 10**6)
    monkeypatch.setattr(sql_parse, "MAX_STATEMENTS", 3)
    with pytest.raises(InvalidQueryError, match=r"has 4 statements; the limit is MAX_STATEMENTS = 3 \(line 1, col 73"):
        parse_batch("; ".join(["SELECT COUNT(*) FROM t"] * 4))
    with pytest.raises(InvalidQueryError, match=r"1,001 predicate atoms; the limit is MAX_PREDICATE_ATOMS = 1,000"):
        parse_batch(COUNT + "a IN (" + ", ".join(["1"] * 1000) + ") OR b = 2")
    assert parse_batch(COUNT + " OR ".join(["a = 1"] * 1000)).statements[0].where is not None


def _twelve_ors(values: int, seed: int) -> str:
    """(x = v OR y = w OR z = u) AND … twelve times, each over three of the columns a, b, c, d."""
    rng = random.Random(seed)
    clauses = ["(" + " OR ".join(f"{column} = {rng.randrange(values)}" for column in rng.sample("abcd", 3)) + ")"
               for _ in range(12)]
    return COUNT + " AND ".join(clauses)


def _truth_table(sql: str) -> np.ndarray:
    """The WHERE clause evaluated by DuckDB on every (a, b, c, d), as a 0/1 vector in that order."""
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT ({sql.split('WHERE ')[1]}) AS hit FROM range(10) w(a), range(10) x(b), "
                           "range(10) y(c), range(10) z(d) ORDER BY a, b, c, d").fetchall()
    return np.array([hit for (hit,) in rows], dtype=float)


@pytest.mark.parametrize(("values", "seed"), [(2, 1), (3, 3)])
def test_twelve_and_ed_three_way_ors_plan_within_the_work_limits(values: int, seed: int, connection: dpsql.Connection,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: 67–91 s to plan — the FALSE sets of every AND were expanded though no NOT needs them,
    and every planning step densified the N × N sum of boxes. Now the box algebra stays within a
    small work budget, the block is exact, and no N × N matrix is formed (N = cells)."""
    sql = _twelve_ors(values, seed)
    monkeypatch.setattr(boxes, "MAX_PREDICATE_WORK", 1_000)
    compiled = compile_batch(parse_batch(sql), SCHEMA)
    group = compiled.groups[0]
    block = group.blocks[0].workload
    assert isinstance(block, sql_compile.DisjointSum) and len(block.terms) >= 2
    base = np.array(list(itertools.product(range(10), repeat=4)))  # every (a, b, c, d); outside cells stay empty
    cells = np.ravel_multi_index(tuple(axis.cell_of_base[base[:, i]] for i, axis in enumerate(group.axes)),
                                 [axis.size for axis in group.axes])
    dense = block.dense()
    np.testing.assert_array_equal(dense[0, cells], _truth_table(sql))
    with monkeypatch.context() as patch:  # sensitivities from the boxes' Kronecker vectors, never an N × N pass
        patch.setattr(sql_compile.DisjointSum, "dense", lambda self: pytest.fail("the block was densified"))
        for norm, power in (("l1", 1), ("l2", 2)):
            np.testing.assert_allclose(block.column_norms(norm) ** power, (np.abs(dense) ** power).sum(axis=0))
    plan = connection.cursor().explain(sql, epsilon=0.5)
    assert "Batch: 1 statement(s)" in plan and connection.budget.spent == 0.0


def test_a_predicate_beyond_the_box_limit_names_it(connection: dpsql.Connection) -> None:
    pairs = " OR ".join(f"(a = {i % 10} AND b = {i // 10})" for i in range(boxes.MAX_PREDICATE_BOXES + 1))
    with pytest.raises(UnsupportedQueryError, match=r"WHERE clause at line 1, col 30 splits the cells into more than "
                                                    r"MAX_PREDICATE_BOXES = 64 disjoint boxes"):
        connection.cursor().explain(COUNT + pairs, epsilon=0.5)
    assert issubclass(UnsupportedQueryError, NotSupportedError) and issubclass(InvalidQueryError, ProgrammingError)
