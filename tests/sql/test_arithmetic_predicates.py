"""Arithmetic on one column in WHERE (``age + 1 > 30``, ``income / 12 >= 4000``, ``-2 * x < 6``, nested,
in comparisons, BETWEEN and IN) is solved for the column exactly, so that the rows it keeps are the
rows DuckDB keeps; other arithmetic is refused, naming it, and charges nothing.

The check is end to end: a table holding each integer of -60 … 160 once, random affine chains of +, −,
· and / by integers around the column, and counts released at an ε so large that the noise (stddev
below 10⁻³) cannot move a count to another integer, against DuckDB's exact count of the same SQL.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsql
from _helpers import assert_refused_free
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.noise import SeededRandomSource
from dpsql.sql import ir
from dpsql.sql.parse import parse_batch

SCHEMA = {"tables": {"t": {"columns": {"x": {"type": "integer", "lower": -60, "upper": 160}}}}}


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT CAST(range AS INTEGER) AS x FROM range(-60, 161)")
    yield con
    con.close()


@st.composite
def sides(draw: st.DrawFn) -> str:
    """One column under up to three operations by non-zero integers (a divisor divides nothing exactly
    onto a boundary that floating point could round across: |x / c − k| ≥ 1/|c| otherwise)."""
    text = "x"
    for _ in range(draw(st.integers(0, 3))):
        c = draw(st.integers(-9, 9).filter(lambda v: v != 0))
        form = draw(st.sampled_from(["{} + {}", "{} - {}", "{1} - {0}", "{} * {}", "{1} * {0}", "{} / {}", "-{}"]))
        text = form.format(f"({text})", f"({c})" if c < 0 else str(c))
    return text


CONDITIONS = st.one_of(
    st.tuples(sides(), st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), st.integers(-200, 200), st.booleans())
    .map(lambda t: f"{t[0]} {t[1]} {t[2]}" if t[3] else f"{t[2]} {t[1]} {t[0]}"),
    st.tuples(sides(), st.integers(-200, 200), st.integers(0, 80), st.booleans())
    .map(lambda t: f"{t[0]} {'NOT ' if t[3] else ''}BETWEEN {t[1]} AND {t[1] + t[2]}"),
    st.tuples(sides(), st.lists(st.integers(-200, 200), min_size=1, max_size=4))
    .map(lambda t: f"{t[0]} IN ({', '.join(map(str, t[1]))})"),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(CONDITIONS, min_size=1, max_size=8))
def test_solved_conditions_keep_the_rows_duckdb_keeps(data: duckdb.DuckDBPyConnection, conditions: list[str]) -> None:
    batch = [f"SELECT COUNT(*) AS n FROM t WHERE {condition}" for condition in conditions]
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e7), rng=SeededRandomSource(1)) as private:
        tables = private.cursor().execute(";\n".join(batch), epsilon=1e6).fetch_arrow_tables()
    for sql, table in zip(batch, tables, strict=True):
        value, stddev = table.column("n")[0].as_py(), table.column("n_stddev")[0].as_py()
        assert stddev < 1e-3, stddev
        assert round(value) == data.execute(sql).fetchone()[0], sql  # type: ignore[index]


def test_a_negative_scale_flips_the_comparison_and_swaps_between_bounds() -> None:
    statement = parse_batch("SELECT COUNT(*) FROM t WHERE 100 - x > 50 AND -2 * (x + 1) BETWEEN -10 AND 4;\n"
                            "SELECT COUNT(*) FROM t WHERE x / 4 >= 2.5").statements
    where = statement[0].where
    assert isinstance(where, ir.And)
    comparison, between = where.operands
    assert isinstance(comparison, ir.Comparison) and (comparison.operator, comparison.value.value) == ("<", 50)
    assert isinstance(between, ir.Between) and (between.low.value, between.high.value) == (-3, 4)
    solved = statement[1].where
    assert isinstance(solved, ir.Comparison) and (solved.operator, solved.value.value) == (">=", 10)


@pytest.mark.parametrize("condition, error, words", [
    ("x + x > 3", NotSupportedError, "arithmetic"),
    ("10 / x > 1", NotSupportedError, "arithmetic"),
    ("x * 0 > 1", NotSupportedError, "a column multiplied by zero"),
    ("x / 0 > 1", ProgrammingError, "division by the constant zero"),
    ("x + 1 > 'a'", NotSupportedError, "compared with a non-number"),
])
def test_other_arithmetic_is_refused_and_charges_nothing(data: duckdb.DuckDBPyConnection, condition: str,
                                                         error: type[Exception], words: str) -> None:
    assert_refused_free(data, SCHEMA, f"SELECT COUNT(*) FROM t WHERE {condition}", error, words)


def test_an_unquoted_hyphenated_name_is_told_to_be_quoted(data: duckdb.DuckDBPyConnection) -> None:
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0)) as private, \
            pytest.raises(NotSupportedError) as caught:
        private.cursor().execute("SELECT SUM(hours-per-week) FROM t", epsilon=0.5)
    assert 'written in double quotes: "hours-per-week"' in str(caught.value)


# ------------------------------------------------------------------------- a rounded column in WHERE
ROUNDED = st.tuples(st.sampled_from(["FLOOR(x / {d})", "CEIL(x / {d}) * {d}", "x // {d}", "CAST(x / {d} AS INTEGER)",
                                     "ROUND(x / {d})", "TRUNC(x / {d}) * {d} + 1", "100 - FLOOR((x + 3) / {d})",
                                     "-ROUND(x / {d} / 2)", "CAST(FLOOR(x / {d}) AS BIGINT)"]),
                    st.integers(-12, 12).filter(lambda d: d != 0)).map(lambda t: t[0].format(d=f"({t[1]})"))
ROUNDED_CONDITIONS = st.one_of(
    st.tuples(ROUNDED, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), st.integers(-40, 40), st.booleans())
    .map(lambda t: f"{t[0]} {t[1]} {t[2]}" if t[3] else f"{t[2]} {t[1]} {t[0]}"),
    st.tuples(ROUNDED, st.sampled_from(["<", ">="]), st.integers(-80, 80)).map(lambda t: f"{t[0]} {t[1]} {t[2] / 2}"),
    st.tuples(ROUNDED, st.integers(-40, 40), st.integers(0, 20), st.booleans())
    .map(lambda t: f"{t[0]} {'NOT ' if t[3] else ''}BETWEEN {t[1]} AND {t[1] + t[2]}"),
    st.tuples(ROUNDED, st.lists(st.integers(-40, 40), min_size=1, max_size=4), st.booleans())
    .map(lambda t: f"{t[0]} {'NOT ' if t[2] else ''}IN ({', '.join(map(str, t[1]))})"),
)


@settings(max_examples=40, deadline=None)
@given(ROUNDED_CONDITIONS)
def test_a_rounded_column_keeps_the_rows_duckdb_keeps(data: duckdb.DuckDBPyConnection, condition: str) -> None:
    """FLOOR, CEIL, TRUNC, ROUND, ``//`` and a CAST to an integer, under affine maps, in comparisons, BETWEEN and
    IN (each value an integer the rounded side may or may not take): the count DuckDB gives, or a refusal
    only where the condition is the same on every row (an equality with a value the side never takes)."""
    sql = f"SELECT COUNT(*) AS n FROM t WHERE {condition}"
    truth = data.execute(sql).fetchone()[0]  # type: ignore[index]
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e7), rng=SeededRandomSource(2)) as private:
        try:
            table = private.cursor().execute(sql, epsilon=1e6).fetch_arrow_table()
        except NotSupportedError as refused:
            assert "never" in str(refused) and truth in (0, 221)  # no row, or every row of the 221
            return
    assert table.column("n_stddev")[0].as_py() < 1e-3
    assert round(table.column("n")[0].as_py()) == truth, sql


def test_a_rounded_column_is_a_range_of_the_column() -> None:
    statements = parse_batch("SELECT COUNT(*) FROM t WHERE FLOOR(x / 5) = 6;\n"
                             "SELECT COUNT(*) FROM t WHERE x // 10 <= -2;\n"
                             "SELECT COUNT(*) FROM t WHERE ROUND(x / 2) * 2 > 7").statements
    equal, below, above = (s.where for s in statements)
    assert isinstance(equal, ir.And)
    assert [(c.operator, c.value.value) for c in equal.operands if isinstance(c, ir.Comparison)] == [(">=", 30),
                                                                                                 ("<", 35)]
    assert isinstance(below, ir.Comparison) and (below.operator, below.value.value) == ("<=", -20)  # -29 // 10 = -2
    assert isinstance(above, ir.Comparison) and (above.operator, above.value.value) == (">=", 7)  # ROUND(3.5) = 4


@pytest.mark.parametrize("condition, words", [
    ("FLOOR(x / 5) * 5 = 32", "never TRUE"),
    ("FLOOR(x / 5) * 5 IN (31, 33)", "never TRUE"),
    ("FLOOR(x + x) > 3", "arithmetic"),
    ("FLOOR(x / 2, 1) > 3", "ROUND to decimals in WHERE"),
    ("FLOOR(x / 2) = 'a'", "compared with a non-number"),
])
def test_rounded_conditions_that_cannot_be_solved_are_refused(data: duckdb.DuckDBPyConnection, condition: str,
                                                              words: str) -> None:
    assert_refused_free(data, SCHEMA, f"SELECT COUNT(*) FROM t WHERE {condition}", NotSupportedError, words)
