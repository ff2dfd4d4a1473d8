"""The DuckDB backend: one GROUP BY scan turns a table into row counts (and sums) per base cell.

The data vector x of the matrix mechanism is the number of rows in each cell of the product of
the declared domains. :meth:`DuckDBBackend.cell_data` computes its non-empty entries with a
single ``GROUP BY`` query and returns them sparsely as :class:`CellData`; the dense product
domain is never built here.

Where a row goes (per cell column, shape ``domain.size + 1``):

- categorical: the position of its value in the declared ``values``;
- ordered: the base cell [b_k, b_{k+1}) holding it, compared as DOUBLE (numbers) or DATE
  (dates; TIMESTAMP columns are cast to DATE, TIMESTAMPTZ in the session's time zone). The last
  boundary is included for numeric domains and explicit integer ``edges``; a uniform integer
  grid's last cell is [upper, upper + 1); dates end at the start of the unit after ``upper``;
- the *outside* cell (last index, ``domain.size``): NULL, NaN, an undeclared category, or a
  value outside [lower, upper]. Outside cells are counted, so the counts always add up to the
  rows kept. With ``out_of_domain = "clamp"`` a value below ``lower`` (or above ``upper``) goes
  to the first (or last) cell instead; NULL and NaN still go outside. Rows whose value in a
  column declared ``out_of_domain = "exclude"`` would go outside are filtered out of every
  query on the table (before the privacy-unit cap), so those outside cells are always empty.

Measures: SUM columns add ``round(clamp(value, lo, hi) / quantum)`` per row as a BIGINT (round
half away from zero, bounds from ``Column.measure_bounds``); NULL and NaN add 0. COUNT(col)
columns count the rows with a value. NaN is not a value, exactly like NULL, everywhere (one
definition, ``_has_value``): not counted, not summed, in the outside cell.

Privacy unit: with ``privacy_unit = { column = "u", max_rows = k }`` the generated SQL drops rows
whose unit is NULL (they belong to no one we can bound) and keeps at most k rows per unit,
chosen by a hash of the row's cell and measure values (ties broken by the values). The choice
depends only on that unit's own rows, so adding or removing one unit changes the kept rows by
at most k: the stability the noise calibration assumes. (Which rows are kept may differ
between queries over different columns; how many per unit does not.)

Why the SQL comes from the schema only: the query text is built with sqlglot expressions from
the declared table and column names (quoted, matched case-insensitively to the names in the
database catalog) and from the declared boundaries and values as literals. No user SQL, no
value read from the data, reaches it, so what the query computes is fixed before any data is
read. Error messages name columns and types, never data values.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Any, Literal, Self

import duckdb
import numpy as np
import pyarrow as pa
from sqlglot import exp

from dpsql.backends.base import CellData, IntArray, MeasureProfile, file_identity
from dpsql.errors import (
    DomainTooLargeError,
    InterfaceError,
    InternalError,
    OperationalError,
    ProgrammingError,
    SchemaError,
    ShapeError,
)
from dpsql.schema import EPOCH, Categorical, Column, Ordered, Table

#: The sqlglot dialect every generated query is rendered in.
DIALECT = "duckdb"
TypeFamily = Literal["integer", "decimal", "float", "boolean", "date", "timestamp", "text", "other"]

_NO_SUMS: Mapping[Column, float] = MappingProxyType({})
_INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
                            "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"})
_NUMBER_FAMILIES = frozenset({"integer", "decimal", "float"})
#: Largest per-row |measure| / quantum: beyond 2**53 doubles no longer hold every integer.
_MAX_SCALED_MEASURE = 2.0**53
#: Most boundaries searched with a CASE tree (explicit edges, or a grid that is not lower + k*step).
_MAX_EDGES = 2**16
#: DuckDB errors whose text describes the catalog or the SQL, never data values.
_QUIET_ERRORS = (duckdb.CatalogException, duckdb.BinderException, duckdb.ParserException,
                 duckdb.IOException, duckdb.ConnectionException, duckdb.PermissionException)
#: How dpsql opens a database: no files, URLs, other databases or Python objects beyond its catalog,
#: no extensions fetched or loaded on demand, and no way to change this from SQL afterwards.
_LOCKED: Mapping[str, bool] = MappingProxyType({"enable_external_access": False, "autoload_known_extensions": False,
                                                "autoinstall_known_extensions": False, "lock_configuration": True})


# ====================================================================================== backend
class DuckDBBackend:
    """Runs the one data-vector query of a table in DuckDB.

    A database path is opened read-only (dpsql never writes, so other readers are never locked
    out) with external access and extension autoloading/autoinstalling disabled and the
    configuration locked (``_LOCKED``): generated SQL can reach only the database's own tables
    and views, never a file, a URL, another database or a Python object. ``":memory:"`` gets the
    same locked configuration (an empty database; useful for tests of errors). An open DuckDB
    connection passed in is used as it is: it cannot be reconfigured, so only the catalog check
    of :func:`describe` (tables and views of its own catalog, no replacement scans) applies.

    Args:
        database: a database path, ``":memory:"``, or an open ``duckdb`` connection. A connection
            passed in stays open after :meth:`close`; one opened here is closed by it.

    Raises:
        OperationalError: there is no file at the path (nothing is created), or DuckDB cannot open
            it (e.g. another process holds it read-write, or this process has it open with another
            configuration).
    """

    #: The dialect of the generated SQL (Backend protocol).
    dialect = DIALECT

    def __init__(self, database: str | os.PathLike[str] | duckdb.DuckDBPyConnection = ":memory:") -> None:
        self._path: str | None = None
        if isinstance(database, duckdb.DuckDBPyConnection):
            self._connection: duckdb.DuckDBPyConnection | None = database
            self._owns_connection = False
            return
        self._connection = _open_locked(os.fspath(database))
        self._owns_connection = True
        self._path = None if os.fspath(database) == ":memory:" else os.fspath(database)

    @property
    def in_memory(self) -> bool:
        """True when no database attached to the connection is stored in a file (or other external storage)."""
        return not attached_files(self.connection)

    @property
    def identity(self) -> str:
        """The opened database file's :func:`~dpsql.backends.base.file_identity`; ``""`` for ``":memory:"``
        and for a connection passed in (its files are not bound: pass the path to bind one)."""
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def check_table(self, table: Table) -> None:
        """Check that the table, every declared column and the privacy-unit column exist with fitting types.

        Reads only the catalog, never the data.

        Raises:
            SchemaError: the table or columns are missing, or a column's type cannot hold its
                declared domain; the message lists every problem.
        """
        catalog = describe(self.connection, table.name)
        _raise_problems(table, catalog, list(table.columns.values()), [])

    def sql_for(self, table: Table, cell_columns: Sequence[Column], *, sum_columns: Mapping[Column, float] = _NO_SUMS,
                count_columns: Sequence[Column] = ()) -> str:
        """The SQL text :meth:`cell_data` runs for these arguments (for EXPLAIN, debugging and tests)."""
        return self._query(table, cell_columns, sum_columns, count_columns).sql(self.dialect, pretty=True)

    def cell_data(self, table: Table, cell_columns: Sequence[Column], *, sum_columns: Mapping[Column, float] = _NO_SUMS,
                  count_columns: Sequence[Column] = ()) -> CellData:
        """Count rows (and sum measures) per cell of the product of ``cell_columns``' domains, in one scan.

        Args:
            table: the declared table.
            cell_columns: declared columns of ``table`` whose domains span the cells (may be empty:
                one cell holding every row).
            sum_columns: measure column -> quantum (a public positive number; use
                :func:`dpsql.schema.measure_quantum`). Each row adds round(clamp(value, lo, hi) / quantum).
            count_columns: columns whose values (not NULL, not NaN) are counted per cell.

        Returns:
            The non-empty cells, sorted by flat index.

        Raises:
            SchemaError: a column is not in ``table``, missing from the database, of a type that
                cannot hold its domain, or summed without measure bounds.
            ProgrammingError: a quantum is not a positive finite number, or is so small that
                values would no longer be exact integers.
            OperationalError: DuckDB failed (the message omits anything that may quote data).
        """
        query = self._query(table, cell_columns, sum_columns, count_columns)
        result = self._run(query.sql(self.dialect))
        shape = tuple(c.domain.size + 1 for c in cell_columns)
        return _cell_data(result, shape, [c.name for c in sum_columns], [c.name for c in count_columns])

    def cell_data_sets(self, table: Table, cell_sets: Sequence[Sequence[Column]], *,
                       sum_columns: Mapping[Column, float] = _NO_SUMS, count_columns: Sequence[Column] = ()) -> list[CellData]:
        """:meth:`cell_data` for several sets of cell columns, in one scan (GROUP BY GROUPING SETS).

        Every set gets the row counts, every sum and every non-NULL count, over the same rows: a
        privacy unit's rows are capped once, chosen by all the columns together, so each set's
        vectors still hold at most ``max_rows`` rows of any unit. Returns one CellData per entry
        of ``cell_sets``, in order (sets listing the same columns share one grouping set).

        Raises:
            SchemaError, ProgrammingError, OperationalError: as for :meth:`cell_data`.
        """
        columns = list(dict.fromkeys(c for cells in cell_sets for c in cells))
        catalog = self._checked_catalog(table, columns, sum_columns, count_columns)
        positions = [tuple(columns.index(c) for c in cells) for cells in cell_sets]
        grouping = list(dict.fromkeys(tuple(sorted(p)) for p in positions))
        result = self._run(_build_query(table, catalog, columns, sum_columns, count_columns, grouping).sql(self.dialect))
        present = np.stack([~np.asarray(result.column(f"dpsql_cell_{i}").is_null()) for i in range(len(columns))], axis=1) \
            if columns else np.zeros((result.num_rows, 0), dtype=bool)
        sums = [f"dpsql_sum_{i}" for i in range(len(sum_columns))]
        counts = [f"dpsql_nonnull_{i}" for i in range(len(count_columns))]
        found = []
        for position, cells in zip(positions, cell_sets):
            pattern = np.zeros(len(columns), dtype=bool)
            pattern[list(position)] = True
            mine = result.filter(pa.array(np.all(present == pattern, axis=1)))
            renamed = pa.table({**{f"dpsql_cell_{k}": mine.column(f"dpsql_cell_{p}") for k, p in enumerate(position)},
                                **{name: mine.column(name) for name in ["dpsql_rows", *sums, *counts]}})
            shape = tuple(c.domain.size + 1 for c in cells)
            found.append(_cell_data(renamed, shape, [c.name for c in sum_columns], [c.name for c in count_columns]))
        return found

    def measure_profile(self, table: Table, column: Column, quantum: float, below: Sequence[float],
                        clip: Sequence[int]) -> MeasureProfile:
        """What the truncation-threshold selectors read, in one scan over the (capped) rows.

        Each row's value is clamped to the column's outer measure bounds and counted in quanta,
        a = |round(clamp(v) / quantum)| (NULL and NaN rows are left out). Returns the number of
        such rows, #{a ≤ below[k]/quantum} per point and Σ min(a, clip[j]) per integer clip level.
        """
        catalog = self._checked_catalog(table, [], {column: quantum}, [])
        rows, _, (value,), _ = _rows(table, catalog, [], {column: quantum}, ())
        magnitude = exp.Abs(this=_ref(value))
        aggregates = [exp.alias_(exp.Count(this=_ref(value)), "dpsql_rows", quoted=True)]
        aggregates += [exp.alias_(exp.Count(this=exp.Case().when(exp.LTE(this=magnitude.copy(), expression=_double(u / quantum)),
                                                               _int(1))), f"dpsql_below_{k}", quoted=True)
                       for k, u in enumerate(below)]
        present = exp.Not(this=_ref(value).is_(exp.null()))  # LEAST skips NULLs, so guard them explicitly
        aggregates += [exp.alias_(exp.Coalesce(this=exp.Sum(this=exp.Case().when(present.copy(), _call(
                           "least", magnitude.copy(), _int(int(t))))), expressions=[_int(0)]), f"dpsql_clip_{j}", quoted=True)
                       for j, t in enumerate(clip)]  # HUGEINT sums, read exactly as Python integers
        result = self._run(exp.select(*aggregates).from_(rows.subquery("dpsql_rows", copy=False)).sql(self.dialect)).to_pylist()[0]
        return MeasureProfile(rows=int(result["dpsql_rows"]),
                              below=tuple(int(result[f"dpsql_below_{k}"]) for k in range(len(below))),
                              clipped_sums=tuple(int(result[f"dpsql_clip_{j}"]) for j in range(len(clip))))

    def marginal_counts(self, table: Table, cell_columns: Sequence[Column],
                        marginals: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], IntArray]:
        """Row counts of several marginals of the cell columns' product, in one scan (GROUPING SETS).

        Args:
            table: the declared table.
            cell_columns: declared columns of ``table``; a marginal lists indices into this sequence.
            marginals: distinct, sorted tuples of column indices (``()`` is the total count).

        Returns:
            Per marginal, a dense int64 array of shape ``(domain.size + 1 for each of its columns)``
            (the last index of each axis is the outside cell), after the privacy-unit cap. Only the
            marginals are ever formed, never the product of all the columns' domains.

        Raises:
            ShapeError: a marginal is not a sorted tuple of distinct valid indices, or is repeated.
            SchemaError, OperationalError: as for :meth:`cell_data`.
        """
        keys = [tuple(m) for m in marginals]
        for marginal in keys:
            if list(marginal) != sorted(set(marginal)) or any(not 0 <= i < len(cell_columns) for i in marginal):
                raise ShapeError(f"marginal {marginal!r} must be a sorted tuple of distinct column indices below "
                                 f"{len(cell_columns)}.")
        if len(set(keys)) != len(keys) or not keys:
            raise ShapeError(f"marginals must be a non-empty list without repeats; got {keys!r}.")
        catalog = self._checked_catalog(table, cell_columns, _NO_SUMS, ())
        result = self._run(_marginals_query(table, catalog, cell_columns, keys).sql(self.dialect))
        return _marginal_tables(result, [c.domain.size + 1 for c in cell_columns], keys)

    # ------------------------------------------------------------------------------- internals
    def _query(self, table: Table, cells: Sequence[Column], sums: Mapping[Column, float],
               counts: Sequence[Column]) -> exp.Select:
        return _build_query(table, self._checked_catalog(table, cells, sums, counts), cells, sums, counts)

    def _checked_catalog(self, table: Table, cells: Sequence[Column], sums: Mapping[Column, float],
                         counts: Sequence[Column]) -> dict[str, DatabaseColumn]:
        """The table's database columns, after checking that every column can serve its role."""
        for column in [*cells, *sums, *counts]:
            if column.table != table.name or table.columns.get(column.name) != column:
                raise SchemaError(f"Column '{column.name}' ({column.key}) is not a column of table '{table.name}'; "
                                  f"pass columns from Schema.table('{table.name}').columns.")
        catalog = describe(self.connection, table.name)
        excluded = [c for c in table.columns.values() if c.outside_excluded and c not in cells]
        _raise_problems(table, catalog, [*cells, *counts, *excluded], list(sums))
        for column, quantum in sums.items():
            _check_quantum(column, quantum)
        return catalog

    def _run(self, sql: str) -> pa.Table:
        """Run generated SQL. Sums are HUGEINT and every per-row value is clamped and bounded by the
        schema (below 2^53 quanta), so no aggregate can overflow; errors that may quote data values
        are reported without their message and not chained."""
        try:
            return arrow_table(self.connection.sql(sql))
        except _QUIET_ERRORS as err:
            raise OperationalError(f"DuckDB failed to run the cell query: {err}") from err
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
@dataclass(frozen=True, slots=True)
class DatabaseColumn:
    """A column as the database has it: its real name and DuckDB type."""

    name: str
    type_name: str

    @property
    def family(self) -> TypeFamily:
        return type_family(self.type_name)


def type_family(type_name: str) -> TypeFamily:
    """The kind of values a DuckDB type holds.

    >>> type_family("DECIMAL(10,2)"), type_family("TIMESTAMP WITH TIME ZONE"), type_family("ENUM('a', 'b')")
    ('decimal', 'timestamp', 'text')
    """
    name = type_name.upper()
    if name in _INTEGER_TYPES:
        return "integer"
    if name.startswith("DECIMAL"):
        return "decimal"
    if name in ("FLOAT", "DOUBLE", "REAL"):
        return "float"
    if name == "BOOLEAN":
        return "boolean"
    if name == "DATE":
        return "date"
    if name.startswith("TIMESTAMP"):
        return "timestamp"
    if name.startswith(("VARCHAR", "ENUM")):
        return "text"
    return "other"


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
        raise OperationalError(f"DuckDB cannot open the database '{name}' read-only: {err}. If this process (or "
                               "another) has it open for writing, close that connection first.") from err


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
    sql = exp.Describe(this=_table_ref(table_name)).sql(DIALECT)
    try:
        rows = connection.execute(sql).fetchall()
    except _QUIET_ERRORS as err:
        raise OperationalError(f"DuckDB could not describe table '{table_name}': {err}") from None
    except duckdb.Error as err:
        raise OperationalError(f"DuckDB could not describe table '{table_name}' ({type(err).__name__}); its message "
                               "is withheld because it may quote data values.") from None
    return {str(row[0]).lower(): DatabaseColumn(str(row[0]), str(row[1])) for row in rows}


def _raise_problems(table: Table, catalog: Mapping[str, DatabaseColumn], binned: Sequence[Column],
                    summed: Sequence[Column]) -> None:
    """SchemaError listing every missing column and every type that cannot hold its column's use."""
    problems = _missing(table, catalog, [c.name for c in [*binned, *summed]])
    for column in dict.fromkeys(binned):
        if column.name in catalog:
            problems.append(_type_problem(column, catalog[column.name]) or "")
    for column in summed:
        if column.name in catalog:
            problems.append(_measure_problem(column, catalog[column.name]) or "")
    if any(problems):
        raise SchemaError(" ".join(p for p in problems if p))


def _missing(table: Table, catalog: Mapping[str, DatabaseColumn], names: Sequence[str]) -> list[str]:
    unit = table.privacy_unit.column
    wanted = dict.fromkeys([*names, *([unit] if unit else [])])
    missing = [name for name in wanted if name not in catalog]
    if not missing:
        return []
    listed = ", ".join(f"'{name}'" + (" (the privacy unit)" if name == unit else "") for name in missing)
    return [(f"Column(s) {listed} of table '{table.name}' are declared in the schema but missing from the "
             f"database table, which has: {', '.join(c.name for c in catalog.values())}. The schema and the "
             "database disagree: fix the column names in the schema or create a view that provides them.")]


def _type_problem(column: Column, db: DatabaseColumn) -> str | None:
    """Why the database column cannot hold the declared domain, or None."""
    domain = column.domain
    if isinstance(domain, Categorical):
        try:
            _category_literals(domain, db)
        except ValueError as err:
            return f"{column.key}: {err}"
        return None
    allowed = ("date", "timestamp") if domain.kind == "date" else tuple(_NUMBER_FAMILIES)
    if db.family in allowed:
        return None
    return (f"{column.key} is declared {domain.kind} but the database column '{db.name}' has type {db.type_name}. "
            f"Declare a domain that fits the type, or create a view that casts the column.")


def _measure_problem(column: Column, db: DatabaseColumn) -> str | None:
    if column.measure_bounds is None:
        return f"{column.key} cannot be summed: only integer and numeric columns have measure bounds."
    if db.family not in _NUMBER_FAMILIES:
        return (f"{column.key} is summed but the database column '{db.name}' has type {db.type_name}, "
                "not a number type. Create a view that casts the column.")
    return None


def _check_quantum(column: Column, quantum: float) -> None:
    if isinstance(quantum, bool) or not isinstance(quantum, (int, float)) or not math.isfinite(quantum) or quantum <= 0:
        raise ProgrammingError(f"The quantum for SUM({column.name}) must be a finite number > 0; got {quantum!r}. "
                               "Use measure_quantum(column).")
    if max(map(abs, column.measure_bounds or (0.0, 0.0))) / quantum > _MAX_SCALED_MEASURE:
        raise ProgrammingError(f"The quantum {quantum!r} for SUM({column.name}) is too small for measure bounds "
                               f"{column.measure_bounds}: values would exceed 2^53 quanta. Use measure_quantum(column).")


# ================================================================================ SQL generation
def _table_ref(name: str) -> exp.Table:
    return exp.Table(this=exp.to_identifier(name, quoted=True))


def _ref(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    """A DuckDB function call, rendered verbatim (no dialect rewriting)."""
    return exp.Anonymous(this=name, expressions=list(args))


def _int(value: int) -> exp.Expression:
    return exp.Literal.number(int(value))


def _double(value: float) -> exp.Expression:
    """A DOUBLE literal that round-trips exactly (a bare 0.1 would be a DECIMAL in DuckDB)."""
    return exp.cast(exp.Literal.string(repr(float(value))), "DOUBLE")


def _date(day_number: float) -> exp.Expression:
    return exp.cast(exp.Literal.string((EPOCH + dt.timedelta(days=int(day_number))).isoformat()), "DATE")


def _cell_index(column: Column, db: DatabaseColumn) -> exp.Expression:
    """The BIGINT cell index of a row for ``column``: 0..size-1, or size for the outside cell."""
    if isinstance(column.domain, Categorical):
        return _categorical_index(column.domain, db)
    return _ordered_index(column.domain, db)


def _category_literals(domain: Categorical, db: DatabaseColumn) -> list[exp.Expression]:
    """The declared values as literals of the column's type; ValueError if the type cannot hold them."""
    family = db.family
    converted: list[object]
    literals: list[exp.Expression]
    if family == "boolean":
        words = {"true": True, "1": True, "false": False, "0": False}
        keys = [str(v).lower() for v in domain.values]
        if any(k not in words for k in keys):
            raise ValueError(f"the database column '{db.name}' is BOOLEAN; declare values \"true\" and \"false\".")
        flags = [words[k] for k in keys]
        converted, literals = list(flags), [exp.Boolean(this=v) for v in flags]
    elif family in _NUMBER_FAMILIES:
        pattern = r"[+-]?\d+" if family == "integer" else r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
        if any(isinstance(v, str) and not re.fullmatch(pattern, v.strip()) for v in domain.values):
            raise ValueError(f"declares text values but the database column '{db.name}' has type {db.type_name}. "
                             "Declare values of that type, or create a view that casts the column.")
        if family == "integer":
            integers = [int(v) for v in domain.values]
            converted, literals = list(integers), [_int(v) for v in integers]
        else:
            numbers = [float(v) for v in domain.values]
            converted, literals = list(numbers), [_double(v) for v in numbers]
    else:
        texts = [str(v) for v in domain.values]
        converted, literals = list(texts), [exp.Literal.string(v) for v in texts]
    if len(set(converted)) != len(converted):
        raise ValueError(f"two declared values are the same value of the database type {db.type_name}; "
                         "list each value once.")
    return literals


def _categorical_index(domain: Categorical, db: DatabaseColumn) -> exp.Expression:
    value: exp.Expression = _ref(db.name)
    if db.family not in ("boolean", "integer") and not db.type_name.upper().startswith("VARCHAR"):
        value = exp.cast(value, "DOUBLE" if db.family in _NUMBER_FAMILIES else "VARCHAR")
    position = _call("list_position", exp.Array(expressions=_category_literals(domain, db)), value)
    found = exp.Nullif(this=position, expression=_int(0))  # 0 or NULL when absent, depending on the version
    return exp.Sub(this=exp.Coalesce(this=found, expressions=[_int(domain.size + 1)]), expression=_int(1))


def _ordered_index(domain: Ordered, db: DatabaseColumn) -> exp.Expression:
    outside, last = domain.size, domain.size - 1
    if domain.kind == "date":
        value = exp.cast(_ref(db.name), "DATE")
        lower, top = _date(domain.lower), _date(domain.upper)
    else:
        value = exp.cast(_ref(db.name), "DOUBLE")
        lower, top = _double(domain.lower), _double(domain.upper)
    inclusive = domain.kind == "numeric" or (domain.kind == "integer" and domain.uniform_step is None)
    beyond = exp.GT if inclusive else exp.GTE
    case = exp.Case().when(exp.Not(this=_has_value(db)), _int(outside))
    return (case.when(exp.LT(this=value.copy(), expression=lower), _int(0 if domain.clamp else outside))
            .when(beyond(this=value.copy(), expression=top), _int(last if domain.clamp else outside))
            .else_(_index_in_range(domain, value, db.family), copy=False))


def _index_in_range(domain: Ordered, value: exp.Expression, family: TypeFamily) -> exp.Expression:
    """The base cell of a value known to lie in [lower, upper]."""
    if domain.kind == "date":
        unit = domain.unit or "day"
        return _call("date_diff", exp.Literal.string(unit), _date(domain.lower), value)
    if domain.uniform_step is not None and _grid_is_arithmetic(domain):
        exact = family == "integer" and all(float(b).is_integer() for b in (domain.lower, domain.uniform_step))
        return _grid_index(domain, value, corrected=not exact)
    if domain.size + 1 > _MAX_EDGES:
        raise DomainTooLargeError(f"The backend bins at most {_MAX_EDGES} explicit boundaries; this domain has "
                                  f"{domain.size + 1}. Use a uniform grid (bin_width/resolution).")
    return _bisect(value, domain.boundaries, 0, domain.size)


def _grid_is_arithmetic(domain: Ordered) -> bool:
    """Whether boundaries are exactly min(lower + step*k, top) in IEEE doubles, as the SQL recomputes them."""
    step = domain.uniform_step or 0.0
    k = np.arange(domain.size + 1, dtype=np.float64)
    return step > 0 and bool(np.array_equal(np.minimum(domain.lower + step * k, domain.upper),
                               np.asarray(domain.boundaries, dtype=np.float64)))


def _grid_index(domain: Ordered, value: exp.Expression, *, corrected: bool) -> exp.Expression:
    """floor((v - lower) / step), corrected by one cell where the division rounded across a boundary.

    The correction recomputes the boundaries as LEAST(lower + step * k, top) with the IEEE
    operations the schema used, so the index agrees exactly with ``domain.boundaries``. Integer
    values on an integer grid need none: the quotient is exact below 2^52.
    """
    step_value = domain.uniform_step or 1.0
    lower, step, top, last = _double(domain.lower), _double(step_value), _double(domain.upper), domain.size - 1

    def boundary(k: exp.Expression) -> exp.Expression:
        offset = exp.Mul(this=step.copy(), expression=exp.cast(k, "DOUBLE"))
        return _call("least", exp.Add(this=lower.copy(), expression=offset), top.copy())

    quotient = exp.Div(this=exp.paren(exp.Sub(this=value.copy(), expression=lower.copy())), expression=step.copy())
    k0 = _call("least", exp.cast(_call("floor", quotient), "BIGINT"), _int(last))
    if not corrected:
        return k0
    down = exp.Case().when(exp.LT(this=value.copy(), expression=boundary(k0.copy())), _int(1)).else_(_int(0))
    above_next = exp.GTE(this=value.copy(), expression=boundary(exp.Add(this=k0.copy(), expression=_int(1))))
    up = exp.Case().when(exp.and_(exp.LT(this=k0.copy(), expression=_int(last)), above_next), _int(1)).else_(_int(0))
    return exp.Add(this=exp.Sub(this=k0, expression=down), expression=up)


def _bisect(value: exp.Expression, boundaries: Sequence[float], low: int, high: int) -> exp.Expression:
    """A CASE tree finding k in [low, high) with boundaries[k] <= value < boundaries[k+1]."""
    if high - low == 1:
        return _int(low)
    middle = (low + high) // 2  # the subtrees are new, so they are attached without sqlglot's default deep copy
    return (exp.Case().when(exp.LT(this=value.copy(), expression=_double(boundaries[middle])),
                            _bisect(value, boundaries, low, middle), copy=False)
            .else_(_bisect(value, boundaries, middle, high), copy=False))


def _measure_value(column: Column, db: DatabaseColumn, quantum: float) -> exp.Expression:
    """round(clamp(v, lo, hi) / quantum) as BIGINT; NULL (adding nothing) where the row has no value."""
    lo, hi = column.measure_bounds or (0.0, 0.0)  # checked by _measure_problem
    value = exp.cast(_ref(db.name), "DOUBLE")
    clamped = _call("least", _call("greatest", value, _double(lo)), _double(hi))
    scaled = exp.cast(exp.Round(this=exp.Div(this=clamped, expression=_double(quantum))), "BIGINT")
    return exp.Case().when(_has_value(db), scaled).else_(exp.null())


def _has_value(db: DatabaseColumn) -> exp.Expression:
    """Whether a row has a value in the column: not NULL and, in a floating-point column, not NaN.

    The one definition every generated query uses. NaN is not a value, like NULL: COUNT(col)
    does not count it, SUM and AVG leave it out, and its cell is the outside cell (predicates are
    UNKNOWN on it, GROUP BY shows it only with ``other``, ``out_of_domain`` = "exclude" drops it).
    Never NULL itself, so it can be projected as a flag.
    """
    present = exp.Not(this=_ref(db.name).is_(exp.null()))
    if db.family == "float":  # parenthesised: NOT and AND must not re-associate around it
        return exp.paren(exp.and_(present, exp.Not(this=_call("isnan", _ref(db.name)))))
    return exp.paren(present)


def _rows(table: Table, catalog: Mapping[str, DatabaseColumn], cells: Sequence[Column],
          sums: Mapping[Column, float], counts: Sequence[Column]) -> tuple[exp.Select, list[str], list[str], list[str]]:
    """(rows, cell names, sum names, count names): one row per (capped) table row with its cell
    indices, scaled measures and has-a-value flags — the input of every aggregate query."""
    cell_names = [f"dpsql_cell_{i}" for i in range(len(cells))]
    sum_names = [f"dpsql_sum_{i}" for i in range(len(sums))]
    count_names = [f"dpsql_nonnull_{i}" for i in range(len(counts))]
    projections = ([exp.alias_(_cell_index(c, catalog[c.name]), n, quoted=True) for c, n in zip(cells, cell_names)]
                   + [exp.alias_(_measure_value(c, catalog[c.name], q), n, quoted=True)
                      for (c, q), n in zip(sums.items(), sum_names)]
                   + [exp.alias_(_has_value(catalog[c.name]), n, quoted=True) for c, n in zip(counts, count_names)])
    unit = table.privacy_unit.column
    projections = projections or [exp.alias_(_int(0), "dpsql_row", quoted=True)]  # COUNT(*) alone touches no column
    kept: list[exp.Expression] = [exp.NEQ(this=_cell_index(c, catalog[c.name]), expression=_int(c.domain.size))
                                  for c in table.columns.values() if c.outside_excluded]
    if unit is None:
        rows = exp.select(*projections).from_(_table_ref(table.name))
    else:  # rows without a unit are dropped: no one's contribution bound covers them
        unit_ref = _ref(catalog[unit].name)
        rows = exp.select(*projections, exp.alias_(unit_ref, "dpsql_unit", quoted=True)).from_(_table_ref(table.name))
        kept.append(unit_ref.copy().is_(exp.null()).not_())
    if kept:
        rows = rows.where(exp.and_(*kept))
    if unit is not None:
        rows = _cap_per_unit(rows, cell_names + sum_names + count_names, table.privacy_unit.max_rows)
    return rows, cell_names, sum_names, count_names


def _build_query(table: Table, catalog: Mapping[str, DatabaseColumn], cells: Sequence[Column],
                 sums: Mapping[Column, float], counts: Sequence[Column],
                 grouping: Sequence[tuple[int, ...]] | None = None) -> exp.Select:
    """SELECT cell indices, COUNT(*), SUMs and COUNTs ... GROUP BY the cell indices (or, given
    ``grouping``, by GROUPING SETS of cell column positions), over the capped rows."""
    rows, cell_names, sum_names, count_names = _rows(table, catalog, cells, sums, counts)
    aggregates = [exp.alias_(exp.Count(this=exp.Star()), "dpsql_rows", quoted=True)]
    # SUM over BIGINT is HUGEINT (128 bits; |sum| < 2^53 per row · 2^63 rows fits): fetched exactly, never cast down
    aggregates += [exp.alias_(exp.Coalesce(this=exp.Sum(this=_ref(n)), expressions=[_int(0)]), n,
                              quoted=True) for n in sum_names]
    aggregates += [exp.alias_(exp.Count(this=exp.Case().when(_ref(n), _int(1))), n, quoted=True) for n in count_names]
    query = exp.select(*[_ref(n) for n in cell_names], *aggregates).from_(rows.subquery("dpsql_rows", copy=False))
    if grouping is not None:
        sets = [exp.Tuple(expressions=[_ref(cell_names[i]) for i in positions]) for positions in grouping]
        query.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
        return query
    return query.group_by(*[_ref(n) for n in cell_names]) if cell_names else query


def _marginals_query(table: Table, catalog: Mapping[str, DatabaseColumn], cells: Sequence[Column],
                     marginals: Sequence[tuple[int, ...]]) -> exp.Select:
    """SELECT cell indices, COUNT(*) ... GROUP BY GROUPING SETS (one per marginal), over the capped rows.

    Cell indices are never NULL, so a result row's NULL pattern names its grouping set.
    """
    rows, cell_names, _, _ = _rows(table, catalog, cells, _NO_SUMS, ())
    sets = [exp.Tuple(expressions=[_ref(cell_names[i]) for i in marginal]) for marginal in marginals]
    query = exp.select(*[_ref(n) for n in cell_names], exp.alias_(exp.Count(this=exp.Star()), "dpsql_rows", quoted=True))
    query = query.from_(rows.subquery("dpsql_rows", copy=False))
    query.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
    return query


def _cap_per_unit(rows: exp.Select, names: Sequence[str], max_rows: int) -> exp.Select:
    """Keep at most ``max_rows`` rows per unit, chosen by hash(values) then the values themselves."""
    order = ([exp.Ordered(this=_call("hash", *[_ref(n) for n in names]))] if names else []) + [
        exp.Ordered(this=_ref(n)) for n in names]
    window = exp.Window(this=exp.RowNumber(), partition_by=[_ref("dpsql_unit")],
                        order=exp.Order(expressions=order) if order else None)
    capped = exp.select(*[_ref(n) for n in names] or [_ref("dpsql_unit")]).from_(rows.subquery("dpsql_unit_rows"))
    return capped.qualify(exp.LTE(this=window, expression=_int(max_rows)))


# ======================================================================================== result
def _cell_data(result: pa.Table, shape: tuple[int, ...], sum_names: Sequence[str], count_names: Sequence[str]) -> CellData:
    """Turn the GROUP BY result into sorted flat indices and aligned read-only arrays."""
    counts = _int_column(result, "dpsql_rows")
    keep = counts > 0  # only a query without GROUP BY over zero rows yields an empty cell
    cells = tuple(_int_column(result, f"dpsql_cell_{i}")[keep] for i in range(len(shape)))
    try:
        index = np.ravel_multi_index(cells, shape) if shape else np.zeros(int(keep.sum()), dtype=np.int64)
    except ValueError:
        raise InternalError("The cell query returned a cell index outside the declared domain.") from None
    order = np.argsort(index)

    def aligned(array: IntArray, *, kept: bool = False) -> IntArray:
        out = np.ascontiguousarray((array if kept else array[keep])[order])  # int64, or Python integers (wide sums)
        out.setflags(write=False)
        return out

    return CellData(
        shape=shape,
        index=aligned(np.asarray(index, dtype=np.int64), kept=True),
        counts=aligned(counts),
        sums=MappingProxyType({name: aligned(_int_column(result, f"dpsql_sum_{i}")) for i, name in enumerate(sum_names)}),
        nonnull=MappingProxyType({name: aligned(_int_column(result, f"dpsql_nonnull_{i}"))
                                  for i, name in enumerate(count_names)}),
    )


def _marginal_tables(result: pa.Table, shapes: Sequence[int], marginals: Sequence[tuple[int, ...]]
                     ) -> dict[tuple[int, ...], IntArray]:
    """Split a GROUPING SETS result by each row's non-NULL cell columns into dense marginal tables."""
    counts = _int_column(result, "dpsql_rows")
    present = np.stack([~np.asarray(result.column(f"dpsql_cell_{i}").is_null()) for i in range(len(shapes))], axis=1) \
        if shapes else np.zeros((len(counts), 0), dtype=bool)
    tables = {}
    for marginal in marginals:
        pattern = np.zeros(len(shapes), dtype=bool)
        pattern[list(marginal)] = True
        mine = np.all(present == pattern, axis=1)
        table = np.zeros(tuple(shapes[i] for i in marginal), dtype=np.int64)
        index = tuple(np.asarray(result.column(f"dpsql_cell_{i}").filter(pa.array(mine)).to_numpy(), dtype=np.int64)
                      for i in marginal)
        if not marginal:
            table.fill(counts[mine].sum())
        else:
            try:
                np.add.at(table, index, counts[mine])
            except IndexError:
                raise InternalError("The marginal query returned a cell index outside the declared domain.") from None
        table.setflags(write=False)
        tables[marginal] = table
    return tables


def _int_column(result: pa.Table, name: str) -> IntArray:
    """An integer result column exactly: int64 when every value fits, else Python integers
    (HUGEINT sums arrive as decimal128(38, 0))."""
    column = result.column(name)
    if column.null_count:
        raise InternalError(f"The cell query returned NULL in '{name}'.")
    if not pa.types.is_decimal(column.type):
        return np.asarray(column.to_numpy(), dtype=np.int64)
    try:  # Arrow's safe cast is exact and refuses any value outside int64
        return np.asarray(column.cast(pa.int64()).to_numpy(), dtype=np.int64)
    except pa.ArrowInvalid:
        values = [int(v) for v in column.to_pylist()]
        return np.array(values, dtype=object).reshape(len(values))
