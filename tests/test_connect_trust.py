"""What a caller of ``dpsql.connect`` cannot do (issue 14, items 1, 3 and 4).

- choose the noise: ``rng=`` only with an in-memory budget on in-memory data (a seeded source on
  charged data lets its holder replay the noise and subtract it);
- reach anything but the database's own tables and views (no replacement scans of files);
- bypass the ledger of data in a file with ``budget=``;
- write to the database, or lock other readers out: paths open read-only, and a missing path is
  an error that creates nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql import engine, errors
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.account import Account
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.cli import main
from dpsql.dbapi import Connection
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
SCHEMA = {"tables": {"people": {"columns": {"sex": {"type": "categorical", "values": ["F", "M"]}}}}}
SCHEMA_TOML = '[tables.people.columns.sex]\ntype = "categorical"\nvalues = ["F", "M"]\n'
BATCH = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
FILL = "CREATE TABLE people AS SELECT CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex FROM range(300) AS r(i)"


@pytest.fixture()
def database(tmp_path: Path) -> Path:
    """people.duckdb (300 rows) whose owner set a total of ε = 10 in the ledger next to it."""
    path = tmp_path / "people.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(FILL)
    Ledger(default_path(path)).set_total(path.name, PrivacyCost(epsilon=10.0),
                                         binding=Binding.of(Schema.load(SCHEMA_TOML), path))
    return path


@pytest.fixture()
def memory() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute(FILL)
    yield con
    con.close()


def _untouched(database: Path) -> None:
    ledger = Ledger(default_path(database))
    assert ledger.history(database.name) == [] and ledger.balance(database.name).left == 10


# ================================================================== item 1: no chosen noise on charged data
def _replay_attack(database: Path, seed: int) -> dict[str, float]:
    """Answer on the real data with seed s, again with seed s on an empty copy, and subtract."""
    real = dpsql.connect(database, schema=SCHEMA, rng=SeededRandomSource(seed))
    noisy = {row[0]: row[1] for row in real.cursor().execute(BATCH, epsilon=0.01).fetchall()}
    empty = duckdb.connect()
    empty.execute("CREATE TABLE people (sex VARCHAR)")
    blank = dpsql.connect(empty, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), rng=SeededRandomSource(seed))
    noise = {row[0]: row[1] for row in blank.cursor().execute(BATCH, epsilon=0.01).fetchall()}
    return {key: noisy[key] - noise[key] for key in noisy}


def test_a_seeded_source_on_a_ledger_connection_is_refused_and_nothing_is_charged(database: Path) -> None:
    with pytest.raises(dpsql.ProgrammingError, match="rng= is for tests on in-memory data"):
        _replay_attack(database, seed=7)  # before the fix this returned the exact counts {F: 100, M: 200}
    _untouched(database)


def test_every_way_to_pair_a_chosen_source_with_a_ledger_is_refused(database: Path,
                                                                   memory: duckdb.DuckDBPyConnection) -> None:
    ledger = Ledger(default_path(database))
    account = Account(ledger=ledger, dataset=database.name)
    attempts = {
        "ledger= on an in-memory connection": lambda: dpsql.connect(memory, schema=SCHEMA, ledger=ledger.path,
                                                                    dataset=database.name, rng=SeededRandomSource(1)),
        "a ledger's budget passed as budget=": lambda: dpsql.connect(memory, schema=SCHEMA, budget=account.budget(),
                                                                     rng=SeededRandomSource(1)),
        "a Connection built by hand": lambda: Connection(DuckDBBackend(memory), Schema.load(SCHEMA), account,
                                                         SeededRandomSource(1)),
        "budget= on a file": lambda: dpsql.connect(database, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0),
                                                   rng=SeededRandomSource(1)),
    }
    for attempt in attempts.values():
        with pytest.raises(dpsql.ProgrammingError, match=r"rng=|budget="):
            attempt()
    with DuckDBBackend(database) as on_file, pytest.raises(dpsql.ProgrammingError, match="rng= is for tests"):
        Connection(on_file, Schema.load(SCHEMA), dpsql.Budget(epsilon=1.0), SeededRandomSource(1))
    prepared = engine.prepare(BATCH, Schema.load(SCHEMA), PrivacyCost(epsilon=1.0))
    with DuckDBBackend(database) as on_file, pytest.raises(dpsql.ProgrammingError, match=r"rng= .* is for tests"):
        engine.run(prepared, backend=on_file, budget=account.bound(Schema.load(SCHEMA), database).budget(),
                   rng=SeededRandomSource(1))  # the engine itself refuses a seed with a ledger's budget
    _untouched(database)


def test_a_seeded_source_stays_available_for_tests_on_in_memory_data(memory: duckdb.DuckDBPyConnection) -> None:
    answers = []
    for _ in range(2):
        with dpsql.connect(memory, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), rng=SeededRandomSource(5)) as c:
            answers.append(c.cursor().execute(BATCH, epsilon=0.5).fetchall())
    assert answers[0] == answers[1]  # the seed reproduces the release: what tests need


# ================================================================== item 3: catalog only; budget= only in memory
def _secret_csv(folder: Path) -> Path:
    path = folder / "secret.csv"
    path.write_text("sex,salary_secret_header\nF,1\nM,2\nM,3\n")
    return path


@pytest.mark.parametrize("spelling", ["absolute", "quoted", "relative"])
def test_a_schema_cannot_name_a_file_next_to_the_database(database: Path, tmp_path: Path, spelling: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    csv = _secret_csv(tmp_path)
    monkeypatch.chdir(tmp_path)
    name = {"absolute": str(csv), "quoted": f"'{csv}'", "relative": csv.name}[spelling]
    schema = {"tables": {name: {"columns": {"sex": {"type": "categorical", "values": ["F", "M"]},
                                            "age": {"type": "integer", "lower": 0, "upper": 9}}}}}
    # the ledger's binding would refuse this schema first; here the owner bound it, so the catalog check is what holds
    Ledger(default_path(database)).set_total(database.name, PrivacyCost(epsilon=10.0),
                                             binding=Binding.of(Schema.load(schema), database), rebind=True)
    with dpsql.connect(database, schema=schema) as connection:
        for run in (lambda: connection.cursor().execute(f'SELECT sex, COUNT(*) FROM "{name}" GROUP BY sex',
                                                        epsilon=1.0),
                    lambda: connection.cursor().execute(f'SELECT COUNT(*) FROM "{name}" WHERE age >= 3', epsilon=1.0)):
            with pytest.raises(dpsql.SchemaError, match=r"is not a table or view in the database's catalog") as caught:
                run()
            assert f"tables.{name}" in str(caught.value) and "salary_secret_header" not in str(caught.value)
            assert caught.value.__cause__ is None
    _untouched(database)


def test_a_passed_in_connection_is_held_to_its_catalog_too(memory: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A DuckDB connection passed in keeps its own configuration (external access on), but the
    catalog check still keeps a schema from naming a file."""
    csv = _secret_csv(tmp_path)
    schema = {"tables": {str(csv): {"columns": {"sex": {"type": "categorical", "values": ["F", "M"]}}}}}
    with dpsql.connect(memory, schema=schema, budget=dpsql.Budget(epsilon=1.0)) as connection:
        with pytest.raises(dpsql.SchemaError, match=r"not a table or view in the database's catalog"):
            connection.cursor().execute(f'SELECT sex, COUNT(*) FROM "{csv}" GROUP BY sex', epsilon=1.0)
        assert connection.budget.spent == 0


def test_dpsqls_own_duckdb_handle_is_locked_and_read_only(database: Path, tmp_path: Path) -> None:
    csv = _secret_csv(tmp_path)
    with dpsql.connect(database, schema=SCHEMA) as connection:
        handle = connection._backend.connection
        for statement in (f"SELECT * FROM read_csv('{csv}')", "SET enable_external_access = true",
                          "SET autoload_known_extensions = true", "SET lock_configuration = false",
                          f"ATTACH '{tmp_path / 'other.duckdb'}' AS other", "INSTALL httpfs",
                          "INSERT INTO people VALUES ('F')", "CREATE TABLE written (a INTEGER)"):
            with pytest.raises(duckdb.Error):
                handle.execute(statement)
    assert not (tmp_path / "other.duckdb").exists()
    with duckdb.connect(str(database), read_only=True) as con:
        assert con.execute("SELECT COUNT(*) FROM people").fetchone() == (300,)
        assert con.execute("SELECT COUNT(*) FROM duckdb_tables() WHERE table_name = 'written'").fetchone() == (0,)


def test_budget_is_refused_for_data_in_a_file(database: Path, tmp_path: Path) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=r"dpsql budget set") as caught:
        dpsql.connect(database, schema=SCHEMA, budget=dpsql.Budget(epsilon=100.0))
    assert str(database) in str(caught.value)
    with duckdb.connect(str(database), read_only=True) as opened, \
            pytest.raises(dpsql.ProgrammingError, match=r"in-memory budget for data in memory"):
        dpsql.connect(opened, schema=SCHEMA, budget=dpsql.Budget(epsilon=100.0))
    with duckdb.connect() as mixed:
        mixed.execute(f"ATTACH '{database}' AS owner (READ_ONLY)")
        with pytest.raises(dpsql.ProgrammingError, match=r"in-memory budget for data in memory"):
            dpsql.connect(mixed, schema=SCHEMA, budget=dpsql.Budget(epsilon=100.0))
    _untouched(database)


# ================================================================== item 4: read-only, and a missing path is an error
@pytest.mark.parametrize("kwargs",
                         [{}, {"budget": dpsql.Budget(epsilon=1.0)}, {"ledger": "books.ledger", "dataset": "x"}])
def test_a_missing_database_path_is_an_error_that_creates_nothing(tmp_path: Path, kwargs: dict[str, object],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "peopel.duckdb"
    with pytest.raises(dpsql.OperationalError, match=r"no database file at .*peopel\.duckdb.*check the path") as caught:
        dpsql.connect(typo, schema=SCHEMA, **kwargs)  # type: ignore[arg-type]
    assert not isinstance(caught.value, errors.LedgerError)  # not a misleading BudgetNotSetError
    assert list(tmp_path.iterdir()) == []  # no database, no WAL, no ledger


@pytest.mark.slow
def test_readers_share_one_file_while_a_connection_is_open(database: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "schema.toml").write_text(SCHEMA_TOML)
    (tmp_path / "queries.sql").write_text(BATCH)
    run = ["run", str(tmp_path / "queries.sql"), "--db", str(database), "--schema", str(tmp_path / "schema.toml"),
           "--epsilon", "1", "--no-reuse"]  # every run measured (a repeat would be answered from the first)
    with dpsql.connect(database, schema=SCHEMA) as notebook, dpsql.connect(str(database), schema=SCHEMA) as second:
        assert notebook.cursor().execute(BATCH, epsilon=1.0, reuse=False).rowcount == 2
        assert second.cursor().execute(BATCH, epsilon=1.0, reuse=False).rowcount == 2
        assert main(run) == 0, capsys.readouterr().err  # `dpsql run` in this process
        child = subprocess.run([sys.executable, "-m", "dpsql.cli", *run], capture_output=True, text=True, env=ENV,
                               timeout=300, check=False)
        assert child.returncode == 0, child.stderr  # and in another process
        assert notebook.cursor().execute(BATCH, epsilon=1.0, reuse=False).rowcount == 2  # the first handle works
    assert len(Ledger(default_path(database)).history(database.name)) == 5


# ======================================================= issue 34: what to do when DuckDB will not open the file
def test_a_duckdb_connection_open_in_this_process_is_named_with_what_to_do(database: Path) -> None:
    with duckdb.connect(str(database), read_only=True) as notebook:  # the analyst's own look at the data
        with pytest.raises(dpsql.OperationalError) as caught:
            dpsql.connect(database, schema=SCHEMA)
        assert notebook.sql("SELECT COUNT(*) FROM people").fetchall() == [(300,)]  # untouched
    message = str(caught.value)
    assert "this process already has" in message and "read_only=True" in message and "con.close()" in message
    assert "open for writing" not in message  # the trap: it is not open for writing
    with dpsql.connect(database, schema=SCHEMA) as private:  # once it is closed, dpsql opens the file
        assert private.cursor().execute(BATCH, epsilon=1.0).rowcount == 2


@pytest.mark.slow
def test_a_writer_in_another_process_is_named_by_its_pid(database: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, sys; con = duckdb.connect({str(database)!r}); "
                               "print('open', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(dpsql.OperationalError) as caught:
            dpsql.connect(database, schema=SCHEMA)
    finally:
        holder.communicate("")
    message = str(caught.value)
    assert f"process {holder.pid} (" in message and "open for writing" in message and "read_only=True" in message


def test_a_file_that_is_not_a_database_is_named(tmp_path: Path) -> None:
    notes = tmp_path / "people.db"
    notes.write_text("sex\nF\n")
    with pytest.raises(dpsql.OperationalError, match=r"'.*people\.db' is not a DuckDB database file.*\.csv"):
        dpsql.connect(notes, schema=SCHEMA, ledger=tmp_path / "books", dataset="people")
