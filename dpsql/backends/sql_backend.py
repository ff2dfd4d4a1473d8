"""Backends over SQL engines: the cell queries built once, run by a thin adapter per engine.

:class:`SqlBackend` implements the :class:`~dpsql.backends.base.Backend` protocol for any engine
that runs SQL and returns Arrow: it checks the declared columns against the engine's catalog,
builds the cell queries of :mod:`dpsql.backends.cell_sql` in the engine's
:class:`~dpsql.backends.sql_dialects.SqlDialect`, runs them and decodes the results. An engine
adapter supplies only what differs: its dialect, how it describes a table from its catalog (no
rows read), how it runs one query to Arrow, whether its data are in memory, its identity, and
``close``. The engine, the ledger and the planner never know which adapter they talk to.

Where rows go (per cell column, shape ``domain.size + 1``):

- categorical: the position of its value in the declared ``values``;
- ordered: the base cell [b_k, b_{k+1}) holding it, compared as DOUBLE (numbers) or DATE
  (dates; TIMESTAMP columns are cast to DATE); an integer column on a grid of integer lower, step
  and top is binned in BIGINT arithmetic, ⌊(v − lower) / step⌋, the same cell without a cast.
  The last boundary is included for numeric domains and explicit integer ``edges``; a uniform
  integer grid's last cell is [upper, upper + 1); dates end at the start of the unit after ``upper``;
- the *outside* cell (last index, ``domain.size``): NULL, NaN, an undeclared category, or a
  value outside [lower, upper]. Outside cells are counted, so the counts always add up to the
  rows kept. With ``out_of_domain = "clamp"`` a value below ``lower`` (or above ``upper``) goes
  to the first (or last) cell instead; NULL and NaN still go outside. Rows whose value in a
  column declared ``out_of_domain = "exclude"`` would go outside are filtered out of every
  query on the table (before the privacy-unit cap), so those outside cells are always empty.

Measures: SUM columns add ``round(clamp(value, lo, hi) / quantum)`` per row as a BIGINT (round
half away from zero, bounds from ``Column.measure_bounds``); NULL and NaN add 0; the sums are
exact (never wrapped). COUNT(col) columns count the rows with a value. NaN is not a value,
exactly like NULL, everywhere: not counted, not summed, in the outside cell.

Privacy unit: with ``privacy_unit = { column = "u", max_rows = k }`` the generated SQL drops rows
whose unit is NULL (they belong to no one we can bound) and keeps at most k rows per unit,
chosen in the order of a hash of the row's cell and measure values salted with its unit (ties
broken by the values). The hash is integer arithmetic that every engine computes alike, so every
engine keeps the same rows. The choice depends only on that unit's own rows, so adding or removing
one unit changes the kept rows by at most k: the stability the noise calibration assumes.
A table joined to its privacy unit's table (``table = "people"`` in its privacy unit) is read as
the join of the two (:func:`~dpsql.backends.cell_sql.joined_source`), and the cap applies to the
joined rows: the same bound (the argument is in :mod:`dpsql.sql.relations`).

Why the SQL comes from the schema only: the query text is built with sqlglot expressions from
the declared table and column names (quoted, matched case-insensitively to the names in the
catalog) and from the declared boundaries and values as literals. No user SQL, no value read from
the data, reaches it, so what the query computes is fixed before any data is read. Error
messages name columns and types, never data values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Self

import numpy as np
import pyarrow as pa
from sqlglot import exp

from dpsql.backends.base import CellData, IntArray, MeasureProfile, Squared
from dpsql.backends.cell_results import decode_cell_data, decode_marginal_tables
from dpsql.backends.cell_sql import (
    DatabaseColumn,
    SourceTable,
    build_query,
    check_quantum,
    finest_sets,
    joined_source,
    marginal_cell_data,
    marginals_query,
    profile_query,
    raise_problems,
    table_ref,
)
from dpsql.backends.sql_dialects import SqlDialect
from dpsql.errors import SchemaError, ShapeError
from dpsql.schema import Column, Table

_NO_SUMS: Mapping[Column | Squared, float] = MappingProxyType({})


class SqlBackend(ABC):
    """The Backend protocol over an SQL engine; subclasses are the engine adapters.

    Args:
        tables: where each declared table is in the engine, by declared name (``{"people":
            "catalog.db.people"}``); a table not listed is looked up by its declared name.
    """

    #: The dialect the cell queries are rendered in (set by each adapter).
    sql_dialect: SqlDialect

    def __init__(self, tables: Mapping[str, str] | None = None) -> None:
        self._tables = {str(name).lower(): str(where) for name, where in (tables or {}).items()}

    @property
    def dialect(self) -> str:
        """The sqlglot name of the dialect the generated SQL is rendered in."""
        return self.sql_dialect.name

    # ----------------------------------------------------------------------- the adapter's part
    @property
    @abstractmethod
    def in_memory(self) -> bool:
        """True when the data are not stored durably (see the Backend protocol)."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """A public, stable name of the stored data for the ledger, or ``""`` (see the Backend protocol)."""

    @abstractmethod
    def describe(self, reference: exp.Table) -> dict[str, DatabaseColumn]:
        """The columns of the table at ``reference`` from the catalog, keyed by lower-case name; no row is read.

        Raises:
            SchemaError: ``reference`` is not a table or view the engine's catalog holds.
            OperationalError: the catalog could not be read.
        """

    @abstractmethod
    def run(self, sql: str) -> pa.Table:
        """Run one generated query and return its whole result as Arrow.

        Raises:
            OperationalError: the engine failed; a message that may quote data is withheld and not chained.
            DataError: an arithmetic overflow (which the generated SQL is built never to reach).
        """

    @abstractmethod
    def close(self) -> None:
        """Release what the adapter holds; later data calls raise InterfaceError."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------------ the shared part
    def table_reference(self, table_name: str) -> exp.Table:
        """Where the declared table ``table_name`` is in the engine: its ``tables`` entry (a dotted
        reference, each part an identifier), else its declared name as one quoted identifier."""
        mapped = self._tables.get(table_name.lower())
        return table_ref(mapped) if mapped is not None else exp.Table(this=exp.to_identifier(table_name, quoted=True))

    def source(self, table: Table) -> SourceTable:
        """The declared table's reference, database columns and dialect (reads the catalog only)."""
        reference = self.table_reference(table.name)
        return SourceTable(reference=reference, columns=self.describe(reference), dialect=self.sql_dialect)

    def check_table(self, table: Table) -> None:
        """Check that the table, every declared column and the privacy-unit column exist with fitting types.

        Reads only the catalog, never the data.

        Raises:
            SchemaError: the table or columns are missing, or a column's type cannot hold its
                declared domain; the message lists every problem.
        """
        raise_problems(table, self._relation_source(table).columns, list(table.columns.values()), [])

    def sql_for(self, table: Table, cell_columns: Sequence[Column], *,
                sum_columns: Mapping[Column | Squared, float] = _NO_SUMS,
                count_columns: Sequence[Column] = ()) -> str:
        """The SQL text :meth:`cell_data` runs for these arguments (for EXPLAIN, debugging and tests)."""
        return self._query(table, cell_columns, sum_columns, count_columns).sql(self.dialect, pretty=True)

    def cell_data(self, table: Table, cell_columns: Sequence[Column], *,
                  sum_columns: Mapping[Column | Squared, float] = _NO_SUMS,
                  count_columns: Sequence[Column] = (), distinct_units: bool = False) -> CellData:
        """Count rows (and sum measures) per cell of the product of ``cell_columns``' domains, in one scan.

        Args:
            table: the declared table.
            cell_columns: declared columns of ``table`` whose domains span the cells (may be empty:
                one cell holding every row).
            sum_columns: measure column -> quantum (a public positive number; use
                :func:`dpsql.schema.measure_quantum`). Each row adds round(clamp(value, lo, hi) / quantum);
                a :class:`~dpsql.backends.base.Squared` column (quantum: :func:`dpsql.schema.square_quantum`)
                adds round(clamp(value, lo, hi)² / quantum), read back as ``CellData.squares``.
            count_columns: columns whose values (not NULL, not NaN) are counted per cell.
            distinct_units: also count the distinct privacy units of each cell's kept rows (``CellData.units``;
                a table with a privacy-unit column only).

        Returns:
            The non-empty cells, sorted by flat index.

        Raises:
            SchemaError: a column is not in ``table``, missing from the database, of a type that
                cannot hold its domain, or summed without measure bounds.
            ProgrammingError: a quantum is not a positive finite number, or is so small that
                values would no longer be exact integers.
            OperationalError: the engine failed (the message omits anything that may quote data).
        """
        if distinct_units and table.privacy_unit.column is None:
            raise SchemaError(f"distinct_units needs a privacy-unit column; table '{table.name}' protects rows.")
        query = build_query(table, self._checked_source(table, cell_columns, sum_columns, count_columns),
                            cell_columns, sum_columns, count_columns, units=distinct_units)
        result = self.run(query.sql(self.dialect))
        shape = tuple(c.domain.size + 1 for c in cell_columns)
        return decode_cell_data(result, shape, list(sum_columns), [c.name for c in count_columns],
                                units=distinct_units)

    def cell_data_sets(self, table: Table, cell_sets: Sequence[Sequence[Column]], *,
                       sum_columns: Mapping[Column | Squared, float] = _NO_SUMS,
                       count_columns: Sequence[Column] = ()) -> list[CellData]:
        """:meth:`cell_data` for several sets of cell columns, in one scan (GROUP BY GROUPING SETS).

        The database aggregates only at the finest sets (:func:`~dpsql.backends.cell_sql.finest_sets`:
        a set contained in another set of at most ``MAX_FINEST_CELLS`` declared cells is read from it);
        the sets inside one are summed from its cells here, exactly (a sum of integers).

        Every set gets the row counts, every sum and every non-NULL count, over the same rows: a
        privacy unit's rows are capped once, chosen by all the columns together, so each set's
        vectors still hold at most ``max_rows`` rows of any unit. Returns one CellData per entry
        of ``cell_sets``, in order (sets listing the same columns share one grouping set).

        Raises:
            SchemaError, ProgrammingError, OperationalError: as for :meth:`cell_data`.
        """
        columns = list(dict.fromkeys(c for cells in cell_sets for c in cells))
        source = self._checked_source(table, columns, sum_columns, count_columns)
        positions = [tuple(columns.index(c) for c in cells) for cells in cell_sets]
        sizes = [c.domain.size + 1 for c in columns]
        finest = finest_sets([tuple(sorted(p)) for p in positions], sizes)
        grouping = list(dict.fromkeys(finest.values()))
        result = self.run(build_query(table, source, columns, sum_columns, count_columns, grouping).sql(self.dialect))
        present = (np.stack([~np.asarray(result.column(f"dpsql_cell_{i}").is_null()) for i in range(len(columns))],
                            axis=1)
                   if columns else np.zeros((result.num_rows, 0), dtype=bool))
        sums = [f"dpsql_sum_{i}" for i in range(len(sum_columns))]
        counts = [f"dpsql_nonnull_{i}" for i in range(len(count_columns))]
        decoded: dict[tuple[int, ...], CellData] = {}
        for chosen in grouping:
            pattern = np.zeros(len(columns), dtype=bool)
            pattern[list(chosen)] = True
            mine = result.filter(pa.array(np.all(present == pattern, axis=1)))
            renamed = pa.table({**{f"dpsql_cell_{k}": mine.column(f"dpsql_cell_{p}") for k, p in enumerate(chosen)},
                                **{name: mine.column(name) for name in ["dpsql_rows", *sums, *counts]}})
            decoded[chosen] = decode_cell_data(renamed, tuple(sizes[p] for p in chosen),
                                               list(sum_columns), [c.name for c in count_columns])
        found = []
        for position in positions:
            chosen = finest[tuple(sorted(position))]
            found.append(marginal_cell_data(decoded[chosen], [chosen.index(p) for p in position]))
        return found

    def measure_profile(self, table: Table, column: Column, quantum: float, below: Sequence[float],
                        clip: Sequence[int]) -> MeasureProfile:
        """What the truncation-threshold selectors read, in one scan over the (capped) rows.

        Each row's value is clamped to the column's outer measure bounds and counted in quanta,
        a = |round(clamp(v) / quantum)| (NULL and NaN rows are left out). Returns the number of
        such rows, #{a ≤ below[k]/quantum} per point and Σ min(a, clip[j]) per integer clip level.
        """
        source = self._checked_source(table, [], {column: quantum}, [])
        query = profile_query(table, source, column, quantum, below, clip)
        result = self.run(query.sql(self.dialect)).to_pylist()[0]
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
        source = self._checked_source(table, cell_columns, _NO_SUMS, ())
        result = self.run(marginals_query(table, source, cell_columns, keys).sql(self.dialect))
        return decode_marginal_tables(result, [c.domain.size + 1 for c in cell_columns], keys)

    # ------------------------------------------------------------------------------- internals
    def _relation_source(self, table: Table) -> SourceTable:
        """:meth:`source`, or for a table joined to its unit table the join over both tables' sources."""
        return joined_source(table, self.source) if table.join is not None else self.source(table)

    def _query(self, table: Table, cells: Sequence[Column], sums: Mapping[Column | Squared, float],
               counts: Sequence[Column]) -> exp.Query:
        return build_query(table, self._checked_source(table, cells, sums, counts), cells, sums, counts)

    def _checked_source(self, table: Table, cells: Sequence[Column], sums: Mapping[Column | Squared, float],
                        counts: Sequence[Column]) -> SourceTable:
        """The table's source, after checking that every column can serve its role."""
        for column in [*cells, *(m.column if isinstance(m, Squared) else m for m in sums), *counts]:
            if column.table not in _member_tables(table) or table.columns.get(column.name) != column:
                raise SchemaError(f"Column '{column.name}' ({column.key}) is not a column of table '{table.name}'; "
                                  f"pass columns from Schema.table('{table.name}').columns.")
        source = self._relation_source(table)
        excluded = [c for c in table.columns.values() if c.outside_excluded and c not in cells]
        raise_problems(table, source.columns, [*cells, *counts, *excluded], list(sums))
        for measure, quantum in sums.items():
            check_quantum(measure, quantum)
        return source


def _member_tables(table: Table) -> set[str]:
    """The declared tables whose columns ``table`` holds: itself, or a joined relation's two tables."""
    return {table.name} if table.join is None else {table.join.fact.name, table.join.unit.name}
