"""Output functions applied to released values (ROUND, CEIL, FLOOR, TRUNC, CAST, ABS, GREATEST, LEAST,
COALESCE, NULLIF): post-processing with DuckDB's semantics, standard errors carried or by the delta
method, a bound on the rounding in the metadata and EXPLAIN, refusals that charge nothing.

The values are compared with DuckDB evaluating the same function on the same numbers (hypothesis over
floats with NULLs); the standard errors with the operand's (rounding) or the chosen operand's
(GREATEST, LEAST, COALESCE); and a slow calibration test checks z-scores of rounded and absolute
outputs at ε = 1 against DuckDB's exact answers.
"""

from __future__ import annotations

import json
import math

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_calibration import assert_calibrated, releases
from test_derived_sql import SCHEMA_DICT, _rows, _table, connect

from _helpers import assert_matches_duckdb
from dpsql.answers.derived import Differentiated, applied
from dpsql.errors import NotSupportedError
from dpsql.sql import derived, ir
from dpsql.sql.parse import parse_batch

SPAN = ir.Span(start=0, end=0, line=1, column=1)
NUMBERS = st.one_of(st.none(), st.floats(min_value=-1e9, max_value=1e9, allow_nan=False),
                    st.integers(-1000, 1000).map(lambda k: k / 2), st.integers(-1000, 1000).map(lambda k: k / 8))


def _value(values: list[float | None], seed: int) -> Differentiated:
    """Values with a distinct random gradient per row (NULL: NaN)."""
    rng = np.random.default_rng(seed)
    numbers = np.array([np.nan if v is None else v for v in values], dtype=float)
    return Differentiated(numbers, rng.normal(size=(len(values), 3)))


def _duckdb(sql: str, columns: list[list[float | None]]) -> list[object]:
    """DuckDB's value of ``sql`` (over columns a, b, c of DOUBLE) row by row."""
    con = duckdb.connect()
    names = "abc"[:len(columns)]
    con.execute(f"CREATE TABLE v (i INTEGER, {', '.join(f'{n} DOUBLE' for n in names)})")
    con.executemany(f"INSERT INTO v VALUES (?{', ?' * len(columns)})",
                    [(i, *row) for i, row in enumerate(zip(*columns))])
    return [row[0] for row in con.execute(f"SELECT {sql} FROM v ORDER BY i").fetchall()]


def _same(got: np.ndarray, expected: list[object]) -> None:
    for g, e in zip(got.tolist(), expected, strict=True):
        if e is None:
            assert math.isnan(g), (g, e)
        else:
            assert g == float(e) or abs(g - float(e)) <= 1e-12 * abs(float(e)), (g, e)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(st.lists(NUMBERS, min_size=1, max_size=8), st.integers(-3, 3))
def test_rounding_functions_agree_with_duckdb_and_keep_the_operands_gradient(values: list[float | None],
                                                                            digits: int) -> None:
    x = _value(values, len(values))
    for function, sql in [("round", f"round(a, {digits})"), ("ceil", "ceil(a)"), ("floor", "floor(a)"),
                          ("trunc", "trunc(a)"), ("cast_integer", "CAST(a AS BIGINT)"), ("cast_real", "a")]:
        call = ir.Call(function=function, operands=(ir.Constant(value=0, span=SPAN),), span=SPAN,  # type: ignore[arg-type]
                       digits=digits if function == "round" else 0)
        found = applied(call, [x])
        _same(found.value, _duckdb(sql, [values]))
        present = ~np.isnan(found.value)
        np.testing.assert_array_equal(found.gradient[present], x.gradient[present])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(NUMBERS, NUMBERS, NUMBERS), min_size=1, max_size=8))
def test_choosing_functions_agree_with_duckdb_and_take_the_chosen_operands_gradient(
        rows: list[tuple[float | None, float | None, float | None]]) -> None:
    columns = [list(column) for column in zip(*rows)]
    operands = [_value(column, i) for i, column in enumerate(columns)]
    for function, sql, arity in [("greatest", "greatest(a, b, c)", 3), ("least", "least(a, b, c)", 3),
                                 ("coalesce", "coalesce(a, b, c)", 3), ("nullif", "nullif(a, b)", 2),
                                 ("abs", "abs(a)", 1)]:
        call = ir.Call(function=function, operands=(ir.Constant(value=0, span=SPAN),) * arity, span=SPAN)  # type: ignore[arg-type]
        found = applied(call, operands[:arity])
        _same(found.value, _duckdb(sql, columns[:arity]))
        for r in np.flatnonzero(~np.isnan(found.value)):
            if function == "abs":
                expected = -operands[0].gradient[r] if operands[0].value[r] < 0 else operands[0].gradient[r]
            else:  # the operand whose value was returned (the first of equal ones)
                chosen = next(i for i in range(arity) if operands[i].value[r] == found.value[r])
                expected = operands[chosen].gradient[r]
            np.testing.assert_array_equal(found.gradient[r], expected)


@pytest.fixture(scope="module")
def data() -> duckdb.DuckDBPyConnection:
    return _table(_rows())


CASES = [
    "SELECT sex, ROUND(AVG(x), 2) AS a, CAST(COUNT(*) AS INTEGER) AS n, CEIL(AVG(x) * 10) AS c, "
    "FLOOR(AVG(hours)) AS f, TRUNC(-AVG(x)) AS t FROM people GROUP BY sex ORDER BY sex",
    "SELECT region, ABS(COUNT(*) - 1000) AS d, GREATEST(COUNT(*), 800) AS g, LEAST(SUM(x), SUM(hours)) AS l, "
    "COALESCE(AVG(hours), 0) AS c, NULLIF(COUNT(*), 0) AS z FROM people GROUP BY region ORDER BY region",
    "SELECT region, CAST(AVG(x) AS DOUBLE) AS a, CAST(AVG(x) AS DECIMAL(10, 1)) AS d, COUNT(*)::BIGINT AS n "
    "FROM people GROUP BY region HAVING ROUND(COUNT(*), -2) >= 600 ORDER BY region",
]


@pytest.mark.parametrize("sql", CASES)
def test_output_functions_match_duckdb_at_a_very_large_budget(data: duckdb.DuckDBPyConnection, sql: str) -> None:
    with connect(data) as connection:
        table = connection.cursor().execute(sql, rho=1e6).fetch_arrow_table()
    assert_matches_duckdb(data, sql, table)


def test_a_cast_to_an_integer_is_an_integer_column_and_rounding_is_bounded_in_metadata_and_explain(
        data: duckdb.DuckDBPyConnection) -> None:
    sql = ("SELECT sex, CAST(COUNT(*) AS INTEGER) AS n, ROUND(AVG(x), 1) AS a, 3 * CEIL(SUM(x)) AS c, "
           "ROUND(SUM(x)) / COUNT(*) AS r FROM people GROUP BY sex")
    with connect(data) as connection:
        cursor = connection.cursor()
        table = cursor.execute(sql, rho=1.0).fetch_arrow_table()
        plan = cursor.explain(sql, rho=1.0)
    assert str(table.schema.field("n").type) == "int64" and str(table.schema.field("a").type) == "double"
    formulas = json.loads(table.schema.metadata[b"dpsql"])["derived"]
    assert "at most 0.5" in formulas["n"] and "at most 0.05" in formulas["a"] and "at most 3" in formulas["c"]
    assert "not bounded" in formulas["r"]
    assert "n: rounded after answering" in plan and "a: rounded after answering" in plan
    # the standard error is the unrounded value's: ROUND(AVG(x), 1) beside AVG(x) of the same release
    with connect(data, seed=3) as connection:
        both = connection.cursor().execute("SELECT sex, AVG(x) AS a, ROUND(AVG(x), 1) AS r FROM people GROUP BY sex",
                                           rho=1.0).fetch_arrow_table()
    np.testing.assert_allclose(both.column("r_stddev").to_numpy(), both.column("a_stddev").to_numpy(), rtol=1e-12)
    for a, r in zip(both.column("a").to_pylist(), both.column("r").to_pylist()):
        assert abs(a - r) <= 0.05 + 1e-12


def test_the_rounding_bound_follows_the_arithmetic() -> None:
    def bound(expression: str) -> float:
        statement = parse_batch(f"SELECT {expression} AS e FROM people").statements[0]
        assert statement.outputs is not None
        item = statement.outputs.items[0]
        assert isinstance(item, ir.DerivedItem)
        return derived.rounding_bound(item.expression)

    assert bound("ROUND(COUNT(*), 2)") == 0.005
    assert bound("ROUND(COUNT(*)) - CEIL(SUM(x))") == 1.5
    assert bound("-2 * FLOOR(COUNT(*)) / 4") == 0.5
    assert bound("ROUND(ROUND(AVG(x), 1))") == 0.55
    assert bound("ROUND(COUNT(*)) * SUM(x)") == math.inf
    assert bound("ABS(COUNT(*)) + GREATEST(SUM(x), 0)") == 0.0


@pytest.mark.parametrize("sql, words", [
    ("SELECT CAST(COUNT(*) AS VARCHAR) AS n FROM people", "CAST of a released value to"),
    ("SELECT ROUND(AVG(x), COUNT(*)) AS a FROM people", "decimals that are not an integer constant"),
    ("SELECT ROUND(MEDIAN(x)) AS m FROM people", "the order statistic"),
    ("SELECT ROUND(x + COUNT(*)) AS m FROM people GROUP BY x", "a column in an output expression"),
])
def test_refused_output_functions_name_the_problem_and_charge_nothing(data: duckdb.DuckDBPyConnection, sql: str,
                                                                      words: str) -> None:
    with connect(data, epsilon=5.0) as connection:
        with pytest.raises(NotSupportedError) as caught:
            connection.cursor().execute(sql, epsilon=1.0)
        assert words in str(caught.value) and connection.budget.spent == 0.0


@pytest.mark.slow
def test_rounded_and_absolute_outputs_are_calibrated_at_epsilon_1() -> None:
    """300 seeded releases at ε = 1: z = (answer − DuckDB's exact value of the same SQL)/stddev of
    ROUND(ratio, 4), CAST(difference AS INTEGER), ABS(difference) (far from 0, so its sign is the
    truth's) and COALESCE(AVG(hours), 0) has mean 0 and E z² = 1; the rounding (≤ ½, against standard
    errors of several units) stays inside the tolerance."""
    con = _table(_rows())
    sql = ("SELECT region, ROUND(SUM(x) / COUNT(*), 4) AS r, CAST(COUNT(*) - COUNT(hours) AS INTEGER) AS d, "
           "ABS(COUNT(hours) - COUNT(*)) AS a, COALESCE(AVG(hours), 0) AS c FROM people GROUP BY region "
           "ORDER BY region")
    exact = ("SELECT region, SUM(x) / COUNT(*), COUNT(*) - COUNT(hours), ABS(COUNT(hours) - COUNT(*)), AVG(hours) "
             "FROM people GROUP BY region ORDER BY region")
    truth = con.execute(exact).fetchall()
    out = releases(con, SCHEMA_DICT, sql, {"epsilon": 1.0}, runs=300, seed=23)
    z = []
    for (table,) in out:
        assert table.column("region").to_pylist() == [row[0] for row in truth]
        z.append(np.concatenate([(table.column(name).to_numpy().astype(float) - [row[k] for row in truth])
                                 / table.column(f"{name}_stddev").to_numpy() for k, name in enumerate("rdac", 1)]))
    assert_calibrated(np.array(z))
