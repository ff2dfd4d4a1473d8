"""The PostgreSQL backend against the DuckDB oracle (``tests/_portable.py``), on a throw-away server.

The portable table is loaded into TEMPORARY tables ``people`` and ``visits`` of one session per
driver (ADBC by ``adbc_ingest``, psycopg by COPY), so NaN stays NaN, NULL stays NULL, DECIMAL
is NUMERIC and dates are DATE. The server comes from ``tests/_postgres_server.py`` (skipped
without PostgreSQL or the drivers, unless ``DPSQL_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import dpsql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.postgres import PostgresBackend, is_dbapi_connection, public_uri
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger
from dpsql.errors import DataError, InterfaceError, OperationalError, ProgrammingError, SchemaError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema
from tests import _portable
from tests import _postgres_server as _server
from tests._postgres_server import postgres_uri, require_driver  # noqa: F401  (a session-scoped fixture)

TABLES = {"people": "people", "visits": "visits"}
_PG_TYPES = {"person": "bigint", "visitor": "text", "age": "integer", "sex": "text", "region": "text",
             "rooms": "bigint", "income": "double precision", "wealth": "bigint", "day": "date",
             "score": "numeric(10, 2)", "member": "boolean"}


# ====================================================================================== fixtures
def _adbc(uri: str, **options: Any) -> Any:
    require_driver("adbc_driver_postgresql")
    from adbc_driver_postgresql import dbapi
    return dbapi.connect(uri, **options)


def _psycopg(uri: str, **options: Any) -> Any:
    require_driver("psycopg")
    import psycopg
    return psycopg.connect(uri, **options)


def _load_adbc(connection: Any, names: tuple[str, ...] = ("people", "visits"), *, temporary: bool = True) -> None:
    cursor = connection.cursor()
    for name in names:
        cursor.adbc_ingest(name, _portable.arrow_table(), mode="create", temporary=temporary)
    cursor.close()
    connection.commit()


def _load_psycopg(connection: Any) -> None:
    """CREATE TEMPORARY TABLE and COPY the portable rows (Python values: NaN, None, Decimal, date)."""
    rows = _portable.arrow_table().to_pylist()
    columns = ", ".join(f'"{name}" {kind}' for name, kind in _PG_TYPES.items())
    with connection.cursor() as cursor:
        for name in ("people", "visits"):
            cursor.execute(f'CREATE TEMPORARY TABLE "{name}" ({columns})')
            with cursor.copy(f'COPY "{name}" FROM STDIN') as copy:
                for row in rows:
                    copy.write_row([row[c] for c in _PG_TYPES])
    connection.commit()


@pytest.fixture(scope="module")
def adbc_connection(postgres_uri: str) -> Iterator[Any]:  # noqa: F811
    """An ADBC connection (default: no autocommit) holding the portable table as temporary tables."""
    connection = _adbc(postgres_uri)
    _load_adbc(connection)
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def psycopg_connection(postgres_uri: str) -> Iterator[Any]:  # noqa: F811
    """A psycopg 3 connection (default: no autocommit) holding the portable table as temporary tables."""
    connection = _psycopg(postgres_uri)
    _load_psycopg(connection)
    yield connection
    connection.close()


@pytest.fixture(params=["adbc", "psycopg"])
def connection(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_connection")


@pytest.fixture(scope="module")
def oracle() -> dict[str, Any]:
    return {"vectors": _portable.data_vectors(DuckDBBackend(_portable.duckdb_database())),
            "answers": _portable.answers(lambda **kw: dpsql.connect(_portable.duckdb_database(), **kw))}


class Recording:
    """A PEP 249 connection that records every statement its cursors execute."""

    def __init__(self, connection: Any) -> None:
        self.inner, self.statements = connection, []

    def cursor(self) -> Any:
        return _RecordingCursor(self.inner.cursor(), self.statements)

    def __getattr__(self, name: str) -> Any:  # close, commit, rollback, info
        return getattr(self.inner, name)


class _RecordingCursor:
    def __init__(self, cursor: Any, statements: list[str]) -> None:
        self.inner, self.statements = cursor, statements

    def execute(self, sql: str, *args: Any) -> Any:
        self.statements.append(sql)
        return self.inner.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# ===================================================================================== the oracle
def test_data_vectors_equal_duckdb(connection: Any, oracle: dict[str, Any]) -> None:
    found = _portable.data_vectors(PostgresBackend(connection, tables=TABLES))
    assert found.keys() == oracle["vectors"].keys()
    for key, value in oracle["vectors"].items():
        assert _portable.same(found[key], value), key


def test_uncapped_grouping_sets_run_as_a_union_with_duckdb_s_vectors(connection: Any) -> None:
    """Without a privacy-unit column the rows are a plain projection: PostgreSQL aggregates each grouping set
    by its own (parallel) GROUP BY in a UNION ALL, and the sets, sums, counts and marginals equal DuckDB's."""
    schema = Schema.load({"tables": {"people": {"columns": _portable.COLUMNS}}})
    table = schema.table("people")
    columns = table.columns

    def vectors(backend: Any) -> list[Any]:
        sets = backend.cell_data_sets(table, [[columns["sex"]], [columns["region"], columns["day"]], [],
                                              [columns["age"], columns["sex"]]],
                                      sum_columns={columns["wealth"]: 1.0, columns["income"]: 0.5},
                                      count_columns=[columns["score"]])
        marginals = backend.marginal_counts(table, [columns["sex"], columns["age"], columns["member"]],
                                            [(), (0,), (1, 2), (0, 1, 2)])
        return [[_portable._plain(data) for data in sets], {key: value.tolist() for key, value in marginals.items()}]

    recording = Recording(connection)
    found = vectors(PostgresBackend(recording, tables=TABLES))
    assert _portable.same(found, vectors(DuckDBBackend(_portable.duckdb_database())))
    reads = [s for s in recording.statements if "dpsql_cell_0" in s]
    assert len(reads) == 2 and all("UNION ALL" in s and "GROUPING SETS" not in s for s in reads)
    connection.rollback()


def test_answers_are_bit_identical_to_duckdb(connection: Any, oracle: dict[str, Any]) -> None:
    def connect(**options: Any) -> dpsql.Connection:
        return dpsql.connect(PostgresBackend(connection, tables=TABLES), **options)

    found = _portable.answers(connect)
    assert len(found) == len(oracle["answers"]) == 9
    assert _portable.same(found, oracle["answers"])
    with connection.cursor() as cursor:  # the connection passed in outlives dpsql's connection
        cursor.execute("SELECT count(*) FROM people")
        assert cursor.fetchall() == [(_portable.ROWS,)]


def test_the_loaded_table_keeps_nan_null_numeric_and_dates(connection: Any) -> None:
    backend = PostgresBackend(connection, tables=TABLES)
    found = backend.run('SELECT count(*) FILTER (WHERE income = \'NaN\'::float8) AS nan, count(*) FILTER (WHERE income '
                        'IS NULL) AS null, sum(score) AS score, min("day") AS day FROM people')
    data = _portable.arrow_table()
    incomes = data.column("income").to_pylist()
    assert found.column("nan").to_pylist() == [sum(1 for v in incomes if v is not None and v != v)]
    assert found.column("null").to_pylist() == [data.column("income").null_count]
    scores = [v for v in data.column("score").to_pylist() if v is not None]
    assert decimal.Decimal(str(found.column("score")[0].as_py())) == sum(scores)
    assert found.column("day").to_pylist() == [min(v for v in data.column("day").to_pylist() if v)]
    columns = backend.source(_portable.tables()["people"]).columns
    assert {k: c.family for k, c in columns.items()} == {
        "person": "integer", "visitor": "text", "age": "integer", "sex": "text", "region": "text", "rooms": "integer",
        "income": "float", "wealth": "integer", "day": "date", "score": "decimal", "member": "boolean"}


TYPED_SCHEMA = {"tables": {"typed": {"columns": {
    "i": {"type": "categorical", "values": [1, 2, 3]},
    "b": {"type": "categorical", "values": ["true", "false"]},
    "d": {"type": "categorical", "values": ["0.5", "1.5"]},
    "r": {"type": "categorical", "values": ["0.5", "0.25"]},
    "t": {"type": "categorical", "values": ["a", "b"]},
    "v": {"type": "categorical", "values": ["a", "b"]},
    "e": {"type": "categorical", "values": ["a", "b", "c"]},
    "n": {"type": "numeric", "lower": 0, "upper": 10, "bin_width": 2.5, "resolution": 0.25, "out_of_domain": "clamp"},
    "days": {"type": "date", "lower": "2020-01-01", "upper": "2021-12-31", "unit": "day", "bin_width": 7},
    "years": {"type": "date", "lower": "2010-01-01", "upper": "2030-12-31", "unit": "year"},
}}}}
_TYPED_PG = {"i": "integer", "b": "boolean", "d": "double precision", "r": "real", "t": "text", "v": "varchar(5)",
             "e": "dpsql_mood", "n": "numeric", "days": "date", "years": "date"}
_TYPED_DUCKDB = {"i": "INTEGER", "b": "BOOLEAN", "d": "DOUBLE", "r": "REAL", "t": "VARCHAR", "v": "VARCHAR",
                 "e": "ENUM('a', 'b', 'c', 'd')", "n": "DECIMAL(18, 2)", "days": "DATE", "years": "DATE"}


def _typed_rows() -> list[dict[str, Any]]:
    """Every value kind per type: NULL, NaN (doubles; NUMERIC 'NaN' in PostgreSQL only), undeclared values,
    values beyond the bounds (NUMERIC ±Infinity)."""
    rows = []
    for k in range(240):
        n: object = [None, "NaN", "Infinity", "-Infinity"][k % 4] if k % 7 == 0 else decimal.Decimal(k % 53) / 4 - 1
        rows.append({"i": None if k % 11 == 0 else k % 5, "b": None if k % 13 == 0 else k % 3 == 0,
                     "d": float("nan") if k % 9 == 0 else [0.5, 1.5, 2.5, None][k % 4],
                     "r": [0.5, 0.25, 0.1, None, float("nan")][k % 5], "t": [None, "a", "b", "c", "A"][k % 5],
                     "v": ["a", "b", "a ", None][k % 4], "e": [None, "a", "b", "c", "d"][k % 5], "n": n,
                     "days": None if k % 17 == 0 else dt.date(2019, 12, 1) + dt.timedelta(days=k * 3),
                     "years": dt.date(2005 + k % 30, 1 + k % 12, 1 + k % 28)})
    return rows


def test_every_column_type_bins_as_in_duckdb(psycopg_connection: Any) -> None:
    """Categorical CASE over integer, boolean, double, real, text, varchar and enum columns; NaN; day and
    year differences; FLOOR rounding and exact NUMERIC sums. PostgreSQL's NUMERIC 'NaN' is no value (as
    NULL is in DuckDB) and ±Infinity lies beyond the bounds (as 1e9 does in DuckDB)."""
    rows = _typed_rows()
    with psycopg_connection.cursor() as cursor:
        cursor.execute("DROP TYPE IF EXISTS pg_temp.dpsql_mood CASCADE; "
                       "CREATE TYPE pg_temp.dpsql_mood AS ENUM ('a', 'b', 'c', 'd')")
        cursor.execute(f"CREATE TEMPORARY TABLE typed ({', '.join(f'{c} {t}' for c, t in _TYPED_PG.items())})")
        with cursor.copy("COPY typed FROM STDIN") as copy:
            for row in rows:
                copy.write_row([str(row[c]) if c == "n" and row[c] is not None else row[c] for c in _TYPED_PG])
    psycopg_connection.commit()
    duck = duckdb.connect()
    duck.execute(f"CREATE TABLE typed ({', '.join(f'{c} {t}' for c, t in _TYPED_DUCKDB.items())})")
    nan_free = {"NaN": None, "Infinity": 1e9, "-Infinity": -1e9}
    duck.executemany(f"INSERT INTO typed VALUES ({', '.join('?' for _ in _TYPED_DUCKDB)})",
                     [[nan_free.get(row[c], row[c]) if c == "n" else row[c] for c in _TYPED_DUCKDB] for row in rows])
    table = Schema.load(TYPED_SCHEMA).table("typed")
    postgres, oracle = PostgresBackend(psycopg_connection, tables={"typed": "typed"}), DuckDBBackend(duck)
    assert postgres.source(table).columns["e"].family == "text"
    columns = table.columns
    for name, column in columns.items():
        sums = {columns["n"]: 0.25}
        found = postgres.cell_data(table, [column], sum_columns=sums, count_columns=[columns["n"], columns["d"]])
        want = oracle.cell_data(table, [column], sum_columns=sums, count_columns=[columns["n"], columns["d"]])
        assert _portable.same(_portable._plain(found), _portable._plain(want)), name
    psycopg_connection.rollback()


# ================================================================================ catalog checks
def test_missing_table_or_column_is_refused_before_any_row_is_read(adbc_connection: Any) -> None:
    recording = Recording(adbc_connection)
    age = {"type": "integer", "lower": 0, "upper": 99}
    schema = {"tables": {"people": {"columns": {"age": age, "height": {"type": "integer", "lower": 0, "upper": 250}}}}}
    with dpsql.connect(PostgresBackend(recording, tables={"people": "people"}), schema=schema,
                       budget=dpsql.Budget(epsilon=1.0)) as connection:
        with pytest.raises(SchemaError, match=r"'height' of table 'people' are declared .* missing"):
            connection.cursor().execute("SELECT COUNT(*) AS n FROM people WHERE height > 10", epsilon=0.5)
        assert connection.budget.left == 1
    nowhere = Schema.load({"tables": {"nowhere": {"columns": {"age": age}}}}).table("nowhere")
    backend = PostgresBackend(recording, tables={"nowhere": "nowhere"})
    assert not backend.in_memory  # not shown to be a temporary table
    with pytest.raises(SchemaError, match=r"Table 'nowhere' is declared .* no table or view named \"nowhere\""):
        backend.check_table(nowhere)  # what the engine calls before the charge
    data_reads = [s for s in recording.statements if "pg_catalog" not in s and "SAVEPOINT" not in s
                  and "READ ONLY" not in s and s != "ROLLBACK"]
    assert recording.statements and data_reads == []


def test_names_resolve_case_insensitively_by_search_path_and_schema(postgres_uri: str) -> None:  # noqa: F811
    connection = _psycopg(postgres_uri, autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute('CREATE SCHEMA "Other"; CREATE TABLE "Other"."Hidden" ("x" integer);'
                           'CREATE TEMPORARY TABLE "People" ("Age" integer, "pe\'o\\\\ple" text)')
        backend = PostgresBackend(connection)
        schema = Schema.load({"tables": {"people": {"columns": {"age": {"type": "integer", "lower": 0, "upper": 9}}}}})
        source = backend.source(schema.table("people"))
        assert source.reference.sql("postgres").startswith('"pg_temp_') and source.reference.name == "People"
        assert source.columns["age"].name == "Age" and "pe'o\\\\ple" in source.columns
        from dpsql.backends.cell_sql import table_ref
        assert list(backend.describe(table_ref("other.hidden"))) == ["x"]  # a schema-qualified name
        with pytest.raises(SchemaError, match="on the connection's search path"):
            backend.describe(table_ref("hidden"))  # "Other" is not on the search path
        with pytest.raises(SchemaError, match=r"in database 'elsewhere'.* connection is to database 'postgres'"):
            backend.describe(table_ref("elsewhere.other.hidden"))
        assert list(backend.describe(table_ref("postgres.other.hidden"))) == ["x"]
        with connection.cursor() as cursor:  # names reach the catalog SQL hex-encoded: quotes and backslashes are inert
            cursor.execute('CREATE TEMPORARY TABLE "we\'ird\\""" ("y" integer)')
        assert list(backend.describe(table_ref("WE'IRD\\\""))) == ["y"]
    finally:
        with connection.cursor() as cursor:
            cursor.execute('DROP SCHEMA "Other" CASCADE')
        connection.close()


# ======================================================================= in memory, identity, ledger
def test_in_memory_only_for_temporary_tables(adbc_connection: Any, postgres_uri: str) -> None:  # noqa: F811
    assert PostgresBackend(adbc_connection, tables=TABLES).in_memory
    assert PostgresBackend(adbc_connection, tables=TABLES).identity == ""
    assert not PostgresBackend(adbc_connection).in_memory  # no mapping: any table of the search path may be read
    with _stored(postgres_uri) as stored:
        backend = PostgresBackend(adbc_connection, tables={"people": "public.stored_people", "visits": "visits"})
        assert not backend.in_memory  # one stored table is enough
        port = postgres_uri.rsplit(":", 1)[1].split("/")[0]
        assert re.fullmatch(rf"postgresql://127\.0\.0\.1:{port}/postgres tables=people=public\.stored_people,"
                            r"visits=pg_temp_\d+\.visits", backend.identity), backend.identity
        with adbc_connection.cursor() as cursor:  # a temporary VIEW over stored data is not in memory
            cursor.execute(f"CREATE TEMPORARY VIEW people_view AS SELECT * FROM {stored}")
        try:
            assert not PostgresBackend(adbc_connection, tables={"people": "people_view"}).in_memory
        finally:
            adbc_connection.rollback()  # drops the view (and its lock on the stored table)


def test_once_in_memory_only_temporary_tables_are_read(postgres_uri: str) -> None:  # noqa: F811
    """A backend accepted as in-memory (where rng= is allowed) never reads a stored table that later takes the name."""
    connection = _psycopg(postgres_uri, autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute("CREATE TEMPORARY TABLE swapped (age integer)")
        backend = PostgresBackend(connection, tables={"people": "swapped"})
        schema = Schema.load({"tables": {"people": {"columns": {"age": {"type": "integer", "lower": 0, "upper": 9}}}}})
        assert backend.in_memory and backend.source(schema.table("people")).columns["age"].name == "age"
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE swapped; CREATE TABLE public.swapped (age integer)")
        with pytest.raises(SchemaError, match=r"now public\.swapped, not a TEMPORARY table"):
            backend.check_table(schema.table("people"))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS public.swapped")
        connection.close()


def test_rng_and_budget_are_refused_on_stored_tables(adbc_connection: Any, postgres_uri: str,  # noqa: F811
                                                     tmp_path: Path) -> None:
    with _stored(postgres_uri) as stored:
        backend = PostgresBackend(adbc_connection, tables={"people": stored, "visits": stored})
        with pytest.raises(ProgrammingError, match=r"in-memory budget for data in memory.*stored_people"):
            dpsql.connect(backend, schema=_portable.SCHEMA, budget=dpsql.Budget(epsilon=1.0))
        with pytest.raises(ProgrammingError, match="rng= is for tests"):
            dpsql.connect(backend, schema=_portable.SCHEMA, ledger=tmp_path / "l", dataset="people",
                          rng=SeededRandomSource(1))


def test_a_stored_table_through_a_ledger_is_charged(postgres_uri: str, tmp_path: Path) -> None:  # noqa: F811
    with _stored(postgres_uri) as stored:
        backend = PostgresBackend.from_uri(postgres_uri, tables={"people": stored})
        schema = {"tables": {"people": _portable.SCHEMA["tables"]["people"]}}
        ledger = Ledger(tmp_path / "pg.dpsql-ledger")
        ledger.set_total("people", PrivacyCost(epsilon=1.0),
                         binding=Binding(schema=Schema.load(schema).canonical(), database=backend.identity))
        with pytest.raises(ProgrammingError, match="in-memory budget for data in memory"):
            dpsql.connect(backend, schema=schema, budget=dpsql.Budget(epsilon=1.0))
        with dpsql.connect(backend, schema=schema, ledger=ledger.path, dataset="people") as connection:
            rows = connection.cursor().execute("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex",
                                               epsilon=0.25).fetchall()
        assert [row[0] for row in rows] == ["F", "M"]
        assert ledger.balance("people").left == Fraction(3, 4)
        with pytest.raises(InterfaceError, match="closed"):
            backend.run("SELECT 1")  # the connection from_uri opened was closed with the backend


def test_connect_and_the_cli_open_postgres_by_address_or_dialect(postgres_uri: str, tmp_path: Path,  # noqa: F811
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``dpsql.connect("postgresql://...")``, ``dpsql.connect(connection, dialect="postgres")`` and
    ``dpsql budget set`` / ``dpsql run --db postgresql://...`` all reach the same stored table and charge one ledger."""
    from dpsql.cli import main

    schema = {"tables": {"people": _portable.SCHEMA["tables"]["people"]}}
    (tmp_path / "schema.toml").write_text(_toml("people", schema["tables"]["people"]))
    (tmp_path / "q.sql").write_text("SELECT region, COUNT(*) AS n FROM people GROUP BY region")
    ledger = tmp_path / "pg.dpsql-ledger"
    where = ["--db", postgres_uri, "--tables", "people=public.stored_people", "--ledger", str(ledger),
             "--dataset", "people"]
    with _stored(postgres_uri):
        assert main(["budget", "set", *where, "--schema", str(tmp_path / "schema.toml"), "--epsilon", "2"]) == 0
        with dpsql.connect(postgres_uri, schema=schema, tables={"people": "public.stored_people"}, ledger=ledger,
                           dataset="people") as connection:
            assert "Data read by: PostgresBackend (postgres SQL)" in connection.cursor().explain(
                "SELECT COUNT(*) AS n FROM people", epsilon=0.5)
            assert connection.cursor().execute("SELECT COUNT(*) AS n FROM people", epsilon=0.5).rowcount == 1
        user = _adbc(postgres_uri, autocommit=True)
        try:
            with dpsql.connect(user, dialect="postgres", schema=schema, tables={"people": "public.stored_people"},
                               ledger=ledger, dataset="people") as connection:
                connection.cursor().execute("SELECT COUNT(*) AS n FROM people", epsilon=0.5)
            capsys.readouterr()
            assert main(["run", str(tmp_path / "q.sql"), *where, "--schema", str(tmp_path / "schema.toml"),
                         "--epsilon", "0.5"]) == 0
        finally:
            user.close()
    assert "-- statement 1" in capsys.readouterr().out
    assert Ledger(ledger).balance("people").left == Fraction(1, 2)


# ====================================================================== errors, read only, lifetime
def test_errors_leave_the_connection_usable(connection: Any) -> None:
    backend = PostgresBackend(connection, tables=TABLES)
    with pytest.raises(OperationalError, match=r"SQLSTATE 22012\); its message is withheld") as failed:
        backend.run("SELECT 1 / (count(*) - count(*)) FROM people")
    assert failed.value.__cause__ is None and "division" not in str(failed.value)
    with pytest.raises(DataError, match="numeric overflow"):
        backend.run("SELECT max(person) + 9223372036854775807 FROM people")
    with pytest.raises(OperationalError, match=r"SQLSTATE 42P01\): .*no_such_table"):
        backend.run("SELECT * FROM no_such_table")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM visits")
        assert cursor.fetchall() == [(_portable.ROWS,)]
    assert backend.run("SELECT count(*) AS n FROM people").column("n").to_pylist() == [_portable.ROWS]


def test_an_open_transaction_survives_an_error_with_psycopg(psycopg_connection: Any) -> None:
    """Inside the caller's transaction dpsql works in a savepoint: the caller's uncommitted rows stay."""
    with psycopg_connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE scratch (a integer); INSERT INTO scratch VALUES (1)")
    with pytest.raises(OperationalError):
        PostgresBackend(psycopg_connection).run("SELECT 1 / 0")
    with psycopg_connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scratch")
        assert cursor.fetchall() == [(1,)]
    psycopg_connection.rollback()


def test_a_transaction_dpsql_began_is_ended_and_an_autocommit_connection_recovers(
        psycopg_connection: Any, postgres_uri: str) -> None:  # noqa: F811
    import psycopg
    psycopg_connection.rollback()
    backend = PostgresBackend(psycopg_connection, tables=TABLES)
    assert backend.run("SELECT count(*) AS n FROM people").column("n").to_pylist() == [_portable.ROWS]
    assert psycopg_connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # psycopg's BEGIN undone
    with PostgresBackend.from_uri(postgres_uri) as own:  # ADBC in autocommit: BEGIN READ ONLY ... ROLLBACK
        with pytest.raises(OperationalError, match="SQLSTATE 22012"):
            own.run("SELECT 1 / 0")
        assert own.run("SELECT 2 AS two").column("two").to_pylist() == [2]
    with pytest.raises(OperationalError, match=r"Cannot connect to PostgreSQL at postgresql://127\.0\.0\.1:1/x"):
        PostgresBackend.from_uri("postgresql://someone:secret@127.0.0.1:1/x")


def test_queries_run_read_only(connection: Any, postgres_uri: str) -> None:  # noqa: F811
    with _stored(postgres_uri) as stored:
        with pytest.raises(OperationalError, match="SQLSTATE 25006"):
            PostgresBackend(connection).run(f"DELETE FROM {stored}")
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {stored}")
            assert cursor.fetchall() == [(_portable.ROWS,)]
        connection.rollback()


def test_a_connection_passed_in_stays_open_after_close(connection: Any) -> None:
    backend = PostgresBackend(connection, tables=TABLES)
    backend.close()
    with pytest.raises(InterfaceError, match="closed"):
        backend.run("SELECT 1")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchall() == [(1,)]


def test_what_is_not_a_connection_or_a_uri_is_refused() -> None:
    assert not is_dbapi_connection(object()) and is_dbapi_connection(Recording(_Closed()))
    with pytest.raises(InterfaceError, match="PEP 249 connection"):
        PostgresBackend("postgresql://localhost/x")
    with pytest.raises(InterfaceError, match="starts with postgresql://"):
        PostgresBackend.from_uri("mysql://localhost/x")
    assert public_uri("postgresql://alice:secret@db.example:5433/sales?sslmode=require") == \
        "postgresql://db.example:5433/sales"


def test_missing_pieces_skip_or_fail_when_postgres_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_server.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no initdb"):
        _server.unavailable("no initdb")
    monkeypatch.setenv(_server.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=r"no initdb .*DPSQL_REQUIRE_POSTGRES=1"):
        _server.unavailable("no initdb")
    with pytest.raises(pytest.fail.Exception, match="no_such_driver is not installed"):
        _server.require_driver("no_such_driver")


def test_rows_become_exact_arrow_columns() -> None:
    from dpsql.backends.postgres import arrow_column
    assert arrow_column([1, None, decimal.Decimal("2")]).type == pa.int64()
    assert arrow_column([decimal.Decimal(2**70)]).to_pylist() == [str(2**70)]
    assert arrow_column([dt.date(2020, 1, 1), None]).type == pa.date32()
    assert arrow_column([True, None]).type == pa.bool_()
    assert arrow_column([2**63, None, -1]).to_pylist() == [str(2**63), None, "-1"]
    assert arrow_column([decimal.Decimal("5E+3"), decimal.Decimal("2.00")]).to_pylist() == [5000, 2]
    assert arrow_column([decimal.Decimal("1.50")]).to_pylist() == [decimal.Decimal("1.50")]


# ======================================================================================= helpers
class _Closed:
    """The four methods a PEP 249 connection has (none does anything)."""

    def cursor(self) -> None: ...
    def close(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...


def _toml(name: str, table: dict[str, Any]) -> str:
    """A schema table as TOML (strings, numbers and lists of strings are all the portable schema uses)."""
    unit = table["privacy_unit"]
    lines = [f'[tables.{name}]', f'privacy_unit = {{ column = "{unit["column"]}", max_rows = {unit["max_rows"]} }}']
    for column, spec in table["columns"].items():
        lines.append(f"[tables.{name}.columns.{column}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in spec.items()]
    return "\n".join(lines) + "\n"


class _stored:  # noqa: N801 - used as a context manager, like a function
    """A persistent table ``public.stored_people`` holding the portable rows, dropped on exit."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def __enter__(self) -> str:
        self.owner = _adbc(self.uri, autocommit=True)
        cursor = self.owner.cursor()
        cursor.adbc_ingest("stored_people", _portable.arrow_table(), mode="replace")
        cursor.close()
        return "public.stored_people"

    def __exit__(self, *exc: object) -> None:
        cursor = self.owner.cursor()
        cursor.execute("DROP TABLE IF EXISTS public.stored_people CASCADE")
        cursor.close()
        self.owner.close()

