"""The PostgreSQL adapter of the cell queries (:mod:`dpsql.backends.sql_backend`).

The cell queries are built by :mod:`dpsql.backends.cell_sql` in the PostgreSQL dialect
(:class:`~dpsql.backends.sql_dialects.PostgresDialect`); this module adds what is PostgreSQL's own:

- **Connections.** An ADBC PostgreSQL connection (``adbc_driver_postgresql.dbapi``; Arrow out via
  ``fetch_arrow_table``), or any PEP 249 connection to PostgreSQL (e.g. psycopg 3; rows and
  ``cursor.description``, turned into Arrow with exact integers). Neither driver is imported until
  :meth:`PostgresBackend.from_uri` is called. A connection passed in stays open after ``close()``.
- **Read only.** Every statement dpsql runs (catalog reads included) runs in a READ ONLY
  transaction or subtransaction, which :func:`_read_only` opens and undoes, so the connection is
  left as it was found, also after an error: on an autocommit connection ``BEGIN READ ONLY`` ...
  ``ROLLBACK``; inside an open transaction ``SAVEPOINT`` + ``SET TRANSACTION READ ONLY`` ...
  ``ROLLBACK TO SAVEPOINT`` + ``RELEASE`` (which also releases the locks taken); and when the
  driver began the transaction for dpsql's statements (psycopg reports it was idle) it is rolled
  back at the end. PostgreSQL lets a read-only transaction write TEMPORARY tables only; dpsql's
  generated queries write nothing. One exception: the ADBC driver without autocommit accepts only
  a full ``rollback()`` after an error, so there an error rolls back the connection's open
  transaction, and the error message says so (``from_uri`` opens its connection in autocommit).
- **Catalog.** :meth:`PostgresBackend.describe` reads ``pg_catalog`` only (no row of the table):
  tables, partitioned tables, views, materialized views and foreign tables. Names are matched
  case-insensitively (an exact match first) and the real names are used; names reach the catalog
  SQL as hex-encoded literals built with sqlglot, never formatted into the text. An unqualified
  name is resolved like PostgreSQL does, by the search path (``current_schemas(true)``, the
  session's temporary schema first), skipping the system schemas; a ``schema.table`` name must be
  in that schema; a ``database.schema.table`` name must name the connected database. The query then
  reads the resolved ``"schema"."table"``, so a later change of ``search_path`` cannot redirect it.
- **Errors.** ``numeric_value_out_of_range`` (SQLSTATE 22003) is a :class:`DataError`; errors of
  class 42 (syntax, undefined table/column/function, privileges) describe the SQL and are shown;
  anything else is an :class:`OperationalError` whose message is withheld (it may quote data),
  never chained.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
from sqlglot import exp

from dpsql.backends.cell_sql import DatabaseColumn, SourceTable
from dpsql.backends.sql_backend import SqlBackend
from dpsql.backends.sql_dialects import POSTGRES, call
from dpsql.errors import DataError, InterfaceError, OperationalError, SchemaError
from dpsql.schema import Table

DIALECT = POSTGRES.name
#: Relation kinds read as tables: table, partitioned table, view, materialized view, foreign table.
_RELATION_KINDS = ("r", "p", "v", "m", "f")
#: SQLSTATE of "numeric value out of range" (integer and numeric overflow).
_OVERFLOW = "22003"
#: SQLSTATE of "SAVEPOINT can only be used in transaction blocks": the connection is in autocommit mode.
_NO_TRANSACTION = "25P01"
_SAVEPOINT = "dpsql_read_only"


def is_dbapi_connection(candidate: object) -> bool:
    """Whether ``candidate`` looks like a PEP 249 connection (callable ``cursor``, ``close``, ``commit``,
    ``rollback``). Duck-typed: a DuckDB connection passes too, so test for it first."""
    return all(callable(getattr(candidate, name, None)) for name in ("cursor", "close", "commit", "rollback"))


@dataclass(frozen=True, slots=True)
class Relation:
    """A resolved table or view: its oid, real schema and name, kind and persistence (``t``: temporary)."""

    oid: int
    schema: str
    name: str
    kind: str
    persistence: str

    @property
    def reference(self) -> exp.Table:
        """``"schema"."name"``, quoted: exactly this relation, whatever the search path."""
        return exp.Table(this=exp.to_identifier(self.name, quoted=True), db=exp.to_identifier(self.schema, quoted=True))

    @property
    def temporary(self) -> bool:
        """A TEMPORARY table of this session (it vanishes with the session); views never count."""
        return self.kind == "r" and self.persistence == "t"


class PostgresBackend(SqlBackend):
    """Runs the data-vector queries of a table in PostgreSQL (see the module docstring).

    Args:
        connection: an open ADBC PostgreSQL connection or PEP 249 connection to PostgreSQL. It
            stays open after :meth:`close` (one opened by :meth:`from_uri` is closed by it).
        tables: where each declared table is, by declared name (``{"people": "public.people"}``).
            With ``tables`` given, only the listed tables can be read; without it a declared name
            is resolved by the search path.

    Raises:
        InterfaceError: ``connection`` is not a PEP 249 connection.
    """

    sql_dialect = POSTGRES

    def __init__(self, connection: Any, tables: Mapping[str, str] | None = None) -> None:
        super().__init__(tables)
        if not is_dbapi_connection(connection):
            raise InterfaceError(f"PostgresBackend takes a PEP 249 connection to PostgreSQL (ADBC or psycopg); got a "
                                 f"{type(connection).__name__}.")
        self._connection: Any = connection
        self._owns_connection = False
        self._mapped = tables is not None
        self._temporary_only = False

    @classmethod
    def from_uri(cls, uri: str, tables: Mapping[str, str] | None = None) -> PostgresBackend:
        """Open ``postgresql://user@host:port/dbname`` with the ADBC PostgreSQL driver (autocommit; closed by
        :meth:`close`).

        Raises:
            InterfaceError: not a ``postgresql://`` URI, or the driver is not installed.
            OperationalError: the server refused or could not be reached.
        """
        if urlsplit(uri).scheme not in ("postgresql", "postgres"):
            raise InterfaceError("A PostgreSQL URI starts with postgresql:// (e.g. postgresql://user@host:5432/dbname).")
        try:
            from adbc_driver_postgresql import dbapi  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError:
            raise InterfaceError("Reading PostgreSQL needs the ADBC driver: pip install 'dpsql[postgres]'.") from None
        try:
            connection = dbapi.connect(uri, autocommit=True)
        except Exception as err:  # the driver's errors name host and port, never data
            raise OperationalError(f"Cannot connect to PostgreSQL at {public_uri(uri)}: {err}") from None
        backend = cls(connection, tables)
        backend._owns_connection = True
        return backend

    # ------------------------------------------------------------------------------ adapter's part
    @property
    def connection(self) -> Any:
        """The open connection; InterfaceError after :meth:`close`."""
        if self._connection is None:
            raise InterfaceError("This PostgresBackend is closed; create a new one.")
        return self._connection

    def close(self) -> None:
        """Close the connection if this backend opened it; later calls raise InterfaceError."""
        if self._connection is not None and self._owns_connection:
            self._connection.close()
        self._connection = None

    @property
    def in_memory(self) -> bool:
        """True only when ``tables`` maps at least one table and every mapped table is a TEMPORARY table
        of this session (``pg_class.relpersistence = 't'``, not a view): such data vanish with the
        session. Once true, every later read must still find temporary tables (SchemaError otherwise),
        so a seeded source accepted for them can never reach stored data."""
        if not self._mapped or not self._tables:
            return False
        try:
            temporary = all(self._resolve(self.table_reference(name), name).temporary for name in self._tables)
        except SchemaError:  # a table that is not there is not shown to be temporary; check_table reports it
            return False
        self._temporary_only = temporary
        return temporary

    @property
    def identity(self) -> str:
        """The ledger's name of the data: ``postgresql://HOST:PORT/DATABASE`` (the server's address on this
        connection, ``localhost`` for a Unix socket, its ``port`` setting and the current database; no
        user, no password), then `` tables=`` and the mapped tables as ``declared=schema.table``, sorted,
        resolved in the catalog. ``""`` when :attr:`in_memory`. A changed address, database or table
        mapping changes it, and the ledger then refuses to charge until the owner rebinds."""
        if self.in_memory:
            return ""
        query = exp.select(exp.Coalesce(this=exp.cast(call("host", call("inet_server_addr")), "TEXT"),
                                        expressions=[exp.Literal.string("localhost")]),
                           call("current_setting", exp.Literal.string("port")), call("current_database"))
        host, port, database = self._execute(query.sql(DIALECT)).to_pylist()[0].values()
        mapped = sorted(f"{name}={self._resolved_name(name)}" for name in self._tables)
        return f"postgresql://{host}:{port}/{database} tables={','.join(mapped)}"

    def _resolved_name(self, declared: str) -> str:
        """``schema.table`` of the mapped table, or its reference as given while it does not resolve."""
        reference = self.table_reference(declared)
        try:
            relation = self._resolve(reference, declared)
        except SchemaError:
            return ".".join(part.name for part in reference.parts)
        return f"{relation.schema}.{relation.name}"

    def source(self, table: Table) -> SourceTable:
        """The resolved relation's real ``"schema"."table"``, its columns and the dialect (catalog only)."""
        relation = self._resolve(self.table_reference(table.name), table.name)
        return SourceTable(reference=relation.reference, columns=self._columns(relation, table.name),
                           dialect=self.sql_dialect)

    def describe(self, reference: exp.Table) -> dict[str, DatabaseColumn]:
        """The columns of the table or view at ``reference`` from ``pg_catalog``, keyed by lower-case name.

        Raises:
            SchemaError: no table or view the connection can see has that name.
            OperationalError: the catalog could not be read.
        """
        return self._columns(self._resolve(reference, reference.name), reference.name)

    def run(self, sql: str) -> pa.Table:
        """Run generated SQL in a read-only transaction; the whole result as Arrow.

        Sums are NUMERIC (exact) and every per-row value is clamped and bounded by the schema, so
        nothing can overflow; if something does, DataError.
        """
        return self._execute(sql)

    # ------------------------------------------------------------------------------------ catalog
    def _resolve(self, reference: exp.Table, declared: str) -> Relation:
        """The relation ``reference`` names (see the module docstring); SchemaError if none."""
        if self._mapped and declared.lower() not in self._tables:
            raise SchemaError(f"Table '{declared}' is declared in the schema but not in tables=: this PostgresBackend "
                              f"reads only {', '.join(sorted(self._tables)) or 'no table'}. Add it to tables=.")
        database, schema, name = reference.catalog, reference.db, reference.name
        if database:
            current = self._execute(exp.select(call("current_database")).sql(DIALECT)).column(0)[0].as_py()
            if str(current).lower() != database.lower():
                raise SchemaError(f"Table '{declared}' is declared at {reference.sql(DIALECT)}, in database "
                                  f"'{database}', but the connection is to database '{current}'. PostgreSQL reads "
                                  "one database per connection: connect to that database, or drop the database part.")
        rows = self._execute(_relations_query(schema, name)).to_pylist()
        found = _pick(rows, schema, name)
        if found is None:
            where = f"in schema '{schema}'" if schema else "on the connection's search path"
            raise SchemaError(f"Table '{declared}' is declared in the schema (tables.{declared}) but no table or view "
                              f"named {reference.sql(DIALECT)} is {where}: the schema and the database disagree. "
                              "Create the table (or a view), fix the name in the schema, or map it with tables=.")
        relation = Relation(int(found["oid"]), str(found["nspname"]), str(found["relname"]), str(found["relkind"]),
                            str(found["relpersistence"]))
        if self._temporary_only and not relation.temporary:
            raise SchemaError(f"Table '{declared}' is now {relation.schema}.{relation.name}, not a TEMPORARY table: "
                              "this backend was accepted as in-memory data, so it reads temporary tables only.")
        return relation

    def _columns(self, relation: Relation, declared: str) -> dict[str, DatabaseColumn]:
        rows = self._execute(_columns_query(relation.oid)).to_pylist()
        readable = [row for row in rows if row["readable"]]
        if rows and not readable:
            raise SchemaError(f"Table '{declared}' ({relation.schema}.{relation.name}): the connection's role may not "
                              "SELECT any of its columns. Grant SELECT on it to the role dpsql connects as.")
        columns: dict[str, DatabaseColumn] = {}
        for row in sorted(readable, key=lambda r: r["attname"] == str(r["attname"]).lower()):  # exact lower wins
            name, type_name = str(row["attname"]), str(row["type_name"])
            columns[name.lower()] = DatabaseColumn(name, type_name, POSTGRES.type_family(str(row["base_type"])))
        return columns

    # ---------------------------------------------------------------------------------- execution
    def _execute(self, sql: str) -> pa.Table:
        """Run one statement read-only (see :func:`_read_only`) and fetch it as Arrow, mapping errors."""
        connection = self.connection
        cursor = connection.cursor()
        try:
            with _read_only(connection, cursor):
                cursor.execute(sql)
                return _fetch(cursor)
        finally:
            with contextlib.suppress(Exception):
                cursor.close()


@contextlib.contextmanager
def _read_only(connection: Any, cursor: Any) -> Iterator[None]:
    """Run the body in a read-only (sub)transaction and undo it afterwards (see the module docstring).

    Raises:
        DataError, OperationalError: as :func:`_mapped`; the connection is left as it was found.
    """
    began = _idle(connection)  # the driver will begin a transaction for dpsql's statements
    try:
        cursor.execute(f"SAVEPOINT {_SAVEPOINT}")
    except Exception as err:
        if _sqlstate(err) != _NO_TRANSACTION:
            raise _mapped(err, "") from None
        undo = ["ROLLBACK"]
        try:
            cursor.execute("BEGIN READ ONLY")
        except Exception as begin_error:
            raise _mapped(begin_error, "") from None
    else:
        undo = [] if began else [f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}", f"RELEASE SAVEPOINT {_SAVEPOINT}"]
    try:
        if undo != ["ROLLBACK"]:
            cursor.execute("SET TRANSACTION READ ONLY")
        yield
    except Exception as err:
        note = _undo(connection, cursor, undo)
        raise _mapped(err, note) from None
    note = _undo(connection, cursor, undo)
    if note:
        raise OperationalError(f"dpsql could not end its read-only transaction; {note}")


def _idle(connection: Any) -> bool:
    """Whether the connection reports no open transaction (psycopg's ``info.transaction_status`` is IDLE);
    False when the driver does not say (ADBC), so the caller's transaction is then kept."""
    status = getattr(getattr(connection, "info", None), "transaction_status", None)
    return status is not None and int(status) == 0


def _undo(connection: Any, cursor: Any, statements: Sequence[str]) -> str:
    """Undo what :func:`_read_only` began; ``""``, or a sentence when the caller's transaction was rolled back."""
    try:
        if not statements:
            connection.rollback()  # the transaction the driver began for dpsql's statements
        for statement in statements:
            cursor.execute(statement)
        return ""
    except Exception:
        with contextlib.suppress(Exception):
            connection.rollback()
        return ("the driver accepted nothing but a full rollback after the error, so the connection's open "
                "transaction was rolled back (open the connection with autocommit=True to avoid this).")


def _mapped(err: BaseException, note: str) -> Exception:
    """The dpsql error for a driver error: DataError on overflow, the message shown for class 42 (SQL and
    catalog problems), else withheld (it may quote data values)."""
    state = _sqlstate(err)
    suffix = f" Note: {note}" if note else ""
    if state == _OVERFLOW:
        return DataError("PostgreSQL reported a numeric overflow in the cell query (SQLSTATE 22003); its message is "
                         f"withheld because it may quote data values.{suffix}")
    if state == "25P02":
        return OperationalError("The connection's transaction was aborted by an earlier error: roll it back "
                                f"(connection.rollback()) before dpsql reads through it.{suffix}")
    if state is not None and state.startswith("42"):
        message = str(err).split("\nQuery was:")[0].strip()  # ADBC appends the (generated) query: too long to help
        return OperationalError(f"PostgreSQL failed to run the cell query (SQLSTATE {state}): {message}{suffix}")
    shown = f"SQLSTATE {state}" if state else type(err).__name__
    return OperationalError(f"PostgreSQL failed to run the cell query ({shown}); its message is withheld because it "
                            f"may quote data values.{suffix}")


def _sqlstate(err: BaseException) -> str | None:
    """The SQLSTATE a driver error carries (``sqlstate``: psycopg 3, ADBC; ``pgcode``: psycopg 2)."""
    state = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
    return str(state) if state else None


# ==================================================================================== catalog SQL
def _text(value: str) -> exp.Expression:
    """``value`` as a text expression that needs no escaping: ``convert_from(decode('<hex>', 'hex'), 'UTF8')``
    (correct whatever ``standard_conforming_strings`` says; a name never enters the SQL as text)."""
    return call("convert_from", call("decode", exp.Literal.string(value.encode().hex()), exp.Literal.string("hex")),
                exp.Literal.string("UTF8"))


def _relations_query(schema: str, name: str) -> str:
    """Tables and views named ``name`` (case-insensitively), in ``schema`` or on the search path, with the
    position of their schema in the search path (NULL when not on it); system schemas excluded."""
    path = ("SELECT s.nspname AS path_name, s.position FROM unnest(current_schemas(true)) "
            "WITH ORDINALITY AS s(nspname, position)")
    kinds = ", ".join(f"'{k}'" for k in _RELATION_KINDS)
    where = [f"c.relkind IN ({kinds})", f"lower(c.relname) = lower({_text(name).sql(DIALECT)})",
             "n.nspname NOT IN ('pg_catalog', 'information_schema')", "n.nspname NOT LIKE 'pg\\_toast%'"]
    where.append(f"lower(n.nspname) = lower({_text(schema).sql(DIALECT)})" if schema else "p.position IS NOT NULL")
    return (f"SELECT c.oid::bigint AS oid, n.nspname::text AS nspname, c.relname::text AS relname, "
            f"c.relkind::text AS relkind, c.relpersistence::text AS relpersistence, p.position::bigint AS position "
            f"FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            f"LEFT JOIN ({path}) p ON p.path_name = n.nspname WHERE {' AND '.join(where)}")


def _pick(rows: list[dict[str, Any]], schema: str, name: str) -> dict[str, Any] | None:
    """PostgreSQL's choice among case-insensitive matches: the first schema on the search path (or the
    named schema, exact name first), then the exact table name; SchemaError if still ambiguous."""
    if not rows:
        return None

    def rank(row: dict[str, Any]) -> tuple[object, ...]:
        first = (row["nspname"] != schema,) if schema else (row["position"],)
        return (*first, row["relname"] != name)

    rows = sorted(rows, key=rank)
    best = [row for row in rows if rank(row) == rank(rows[0])]
    if len(best) > 1:
        names = ", ".join(f"{r['nspname']}.{r['relname']}" for r in best)
        raise SchemaError(f"The table name '{name}' matches several tables that differ only in case ({names}): "
                          "map the declared table to one of them exactly with tables=.")
    return best[0]


def _columns_query(oid: int) -> str:
    """The relation's live columns in order: name, type (``format_type``), the type whose family counts
    (a domain's base type; ``enum`` for enum types) and whether the role may SELECT the column."""
    return ("SELECT a.attname::text AS attname, format_type(a.atttypid, a.atttypmod) AS type_name, "
            "CASE t.typtype WHEN 'e' THEN 'enum' WHEN 'd' THEN format_type(t.typbasetype, t.typtypmod) "
            "ELSE format_type(a.atttypid, a.atttypmod) END AS base_type, "
            "has_column_privilege(a.attrelid, a.attnum, 'SELECT') AS readable "
            "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
            f"WHERE a.attrelid = {int(oid)} AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum")


# ===================================================================================== results
def _fetch(cursor: Any) -> pa.Table:
    """The cursor's result as Arrow: ADBC's own (``fetch_arrow_table``), else rows and ``description``."""
    if callable(getattr(cursor, "fetch_arrow_table", None)):
        table: pa.Table = cursor.fetch_arrow_table()
        return table
    names = [str(column[0]) for column in cursor.description or ()]
    rows = cursor.fetchall() if names else []
    return pa.table({name: arrow_column([row[i] for row in rows]) for i, name in enumerate(names)})


def arrow_column(values: list[Any]) -> pa.Array:
    """Integers (and integral decimals, e.g. NUMERIC sums) exactly: int64 when all fit, else decimal text.

    Columns of Python ints, or of decimals Arrow reads at scale 0, are converted by Arrow at once (its
    casts are exact and refuse what int64 cannot hold); anything else value by value.
    """
    kinds = {type(v) for v in values} - {type(None)}
    with contextlib.suppress(OverflowError, pa.ArrowException):
        if kinds == {int}:
            return pa.array(values, pa.int64())
        if kinds == {decimal.Decimal}:
            column = pa.array(values)
            if pa.types.is_decimal(column.type) and column.type.scale == 0:
                return column.cast(pa.int64())
    present = [v for v in values if v is not None]
    if all(_is_integer(v) for v in present):
        integers = [None if v is None else int(v) for v in values]
        if all(-(2**63) <= v < 2**63 for v in integers if v is not None):
            return pa.array(integers, pa.int64())
        return pa.array([None if v is None else str(v) for v in integers], pa.string())
    if all(isinstance(v, dt.date) and not isinstance(v, dt.datetime) for v in present):
        return pa.array(values, pa.date32())
    return pa.array(values)


def _is_integer(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, decimal.Decimal) and value.is_finite() and value == value.to_integral_value()


def public_uri(uri: str) -> str:
    """``uri`` without user, password or query: what may appear in messages."""
    parts = urlsplit(uri)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
