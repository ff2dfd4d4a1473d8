"""The Backend protocol (``dpsql.backends.base``): what it declares, and that DuckDBBackend implements it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql.accounting import PrivacyCost
from dpsql.backends import Backend, file_identity
from dpsql.backends.base import BACKEND_MEMBERS, missing_members
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import LedgerError
from dpsql.ledger import Binding, Ledger
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema


def test_duckdb_backend_implements_the_protocol(tmp_path: Path) -> None:
    database = tmp_path / "d.duckdb"
    duckdb.connect(str(database)).close()
    with DuckDBBackend(":memory:") as memory, DuckDBBackend(database) as on_file:
        assert isinstance(memory, Backend) and isinstance(on_file, Backend)
        assert missing_members(memory) == [] and memory.dialect == "duckdb"
        assert memory.in_memory and memory.identity == ""
        assert not on_file.in_memory and on_file.identity == file_identity(database)
    connection = duckdb.connect()
    with DuckDBBackend(connection) as handed_in:  # a connection handed in binds no file (as Binding.of did)
        assert handed_in.identity == ""


def test_the_member_list_is_the_protocol() -> None:
    declared = {name for name, value in vars(Backend).items()
                if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}
    assert set(BACKEND_MEMBERS) == declared
    assert missing_members(object()) == list(BACKEND_MEMBERS)


def test_importing_the_protocol_imports_no_database_package() -> None:
    code = "import sys, dpsql.backends, dpsql.backends.base; assert 'duckdb' not in sys.modules, 'duckdb imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# ============================================================================ dpsql.connect(backend)
SCHEMA = {"tables": {"people": {"columns": {"sex": {"type": "categorical", "values": ["F", "M"]}}}}}
BATCH = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
FILL = "CREATE TABLE people AS SELECT CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex FROM range(300) AS r(i)"


class Forwarding:
    """A Backend by delegation (not a DuckDBBackend subclass) whose public facts the test chooses."""

    dialect = "duckdb"

    def __init__(self, inner: DuckDBBackend, *, in_memory: bool, identity: str) -> None:
        self.inner, self.in_memory, self.identity, self.closed = inner, in_memory, identity, False
        self.check_table, self.cell_data, self.cell_data_sets = inner.check_table, inner.cell_data, inner.cell_data_sets
        self.marginal_counts, self.measure_profile = inner.marginal_counts, inner.measure_profile

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def _filled() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(FILL)
    return con


def _answers(database: object, seed: int, **books: object) -> list[tuple[object, ...]]:
    with dpsql.connect(database, schema=SCHEMA, rng=SeededRandomSource(seed), **books) as connection:  # type: ignore[arg-type]
        return connection.cursor().execute(BATCH, epsilon=1.0).fetchall()


def test_connect_takes_a_backend_object_and_answers_as_with_the_database() -> None:
    by_database = _answers(_filled(), 3, budget=dpsql.Budget(epsilon=2.0))
    backend = Forwarding(DuckDBBackend(_filled()), in_memory=True, identity="")
    assert _answers(backend, 3, budget=dpsql.Budget(epsilon=2.0)) == by_database
    assert backend.closed  # the connection closed the backend it was given
    assert _answers(DuckDBBackend(_filled()), 3, budget=dpsql.Budget(epsilon=2.0)) == by_database


def test_connect_refuses_an_object_that_is_not_a_backend() -> None:
    with pytest.raises(dpsql.ProgrammingError, match="a dict lacks dialect, in_memory, identity, check_table"):
        dpsql.connect({}, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0))  # type: ignore[arg-type]


def test_stored_data_behind_a_backend_need_a_ledger_bound_to_its_identity(tmp_path: Path) -> None:
    stored = Forwarding(DuckDBBackend(_filled()), in_memory=False, identity="cluster://people@v1")
    with pytest.raises(dpsql.ProgrammingError, match=r"in-memory budget for data in memory.*cluster://people@v1"):
        dpsql.connect(stored, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0))
    assert not stored.closed  # a refused connect leaves the caller's backend open
    with pytest.raises(dpsql.ProgrammingError, match="a Forwarding backend needs budget="):
        dpsql.connect(stored, schema=SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match="rng= is for tests"):
        dpsql.connect(stored, schema=SCHEMA, ledger=tmp_path / "l", dataset="people", rng=SeededRandomSource(1))
    ledger = Ledger(tmp_path / "people.dpsql-ledger")
    ledger.set_total("people", PrivacyCost(epsilon=1.0),
                     binding=Binding(schema=Schema.load(SCHEMA).canonical(), database=stored.identity))
    with dpsql.connect(stored, schema=SCHEMA, ledger=ledger.path, dataset="people") as connection:
        assert len(connection.cursor().execute(BATCH, epsilon=0.25).fetchall()) == 2
    assert ledger.balance("people").left == Fraction(3, 4)
    moved = Forwarding(DuckDBBackend(_filled()), in_memory=False, identity="cluster://people@v2")
    with dpsql.connect(moved, schema=SCHEMA, ledger=ledger.path, dataset="people") as connection, \
            pytest.raises(LedgerError, match="cluster://people@v2"):
        connection.cursor().execute(BATCH, epsilon=0.25)
    assert ledger.balance("people").left == Fraction(3, 4)
