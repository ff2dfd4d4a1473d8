"""The Backend protocol (``dpsql.backends.base``): what it declares, and that DuckDBBackend implements it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import duckdb

from dpsql.backends import Backend, file_identity
from dpsql.backends.base import BACKEND_MEMBERS, missing_members
from dpsql.backends.duckdb import DuckDBBackend


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
