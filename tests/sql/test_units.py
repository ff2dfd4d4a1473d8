"""COUNT(DISTINCT <privacy unit>) on a table whose unit keeps up to max_rows = k > 1 rows (issue 33, item 7):
the ``units`` data vector (distinct units per declared cell, computed by the database from the schema), its
sensitivity (a unit counts once in each of at most k cells), answers against DuckDB's, refusals.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import duckdb
import numpy as np
import pytest

import dpsql
from _helpers import assert_refused_free, duckdb_table
from dpsql import engine
from dpsql.backends.cell_sql import DatabaseColumn, SourceTable, build_query, table_ref
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.sql_dialects import DUCKDB, POSTGRES
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.errors import NotSupportedError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema
from dpsql.sql.vectors import DataVector

MAX_ROWS = 3
COLUMNS = {"person": {"type": "integer", "lower": 0, "upper": 1000, "bin_width": 1001},
           "kind": {"type": "categorical", "values": ["a", "b", "c"]},
           "cost": {"type": "integer", "lower": 0, "upper": 9},
           "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1}}
SCHEMA_DICT = {"tables": {"v": {"privacy_unit": {"column": "person", "max_rows": MAX_ROWS}, "columns": COLUMNS}}}
SCHEMA = Schema.load(SCHEMA_DICT)


def _rows(seed: int = 1) -> list[tuple[object, ...]]:
    """500 persons with 1 to MAX_ROWS rows each (the cap keeps every row, so DuckDB's answer is exact)."""
    rng = np.random.default_rng(seed)
    return [(person, str(rng.choice(["a", "b", "c"])), int(rng.integers(0, 10)), int(rng.integers(0, 100)))
            for person in range(500) for _ in range(int(rng.integers(1, MAX_ROWS + 1)))]


def _table(rows: list[tuple[object, ...]]) -> duckdb.DuckDBPyConnection:
    return duckdb_table("v", "person INTEGER, kind VARCHAR, cost INTEGER, age INTEGER", rows)


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = _table(_rows())
    yield con
    con.close()


CASES = [
    "SELECT kind, COUNT(DISTINCT person) AS u, COUNT(*) AS n, SUM(cost) AS s FROM v GROUP BY kind ORDER BY kind",
    "SELECT COUNT(DISTINCT person) AS u FROM v",
    "SELECT COUNT(DISTINCT person) AS u, AVG(cost) AS a FROM v WHERE kind = 'b' AND cost = 3",
    "SELECT kind, cost, COUNT(DISTINCT person) AS u FROM v GROUP BY kind, cost ORDER BY kind, cost",
]


@pytest.mark.parametrize("sql", CASES)
def test_distinct_units_match_duckdb_at_a_very_large_budget(data: duckdb.DuckDBPyConnection, sql: str) -> None:
    connection = dpsql.connect(data, schema=SCHEMA, budget=Budget(rho=1e9), rng=SeededRandomSource(0))
    table = connection.cursor().execute(sql, rho=1e8).fetch_arrow_table()
    names = [n for n in table.column_names if not n.endswith("_stddev")]
    truth = data.execute(sql).fetchall()
    found = [list(row) for row in zip(*(table.column(n).to_pylist() for n in names))]
    assert len(found) == len(truth)
    for row, expected in zip(found, truth):
        for name, value, true in zip(names, row, expected):
            assert value == true if isinstance(true, str) else abs(value - float(true)) <= 1e-3, (name, row, expected)


def test_a_batch_keeps_the_distinct_count_in_its_own_group(data: duckdb.DuckDBPyConnection) -> None:
    """With a statement over other columns in the batch, the distinct count is never merged into a group
    whose cells it would sum across (its answers stay DuckDB's)."""
    sql = ("SELECT kind, COUNT(DISTINCT person) AS u FROM v GROUP BY kind ORDER BY kind; "
           "SELECT kind, age, COUNT(*) AS n FROM v GROUP BY kind, age")
    connection = dpsql.connect(data, schema=SCHEMA, budget=Budget(rho=1e9), rng=SeededRandomSource(0))
    first = connection.cursor().execute(sql, rho=1e8).fetch_arrow_tables()[0]
    truth = data.execute("SELECT kind, COUNT(DISTINCT person) FROM v GROUP BY kind ORDER BY kind").fetchall()
    assert np.allclose(first.column("u").to_numpy(), [n for _, n in truth], atol=1e-3)
    assert "Statement groups: 2" in connection.cursor().explain(sql, rho=1.0)


def test_the_units_vector_is_calibrated_for_max_rows_cells_each_moved_by_one() -> None:
    """The plan measures ``units(person)`` with contribution k = max_rows (quantum 1), and the vector the
    database returns moves by 0 or 1 per cell, in at most k cells, when one person is removed: a person
    with 3 rows in 3 cells moves 3 cells by 1, one with 3 rows in one cell moves it by 1, and one with 5
    rows (2 beyond the cap) at most 3 cells."""
    prepared = engine.prepare("SELECT kind, COUNT(DISTINCT person) FROM v GROUP BY kind", SCHEMA,
                              PrivacyCost(epsilon=1.0))
    (m,) = prepared.chosen.measurements
    assert m.vector == DataVector("units", "person") and m.row_scale == MAX_ROWS and m.quantum == 1.0
    calibration = m.calibration()
    assert math.isclose(float(calibration.scale), MAX_ROWS / m.share, rel_tol=1e-6)  # the identity: ‖a_j‖₁ = 1
    rows = _rows()[:300]
    special = [(900, "a", 1, 5), (900, "b", 2, 5), (900, "c", 3, 5),            # three cells
               (901, "b", 4, 5), (901, "b", 4, 6), (901, "b", 4, 7),            # one cell
               *[(902, "a", cost, 5) for cost in range(5)]]                     # five rows, capped at three
    table = SCHEMA.table("v")
    cells = [table.columns["kind"], table.columns["cost"]]

    def units(extra: list[tuple[object, ...]]) -> np.ndarray:
        found = DuckDBBackend(_table(rows + extra)).cell_data(table, cells, distinct_units=True)
        assert found.units is not None
        return found.dense(found.units)

    base = units([])
    for person, moved in ((900, 3), (901, 1), (902, 3)):
        change = units([r for r in special if r[0] == person]) - base
        assert set(np.unique(change)) <= {0, 1} and change.sum() == moved, (person, change.sum())


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT COUNT(DISTINCT person) FROM v WHERE kind IN ('a', 'b')",
     "COUNT(DISTINCT person) (line 1, col 8) is supported on v, whose privacy unit keeps up to 3"),
    ("SELECT age, COUNT(DISTINCT person) FROM v GROUP BY age", "each group reads one declared cell"),
    ("SELECT COUNT(DISTINCT person) FROM v WHERE cost < 5", "a unit with rows in two cells of a group"),
])
def test_a_group_over_several_cells_is_refused_free(data: duckdb.DuckDBPyConnection, sql: str, words: str) -> None:
    assert_refused_free(data, SCHEMA_DICT, sql, NotSupportedError, words)


def test_postgres_counts_the_same_distinct_units_as_duckdb() -> None:
    """The PostgreSQL form of the cell query (COUNT(DISTINCT unit) over the capped rows, the cap keeping
    the unit), evaluated by DuckDB, gives DuckDB's form's counts."""
    table = SCHEMA.table("v")
    catalog = {"person": DatabaseColumn("person", "BIGINT", "integer"), "kind": DatabaseColumn("kind", "TEXT", "text"),
               "cost": DatabaseColumn("cost", "BIGINT", "integer"), "age": DatabaseColumn("age", "BIGINT", "integer")}
    con = _table(_rows() + [(999, "a", cost, 1) for cost in range(6)])
    found = []
    for dialect in (DUCKDB, POSTGRES):
        source = SourceTable(reference=table_ref("v"), columns=catalog, dialect=dialect)
        query = build_query(table, source, [table.columns["kind"]], {}, [], units=True)
        assert "COUNT(DISTINCT" in query.sql(dialect.name)
        found.append(sorted(con.execute(query.sql("duckdb")).fetchall()))
    assert found[0] == found[1]
    truth = con.execute("SELECT kind, COUNT(DISTINCT person) FROM v GROUP BY kind ORDER BY kind").fetchall()
    assert [row[2] for row in found[0]] == [n for _, n in truth]
