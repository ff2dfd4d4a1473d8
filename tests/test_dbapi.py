"""PEP 249 (DB-API 2.0), walked through in the PEP's own order: module interface, exceptions,
Connection, Cursor, type objects; plus dpsql's Arrow extensions, the ways to connect, and the
privacy ledger behind a connection (fail closed, durable across connections)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import dpsql
from dpsql import errors
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

SCHEMA = {"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "born": {"type": "date", "lower": "2000-01-01", "upper": "2000-01-02"},
}}}}
BATCH = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex; SELECT age, COUNT(*) AS n FROM people GROUP BY age;" \
        "SELECT born, COUNT(*) AS n FROM people GROUP BY born"


def _fill(con: duckdb.DuckDBPyConnection) -> None:
    """300 rows: ages 0..99 three times, sex alternating F/M, born on 2000-01-01 or 2000-01-02."""
    con.execute("CREATE TABLE people AS SELECT CAST(i % 100 AS INTEGER) AS age, CASE WHEN i % 2 = 0 THEN "
                "'F' ELSE 'M' END AS sex, DATE '2000-01-01' + CAST(i % 2 AS INTEGER) AS born FROM range(300) AS r(i)")


@pytest.fixture()
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    _fill(con)
    yield con
    con.close()


@pytest.fixture()
def connection(data: duckdb.DuckDBPyConnection) -> Iterator[dpsql.Connection]:
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), rng=SeededRandomSource(3)) as opened:
        yield opened


@pytest.fixture()
def cursor(connection: dpsql.Connection) -> dpsql.Cursor:
    return connection.cursor()


# ============================================================================== module interface
def test_module_globals() -> None:
    assert dpsql.apilevel == "2.0"
    assert dpsql.threadsafety in (0, 1, 2, 3)
    assert dpsql.paramstyle == "qmark"
    assert callable(dpsql.connect)


PEP_249_TREE = [
    ("Warning", Exception), ("Error", Exception),
    ("InterfaceError", "Error"), ("DatabaseError", "Error"),
    ("DataError", "DatabaseError"), ("OperationalError", "DatabaseError"), ("IntegrityError", "DatabaseError"),
    ("InternalError", "DatabaseError"), ("ProgrammingError", "DatabaseError"), ("NotSupportedError", "DatabaseError"),
]


@pytest.mark.parametrize("name, parent", PEP_249_TREE)
def test_the_pep_249_exception_hierarchy(name: str, parent: type | str) -> None:
    cls = getattr(dpsql, name)
    base = getattr(dpsql, parent) if isinstance(parent, str) else parent
    assert isinstance(cls, type) and issubclass(cls, base) and cls is getattr(errors, name)
    assert base in cls.__bases__  # a direct subclass, as the PEP's tree draws it


def test_error_is_not_a_warning_and_warning_is_not_an_error() -> None:
    assert not issubclass(dpsql.Warning, dpsql.Error) and not issubclass(dpsql.Error, dpsql.Warning)


@pytest.mark.parametrize("name, pep_parent", [
    ("BudgetExhaustedError", "OperationalError"), ("SchemaError", "ProgrammingError"),
    ("SqlSyntaxError", "ProgrammingError"),
    ("UnsupportedQueryError", "NotSupportedError"), ("PrivacyParameterError", "ProgrammingError"),
    ("ShapeError", "ProgrammingError"), ("UnsupportedStrategyError", "NotSupportedError"),
])
def test_dpsql_errors_sit_under_their_pep_249_class(name: str, pep_parent: str) -> None:
    cls = getattr(dpsql, name)
    assert issubclass(cls, getattr(dpsql, pep_parent)) and issubclass(cls, dpsql.DpsqlError)
    assert issubclass(cls, dpsql.Error)


def test_type_objects_and_constructors(cursor: dpsql.Cursor) -> None:
    for name in ("STRING", "BINARY", "NUMBER", "DATETIME", "ROWID", "Date", "Time", "Timestamp", "DateFromTicks",
                 "TimeFromTicks", "TimestampFromTicks", "Binary"):
        assert hasattr(dpsql, name), name
    cursor.execute(BATCH, epsilon=1.0)
    assert cursor.description[0][1] == dpsql.STRING and cursor.description[1][1] == dpsql.NUMBER
    cursor.nextset()
    cursor.nextset()
    assert cursor.description[0][1] == dpsql.DATETIME
    assert dpsql.Date(2000, 1, 2) == dt.date(2000, 1, 2)


# ============================================================================== connect
def test_connect_to_a_database_file(tmp_path: Path) -> None:
    path = tmp_path / "people.duckdb"
    with duckdb.connect(str(path)) as con:
        _fill(con)
    _owner_sets(path, epsilon=1.0)
    for database in (str(path), path):
        with dpsql.connect(database, schema=SCHEMA) as connection:
            assert connection.cursor().execute(BATCH, epsilon=0.5).rowcount == 2
    with duckdb.connect(str(path)) as con:  # nothing written, nothing locked
        assert con.execute("SELECT COUNT(*) FROM people").fetchone() == (300,)


def test_connect_in_memory_and_with_the_default_database() -> None:
    for connection in (dpsql.connect(":memory:", schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0)),
                       dpsql.connect(schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0))):
        with connection:
            assert "Cost: ε=0.5" in connection.cursor().explain(BATCH, epsilon=0.5)
            with pytest.raises(dpsql.ProgrammingError, match="people"):  # an empty database has no table people
                connection.cursor().execute(BATCH, epsilon=0.5)
            assert connection.budget.spent == 0.0


def test_connect_to_an_open_duckdb_connection_leaves_it_open(data: duckdb.DuckDBPyConnection) -> None:
    connection = dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0))
    connection.cursor().execute(BATCH, epsilon=0.5)
    connection.close()
    assert data.execute("SELECT COUNT(*) FROM people").fetchone() == (300,)


def test_connect_accepts_a_toml_schema_and_a_schema_file(data: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    text = '[tables.people.columns.sex]\ntype = "categorical"\nvalues = ["F", "M"]\n'
    (tmp_path / "schema.toml").write_text(text)
    for schema in (text, tmp_path / "schema.toml", str(tmp_path / "schema.toml")):
        with dpsql.connect(data, schema=schema, budget=dpsql.Budget(epsilon=1.0)) as connection:
            assert connection.cursor().execute("SELECT sex, COUNT(*) FROM people GROUP BY sex",
                                               epsilon=0.1).rowcount == 2


@pytest.mark.parametrize("budget", [None, 1.0, {"epsilon": 1.0}])
def test_connect_needs_a_budget(data: duckdb.DuckDBPyConnection, budget: object) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=r"Budget\(epsilon=\.\.\.\)"):
        dpsql.connect(data, schema=SCHEMA, budget=budget)  # type: ignore[arg-type]
    with pytest.raises(dpsql.ProgrammingError, match=r"or ledger=PATH"):
        dpsql.connect(":memory:", schema=SCHEMA)


def test_connect_to_a_missing_file_is_an_operational_error(tmp_path: Path) -> None:
    with pytest.raises(dpsql.OperationalError, match="no database file at"):
        dpsql.connect(tmp_path / "missing.duckdb", schema=SCHEMA)


# ============================================================================== Connection
def test_close_then_every_operation_raises(connection: dpsql.Connection) -> None:
    cursor = connection.cursor()
    connection.close()
    assert connection.closed
    connection.close()  # closing twice is harmless
    with pytest.raises(dpsql.InterfaceError):
        connection.cursor()
    with pytest.raises(dpsql.Error):
        connection.commit()
    with pytest.raises(dpsql.InterfaceError):
        cursor.execute(BATCH, epsilon=1.0)  # a cursor of a closed connection is unusable too


def test_commit_is_a_no_op_and_rollback_is_not_supported(connection: dpsql.Connection) -> None:
    assert connection.commit() is None
    with pytest.raises(dpsql.NotSupportedError):
        connection.rollback()


def test_connection_as_context_manager_closes(data: duckdb.DuckDBPyConnection) -> None:
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0)) as connection:
        assert not connection.closed and isinstance(connection.cursor(), dpsql.Cursor)
    assert connection.closed


def test_cursors_are_independent(connection: dpsql.Connection) -> None:
    first, second = connection.cursor(), connection.cursor()
    first.execute(BATCH, epsilon=1.0)
    assert first is not second and second.description is None and first.connection is connection


# ============================================================================== Cursor
def test_description_and_rowcount_before_and_after_execute(cursor: dpsql.Cursor) -> None:
    assert cursor.description is None and cursor.rowcount == -1
    assert cursor.execute(BATCH, epsilon=1.0) is cursor
    assert cursor.rowcount == 2
    description = cursor.description
    assert [column[0] for column in description] == ["sex", "n", "n_stddev"]
    assert all(len(column) == 7 for column in description)
    assert [column[1] for column in description] == ["STRING", "NUMBER", "NUMBER"]
    assert all(column[2:6] == (None, None, None, None) for column in description)
    assert cursor.nextset()
    assert cursor.rowcount == 10 and [c[0] for c in cursor.description] == ["age", "age_upper", "n", "n_stddev"]
    assert cursor.nextset()
    assert cursor.description[0][:2] == ("born", "DATETIME") and cursor.rowcount == 2


def test_callproc_is_not_supported(cursor: dpsql.Cursor) -> None:
    with pytest.raises(dpsql.NotSupportedError):
        cursor.callproc("anything", [1])


def test_closed_cursor_refuses_every_operation(cursor: dpsql.Cursor) -> None:
    cursor.execute(BATCH, epsilon=1.0)
    cursor.close()
    for operation in (lambda: cursor.execute(BATCH, epsilon=1.0), cursor.fetchone, cursor.fetchall, cursor.fetchmany,
                      cursor.nextset, cursor.fetch_arrow_table, cursor.fetch_arrow_tables,
                      lambda: cursor.executemany(BATCH, [[]], epsilon=1.0), lambda: cursor.explain(BATCH, epsilon=1.0)):
        with pytest.raises(dpsql.InterfaceError):
            operation()
    assert cursor.connection.budget.spent == 1.0


def test_cursor_as_context_manager_closes(connection: dpsql.Connection) -> None:
    with connection.cursor() as cursor:
        cursor.execute(BATCH, epsilon=1.0)
    with pytest.raises(dpsql.InterfaceError):
        cursor.fetchone()


def test_execute_with_parameters(cursor: dpsql.Cursor) -> None:
    cursor.execute("SELECT sex, COUNT(*) AS n FROM people WHERE age >= ? AND born = ? GROUP BY sex",
                   (50, dt.date(2000, 1, 2)), epsilon=1.0)
    assert [row[0] for row in cursor.fetchall()] == ["F", "M"]
    with pytest.raises(dpsql.ProgrammingError):
        cursor.execute("SELECT COUNT(*) FROM people WHERE age >= ?", [], epsilon=1.0)
    with pytest.raises(dpsql.ProgrammingError):
        cursor.execute("SELECT COUNT(*) FROM people WHERE age >= ?", [True], epsilon=1.0)


def test_execute_needs_exactly_one_privacy_cost(cursor: dpsql.Cursor) -> None:
    for cost in ({}, {"epsilon": 1.0, "rho": 0.1}, {"epsilon": 0.0}, {"epsilon": float("nan")}, {"rho": -1.0}):
        with pytest.raises(dpsql.PrivacyParameterError):
            cursor.execute(BATCH, **cost)
    assert cursor.connection.budget.spent == 0.0
    with pytest.raises(dpsql.PrivacyParameterError, match="epsilon_per_batch="):  # the message names the default
        cursor.execute(BATCH)


def test_a_connection_default_cost_lets_execute_run_without_one(data: duckdb.DuckDBPyConnection) -> None:
    """``connect(epsilon_per_batch=...)``: each ``execute(sql)`` without a cost is one batch charged that cost
    (what pandas.read_sql and other PEP 249 tools call); a cost given to execute still wins."""
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=3.0), epsilon_per_batch=0.5) as connection:
        cursor = connection.cursor()
        assert cursor.execute("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex").rowcount == 2
        assert connection.budget.spent == 0.5
        cursor.execute("SELECT COUNT(*) AS n FROM people", epsilon=1.0, reuse=False)  # else free: the sum of the groups
        assert connection.budget.spent == 1.5
        assert "Cost: ε=0.5" in cursor.explain("SELECT COUNT(*) AS n FROM people", reuse=False)
        cursor.executemany("SELECT COUNT(*) AS n FROM people WHERE age >= ?", [[10], [20]])
        assert connection.budget.spent == 2.5
    for costs in ({"epsilon_per_batch": 1.0, "rho_per_batch": 0.1}, {"epsilon_per_batch": -1.0},
                  {"rho_per_batch": float("inf")}):
        with pytest.raises(dpsql.PrivacyParameterError):
            dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=3.0), **costs)


def test_executemany_runs_one_charged_batch_per_parameter_set(cursor: dpsql.Cursor) -> None:
    cursor.executemany("SELECT sex, COUNT(*) AS n FROM people WHERE age >= ? GROUP BY sex", [[10], [20], [30]],
                       epsilon=0.5)
    assert cursor.connection.budget.spent == 1.5
    assert len(cursor.fetch_arrow_tables()) == 3
    assert len(cursor.fetchall()) == 2 and cursor.nextset() and cursor.nextset() and cursor.nextset() is None
    cursor.executemany("SELECT COUNT(*) FROM people WHERE age >= ?", [], epsilon=0.5)
    assert cursor.description is None and cursor.rowcount == -1 and cursor.connection.budget.spent == 1.5


def test_fetchone_fetchmany_fetchall_and_arraysize(cursor: dpsql.Cursor) -> None:
    assert cursor.arraysize == 1
    cursor.execute("SELECT age, COUNT(*) AS n FROM people GROUP BY age", epsilon=1.0)
    first = cursor.fetchone()
    assert isinstance(first, tuple) and first[:2] == (0, 10) and len(first) == 4
    assert [row[0] for row in cursor.fetchmany()] == [10]  # default size: arraysize
    cursor.arraysize = 3
    assert cursor.arraysize == 3
    assert [row[0] for row in cursor.fetchmany()] == [20, 30, 40]
    assert [row[0] for row in cursor.fetchmany(2)] == [50, 60]
    assert [row[0] for row in cursor.fetchall()] == [70, 80, 90]
    assert cursor.fetchone() is None and cursor.fetchmany(5) == [] and cursor.fetchall() == []


def test_fetch_before_execute_is_an_error(cursor: dpsql.Cursor) -> None:
    for fetch in (cursor.fetchone, cursor.fetchmany, cursor.fetchall, cursor.fetch_arrow_table,
                  cursor.fetch_arrow_tables,
                  cursor.nextset):
        with pytest.raises(dpsql.Error):
            fetch()


def test_nextset_true_then_none(cursor: dpsql.Cursor) -> None:
    cursor.execute(BATCH, epsilon=1.0)
    cursor.fetchone()
    assert cursor.nextset() is True
    assert cursor.fetchone()[0] == 0  # each result set starts at its first row
    assert cursor.nextset() is True
    assert cursor.nextset() is None
    assert cursor.description[0][0] == "born"  # the last set stays current


def test_setinputsizes_and_setoutputsize_are_no_ops(cursor: dpsql.Cursor) -> None:
    assert cursor.setinputsizes([None, 10]) is None
    assert cursor.setoutputsize(100) is None and cursor.setoutputsize(100, 2) is None
    assert cursor.description is None


def test_iteration_yields_the_remaining_rows(cursor: dpsql.Cursor) -> None:
    cursor.execute("SELECT age, COUNT(*) AS n FROM people GROUP BY age", epsilon=1.0)
    cursor.fetchmany(4)
    assert [row[0] for row in cursor] == [40, 50, 60, 70, 80, 90]
    assert list(cursor) == []


def test_fetch_arrow_table_and_tables(cursor: dpsql.Cursor) -> None:
    cursor.execute(BATCH, epsilon=1.0)
    tables = cursor.fetch_arrow_tables()
    assert [t.num_rows for t in tables] == [2, 10, 2] and all(isinstance(t, pa.Table) for t in tables)
    whole = cursor.fetch_arrow_table()
    assert whole.equals(tables[0]) and cursor.fetchone() is None
    cursor.nextset()
    cursor.fetchmany(3)
    rest = cursor.fetch_arrow_table()
    assert rest.equals(tables[1].slice(3)) and cursor.fetch_arrow_table().num_rows == 0
    assert [t.num_rows for t in cursor.fetch_arrow_tables()] == [2, 10, 2]  # every set, whatever was fetched


def test_rows_hold_python_values_in_the_arrow_types(cursor: dpsql.Cursor) -> None:
    cursor.execute("SELECT born, sex, COUNT(*) AS n FROM people GROUP BY born, sex", epsilon=1.0)
    rows = cursor.fetchall()
    assert [row[:2] for row in rows] == [(dt.date(2000, 1, 1), "F"), (dt.date(2000, 1, 1), "M"),
                                         (dt.date(2000, 1, 2), "F"), (dt.date(2000, 1, 2), "M")]
    assert all(isinstance(row[2], float) and isinstance(row[3], float) for row in rows)


# ============================================================================== the ledger
@pytest.fixture()
def database(tmp_path: Path) -> Path:
    path = tmp_path / "people.duckdb"
    with duckdb.connect(str(path)) as con:
        _fill(con)
    return path


def _owner_sets(database: Path, **total: float) -> Ledger:
    """The data owner's action, as `dpsql budget set --db DATABASE --schema SCHEMA --epsilon ...` does it."""
    ledger = Ledger(default_path(database))
    ledger.set_total(database.name, PrivacyCost(**total), binding=Binding.of(Schema.load(SCHEMA), database))
    return ledger


def _no_data_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data were read")

    monkeypatch.setattr(DuckDBBackend, "cell_data", refuse)


def test_a_spent_budget_is_reported_before_the_batch_is_planned(data: duckdb.DuckDBPyConnection,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsql.engine import pipeline

    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=0.5)) as opened:
        monkeypatch.setattr(pipeline, "prepare",
                            lambda *args, **kwargs: pytest.fail("planned although the budget cannot pay"))
        with pytest.raises(dpsql.BudgetExhaustedError, match="Nothing was run or charged"):
            opened.cursor().execute(BATCH, epsilon=1.0)
        assert opened.budget.spent == 0


def test_a_database_file_draws_from_the_ledger_next_to_it(database: Path) -> None:
    ledger = _owner_sets(database, epsilon=1.5)
    with dpsql.connect(database, schema=SCHEMA) as connection:
        cursor = connection.cursor().execute(BATCH, epsilon=1.0)
        metadata = json.loads(cursor.fetch_arrow_table().schema.metadata[b"dpsql"])
        assert metadata["budget_spent"] == "ε=1" and metadata["budget_remaining"] == "0.5 of ε=1.5"
    with dpsql.connect(str(database), schema=SCHEMA) as again:  # a new session: the spend stays
        assert again.budget.spent == 1 and again.budget.remaining == 0.5
        with pytest.raises(dpsql.BudgetExhaustedError, match=r"dataset 'people.duckdb' has ε=0.5 left of 1.5"):
            again.cursor().execute(BATCH, epsilon=1.0, reuse=False)  # (reused, the same batch would be free)
    (charge,) = ledger.history(database.name)
    assert charge.sql_hash == hashlib.sha256(BATCH.encode()).hexdigest()
    assert charge.mechanism == "matrix mechanism, discrete Laplace" and charge.cost == PrivacyCost(epsilon=1.0)


def test_a_ledger_path_and_dataset_can_be_named(data: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "books.ledger")
    ledger.set_total("census", PrivacyCost(rho=1.0), binding=Binding.of(Schema.load(SCHEMA)))  # no database file
    with dpsql.connect(data, schema=SCHEMA, ledger=ledger.path, dataset="census") as connection:
        connection.cursor().executemany("SELECT COUNT(*) FROM people WHERE age >= ?", [[10], [20]], rho=0.25)
        assert connection.account is not None and connection.account.dataset == "census"
    assert ledger.balance("census").left == Fraction(1, 2) and len(ledger.history("census")) == 2


def test_explain_shows_the_balance_and_spends_nothing(database: Path) -> None:
    ledger = _owner_sets(database, rho=2.0)
    with dpsql.connect(database, schema=SCHEMA) as connection:
        cursor = connection.cursor().execute(BATCH, epsilon=1.0)
        assert "Cost: ε=1; budget left 1.5 of ρ=2" in cursor.explain(BATCH, epsilon=1.0, reuse=False)
        assert "Statement 1: free (answered by release #" in cursor.explain(BATCH, epsilon=1.0)
    assert len(ledger.history(database.name)) == 1


def test_without_a_budget_set_nothing_is_read_or_answered(database: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_data_reads(monkeypatch)
    with dpsql.connect(database, schema=SCHEMA) as connection:
        cursor = connection.cursor()
        with pytest.raises(errors.BudgetNotSetError, match="dpsql budget set") as caught:
            cursor.execute(BATCH, epsilon=0.1)
        assert isinstance(caught.value, dpsql.OperationalError) and cursor.description is None
        assert "Budget: unknown" in cursor.explain(BATCH, epsilon=0.1)
    assert not default_path(database).exists()  # querying never creates a ledger


@pytest.mark.parametrize("damage", ["garbage", "empty", "directory"])
def test_a_corrupted_ledger_fails_every_query_closed(database: Path, monkeypatch: pytest.MonkeyPatch,
                                                     damage: str) -> None:
    ledger = _owner_sets(database, epsilon=10.0)
    backup = ledger.path.with_name("backup")
    shutil.copy(ledger.path, backup)
    if damage == "directory":
        ledger.path.unlink()
        ledger.path.mkdir()
    else:
        ledger.path.write_bytes(b"\x00\xffnot a ledger" * 300 if damage == "garbage" else b"")
    with dpsql.connect(database, schema=SCHEMA) as connection, monkeypatch.context() as patch:
        _no_data_reads(patch)
        cursor = connection.cursor()
        for run in (lambda: cursor.execute(BATCH, epsilon=1.0),
                    lambda: cursor.execute("SELECT COUNT(*) FROM people", rho=0.1),
                    lambda: cursor.executemany("SELECT COUNT(*) FROM people WHERE age >= ?", [[10]], epsilon=0.1),
                    lambda: connection.budget):
            with pytest.raises(errors.LedgerError, match="Nothing was run or charged"):
                run()
        assert cursor.description is None and "Budget: unknown" in cursor.explain(BATCH, epsilon=1.0)
        patch.undo()
        if damage == "directory":
            ledger.path.rmdir()
        shutil.copy(backup, ledger.path)  # restored from the backup: answering resumes where the books were
        assert cursor.execute(BATCH, epsilon=1.0).rowcount == 2 and connection.budget.remaining == 9


def test_budget_and_ledger_are_exclusive_and_checked(data: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    cases = [({"budget": dpsql.Budget(epsilon=1.0), "ledger": tmp_path / "l"}, "not both"),
             ({"ledger": tmp_path / "l"}, "pass dataset='name'"),
             ({"budget": dpsql.Budget(epsilon=1.0), "dataset": "people"}, "name a budget in a ledger"),
             ({"ledger": 3, "dataset": "people"}, "ledger= must be a file path"),
             ({"ledger": tmp_path / "l", "dataset": " "}, "dataset= must be a non-empty name")]
    for kwargs, phrase in cases:
        with pytest.raises(dpsql.ProgrammingError, match=phrase):
            dpsql.connect(data, schema=SCHEMA, **kwargs)  # type: ignore[arg-type]
