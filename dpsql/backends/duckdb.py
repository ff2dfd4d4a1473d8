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
definition, in :mod:`dpsql.backends.cell_sql`): not counted, not summed, in the outside cell.

Privacy unit: with ``privacy_unit = { column = "u", max_rows = k }`` the generated SQL drops rows
whose unit is NULL (they belong to no one we can bound) and keeps at most k rows per unit,
chosen by a hash of the row's cell and measure values (ties broken by the values). The choice
depends only on that unit's own rows, so adding or removing one unit changes the kept rows by
at most k: the stability the noise calibration assumes. (Which rows are kept may differ
between queries over different columns; how many per unit does not.)

Why the SQL comes from the schema only: the query text is built (:mod:`dpsql.backends.cell_sql`)
with sqlglot expressions from the declared table and column names (quoted, matched
case-insensitively to the names in the database catalog) and from the declared boundaries and
values as literals. No user SQL, no value read from the data, reaches it, so what the query
computes is fixed before any data is read. Error messages name columns and types, never data values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Self

import duckdb
import numpy as np
import pyarrow as pa
from sqlglot import exp

from dpsql.backends.base import CellData, IntArray, MeasureProfile, file_identity
from dpsql.backends.cell_sql import (
    DatabaseColumn,
    build_query,
    check_quantum,
    decode_cell_data,
    decode_marginal_tables,
    marginals_query,
    profile_query,
    raise_problems,
    table_ref,
)
from dpsql.errors import (
    InterfaceError,
    OperationalError,
    SchemaError,
    ShapeError,
)
from dpsql.schema import Column, Table

#: The sqlglot dialect every generated query is rendered in.
DIALECT = "duckdb"

_NO_SUMS: Mapping[Column, float] = MappingProxyType({})
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

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def check_table(self, table: Table) -> None:
        """Check that the table, every declared column and the privacy-unit column exist with fitting types.

        Reads only the catalog, never the data.

        Raises:
            SchemaError: the table or columns are missing, or a column's type cannot hold its
                declared domain; the message lists every problem.
        """
        catalog = describe(self.connection, table.name)
        raise_problems(table, catalog, list(table.columns.values()), [])

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
        return decode_cell_data(result, shape, [c.name for c in sum_columns], [c.name for c in count_columns])

    def cell_data_sets(self, table: Table, cell_sets: Sequence[Sequence[Column]], *,
                       sum_columns: Mapping[Column, float] = _NO_SUMS,
                       count_columns: Sequence[Column] = ()) -> list[CellData]:
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
        result = self._run(build_query(table, catalog, columns, sum_columns, count_columns, grouping).sql(self.dialect))
        present = (np.stack([~np.asarray(result.column(f"dpsql_cell_{i}").is_null()) for i in range(len(columns))],
                            axis=1)
                   if columns else np.zeros((result.num_rows, 0), dtype=bool))
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
            found.append(decode_cell_data(renamed, shape, [c.name for c in sum_columns],
                                          [c.name for c in count_columns]))
        return found

    def measure_profile(self, table: Table, column: Column, quantum: float, below: Sequence[float],
                        clip: Sequence[int]) -> MeasureProfile:
        """What the truncation-threshold selectors read, in one scan over the (capped) rows.

        Each row's value is clamped to the column's outer measure bounds and counted in quanta,
        a = |round(clamp(v) / quantum)| (NULL and NaN rows are left out). Returns the number of
        such rows, #{a ≤ below[k]/quantum} per point and Σ min(a, clip[j]) per integer clip level.
        """
        catalog = self._checked_catalog(table, [], {column: quantum}, [])
        query = profile_query(table, catalog, column, quantum, below, clip)
        result = self._run(query.sql(self.dialect)).to_pylist()[0]
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
        result = self._run(marginals_query(table, catalog, cell_columns, keys).sql(self.dialect))
        return decode_marginal_tables(result, [c.domain.size + 1 for c in cell_columns], keys)

    # ------------------------------------------------------------------------------- internals
    def _query(self, table: Table, cells: Sequence[Column], sums: Mapping[Column, float],
               counts: Sequence[Column]) -> exp.Select:
        return build_query(table, self._checked_catalog(table, cells, sums, counts), cells, sums, counts)

    def _checked_catalog(self, table: Table, cells: Sequence[Column], sums: Mapping[Column, float],
                         counts: Sequence[Column]) -> dict[str, DatabaseColumn]:
        """The table's database columns, after checking that every column can serve its role."""
        for column in [*cells, *sums, *counts]:
            if column.table != table.name or table.columns.get(column.name) != column:
                raise SchemaError(f"Column '{column.name}' ({column.key}) is not a column of table '{table.name}'; "
                                  f"pass columns from Schema.table('{table.name}').columns.")
        catalog = describe(self.connection, table.name)
        excluded = [c for c in table.columns.values() if c.outside_excluded and c not in cells]
        raise_problems(table, catalog, [*cells, *counts, *excluded], list(sums))
        for column, quantum in sums.items():
            check_quantum(column, quantum)
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
    sql = exp.Describe(this=table_ref(table_name)).sql(DIALECT)
    try:
        rows = connection.execute(sql).fetchall()
    except _QUIET_ERRORS as err:
        raise OperationalError(f"DuckDB could not describe table '{table_name}': {err}") from None
    except duckdb.Error as err:
        raise OperationalError(f"DuckDB could not describe table '{table_name}' ({type(err).__name__}); its message "
                               "is withheld because it may quote data values.") from None
    return {str(row[0]).lower(): DatabaseColumn(str(row[0]), str(row[1])) for row in rows}


