"""suggest_schema: a loadable draft schema, read from the data and saying so."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import SchemaError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Categorical, Ordered, Schema
from dpsql.suggest import suggest_schema


def people(con: duckdb.DuckDBPyConnection, rows: int = 300) -> None:
    """A generated table with every supported type, NULLs, an ENUM, a wide text column and odd names."""
    rng = np.random.default_rng(7)
    con.execute("""CREATE TABLE "People Data" (id INTEGER, age INTEGER, income DOUBLE, sex VARCHAR,
                   "first name" VARCHAR, employed BOOLEAN, joined DATE, seen TIMESTAMP,
                   tier ENUM('gold', 'silver', 'bronze'),
                   score DECIMAL(6, 2), "quote""d" VARCHAR, nothing VARCHAR, payload BLOB)""")
    data = [(i, int(rng.integers(18, 90)), float(rng.lognormal(10, 1)), ["f", "m", None][i % 3], f"name {i}",
             bool(i % 2), dt.date(2018, 1, 1) + dt.timedelta(days=int(rng.integers(0, 2000))),
             dt.datetime(2021, 3, 1) + dt.timedelta(hours=int(rng.integers(0, 24 * 60))), ["gold", "silver"][i % 2],
             round(float(rng.uniform(-5, 5)), 2), 'say "hi"\\', None, b"x") for i in range(rows)]
    con.executemany('INSERT INTO "People Data" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)', data)


def test_suggestion_loads_warns_and_describes_each_column() -> None:
    con = duckdb.connect()
    people(con)
    text = suggest_schema(con, "People Data")
    assert text.startswith("# ====")
    head = text[:800]
    assert "READ FROM THE DATA" in head and "NOT PRIVATE" in head and "PUBLIC KNOWLEDGE" in head
    table = Schema.load(text).table("People Data")
    assert table.privacy_unit.column is None
    columns = table.columns
    assert set(columns) == {"id", "age", "income", "sex", "employed", "joined", "seen", "tier", "score", 'quote"d'}
    assert columns["sex"].domain == Categorical(values=("f", "m"))
    assert columns["employed"].domain == Categorical(values=("false", "true"))
    assert columns["tier"].domain == Categorical(values=("gold", "silver", "bronze"))  # the ENUM type's values
    assert columns['quote"d'].domain == Categorical(values=('say "hi"\\',))
    for name in ("id", "age", "income", "score", "joined", "seen"):
        domain = columns[name].domain
        assert isinstance(domain, Ordered)
        assert 10 <= len(domain.bin_starts) <= 100 or domain.size <= 100, name
    assert columns["age"].domain.kind == "integer" and columns["income"].domain.kind == "numeric"
    assert columns["joined"].domain.unit == "month" and columns["seen"].domain.unit == "day"  # 5 years; 60 days
    low, high = con.execute('SELECT min(income), max(income) FROM "People Data"').fetchone()
    assert columns["income"].domain.lower <= low and high <= columns["income"].domain.upper
    assert '# [tables."People Data".columns."first name"]' in text  # too many values: commented out
    assert "# [tables.\"People Data\".columns.nothing]" in text and "BLOB is not supported" in text


def test_suggested_schema_fits_the_database_and_keeps_every_row() -> None:
    con = duckdb.connect()
    people(con)
    table = Schema.load(suggest_schema(con, "People Data")).table("people data")
    backend = DuckDBBackend(con)
    backend.check_table(table)
    for column in table.columns.values():
        data = backend.cell_data(table, [column])
        outside = data.counts[data.index == column.domain.size].sum()
        assert int(data.counts.sum()) == 300
        quoted = '"' + column.name.replace('"', '""') + '"'
        expected_null = con.execute(f'SELECT count(*) - count({quoted}) FROM "People Data"').fetchone()[0]
        assert outside == expected_null, column.name  # only NULLs fall outside the observed domain


def test_suggest_from_a_path_small_ranges_and_many_categories(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE t (small INTEGER, flag VARCHAR, day DATE, x DOUBLE, c DOUBLE)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)",
                        [(i % 5, f"v{i % 7}", dt.date(2020, 1, 1) + dt.timedelta(days=i % 30),
                          [float("inf"), float("nan"), 0.125][i % 3], 2.5) for i in range(40)])
    text = suggest_schema(path, "t", max_categories=5)
    table = Schema.load(text).table("t")
    assert table.columns["small"].domain.boundaries == (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
    assert "flag" not in table.columns and "more than 5 distinct values" in text
    assert table.columns["day"].domain.unit == "day" and table.columns["day"].domain.size == 30
    x = table.columns["x"].domain  # infinities and NaN are ignored when reading the range
    assert isinstance(x, Ordered) and x.lower <= 0.125 <= x.upper
    c = table.columns["c"].domain  # a single value still gets a non-empty range
    assert isinstance(c, Ordered) and c.lower <= 2.5 <= c.upper and c.upper > c.lower


def test_suggest_errors() -> None:
    con = duckdb.connect()
    with pytest.raises(SchemaError, match=r"no table or view 'missing' in the database \(its current schema has none"):
        suggest_schema(con, "missing")  # there is no schema here: the message must not speak of one
    con.execute("CREATE TABLE blobs (b BLOB)")
    with pytest.raises(SchemaError, match=r"current schema has blobs.*give the bare table name"):
        suggest_schema(con, "main.blobs")
    with pytest.raises(SchemaError, match="supported type"):
        suggest_schema(con, "blobs")


def test_a_suggested_schema_answers_a_first_range_query_exactly_at_a_large_epsilon() -> None:
    con = duckdb.connect()
    people(con)
    con.execute('INSERT INTO "People Data" (id, age, income) SELECT 1000 + i, 18 + i % 72, i * 731.5 '
                "FROM range(3000) AS r(i)")  # integers over more than 1,000 values: resolution a tenth of a bin
    text = suggest_schema(con, "People Data")
    assert "`resolution`" in text and "`bin_width`" in text and "age BETWEEN 25 AND 34" in text  # both explained
    columns = Schema.load(text).table("People Data").columns
    assert [columns[name].domain.grid.step for name in ("age", "id")] == [1, 10]  # the ids span 0..3999
    sql = """SELECT COUNT(*) AS n FROM "People Data" WHERE age BETWEEN 25 AND 34;
             SELECT COUNT(*) AS n FROM "People Data" WHERE income >= 100000 AND id < 2500"""
    exact = [con.execute(query).fetchone()[0] for query in sql.split(";")]
    with dpsql.connect(con, schema=text, budget=dpsql.Budget(rho=1e9), rng=SeededRandomSource(34)) as private:
        tables = private.cursor().execute(sql, rho=1e8).fetch_arrow_tables()
    for table, count in zip(tables, exact, strict=True):
        row = table.to_pylist()[0]
        assert row["n"] == pytest.approx(count, abs=6 * row["n_stddev"] + 1e-6)
