"""Which backend ``dpsql.connect`` opens, and the refusals that leave nothing open and nothing charged.

The Spark and PostgreSQL backends themselves are tested against real engines in
``test_backend_spark.py`` and ``test_backend_postgres.py``; this module needs neither installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql.backends.choose import choose_backend, is_address
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.cli import main

SCHEMA = {"tables": {"people": {"columns": {"age": {"type": "integer", "lower": 0, "upper": 9}}}}}


def test_the_embedded_default_is_duckdb() -> None:
    assert isinstance(choose_backend(":memory:"), DuckDBBackend)
    assert isinstance(choose_backend(duckdb.connect(), dialect="duckdb"), DuckDBBackend)


@pytest.mark.parametrize(("database", "options", "message"), [
    (":memory:", {"tables": {"people": "db.people"}}, "tables= maps declared tables to Spark or PostgreSQL"),
    (":memory:", {"dialect": "spark"}, "dialect='spark' does not fit a DuckDB database"),
    ("duckdb connection", {"dialect": "postgres"}, "dialect='postgres' does not fit a DuckDB database"),
    (":memory:", {"dialect": "oracle"}, "dialect='oracle' is not one dpsql generates SQL for"),
    (3, {"dialect": "postgres"}, "dialect='postgres' takes a PEP 249 connection to PostgreSQL"),
])
def test_options_that_do_not_fit_the_database_are_refused(database: object, options: dict[str, object],
                                                          message: str) -> None:
    target = duckdb.connect() if database == "duckdb connection" else database
    with pytest.raises(dpsql.ProgrammingError, match=message):
        dpsql.connect(target, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("address", ["sc://127.0.0.1:1", "postgresql://nobody@127.0.0.1:1/none"])
def test_a_server_address_needs_a_ledger_before_anything_is_contacted(address: str) -> None:
    assert is_address(address) and not is_address("people.duckdb")
    modules = set(sys.modules)
    with pytest.raises(dpsql.ProgrammingError, match="pass ledger=PATH and dataset='name'"):
        dpsql.connect(address, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0))
    assert not {name for name in set(sys.modules) - modules if name.startswith(("pyspark", "adbc", "psycopg"))}


def test_the_cli_asks_for_a_ledger_for_a_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q.sql").write_text("SELECT COUNT(*) FROM people")
    (tmp_path / "s.toml").write_text('[tables.people.columns.age]\ntype = "integer"\nlower = 0\nupper = 9\n')
    status = main(["run", str(tmp_path / "q.sql"), "--db", "sc://127.0.0.1:1", "--schema", str(tmp_path / "s.toml"),
                   "--epsilon", "1", "--tables", "people=analytics.people"])
    assert status == 2 and "pass ledger=PATH and dataset='name'" in capsys.readouterr().err
    status = main(["budget", "show", "--db", "postgresql://h/db"])
    assert status == 2 and "pass --ledger PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", str(tmp_path / "q.sql"), "--db", "x.duckdb", "--schema", "s", "--epsilon", "1",
              "--tables", "people"])
    assert "is not NAME=REFERENCE" in capsys.readouterr().err
