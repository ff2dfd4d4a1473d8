"""The engines' own forms in the cell query: rounding half away from zero by truncation, and PostgreSQL's
grouping sets as a UNION ALL of GROUP BYs where the rows are uncapped.

The rounding forms are evaluated in DuckDB (whose ``trunc`` truncates a double toward zero, as PostgreSQL's
does) against exact rational rounding in Python; the engines themselves are compared with DuckDB in
``test_backend_postgres.py`` and ``test_backend_spark.py``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import duckdb
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from dpsql.backends import Squared
from dpsql.backends.cell_sql import DatabaseColumn, SourceTable, build_query, marginals_query, table_ref
from dpsql.backends.sql_dialects import DUCKDB, POSTGRES, SPARK, SqlDialect
from dpsql.schema import Schema, square_quantum

#: Halves, their neighbours one ulp away, and the ends of the range (|v| ≤ 2^53) the measures are bounded to.
EDGES = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999999999999994, -0.49999999999999994, math.nextafter(2.5, 0),
         math.nextafter(2.5, 3), 2.0**52 - 0.5, -(2.0**52) + 0.5, 2.0**52 + 1, 2.0**53, -(2.0**53), 0.0, -0.0,
         4503599627370495.5, 1e-300, 12345.5]


def exact_half_away(value: float) -> int:
    """round(value), halves away from zero, on the exact rational value of the double."""
    exact = Fraction(value)
    return math.floor(exact + Fraction(1, 2)) if exact >= 0 else -math.floor(-exact + Fraction(1, 2))


def rounded_in_duckdb(dialect: SqlDialect, values: list[float]) -> list[int]:
    """``dialect.round_half_away`` of each value (the column ``v``), evaluated by DuckDB and cast to BIGINT."""
    rounded = exp.cast(dialect.round_half_away(exp.column("v")), "BIGINT")
    with duckdb.connect() as connection:
        connection.register("doubles", pa.table({"i": list(range(len(values))), "v": pa.array(values, pa.float64())}))
        sql = exp.select(rounded.as_("r")).from_("doubles").order_by("i").sql("duckdb")
        return [int(row[0]) for row in connection.execute(sql).fetchall()]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-(2.0**53), max_value=2.0**53, allow_nan=False)
                | st.integers(-(2**20), 2**20).map(lambda k: k / 2), max_size=40))
def test_rounding_by_truncation_is_exact_half_away_from_zero(values: list[float]) -> None:
    values = [*EDGES, *values]
    assert rounded_in_duckdb(POSTGRES, values) == [exact_half_away(v) for v in values]


def test_spark_rounds_by_truncating_casts_not_round() -> None:
    """Spark's form truncates with CAST(... AS BIGINT) (ANSI: exact below 2^63) and never calls ROUND, which
    converts every double to a BigDecimal."""
    sql = SPARK.round_half_away(exp.column("v")).sql("spark")
    assert "ROUND" not in sql.upper() and sql.count("AS BIGINT)") == 3


SCHEMA = {"columns": {"age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10},
                      "sex": {"type": "categorical", "values": ["F", "M"]},
                      "hours": {"type": "integer", "lower": 0, "upper": 99}}}
CATALOG = {"age": DatabaseColumn("age", "BIGINT", "integer"), "sex": DatabaseColumn("sex", "TEXT", "text"),
           "hours": DatabaseColumn("hours", "BIGINT", "integer"),
           "person": DatabaseColumn("person", "BIGINT", "integer")}


def rendered(dialect: SqlDialect, *, capped: bool) -> tuple[str, str]:
    """The cell query over three grouping sets and the marginal query over three marginals, in ``dialect``."""
    unit = {"privacy_unit": {"column": "person", "max_rows": 2}} if capped else {}
    table = Schema.load({"tables": {"people": {**unit, **SCHEMA}}}).table("people")
    source = SourceTable(reference=table_ref("people"), columns=CATALOG, dialect=dialect)
    cells = [table.columns[name] for name in ("age", "sex", "hours")]
    sets = [(0, 1), (1, 2), ()]
    cell_query = build_query(table, source, cells, {table.columns["hours"]: 1.0}, [], sets)
    return cell_query.sql(dialect.name), marginals_query(table, source, cells, sets).sql(dialect.name)


def test_postgres_aggregates_uncapped_sets_in_a_union_and_capped_ones_by_grouping_sets() -> None:
    for query in rendered(POSTGRES, capped=False):
        assert "GROUPING SETS" not in query and query.count("UNION ALL") == 2 and "ROW_NUMBER" not in query
        assert query.count("CAST(NULL AS BIGINT)") == 1 + 1 + 3  # the cell columns each set lacks
    for query in rendered(POSTGRES, capped=True):  # the cap's window is computed once, not once per set
        assert "GROUPING SETS" in query and "UNION" not in query and query.count("ROW_NUMBER") == 1
    for dialect in (DUCKDB, SPARK):
        for query in rendered(dialect, capped=False):
            assert "GROUPING SETS" in query and "UNION" not in query


def test_sums_of_squares_square_the_clamped_value_in_every_dialect() -> None:
    """A Squared measure adds round(clamp(v, lo, hi)²/q) per row: PostgreSQL's and DuckDB's forms, evaluated
    by DuckDB, give the exact per-cell sums (−50 clamps to −10 before squaring, 10⁹ to 30, NULL adds 0);
    Spark's squares the clamped value too and rounds by truncating casts, never ROUND."""
    table = Schema.load({"tables": {"people": {"columns": {"sex": {"type": "categorical", "values": ["F", "M"]},
                                                           "x": {"type": "numeric", "lower": -10,
                                                                 "upper": 30}}}}}).table("people")
    catalog = {"sex": DatabaseColumn("sex", "TEXT", "text"), "x": DatabaseColumn("x", "DOUBLE", "float")}
    x, quantum = table.columns["x"], square_quantum(table.columns["x"])
    rows = [("F", -50.0), ("F", 2.5), ("M", 29.99), ("M", None), ("M", 1e9)]
    expected = [(0, 2, sum(exact_half_away(v * v / quantum) for v in (-10.0, 2.5))),
                (1, 3, sum(exact_half_away(v * v / quantum) for v in (29.99, 30.0)))]
    with duckdb.connect() as connection:
        connection.execute("CREATE TABLE people (sex VARCHAR, x DOUBLE)")
        connection.executemany("INSERT INTO people VALUES (?, ?)", rows)
        for dialect in (DUCKDB, POSTGRES):
            source = SourceTable(reference=table_ref("people"), columns=catalog, dialect=dialect)
            query = build_query(table, source, [table.columns["sex"]], {Squared(x): quantum}, [])
            found = connection.execute(query.sql("duckdb") + " ORDER BY 1").fetchall()
            assert [(c, n, int(s)) for c, n, s in found] == expected, dialect.name
    spark = build_query(table, SourceTable(reference=table_ref("people"), columns=catalog, dialect=SPARK),
                        [table.columns["sex"]], {Squared(x): quantum}, []).sql("spark")
    clamped = "LEAST(GREATEST(CAST(`x` AS DOUBLE), CAST('-10.0' AS DOUBLE)), CAST('30.0' AS DOUBLE))"
    assert f"({clamped}) * ({clamped})" in spark and "ROUND" not in spark.upper()
