"""The Spark backend against the DuckDB oracle (``tests/_portable.py``), on one local[2] session.

Shows that Spark computes the same data vectors as DuckDB (both privacy units, every aggregate
the engine asks for, and the dialect's edge cases: integer, double and decimal categories, NaN,
-0.0, year/month/day date units, timestamps, negative halves), that answers through
``dpsql.connect(spark_session, tables=...)`` are bit-identical to DuckDB's under the same seeded source,
and Spark's own rules: ANSI mode forced on per query and the user's setting restored, overflow as
DataError, catalog-only table references (no ``parquet.`/path```), ``in_memory`` only for driver
data, temporary views dropped on close.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _required import module, unavailable

import dpsql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.spark import SparkBackend, is_spark_dataframe, is_spark_session
from dpsql.errors import DataError, InterfaceError, ProgrammingError, SchemaError
from dpsql.schema import Schema
from tests import _portable

module("pyspark", "the Spark backend needs pyspark >= 4 (pip install \"dpsql[spark]\")")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    unavailable("Spark needs a Java runtime >= 17 (e.g. apt-get install -y openjdk-17-jre-headless); none is on "
                "PATH or in JAVA_HOME")

ANSI = "spark.sql.ansi.enabled"


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local[2] session for the module: small heap, no UI, loopback only, two shuffle partitions."""
    from pyspark.sql import SparkSession
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, also for the block manager
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (SparkSession.builder.master("local[2]").appName("dpsql-tests")
               .config("spark.ui.enabled", "false").config("spark.driver.memory", "768m")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2").config("spark.sql.warehouse.dir", str(warehouse))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    """The portable rows as a DataFrame built from Arrow (so NaN stays NaN, not NULL)."""
    return spark.createDataFrame(_portable.arrow_table())


@pytest.fixture(scope="module")
def parquet_dir(frame: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The portable rows written as Parquet files (a directory without dots in its path)."""
    where = str(tmp_path_factory.mktemp("files") / "people_files")
    frame.write.parquet(where)
    return where


def both(frame: Any) -> dict[str, Any]:
    return {"people": frame, "visits": frame}


# ================================================================================ the oracle
def test_data_vectors_equal_duckdb(spark: Any, frame: Any) -> None:
    with SparkBackend(spark, both(frame)) as backend:
        found = _portable.data_vectors(backend)
    expected = _portable.data_vectors(DuckDBBackend(_portable.duckdb_database()))
    assert found.keys() == expected.keys()
    for key in expected:
        assert _portable.same(found[key], expected[key]), key


def test_answers_bit_identical_to_duckdb(spark: Any, frame: Any) -> None:
    def on_spark(**options: Any) -> dpsql.Connection:  # the session itself: connect() opens the SparkBackend
        return dpsql.connect(spark, tables=both(frame), **options)

    def on_duckdb(**options: Any) -> dpsql.Connection:
        return dpsql.connect(_portable.duckdb_database(), **options)

    found, expected = _portable.answers(on_spark), _portable.answers(on_duckdb)
    assert len(found) == len(expected) == 9
    assert _portable.same(found, expected)


# ============================================================================ dialect edges
EDGE_SCHEMA: dict[str, Any] = {"tables": {"edges": {"columns": {
    "code": {"type": "categorical", "values": [1, 2, 3]},
    "level": {"type": "categorical", "values": ["0.5", "1.5", "0"]},
    "price": {"type": "categorical", "values": ["1.25", "2.5"]},
    "born": {"type": "date", "lower": "1990-01-01", "upper": "2001-12-31", "unit": "year"},
    "seen": {"type": "date", "lower": "2020-01-01", "upper": "2020-03-31", "unit": "day"},
    "at": {"type": "date", "lower": "2020-01-01", "upper": "2021-12-31", "unit": "month"},
    "delta": {"type": "numeric", "lower": -10, "upper": 10, "bin_width": 5, "resolution": 0.5},
}}}}


def edge_rows() -> pa.Table:
    """Rows at the dialect's edges: integer/double/decimal categories (NaN, -0.0, NULL, undeclared),
    dates across year/month/day boundaries, timestamps, and negative halves to round."""
    n = 240
    levels = [0.5, 1.5, 0.0, -0.0, float("nan"), None, 2.5, 1.4999999999999998]
    days = [dt.date(1989, 12, 31), dt.date(1990, 1, 1), dt.date(1995, 12, 31), dt.date(1996, 1, 1),
            dt.date(2001, 12, 31), dt.date(2002, 1, 1), dt.date(2020, 2, 29), dt.date(2020, 3, 31), None]
    return pa.table({
        "code": pa.array([None if i % 13 == 0 else i % 5 for i in range(n)], pa.int64()),
        "level": pa.array([levels[i % len(levels)] for i in range(n)], pa.float64()),
        "price": pa.array([None if i % 11 == 0 else decimal.Decimal(i % 4) * decimal.Decimal("1.25")
                           for i in range(n)], pa.decimal128(8, 2)),
        "born": pa.array([days[i % len(days)] for i in range(n)], pa.date32()),
        "seen": pa.array([days[(i * 5) % len(days)] for i in range(n)], pa.date32()),
        "at": pa.array([None if i % 17 == 0 else dt.datetime(2019, 12, 31, 23, 59) + dt.timedelta(days=3 * i)
                        for i in range(n)], pa.timestamp("us")),
        "delta": pa.array([float("nan") if i % 19 == 0 else (i % 43) / 2 - 10.5 for i in range(n)], pa.float64()),
    })


def edge_vectors(backend: Any) -> dict[str, Any]:
    table = Schema.load(EDGE_SCHEMA).table("edges")
    columns = table.columns
    cells = [columns[name] for name in ("code", "level", "price", "born", "seen", "at")]
    data = backend.cell_data(table, cells, sum_columns={columns["delta"]: 0.5},
                             count_columns=[columns["delta"]])
    return {"index": data.index.tolist(), "counts": data.counts.tolist(),
            "sums": {k: [int(v) for v in s] for k, s in data.sums.items()},
            "nonnull": {k: v.tolist() for k, v in data.nonnull.items()}}


def duckdb_edges() -> dict[str, Any]:
    import duckdb
    con = duckdb.connect()
    con.from_arrow(edge_rows()).create("edges")
    return edge_vectors(DuckDBBackend(con))


def test_dialect_edges_equal_duckdb_with_ansi_off(spark: Any) -> None:
    """With the user's session in ANSI-off mode, dpsql's query still runs in ANSI mode, gives DuckDB's
    vector, and leaves the user's setting as it was."""
    rows = spark.createDataFrame(edge_rows())
    spark.conf.set(ANSI, "false")
    try:
        with SparkBackend(spark, {"edges": rows}) as backend:
            assert edge_vectors(backend) == duckdb_edges()
        assert spark.conf.get(ANSI) == "false"
    finally:
        spark.conf.unset(ANSI)


# ===================================================================================== errors
OVERFLOW = "SELECT SUM(`x`) AS `s` FROM VALUES (9223372036854775807L), (1L) AS `v`(`x`)"


def test_overflow_is_a_data_error_even_with_ansi_off(spark: Any, frame: Any) -> None:
    """The user's ANSI-off session wraps an overflowing BIGINT sum to -2^63; through the backend the same
    query is a DataError, without Spark's message or a chained cause, and the setting is restored."""
    spark.conf.set(ANSI, "false")
    try:
        assert spark.sql(OVERFLOW).collect()[0][0] == -(2**63)  # the hazard the backend exists to stop
        with SparkBackend(spark, both(frame)) as backend, pytest.raises(DataError, match="overflow") as caught:
            backend.run(OVERFLOW)
        assert spark.conf.get(ANSI) == "false"
    finally:
        spark.conf.unset(ANSI)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "9223372036854775807" not in str(caught.value)


def test_other_failures_withhold_the_message(spark: Any, frame: Any, capfd: pytest.CaptureFixture[str]) -> None:
    """A runtime failure (here a cast of a text value) may quote data: its message is withheld, from the
    error and from PySpark's own log of failed queries."""
    with SparkBackend(spark, both(frame)) as backend, pytest.raises(dpsql.OperationalError) as caught:
        backend.run("SELECT CAST(`y` AS INT) AS `z` FROM VALUES ('secret-value') AS `v`(`y`)")
    assert "secret-value" not in str(caught.value) and "withheld" in str(caught.value)
    assert caught.value.__cause__ is None
    printed = capfd.readouterr()
    assert "secret-value" not in printed.out + printed.err


def jobs(spark: Any) -> list[int]:
    return sorted(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


@pytest.mark.parametrize("where", ["parquet.{files}", "missing_db.people", "people"])
def test_files_and_missing_tables_are_refused_from_the_catalog(spark: Any, parquet_dir: str, where: str) -> None:
    """Spark would read ``parquet.`/dir``` as the files at /dir; dpsql refuses it, and a missing table, with a
    SchemaError before any Spark job runs (no row read)."""
    assert spark.sql(f"SELECT COUNT(*) FROM parquet.`{parquet_dir}`").collect()[0][0] == _portable.ROWS
    table = _portable.tables()["people"]
    before = jobs(spark)
    with SparkBackend(spark, {"people": where.format(files=parquet_dir)}) as backend:
        with pytest.raises(SchemaError, match=r"tables\.people.*not a table or view in the Spark session's catalog"):
            backend.check_table(table)
        with pytest.raises(SchemaError, match="catalog"):
            backend.cell_data(table, [table.columns["sex"]])
    assert jobs(spark) == before


def test_only_the_dataframes_given_when_all_are_in_memory(spark: Any, frame: Any) -> None:
    with SparkBackend(spark, {"people": frame}) as backend, pytest.raises(SchemaError, match="DataFrames passed"):
        backend.check_table(_portable.tables()["visits"])


# ============================================================================ what is stored
def test_in_memory_only_for_driver_data(spark: Any, frame: Any, parquet_dir: str) -> None:
    frame.write.mode("overwrite").saveAsTable("default.people_saved")
    spark.read.parquet(parquet_dir).createOrReplaceTempView("people_files_view")
    for local_data in (both(frame), {"people": _portable.arrow_table()}):
        with SparkBackend(spark, local_data) as local:
            assert local.in_memory and local.identity == ""
    stored = {"catalog table": "people_saved", "view over files": "people_files_view",
              "DataFrame over files": spark.read.parquet(parquet_dir), "projection": frame.select("*")}
    for label, where in stored.items():
        with SparkBackend(spark, {"people": where, "visits": frame}) as backend:
            assert not backend.in_memory, label
            assert backend.identity.startswith("spark:current=spark_catalog.default;"), label
    with SparkBackend(spark, {"people": "people_saved"}) as backend:
        assert "people=`spark_catalog`.`default`.`people_saved`" in backend.identity
        assert "`spark_catalog`.`default`.`people_saved`" in backend.sql_for(_portable.tables()["people"], [])
        with pytest.raises(ProgrammingError, match="budget"):
            dpsql.connect(backend, schema=_portable.SCHEMA, budget=dpsql.Budget(epsilon=1.0))


def test_a_catalog_table_gives_duckdb_vector(spark: Any, frame: Any) -> None:
    frame.write.mode("overwrite").saveAsTable("default.people_catalog")
    table = _portable.tables()["people"]
    cells = [table.columns["region"], table.columns["day"]]
    with SparkBackend(spark, {"people": "default.people_catalog"}) as backend:
        found = backend.cell_data(table, cells, sum_columns={table.columns["income"]: 1.0})
    expected = DuckDBBackend(_portable.duckdb_database()).cell_data(table, cells,
                                                                    sum_columns={table.columns["income"]: 1.0})
    assert (found.index.tolist(), found.counts.tolist(), found.sums["income"].tolist()) == \
        (expected.index.tolist(), expected.counts.tolist(), expected.sums["income"].tolist())


def test_close_drops_views_and_keeps_the_session(spark: Any, frame: Any) -> None:
    backend = SparkBackend(spark, both(frame))
    views = [name for name, in spark.sql("SHOW VIEWS").select("viewName").collect() if name.startswith("dpsql_")]
    assert len(views) == 2 and all(v.startswith(("dpsql_people_", "dpsql_visits_")) for v in views)
    backend.close()
    assert not any(spark.catalog.tableExists(view) for view in views)
    assert spark.sql("SELECT 1").collect()[0][0] == 1  # not stopped
    with pytest.raises(InterfaceError, match="closed"):
        backend.check_table(_portable.tables()["people"])
    backend.close()  # twice is harmless


def test_detection_needs_no_pyspark_import(spark: Any, frame: Any) -> None:
    assert is_spark_session(spark) and is_spark_dataframe(frame)
    assert not is_spark_session(frame) and not is_spark_session("sc://localhost:15002")
    with pytest.raises(ProgrammingError, match="SparkSession"):
        SparkBackend(object())
    with pytest.raises(ProgrammingError, match="DataFrame"):
        SparkBackend(spark, {"people": 3})
    with pytest.raises(ProgrammingError, match="another SparkSession"):
        SparkBackend(spark.newSession(), {"people": frame})
    code = ("import sys, dpsql, dpsql.backends, dpsql.backends.spark; "
            "assert not [m for m in sys.modules if m.startswith('pyspark')], 'pyspark imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2],
                   env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


def test_types_map_to_families() -> None:
    spark_dialect = SparkBackend.sql_dialect
    names = {"bigint": "integer", "int": "integer", "smallint": "integer", "tinyint": "integer",
             "double": "float", "float": "float", "decimal(10,2)": "decimal", "boolean": "boolean",
             "date": "date", "timestamp": "timestamp", "timestamp_ntz": "timestamp", "string": "text",
             "varchar(10)": "text", "char(3)": "text", "binary": "other", "array<int>": "other"}
    assert {name: spark_dialect.type_family(name) for name in names} == names


class RefusingConf:
    """A session configuration that is ANSI-off and refuses changes (as a managed service may)."""

    def get(self, key: str) -> str:
        return "false"

    def set(self, key: str, value: str) -> None:
        raise RuntimeError(f"cannot modify {key}")


def test_a_session_refusing_ansi_mode_runs_nothing() -> None:
    """Where ANSI mode cannot be set, the query is refused (OperationalError naming the setting) unrun."""
    ran: list[str] = []
    stand_in = type("SparkSession", (), {"__module__": "pyspark.sql.session", "conf": RefusingConf(),
                                         "sql": lambda self, text: ran.append(text)})
    backend = SparkBackend(stand_in())
    with pytest.raises(dpsql.OperationalError, match=r"spark\.sql\.ansi\.enabled=true.*refused"):
        backend.run(OVERFLOW)
    assert ran == []
