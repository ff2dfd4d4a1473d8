"""Which backend a ``dpsql.connect`` argument means: DuckDB by default, Spark, PostgreSQL, or any Backend.

- a path, ``":memory:"`` or a duckdb connection: ``DuckDBBackend``, the embedded default (a CSV or
  Parquet path: its in-memory copy as one table, ``table``);
- ``"sc://host:port"``: Spark Connect (``SparkBackend.remote``; install ``dpsql[spark-connect]``);
- a ``SparkSession``, classic or Connect: ``SparkBackend`` (``dpsql[spark]``);
- ``"postgresql://..."``: PostgreSQL through ADBC (``PostgresBackend.from_uri``; ``dpsql[postgres]``);
- a PEP 249 connection with ``dialect="postgres"``: ``PostgresBackend``;
- an object with the Backend protocol's members: itself.

The Spark and PostgreSQL modules import their drivers only when a backend is opened, so the core
install needs neither.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import duckdb

from dpsql.backends.base import Backend, data_file_suffix, missing_members
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.postgres import PostgresBackend
from dpsql.backends.spark import SparkBackend, is_spark_session
from dpsql.backends.sql_dialects import DIALECTS, DUCKDB, POSTGRES, SPARK
from dpsql.errors import ProgrammingError
from dpsql.schema import Schema

#: URI prefixes of the engines reached by address.
SPARK_CONNECT = "sc://"
POSTGRES_URIS = ("postgresql://", "postgres://")


def is_address(database: object) -> bool:
    """Whether ``database`` is an engine's address (Spark Connect or PostgreSQL URI), not a file path."""
    return isinstance(database, str) and database.startswith((SPARK_CONNECT, *POSTGRES_URIS))


def choose_backend(database: Any, *, dialect: str | None = None, tables: Mapping[str, Any] | None = None,
                   table: str | None = None) -> Backend:
    """The backend over ``database`` (see the module table); a backend opened here is closed by its ``close``.
    ``table``: the name a CSV or Parquet file is read as (default: the file's name without its ending).

    Raises:
        ProgrammingError: ``dialect`` is not one dpsql knows, does not fit ``database``, ``tables`` is given for
            DuckDB or for a Backend passed in, or ``database`` is none of the forms above.
        OperationalError: the database cannot be reached or opened.
    """
    if dialect is not None and dialect not in DIALECTS:
        raise ProgrammingError(f"dialect={dialect!r} is not one dpsql generates SQL for; use one of "
                               f"{', '.join(sorted(DIALECTS))}.")
    if isinstance(database, str) and database.startswith(SPARK_CONNECT):
        _check_dialect(dialect, SPARK.name, "an sc:// address")
        return SparkBackend.remote(database, tables=tables)
    if isinstance(database, str) and database.startswith(POSTGRES_URIS):
        _check_dialect(dialect, POSTGRES.name, "a postgresql:// address")
        return PostgresBackend.from_uri(database, tables=tables)
    if is_spark_session(database):
        _check_dialect(dialect, SPARK.name, "a SparkSession")
        return SparkBackend(database, tables=tables)
    if isinstance(database, (str, os.PathLike, duckdb.DuckDBPyConnection)):
        _check_dialect(dialect, DUCKDB.name, "a DuckDB database")
        if tables:
            raise ProgrammingError("tables= maps declared tables to Spark or PostgreSQL references; a DuckDB database "
                                   "reads each declared table by its name: create a view with that name instead.")
        return DuckDBBackend(database, table=table)
    if dialect == POSTGRES.name:
        if not (hasattr(database, "cursor") and hasattr(database, "close")):
            raise ProgrammingError(f"dialect='postgres' takes a PEP 249 connection to PostgreSQL (ADBC or psycopg); "
                                   f"got a {type(database).__name__}.")
        return PostgresBackend(database, tables=tables)
    missing = missing_members(database)
    if missing:
        raise ProgrammingError(
            f"connect() takes a DuckDB database (a path, ':memory:' or a duckdb connection), an sc:// or postgresql:// "
            f"address, a SparkSession, a PostgreSQL connection with dialect='postgres', or a dpsql.backends.Backend; "
            f"a {type(database).__name__} is none of these, and as a Backend a {type(database).__name__} lacks "
            f"{', '.join(missing)}.")
    if tables or dialect is not None:
        raise ProgrammingError("tables= and dialect= are for the backends dpsql opens; a Backend passed in is used "
                               "as it is. Drop them.")
    backend: Backend = database
    return backend


def file_table(database: object, schema: Schema) -> str | None:
    """The table a CSV or Parquet ``database`` is read as: the schema's one declared table (None for anything else).

    Raises:
        ProgrammingError: the schema declares no table or several (a file is one table).
    """
    if data_file_suffix(database) is None:
        return None
    names = [table.name for table in schema.tables.values()]
    if len(names) != 1:
        raise ProgrammingError(f"'{database}' is a CSV or Parquet file, read as one table, but the schema declares "
                               f"{len(names)} tables ({', '.join(names) or 'none'}). Declare one table, or load the "
                               "files into one DuckDB database (CREATE TABLE name AS SELECT * FROM "
                               "read_csv('file.csv')) and pass that. Nothing was opened or charged.")
    return names[0]


def _check_dialect(dialect: str | None, expected: str, what: str) -> None:
    if dialect is not None and dialect != expected:
        raise ProgrammingError(f"dialect={dialect!r} does not fit {what}, whose dialect is {expected!r}; "
                               "drop dialect=.")
