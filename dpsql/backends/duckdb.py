"""The DuckDB adapter: the embedded default engine of the cell queries (:mod:`dpsql.backends.sql_backend`).

DuckDB computes the data vector x of the matrix mechanism, the number of rows in each cell of
the product of the declared domains, with one ``GROUP BY`` (or ``GROUPING SETS``) scan; where rows
go, how measures are clamped and how the privacy-unit cap picks rows is described in
:mod:`dpsql.backends.sql_backend`, and is the same on every engine. This module adds what is
DuckDB's own: opening a database file read-only and locked, the catalog check that keeps every
scan on the database's own tables and views, and running a query to Arrow on DuckDB 1.x and 2.x.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from dpsql.backends.base import (
    DATA_FILE_READERS,
    content_identity,
    data_file_suffix,
    data_file_table,
    file_identity,
)
from dpsql.backends.cell_sql import DatabaseColumn, table_ref
from dpsql.backends.sql_backend import SqlBackend
from dpsql.backends.sql_dialects import DUCKDB
from dpsql.errors import DataError, InterfaceError, OperationalError, SchemaError

#: The sqlglot dialect every generated query is rendered in.
DIALECT = DUCKDB.name
#: DuckDB errors whose text describes the catalog or the SQL, never data values.
_QUIET_ERRORS = (duckdb.CatalogException, duckdb.BinderException, duckdb.ParserException,
                 duckdb.IOException, duckdb.ConnectionException, duckdb.PermissionException)
#: How dpsql opens a database: no files, URLs, other databases or Python objects beyond its catalog,
#: no extensions fetched or loaded on demand, and no way to change this from SQL afterwards.
_LOCKED: Mapping[str, bool] = MappingProxyType({"enable_external_access": False, "autoload_known_extensions": False,
                                                "autoinstall_known_extensions": False, "lock_configuration": True})


# ====================================================================================== backend
class DuckDBBackend(SqlBackend):
    """Runs the data-vector queries of a table in DuckDB.

    A database path is opened read-only (dpsql never writes, so other readers are never locked
    out) with external access and extension autoloading/autoinstalling disabled and the
    configuration locked (``_LOCKED``): generated SQL can reach only the database's own tables
    and views, never a file, a URL, another database or a Python object. ``":memory:"`` gets the
    same locked configuration (an empty database; useful for tests of errors). An open DuckDB
    connection passed in is used as it is: it cannot be reconfigured, so only the catalog check
    of :func:`describe` (tables and views of its own catalog, no replacement scans) applies.

    A CSV or Parquet file (``DATA_FILE_READERS``: ``.csv``, ``.csv.gz``, ``.tsv``, ``.parquet``) is
    read once, whole, into a table of an in-memory database with the same locked configuration
    (:func:`_load_data_file`): the scans then read exactly the bytes whose SHA-256 is the
    backend's ``identity``, and no later change to the file reaches them.

    Args:
        database: a database path, a CSV or Parquet file, ``":memory:"``, or an open ``duckdb``
            connection. A connection passed in stays open after :meth:`close`; one opened here is
            closed by it.
        table: the table a CSV or Parquet file is read as (default: its name without the ending,
            ``adult.csv`` → ``adult``); ignored for a database.

    Raises:
        OperationalError: there is no file at the path (nothing is created), or DuckDB cannot open
            it (e.g. another process holds it read-write, or this process has it open with another
            configuration), or cannot read a CSV or Parquet file.
    """

    sql_dialect = DUCKDB

    def __init__(self, database: str | os.PathLike[str] | duckdb.DuckDBPyConnection = ":memory:", *,
                 table: str | None = None) -> None:
        super().__init__()
        self._path: str | None = None
        self._content: str | None = None  # a CSV or Parquet file's content_identity, taken as it was read
        if isinstance(database, duckdb.DuckDBPyConnection):
            self._connection: duckdb.DuckDBPyConnection | None = database
            self._owns_connection = False
            return
        name = os.fspath(database)
        if data_file_suffix(name) is not None:
            self._connection, self._content = _load_data_file(name, table or data_file_table(name))
        else:
            self._connection = _open_locked(name)
        self._owns_connection = True
        self._path = None if name == ":memory:" else name

    @property
    def in_memory(self) -> bool:
        """True when no database attached to the connection is stored in a file (or other external storage);
        False for a CSV or Parquet file's copy (the data are the file's)."""
        return self._content is None and not attached_files(self.connection)

    @property
    def identity(self) -> str:
        """The opened database file's :func:`~dpsql.backends.base.file_identity` (a CSV or Parquet file's
        :func:`~dpsql.backends.base.content_identity`, of the bytes read); ``""`` for ``":memory:"`` and for a
        connection passed in (its files are not bound: pass the path to bind one)."""
        if self._content is not None:
            return self._content
        return "" if self._path is None else file_identity(self._path)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The open DuckDB connection; InterfaceError after :meth:`close`."""
        if self._connection is None:
            raise InterfaceError("This DuckDBBackend is closed; create a new one.")
        return self._connection

    def close(self) -> None:
        """Close the connection if this backend opened it; later calls raise InterfaceError."""
        if self._connection is not None and self._owns_connection:
            self._connection.close()
        self._connection = None

    def describe(self, reference: exp.Table) -> dict[str, DatabaseColumn]:
        """The table's columns from DuckDB's catalog (see :func:`describe`)."""
        return describe(self.connection, reference.name)

    def run(self, sql: str) -> pa.Table:
        """Run generated SQL. Sums are HUGEINT and every per-row value is clamped and bounded by the
        schema (below 2^53 quanta), so no aggregate can overflow; errors that may quote data values
        are reported without their message and not chained."""
        try:
            return arrow_table(self.connection.sql(sql))
        except _QUIET_ERRORS as err:
            raise OperationalError(f"DuckDB failed to run the cell query: {err}") from err
        except duckdb.OutOfRangeException:
            raise DataError("DuckDB reported an arithmetic overflow in the cell query (its message is withheld "
                            "because it may quote data values).") from None
        except duckdb.Error as err:
            raise OperationalError(f"DuckDB failed to run the cell query ({type(err).__name__}); its message is "
                                   "withheld because it may quote data values.") from None


def arrow_table(result: Any) -> pa.Table:
    """A DuckDB relation or result as a ``pyarrow.Table`` on DuckDB 1.x and 2.x.

    Uses ``to_arrow_table()`` (2.x), else ``fetch_arrow_table()`` (1.x), else ``arrow()`` (which
    returns a RecordBatchReader in 2.x and a Table before).
    """
    for name in ("to_arrow_table", "fetch_arrow_table", "arrow"):
        method = getattr(result, name, None)
        if method is not None:
            table = method()
            return table.read_all() if isinstance(table, pa.RecordBatchReader) else table
    raise InterfaceError(f"{type(result).__name__} offers no Arrow export (to_arrow_table, fetch_arrow_table, arrow).")


# ====================================================================================== catalog
def _open_locked(name: str) -> duckdb.DuckDBPyConnection:
    """Open ``name`` (a database file, read-only, or ``":memory:"``) with the locked configuration.

    A missing file is refused before DuckDB is called: a typo must not create an empty database.
    (DuckDB's read-only mode would refuse it too; the check gives the clearer message.)
    """
    if name != ":memory:" and not os.path.isfile(name):
        where = f"'{name}'" if os.path.isabs(name) else f"'{name}' (resolved to '{os.path.abspath(name)}')"
        raise OperationalError(f"There is no database file at {where}: check the path, or create the database "
                               "first (dpsql opens databases read-only and never creates one).")
    try:
        return duckdb.connect(name, read_only=name != ":memory:", config=dict(_LOCKED))
    except duckdb.Error as err:
        raise OperationalError(_open_failure(name, err)) from err


def _open_failure(name: str, err: duckdb.Error) -> str:
    """Why DuckDB could not open ``name`` read-only, in words, and what to do (DuckDB's text at the end)."""
    text = str(err)
    if "different configuration" in text:
        situation = (f"this process already has '{name}' open in another DuckDB connection (e.g. "
                     f"duckdb.connect('{name}') or duckdb.connect('{name}', read_only=True) in this notebook or "
                     "script), and DuckDB opens one file with one configuration per process, while dpsql opens it "
                     "locked (no external access). Close that connection (con.close()) before dpsql.connect, and "
                     "open it again after closing dpsql's; or read the data yourself from another process.")
    elif "lock" in text.lower():
        holder = re.search(r"Conflicting lock is held in (.+?) \(PID (\d+)\)", text)
        who = f"process {holder.group(2)} ({os.path.basename(holder.group(1))})" if holder else "another process"
        situation = (f"{who} has '{name}' open for writing, and DuckDB lets a writer keep every other process out. "
                     "Close that connection, or open it there with read_only=True (any number of read-only "
                     "processes can share the file), then try again.")
    elif "not a valid DuckDB database" in text:
        situation = (f"'{name}' is not a DuckDB database file. Pass a DuckDB database, or a CSV or Parquet file "
                     "with its usual ending (.csv, .csv.gz, .tsv, .parquet), which dpsql reads as one table.")
    else:
        situation = "check the path and that it is a DuckDB database file."
    return f"DuckDB cannot open the database '{name}' read-only: {situation} (DuckDB: {text})"


def _load_data_file(name: str, table: str) -> tuple[duckdb.DuckDBPyConnection, str]:
    """A locked in-memory database holding the CSV or Parquet file ``name`` as table ``table``, and the
    file's :func:`content_identity`.

    The file is read by DuckDB's reader (``read_csv`` with its type detection, or ``read_parquet``)
    in a separate, unlocked in-memory connection, the path bound as a parameter; the rows are then
    copied into the locked one, which can read no file. The file is hashed before and after
    reading: if it changed meanwhile, nothing is returned. DuckDB's messages are withheld (a CSV
    reader's message quotes lines of the file).
    """
    if not os.path.isfile(name):
        where = f"'{name}'" if os.path.isabs(name) else f"'{name}' (resolved to '{os.path.abspath(name)}')"
        raise OperationalError(f"There is no data file at {where}: check the path (dpsql reads CSV and Parquet "
                               "files read-only and never creates one).")
    before = content_identity(name)
    reader = DATA_FILE_READERS[data_file_suffix(name) or ""]
    source = duckdb.connect(":memory:")
    try:
        rows = arrow_table(source.sql(f"SELECT * FROM {reader}($path)", params={"path": name}))
    except duckdb.Error as err:
        kind = "CSV file with a header row" if reader == "read_csv" else "Parquet file"
        raise OperationalError(f"DuckDB cannot read '{name}' with {reader} ({type(err).__name__}); its message is "
                               f"withheld because it may quote the file's contents. Check that it is a {kind}, e.g. "
                               f"in duckdb: SELECT * FROM {reader}('{name}') LIMIT 5.") from None
    finally:
        source.close()
    if content_identity(name) != before:
        raise OperationalError(f"The data file '{name}' changed while dpsql read it; nothing was read. Try again "
                               "once it is written.")
    connection = _open_locked(":memory:")
    try:
        connection.register("dpsql_file_rows", rows)
        connection.execute(exp.Create(this=exp.Table(this=exp.to_identifier(table, quoted=True)), kind="TABLE",
                                      expression=exp.select("*").from_("dpsql_file_rows")).sql(DIALECT))
        connection.unregister("dpsql_file_rows")
    except duckdb.Error as err:
        connection.close()
        raise OperationalError(f"DuckDB cannot copy '{name}' into table '{table}' ({type(err).__name__}).") from None
    return connection, before


def attached_files(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """Where the connection's non-internal databases are stored, for those not in memory (``duckdb_databases()``).

    Raises:
        OperationalError: DuckDB cannot list its databases (e.g. the connection is closed).
    """
    try:
        rows = connection.execute("SELECT path FROM duckdb_databases() WHERE NOT internal AND path IS NOT NULL "
                                  "ORDER BY database_name").fetchall()
    except duckdb.Error as err:
        raise OperationalError(f"DuckDB cannot list the connection's databases: {err}") from err
    return [str(row[0]) for row in rows]


#: Non-internal tables and views that the quoted, unqualified name ``"name"`` can resolve to: temporary ones
#: and those in the current database and schema. The name is bound as a parameter, never formatted in.
_CATALOG_ENTRY = " UNION ALL ".join(
    f"SELECT 1 FROM duckdb_{kind}s() WHERE NOT internal AND lower({kind}_name) = lower(?) "
    "AND (temporary OR (database_name = current_database() AND schema_name = current_schema()))"
    for kind in ("table", "view"))


def in_catalog(connection: duckdb.DuckDBPyConnection, table_name: str) -> bool:
    """Whether ``table_name`` is a table or view of the database's own catalog (matched case-insensitively).

    Anything else the name could reach in DuckDB (a replacement scan of a CSV/Parquet/JSON file or
    a Python object, a system view) is not data the ledger accounts for, so it is not accepted.

    Raises:
        OperationalError: DuckDB cannot read its catalog.
    """
    try:
        return bool(connection.execute(_CATALOG_ENTRY, [table_name, table_name]).fetchall())
    except duckdb.Error as err:
        raise OperationalError(f"DuckDB cannot read its catalog: {err}") from err


def describe(connection: duckdb.DuckDBPyConnection, table_name: str) -> dict[str, DatabaseColumn]:
    """The table's columns from the catalog (``DESCRIBE``), keyed by lower-case name; no data is read.

    The name must first be a table or view of the database's catalog (:func:`in_catalog`), so
    ``DESCRIBE`` and every later scan cannot fall through to a file or another source. DuckDB's
    own messages are not chained: a view over a file could quote its contents.

    Raises:
        SchemaError: the name is not a table or view in the database's catalog.
        OperationalError: DuckDB failed otherwise.
    """
    if not in_catalog(connection, table_name):
        raise SchemaError(f"Table '{table_name}' is declared in the schema (tables.{table_name}) but is not a table "
                          "or view in the database's catalog: the schema and the database disagree (dpsql reads only "
                          "the database's own tables and views, never files or other sources). Create the table (or "
                          "a view with that name) in the database, or fix the table name in the schema.")
    sql = exp.Describe(this=table_ref(table_name)).sql(DIALECT)
    try:
        rows = connection.execute(sql).fetchall()
    except _QUIET_ERRORS as err:
        raise OperationalError(f"DuckDB could not describe table '{table_name}': {err}") from None
    except duckdb.Error as err:
        raise OperationalError(f"DuckDB could not describe table '{table_name}' ({type(err).__name__}); its message "
                               "is withheld because it may quote data values.") from None
    return {str(row[0]).lower(): DatabaseColumn(str(row[0]), str(row[1]), DUCKDB.type_family(str(row[1])))
            for row in rows}


