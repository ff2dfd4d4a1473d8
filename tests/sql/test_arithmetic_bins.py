"""GROUP BY arithmetic bins of one column (``FLOOR(age / 5) * 5``, ``age // 10``, ``CAST(income / 1000 AS
INTEGER)``, CEIL, TRUNC, ROUND, affine maps around them): a re-binning of the column's declared cells when
every step falls on a cell boundary (or the cells hold one value each), answered from the same cell counts
as the plain GROUP BY; otherwise refused before anything is charged, naming the cell it splits and the
widths that align.

Checked end to end against DuckDB's exact answer to the same SQL at an ε where the noise cannot move a
count to another integer: random bins on an integer column of one value per cell and on a numeric
column of 1,000-wide cells [lo, hi) (divisors that are multiples of the width, and ROUND of half of them,
which steps at odd multiples; CEIL steps just after a boundary, so it splits every such cell).
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsql
from _helpers import assert_refused_free
from dpsql.errors import NotSupportedError
from dpsql.noise import SeededRandomSource

SCHEMA = {"tables": {"t": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1},
    "income": {"type": "numeric", "lower": 0, "upper": 60000, "bin_width": 10000, "resolution": 1000},
    "coarse": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10},
}}}}


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT CAST(range % 100 AS INTEGER) AS age, "
                "CAST((range * 7919) % 60000 AS DOUBLE) + 0.5 AS income, CAST(range % 100 AS INTEGER) AS coarse "
                "FROM range(4000)")
    yield con
    con.close()


AGE_BINS = st.tuples(st.sampled_from(["FLOOR(age / {d}) * {d}", "age // {d}", "CAST(age / {d} AS INTEGER)",
                                      "CEIL(age / {d})", "TRUNC(age / {d}) * {d} + 1", "ROUND(age / {d})",
                                      "100 - FLOOR((age + 3) / {d})", "CAST(FLOOR(age / {d}) AS BIGINT)"]),
                     st.integers(1, 30)).map(lambda t: t[0].format(d=t[1]))
INCOME_BINS = st.tuples(st.sampled_from(["FLOOR(income / {d}) * {d}", "ROUND(income / {d} / 2)",
                                         "-FLOOR(income / {d})", "TRUNC(income / {d})"]),
                        st.sampled_from([1000, 2000, 5000, 10000, 30000])).map(lambda t: t[0].format(d=t[1]))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.one_of(AGE_BINS, INCOME_BINS), min_size=1, max_size=5))
def test_bins_that_align_answer_as_duckdb_does(data: duckdb.DuckDBPyConnection, keys: list[str]) -> None:
    batch = [f"SELECT {key} AS k, COUNT(*) AS n FROM t GROUP BY 1 ORDER BY 1" for key in keys]
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e7), rng=SeededRandomSource(3)) as private:
        tables = private.cursor().execute(";\n".join(batch), epsilon=1e6).fetch_arrow_tables()
    for sql, table in zip(batch, tables, strict=True):
        truth = dict(data.execute(sql).fetchall())
        got = {k: round(n) for k, n in zip(table.column("k").to_pylist(), table.column("n").to_pylist(), strict=True)
               if round(n) != 0}  # dpsql lists every declared group, DuckDB only those with rows
        assert got == truth, sql
        assert max(table.column("n_stddev").to_pylist()) < 1e-3


def test_an_integer_division_is_an_integer_label_and_floor_a_double(data: duckdb.DuckDBPyConnection) -> None:
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0)) as private:
        cursor = private.cursor()
        divided = cursor.execute("SELECT age // 10 AS d, COUNT(*) FROM t GROUP BY 1", epsilon=1.0).fetch_arrow_table()
        floored = cursor.execute("SELECT FLOOR(age / 10) AS d, COUNT(*) FROM t GROUP BY 1",
                                 epsilon=1.0).fetch_arrow_table()
    assert str(divided.schema.field("d").type) == "int64" and str(floored.schema.field("d").type) == "double"
    assert divided.column("d").to_pylist() == list(range(10))


@pytest.mark.parametrize("key, words", [
    ("FLOOR(coarse / 5) * 5", "splits the cell [0, 10) of tables.t.columns.coarse"),
    ("FLOOR(income / 1500)", "multiples of 1000"),
    ("CEIL(income / 1000)", "splits the cell [0, 1000)"),  # CEIL steps just after a boundary: cells are [lo, hi)
    ("coarse + 1", "is not one value per cell"),
    ("age + income", "in GROUP BY"),
    ("ROUND(age / 3, 1)", "ROUND to decimals in GROUP BY"),
])
def test_bins_that_split_a_cell_are_refused_before_any_charge(data: duckdb.DuckDBPyConnection, key: str,
                                                              words: str) -> None:
    assert_refused_free(data, SCHEMA, f"SELECT {key} AS k, COUNT(*) FROM t GROUP BY 1", NotSupportedError, words)


def test_a_bin_in_where_keeps_the_rows_duckdb_keeps(data: duckdb.DuckDBPyConnection) -> None:
    """The same bins as predicates (solved for the column: FLOOR(income / 5000) = 2 is 10000 <= income < 15000),
    on a column of 1,000-wide cells, against DuckDB's exact counts."""
    conditions = ["FLOOR(income / 5000) = 2", "FLOOR(age / 5) * 5 BETWEEN 20 AND 45", "age // 10 IN (1, 3, 7)",
                  "CAST(income / 2000 AS INTEGER) >= 8", "NOT ROUND(income / 10000) <= 2", "TRUNC(age / 3) <> 4"]
    batch = [f"SELECT COUNT(*) AS n FROM t WHERE {condition}" for condition in conditions]
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e7), rng=SeededRandomSource(5)) as private:
        tables = private.cursor().execute(";\n".join(batch), epsilon=1e6).fetch_arrow_tables()
    for sql, table in zip(batch, tables, strict=True):
        assert round(table.column("n")[0].as_py()) == data.execute(sql).fetchone()[0], sql  # type: ignore[index]


def test_a_bin_in_where_that_splits_a_cell_is_refused(data: duckdb.DuckDBPyConnection) -> None:
    assert_refused_free(data, SCHEMA, "SELECT COUNT(*) FROM t WHERE FLOOR(income / 1500) = 3", NotSupportedError,
                        "4500")
