"""Compile a parsed batch against the schema into workloads over the batch's cells.

The batch's cells are the product, over every column the batch groups or filters on (its *axes*,
in schema order), of the coarsest partition of the column's base cells that every statement
respects, plus one *outside* cell per axis for NULL and out-of-domain values (none for a column
declared ``out_of_domain = "exclude"``, whose such rows no scan reads). Each aggregate of
each statement becomes a block of linear queries over those cells:

- GROUP BY gives one row per declared group (every bin, and the outside group when the column
  declares ``other``; for a CASE, date-part or public-lookup key, each of the key's labels, read
  from the schema and the SQL by :mod:`dpsql.sql.group_keys`), so group keys never come from the data;
- WHERE follows SQL's three-valued logic: a predicate is held as the disjoint unions of Kronecker
  boxes on which it is TRUE and FALSE (an axis's outside cell makes its atoms UNKNOWN, but IS NULL
  is TRUE there); NOT swaps the two, AND and OR combine them, and a row counts where WHERE (and the
  aggregate's FILTER) is TRUE. The block is then Σ_boxes ⊗_axes (bin membership or mask) — OR
  becomes a sum of Kronecker terms. (IS NULL, LIKE, FILTER: :mod:`dpsql.sql.filters`.)

COUNT(*) reads the cell counts; COUNT(col) the per-cell non-NULL counts of col; SUM(col) the
per-cell sums of col clamped to its measure bounds; AVG(col) is SUM(col) / COUNT(col); a variance or
standard deviation reads SUM(col), COUNT(col) and the per-cell sums of the clamped value's square
(its own data vector, never value cells: :mod:`dpsql.answers.columns` has the estimator).

*Value cells* (truncation-aware answering, TaMM of Wu, Pujol, Kotsogiannis and Machanavajjhala,
"Answering Summation Queries for Numerical Attributes under Differential Privacy"): a measure
column may instead be read as an axis of its own values. Its cells are the column's base cells,
each worth one representative
value r (the cell's midpoint, clamped to the — possibly truncated — measure bounds [lo, hi]);
cells of equal r (all of those beyond a truncation threshold) are merged unless a statement
tells them apart, and out-of-range values fall into the edge cells as SUM clamps them. SUM(col)
is then the count workload weighted by r/s on that axis (answers scaled back by s = max(|lo|,
|hi|)) and COUNT(col) the count workload on its non-NULL cells, so COUNT, SUM and AVG share one
data vector, the cell counts, whose sensitivity is one per row.

Statements are answered in *groups*, each jointly over its own cells: by default one group per
distinct set of columns; the caller (the engine) may merge groups when that lowers the expected
error. (ResidualPlanner answers many-column marginal batches without this split.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql import schema as sch
from dpsql.errors import InvalidQueryError, SchemaError, UnsupportedQueryError
from dpsql.matrix.workloads import DisjointSum, Explicit, Kron, Sum, VStack, Workload
from dpsql.sql import derived, filters, ir, units
from dpsql.sql import quantiles as qs
from dpsql.sql.atom_masks import base_mask
from dpsql.sql.axes import Axis
from dpsql.sql.boxes import Box, BoxBudget, intersect, merge, union
from dpsql.sql.cell_totals import batch_cell_totals as batch_cell_totals  # re-exported: the scans sum cells with it
from dpsql.sql.filters import Atom, statement_atoms
from dpsql.sql.group_keys import KeyGroups, key_groups, keys_of, membership, plain_groups, weighted_membership
from dpsql.sql.relations import joined_relation, resolve
from dpsql.sql.value_cells import ValueCells
from dpsql.sql.vectors import COUNTS, SPREADS, DataVector, aggregate_vectors

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """The linear queries of one aggregate input of one statement, over one data kind."""

    data: DataVector  # the vector measured
    kind: DataVector  # what the block answers: data, or a sum/non-NULL count read from value cells (data is COUNTS)
    workload: Workload
    scale: float = 1.0  # answers are workload @ data times this (value-cell sums are weighted by r/scale)
    bias: float = 0.0   # value-cell SUM rows on rounded cells: the most one row's value is moved (0: exact)
    total: Workload | None = None  # order statistics: each prefix row's group total, row by row (for Cov(P̂_k, N̂))


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputAggregate:
    """An aggregate's output column: SUM/COUNT read one block; AVG reads a sum and a count block."""

    aggregate: ir.Aggregate
    blocks: tuple[int, ...]  # indices into CompiledBatch.blocks (AVG: (sum, count))
    column: sch.Column | None
    quantile: qs.QuantilePlan | None = None  # an order statistic: how its prefix block becomes the answer


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledStatement:
    statement: ir.Statement
    group: int                           # index of the CompiledGroup answering this statement
    group_axes: tuple[int, ...]          # axis index of each GROUP BY column, in GROUP BY order
    group_labels: tuple[list[object], ...]  # per GROUP BY column, the label of each of its groups
    group_rows: npt.NDArray[np.int64]    # (groups, len(group_axes)) group index per column, output order
    block_rows: npt.NDArray[np.int64]    # for each output row, its row inside the statement's blocks
    aggregates: tuple[OutputAggregate, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledGroup:
    """Statements answered jointly: their axes and query blocks over the axes' cells."""

    axes: tuple[Axis, ...]
    blocks: tuple[Block, ...]
    _workloads: dict[DataVector, Workload] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def cells(self) -> int:
        return int(np.prod([axis.size for axis in self.axes], dtype=np.int64))

    def data_kinds(self) -> list[DataVector]:
        """The data vectors the group needs, in a stable order."""
        return sorted({block.data for block in self.blocks}, key=lambda vector: (vector.kind, vector.column or ""))

    def workload(self, kind: DataVector) -> Workload:
        """All blocks over one data vector, stacked in block order (on one axis, as one dense
        matrix while it has at most DENSE_STACK entries: a thousand one-row statements then plan
        and answer as one matrix, not a thousand). Built once per group and vector: what planning
        keeps per workload object (its partition form, Gram, digest) is then found once."""
        if kind not in self._workloads:
            blocks = [block.workload for block in self.blocks if block.data == kind]
            rows = sum(block.shape[0] for block in blocks)
            one = len(self.axes) == 1 and len(blocks) > 1 and rows * self.cells <= DENSE_STACK
            self._workloads[kind] = Explicit(np.vstack([_one_axis_rows(b) for b in blocks])) if one else VStack(blocks)
        return self._workloads[kind]


def _one_axis_rows(block: Workload) -> npt.NDArray[np.float64]:
    """A one-axis block (a one-factor Kronecker product, or a sum of them) as a dense matrix."""
    if isinstance(block, Kron) and len(block.factors) == 1:
        return block.factors[0].dense()
    if isinstance(block, Sum):
        return np.sum([_one_axis_rows(term) for term in block.terms], axis=0)
    return block.dense()


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledBatch:
    table: sch.Table
    groups: tuple[CompiledGroup, ...]
    statements: tuple[CompiledStatement, ...]


#: Two groups are only considered for merging while their joint domain has at most this many cells.
MERGE_CELLS = 2**18
#: A one-axis group's blocks are stacked into one dense matrix up to this many entries.
DENSE_STACK = 2**23
#: No statement may span more cells than this.
MAX_CELLS = 2**24


def compile_batch(batch: ir.Batch, schema: sch.Schema, partition: Sequence[Sequence[int]] | None = None,
                  memo: StatementMemo | None = None) -> CompiledBatch:
    """IR + Schema → groups of statements with their axes, query blocks and output plan.

    ``partition`` lists the statement indices of each group (default: one group per column set);
    ``memo`` (for this batch) reuses statements compiled before over the same cells.
    """
    table = batch_table(batch, schema)
    groups: list[CompiledGroup] = []
    compiled: dict[int, CompiledStatement] = {}
    for members in partition if partition is not None else initial_partition(batch, table):
        group, statements = compile_group(batch, table, members, len(groups), memo=memo)
        groups.append(group)
        compiled.update(zip(members, statements))
    return CompiledBatch(table=table, groups=tuple(groups),
                         statements=tuple(compiled[i] for i in range(len(batch.statements))))


def batch_table(batch: ir.Batch, schema: sch.Schema) -> sch.Table:
    """The one declared table the batch queries, or the relation its statements join (:mod:`dpsql.sql.relations`)."""
    if (relation := joined_relation(batch, schema)) is not None:
        return relation
    tables = {statement.table.lower() for statement in batch.statements}
    first = batch.statements[0]
    if len(tables) != 1:
        other = next(s for s in batch.statements if s.table.lower() != first.table.lower())
        raise UnsupportedQueryError(
            f"a batch must query one table; this one queries {', '.join(sorted(tables))} "
            f"({(other.table_span or other.span).describe()}). Send one batch per table."
        )
    for statement in batch.statements:
        schema.table(statement.table, (statement.table_span or statement.span).describe())
    return schema.table(first.table)


class StatementMemo:
    """Statements of one batch over one table already compiled, by statement index and the group's
    axes: a statement's blocks depend on nothing else (not on the other statements of its group, nor
    on where its blocks fall), and on an axis whose column it neither groups nor filters on only
    through that axis's size (its factor there is a row of ones), so a search that compiles many
    candidate groups (``engine.plan.grouping``) compiles each statement once per distinct set of
    cells of its own columns, not once per candidate group: over a group with other axes too, its
    blocks are those compiled over its own axes with a row of ones inserted on each other axis
    (:meth:`_extended`; O(blocks · axes), no predicate read again).

    ``same`` (optional, one entry per statement of the batch) names for each statement the first
    statement of the batch that asks exactly what it asks (its spans aside: ``ir.Span`` says where a
    statement is, not what it asks): identical statements are compiled once, each copy keeping its
    own ``statement`` (a batch of 1,000 statements repeats many, e.g. the same GROUP BY)."""

    def __init__(self, same: Sequence[int] | None = None) -> None:
        self.compiled: dict[tuple[int, tuple[tuple[str, bytes | int], ...]],
                            tuple[tuple[Block, ...], CompiledStatement]] = {}
        self.touched: dict[int, frozenset[str]] = {}  # each statement's columns
        self.same = tuple(same) if same is not None else None
        self.compilations = 0  # statements compiled, not read from the memo (tests count them)
        self.keys: dict[tuple[int, str], AxisKeys] = {}
        self.own: dict[tuple[int, tuple[tuple[str, bytes], ...]], tuple[tuple[Block, ...], CompiledStatement]] = {}
        self.ones: dict[int, Explicit] = {}  # a row of ones per axis size, shared by the extended blocks
        self.masks: dict[tuple[int, str], tuple[npt.NDArray[np.int64], ...]] = {}
        self.groups: dict[tuple[int, ...], tuple[CompiledGroup, tuple[CompiledStatement, ...]]] = {}  # by members

    def axis_keys(self, column: sch.Column, index: int, statement: ir.Statement, table: sch.Table) -> AxisKeys:
        """:func:`axis_keys` of the batch's ``index``-th statement on ``column``, computed once per statement
        (and its copies) and column, not once per candidate group holding it."""
        key = (self.same[index] if self.same is not None else index, column.name)
        if key not in self.keys:
            self.keys[key] = axis_keys(column, statement, table)
        return self.keys[key]

    def axis_masks(self, column: sch.Column, index: int, statement: ir.Statement,
                   table: sch.Table) -> tuple[npt.NDArray[np.int64], ...]:
        """:func:`axis_masks` of the batch's ``index``-th statement on ``column``, computed once likewise."""
        key = (self.same[index] if self.same is not None else index, column.name)
        if key not in self.masks:
            self.masks[key] = axis_masks(column, statement, table)
        return self.masks[key]

    def columns(self, index: int, statement: ir.Statement, table: sch.Table) -> frozenset[str]:
        """The names of the columns the batch's ``index``-th statement (or the first of its copies) groups
        or filters on, found once."""
        touched = self.touched.get(index)
        if touched is None:
            touched = self.touched[index] = frozenset(c.name for c in _touched_columns([statement], table))
        return touched

    def statement(self, compiler: _StatementCompiler, index: int, statement: ir.Statement) -> CompiledStatement:
        """``statement`` (the batch's ``index``-th) compiled over ``compiler``'s axes, its blocks appended
        to the compiler's: compiled once, then copied with its block indices moved to where they fall."""
        if self.same is not None:
            index = self.same[index]
        touched = self.columns(index, statement, compiler.table)
        key = (index, tuple((a.column.name, a.cell_of_base.tobytes() if a.column.name in touched else a.size)
                            for a in compiler.axes))
        offset = len(compiler.blocks)
        if key not in self.compiled:
            extended = self._extended(compiler, index, statement, touched)
            if extended is None:
                self.compilations += 1
                found = compiler.compile(statement)
                local = tuple(replace(a, blocks=tuple(b - offset for b in a.blocks)) for a in found.aggregates)
                self.compiled[key] = tuple(compiler.blocks[offset:]), replace(found, group=0, aggregates=local)
                if not compiler.values and all(axis.column.name in touched for axis in compiler.axes):
                    self.own[(index, tuple((a.column.name, a.cell_of_base.tobytes()) for a in compiler.axes))] = \
                        self.compiled[key]  # over its own axes: what other groups extend
                return found
            self.compiled[key] = extended
        blocks, known = self.compiled[key]
        compiler.blocks.extend(blocks)
        moved = tuple(_own_aggregate(a, own, offset) for a, own in zip(known.aggregates, statement.aggregates,
                                                                        strict=True))
        return replace(known, statement=statement, group=compiler.group, aggregates=moved)


    def _extended(self, compiler: _StatementCompiler, index: int, statement: ir.Statement,
                  touched: frozenset[str]) -> tuple[tuple[Block, ...], CompiledStatement] | None:
        """``statement`` over ``compiler``'s axes from its blocks over its own axes (compiled once per cells of
        those), a row of ones inserted on each other axis — what compiling it over every axis gives, as
        there every box of its predicates is all ones on those axes. None where that is not so or not
        read here (it touches no column or every one; an aggregate scaled, which scales the first
        factor, or an order statistic; a block not a Kronecker product or a disjoint sum of them, or
        with a zero factor, as a WHERE never TRUE gives): the caller compiles it."""
        positions = [i for i, axis in enumerate(compiler.axes) if axis.column.name in touched]
        if not positions or len(positions) == len(compiler.axes) or compiler.values \
                or any(a.scale != 1.0 or a.function == "quantile" for a in statement.aggregates):
            return None
        axes = tuple(compiler.axes[i] for i in positions)
        key = (index, tuple((axis.column.name, axis.cell_of_base.tobytes()) for axis in axes))
        if key not in self.own:
            own = _StatementCompiler(table=compiler.table, axes=axes, group=0, values={})
            self.compilations += 1
            found = own.compile(statement)
            self.own[key] = tuple(own.blocks), found
        blocks, found = self.own[key]
        sizes = [axis.size for axis in compiler.axes]
        extended = []
        for block in blocks:
            workload = self._with_ones(block.workload, positions, sizes)
            if workload is None or block.total is not None:
                return None
            extended.append(replace(block, workload=workload))
        return tuple(extended), replace(found, group=0, group_axes=tuple(positions[a] for a in found.group_axes))

    def _with_ones(self, workload: Workload, positions: Sequence[int], sizes: Sequence[int]) -> Workload | None:
        """``workload`` (over the axes at ``positions``) with a row of ones on every other axis of ``sizes``."""
        if isinstance(workload, DisjointSum):
            terms = [self._with_ones(term, positions, sizes) for term in workload.terms]
            return None if any(t is None for t in terms) else DisjointSum([t for t in terms if t is not None])
        if not isinstance(workload, Kron) or len(workload.factors) != len(positions) \
                or not all(_nonzero_explicit(f) for f in workload.factors):
            return None
        factors: list[Workload] = [self._ones(n) for n in sizes]
        for position, factor in zip(positions, workload.factors):
            factors[position] = factor
        return Kron(factors)

    def _ones(self, n: int) -> Explicit:
        """The row of ones over ``n`` cells shared by the extended blocks (built once per size)."""
        ones = self.ones.get(n)
        if ones is None:
            ones = self.ones[n] = Explicit(np.ones((1, n)))
        return ones


def _nonzero_explicit(factor: Workload) -> bool:
    """Whether ``factor`` is an explicit matrix with some non-zero entry."""
    if not isinstance(factor, Explicit):
        return False
    matrix = factor.matrix
    return bool(np.any(matrix)) if isinstance(matrix, np.ndarray) else bool(matrix.count_nonzero() > 0)


def _own_aggregate(known: OutputAggregate, own: ir.Aggregate, offset: int) -> OutputAggregate:
    """``known`` (compiled for a statement identical to ``own``'s) with ``own``'s aggregate (its spans)
    and its block indices moved by ``offset``."""
    quantile = known.quantile
    if quantile is not None and own.quantile is not None:
        quantile = replace(quantile, spec=own.quantile)
    return replace(known, aggregate=own, blocks=tuple(b + offset for b in known.blocks), quantile=quantile)


def compile_group(batch: ir.Batch, table: sch.Table, members: Sequence[int], index: int = 0,
                  values: Mapping[str, ValueCells] | None = None,
                  memo: StatementMemo | None = None) -> tuple[CompiledGroup, list[CompiledStatement]]:
    """One group of statements over the coarsest cells that all of them respect.

    ``values`` reads those measure columns as value cells (see the module docstring; check
    :func:`~dpsql.sql.value_cells.value_cells_problem` first): their SUM and COUNT(col) become count blocks.
    ``memo`` (for this batch and table, without value cells) reuses statements compiled before over
    the same axes, and a group of the same members as it was (its statements numbered ``index``).
    """
    values = values or {}
    if memo is not None and not values and tuple(members) in memo.groups:
        group, compiled = memo.groups[tuple(members)]
        return group, [s if s.group == index else replace(s, group=index) for s in compiled]
    sub = [batch.statements[i] for i in members]
    if memo is None or values:
        touched = {c.name for c in _touched_columns(sub, table)}
    else:  # the union of each statement's columns, each found once
        touched = set().union(*(memo.columns(memo.same[i] if memo.same is not None else i, batch.statements[i], table)
                                for i in members))
    columns = [c for c in table.columns.values() if c.name in touched or c.name in values]
    if memo is None or values:
        axes = tuple(_axis(column, [axis_keys(column, statement, table) for statement in sub],
                           [axis_masks(column, statement, table) for statement in sub], values.get(c.name))
                     for c in columns for column in [_value_column(c) if c.name in values else c])
    else:
        axes = tuple(_axis(c, [memo.axis_keys(c, i, batch.statements[i], table) for i in members],
                           [memo.axis_masks(c, i, batch.statements[i], table) for i in members]) for c in columns)
    compiler = _StatementCompiler(table=table, axes=axes, group=index, values=values)
    if memo is None or values:
        statements = [compiler.compile(statement) for statement in sub]
    else:
        statements = [memo.statement(compiler, i, batch.statements[i]) for i in members]
    group = CompiledGroup(axes=axes, blocks=tuple(compiler.blocks))
    if memo is not None and not values:
        memo.groups[tuple(members)] = group, tuple(statements)
    return group, statements


def column_set(statement: ir.Statement, table: sch.Table) -> frozenset[str]:
    """The columns a statement groups or filters on."""
    return frozenset(c.name for c in _touched_columns([statement], table))


def group_cells(table: sch.Table, names: frozenset[str]) -> int:
    """Upper bound on a group's cells: Π (base cells + 1) over its columns."""
    return int(np.prod([table.columns[n].domain.size + 1 for n in names], dtype=np.float64))


def initial_partition(batch: ir.Batch, table: sch.Table) -> list[list[int]]:
    """One group per distinct set of columns, in order of first appearance; checks MAX_CELLS."""
    groups: dict[frozenset[str], list[int]] = {}
    for index, statement in enumerate(batch.statements):
        names = column_set(statement, table)
        if group_cells(table, names) > MAX_CELLS:
            raise UnsupportedQueryError(
                f"the statement at {statement.span.describe()} spans {group_cells(table, names):,} cells over "
                f"{', '.join(sorted(names))}; the limit is {MAX_CELLS:,}. Group by fewer or coarser columns."
            )
        groups.setdefault(names, []).append(index)
    return list(groups.values())


# ==================================================================================== axes
def _touched_columns(statements: Sequence[ir.Statement], table: sch.Table) -> list[sch.Column]:
    names = set()
    for statement in statements:
        for column in statement.group_by:
            names.add(_resolve(table, column).name)
        for atom in statement_atoms(statement):
            names.add(_resolve(table, atom.column).name)
        names.update(_resolve(table, column).name for column in qs.quantile_columns(statement))
    return [column for name, column in table.columns.items() if name in names]


def _resolve(table: sch.Table, column: ir.Column) -> sch.Column:
    return resolve(table, column) if table.join is not None else table.column(column.name, column.span.describe())


def _value_column(column: sch.Column) -> sch.Column:
    """A measure column as value cells: out-of-range values go to the edge cells, as SUM clamps them
    (unless the column excludes them from the table: then they stay out of every scan)."""
    assert isinstance(column.domain, sch.Ordered)
    if column.domain.clamp or column.outside_excluded:
        return column
    return replace(column, domain=replace(column.domain, clamp=True))


@dataclass(frozen=True, slots=True)
class AxisKeys:
    """What one statement's GROUP BY adds to one column's cell signature (:func:`_axis`): whether it takes
    an order statistic of the column or groups by its bins, and the base-cell labels of its group keys."""

    quantile: bool
    grouped: bool
    keys: tuple[npt.NDArray[np.int64], ...]


def axis_keys(column: sch.Column, statement: ir.Statement, table: sch.Table) -> AxisKeys:
    """:class:`AxisKeys` of ``statement`` on ``column`` (O(base cells) per key on the column)."""
    return AxisKeys(
        quantile=any(_resolve(table, c).name == column.name for c in qs.quantile_columns(statement)),
        grouped=any(_resolve(table, c).name == column.name for c, k in keys_of(statement) if k is None),
        keys=tuple(_key_groups(column, k).group_of_base[:-1] for c, k in keys_of(statement)
                   if k is not None and _resolve(table, c).name == column.name))


def axis_masks(column: sch.Column, statement: ir.Statement, table: sch.Table) -> tuple[npt.NDArray[np.int64], ...]:
    """The base-cell masks of ``statement``'s atoms on ``column``, in order (O(base cells) per atom)."""
    return tuple(base_mask(column, atom).astype(np.int64) for atom in statement_atoms(statement)
                 if _resolve(table, atom.column).name == column.name)


def _axis(column: sch.Column, keys: Sequence[AxisKeys], masks: Sequence[tuple[npt.NDArray[np.int64], ...]],
          values: ValueCells | None = None) -> Axis:
    """Batch cells of one column: contiguous runs of base cells for ordered domains, and classes
    of values no statement tells apart for categorical ones; value cells keep apart every
    representative value. ``keys``, ``masks``: each statement's :func:`axis_keys` and :func:`axis_masks`
    on the column."""
    size = column.domain.size
    signature = [np.zeros(size, dtype=np.int64)]
    if values is not None:
        assert isinstance(column.domain, sch.Ordered)  # value cells are checked by value_cells_problem
        ranks = np.unique(values.representatives(column.domain), return_inverse=True)[1]
        signature.append(np.asarray(ranks, dtype=np.int64).ravel())
    if any(part.quantile for part in keys):
        signature.append(qs.cell_signature(size))  # an order statistic reads every base cell (or runs of them)
    if any(part.grouped for part in keys):
        signature.append(column.domain.bin_of_base())
    signature += [key for part in keys for key in part.keys]  # a key's groups never share a cell
    signature += [mask for part in masks for mask in part]
    stacked = np.stack(signature, axis=1)
    if isinstance(column.domain, sch.Ordered):
        starts = np.concatenate([[True], np.any(stacked[1:] != stacked[:-1], axis=1)])
        cell = np.cumsum(starts) - 1
    else:
        _, cell = np.unique(stacked, axis=0, return_inverse=True)
        cell = cell.ravel()
    cells = int(cell.max()) + 1
    outside = -1 if column.outside_excluded and cells >= 2 else cells  # excluded rows never reach the cell
    return Axis(column=column, cell_of_base=np.append(cell, outside))


def _key_groups(column: sch.Column, key: ir.GroupKey | None) -> KeyGroups:
    """The output groups of a GROUP BY entry on ``column``: its bins, or its key's (group_keys)."""
    return plain_groups(column) if key is None else key_groups(column, key, base_mask)


# ==================================================================================== predicates
@dataclass(frozen=True, slots=True)
class _Truth:
    """Where a predicate is TRUE and where it is FALSE, each a disjoint union of boxes."""

    true: list[Box]
    false: list[Box]


class _StatementCompiler:
    def __init__(self, *, table: sch.Table, axes: tuple[Axis, ...], group: int,
                 values: Mapping[str, ValueCells]) -> None:
        self.table, self.axes, self.group, self.values = table, axes, group, values
        self.position = {axis.column.name: index for index, axis in enumerate(axes)}
        self.blocks: list[Block] = []
        self.keys: dict[int, KeyGroups] = {}  # the current statement's groups, by axis
        self.budget = BoxBudget(ir.Span(line=1, column=1, start=0, end=0))  # one per statement, set by compile

    def compile(self, statement: ir.Statement) -> CompiledStatement:
        self.budget = BoxBudget(statement.where.span if statement.where is not None else statement.span)
        truth = (self._truth(statement.where, false=False) if statement.where is not None
                 else _Truth(true=[self._everywhere()], false=[]))
        group_axes = tuple(self.position[_resolve(self.table, c).name] for c in statement.group_by)
        self.keys = {self.position[_resolve(self.table, c).name]: _key_groups(_resolve(self.table, c), k)
                     for c, k in keys_of(statement)}
        if len(set(group_axes)) != len(group_axes):
            raise UnsupportedQueryError(f"a column appears twice in GROUP BY ({statement.span.describe()}); "
                                        "list each column once.")
        rows_in_axis_order, group_rows = self._group_order(group_axes)
        aggregates = tuple(self._aggregate(statement, aggregate, self._filtered(truth.true, aggregate), group_axes)
                           for aggregate in statement.aggregates)
        _check_order_by(statement)
        _check_output_names(statement, self.table)
        derived.check_outputs(statement, self.table, group_rows, int(np.prod([a.size for a in self.axes])))
        labels = tuple(self._labels(self.axes[a]) for a in group_axes)
        return CompiledStatement(statement=statement, group=self.group, group_axes=group_axes, group_labels=labels,
                                 group_rows=group_rows, block_rows=rows_in_axis_order, aggregates=aggregates)

    def _filtered(self, true: list[Box], aggregate: ir.Aggregate) -> list[Box]:
        """The cells an aggregate reads: where WHERE is TRUE, and its FILTER too."""
        found = None if aggregate.filter is None else self._truth(aggregate.filter, false=False).true
        return true if found is None else intersect(true, found, self.budget)

    def _everywhere(self) -> Box:
        return tuple(np.ones(axis.size, dtype=bool) for axis in self.axes)

    def _truth(self, predicate: ir.Predicate, true: bool = True, false: bool = True) -> _Truth:
        """The predicate's TRUE and FALSE sets; a side not asked for (``true``/``false``) is left
        empty and never computed (a WHERE clause needs FALSE sets only under NOT)."""
        if isinstance(predicate, ir.Not):
            inner = self._truth(predicate.operand, true=false, false=true)
            return _Truth(true=inner.false, false=inner.true)
        if isinstance(predicate, (ir.And, ir.Or)):
            meet, join = (intersect, union) if isinstance(predicate, ir.And) else (union, intersect)
            parts = [self._truth(operand, true, false) for operand in predicate.operands]
            result = parts[0]
            for part in parts[1:]:
                result = _Truth(true=meet(result.true, part.true, self.budget) if true else [],
                                false=join(result.false, part.false, self.budget) if false else [])
            return result
        return self._atom_truth(predicate)

    def _atom_truth(self, atom: Atom) -> _Truth:
        column = _resolve(self.table, atom.column)
        axis_index = self.position[column.name]
        axis = self.axes[axis_index]
        if isinstance(atom, ir.IsNull):  # never UNKNOWN: TRUE on the outside cell, FALSE on the declared ones
            true, false = filters.is_null_cells(axis.size, axis.has_outside, column.outside_excluded, atom.negated)
            return _Truth(true=[self._on_axis(axis_index, true)], false=[self._on_axis(axis_index, false)])
        base = base_mask(column, atom)
        true_cells = np.zeros(axis.size, dtype=bool)
        true_cells[axis.cell_of_base[:-1][base]] = True
        false_cells = np.zeros(axis.size, dtype=bool)
        false_cells[axis.cell_of_base[:-1][~base]] = True
        return _Truth(true=[self._on_axis(axis_index, true_cells)], false=[self._on_axis(axis_index, false_cells)])

    def _on_axis(self, axis_index: int, mask: BoolArray) -> Box:
        box = list(self._everywhere())
        box[axis_index] = mask
        return tuple(box)

    def _group_order(self, group_axes: tuple[int, ...]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Groups are the product of each GROUP BY column's groups; Kronecker rows come in axis order,
        output rows in GROUP BY order. Returns (block row of each output row, group index tuples)."""
        if not group_axes:
            return np.zeros(1, dtype=np.int64), np.zeros((1, 0), dtype=np.int64)
        counts = [self._group_count(self.axes[a]) for a in group_axes]
        output = np.stack(np.unravel_index(np.arange(int(np.prod(counts, dtype=np.int64))), counts), axis=1)
        order = np.argsort(group_axes, kind="stable")
        block_rows = np.ravel_multi_index(tuple(output[:, i] for i in order), [counts[i] for i in order])
        return np.asarray(block_rows, dtype=np.int64), output.astype(np.int64)

    def _group_count(self, axis: Axis) -> int:
        return len(self._labels(axis))

    def _labels(self, axis: Axis) -> list[object]:
        return self.keys[self.position[axis.column.name]].labels

    def _grouped(self, axis: Axis, mask: npt.NDArray[np.float64]) -> Explicit:
        """membership · diag(mask): which cells each GROUP BY group of this axis holds, weighted by the
        box's mask; dense up to DENSE_STACK entries (``weighted_membership``), else sparse."""
        groups = self.keys[self.position[axis.column.name]]
        if len(groups.labels) * axis.size <= DENSE_STACK:
            return Explicit(weighted_membership(groups, axis.cell_of_base, mask))
        return _explicit(membership(groups, axis.cell_of_base, axis.size) @ sp.diags_array(mask))

    def _block(self, true: list[Box], group_axes: tuple[int, ...],
               weights: tuple[int, npt.NDArray[np.float64]] | None = None) -> Workload:
        """Σ_boxes ⊗_axes (membership · diag(mask) on grouped axes, maskᵀ elsewhere); ``weights``
        (axis, per-cell weight) multiplies that axis's factor column-wise."""
        grouped = set(group_axes)
        terms: list[Workload] = []
        for box in merge(true):
            masks = [mask * weights[1] if weights is not None and i == weights[0] else mask.astype(np.float64)
                     for i, mask in enumerate(box)]
            factors = [self._grouped(axis, mask) if i in grouped else Explicit(mask[None, :])
                       for i, (axis, mask) in enumerate(zip(self.axes, masks))]
            terms.append(Kron(factors) if factors else Explicit(np.ones((1, 1))))
        if not terms:  # the WHERE clause is never TRUE: rows of zeros
            factors = [_explicit(sp.csr_array((self._group_count(a) if i in grouped else 1, a.size)))
                       for i, a in enumerate(self.axes)]
            terms.append(Kron(factors) if factors else Explicit(np.zeros((1, 1))))
        return terms[0] if len(terms) == 1 else DisjointSum(terms)

    def _aggregate(self, statement: ir.Statement, aggregate: ir.Aggregate, true: list[Box],
                   group_axes: tuple[int, ...]) -> OutputAggregate:
        if aggregate.distinct:  # COUNT(DISTINCT unit): the cell counts, or the units per cell (dpsql.sql.units)
            vector = units.check_units(aggregate, self.table)
            self.blocks.append(Block(data=vector, kind=vector, workload=self._block(true, group_axes)))
            if vector != COUNTS:
                units.check_single_cells(aggregate, self.blocks[-1].workload, self.axes, self.table)
            return OutputAggregate(aggregate=aggregate, blocks=(len(self.blocks) - 1,), column=None)
        column = None if aggregate.column is None else _resolve(self.table, aggregate.column)
        if aggregate.function == "quantile" and column is not None:  # an order statistic (dpsql.sql.quantiles)
            position = self.position[column.name]
            later = [self._group_count(self.axes[a]) for a in group_axes if a > position]
            plan, workload, total = qs.prefix_block(aggregate, column, self.axes[position].cell_of_base, position,
                                                    position in group_axes, later, self._block(true, group_axes))
            self.blocks.append(Block(data=COUNTS, kind=COUNTS, workload=workload, total=total))
            return OutputAggregate(aggregate=aggregate, blocks=(len(self.blocks) - 1,), column=column, quantile=plan)
        if aggregate.function != "count" and (column is None or column.measure_bounds is None):
            name = aggregate.column.name if aggregate.column else "*"
            raise SchemaError(
                f"{aggregate.function.upper()}({name}) needs a numeric column with declared bounds "
                f"({aggregate.span.describe()}); "
                f"declare {self.table.name}.{name} as integer or numeric with lower/upper."
            )
        if aggregate.function in SPREADS and column is not None and column.truncation is not None:
            raise UnsupportedQueryError(
                f"{aggregate.function.upper()}({column.name}) ({aggregate.span.describe()}) is not supported on "
                f"{column.key}, whose SUMs are truncated at a threshold chosen from the data: the sum of squares "
                "would need its own. Declare the column without truncate, or ask for SUM and AVG.")
        indices = []
        for kind in aggregate_vectors(aggregate.function, None if column is None else column.name):
            block = self._kind_block(kind, true, group_axes)
            self.blocks.append(replace(block, workload=filters.scaled(block.workload, aggregate.scale)))
            indices.append(len(self.blocks) - 1)
        return OutputAggregate(aggregate=aggregate, blocks=tuple(indices), column=column)

    def _kind_block(self, kind: DataVector, true: list[Box], group_axes: tuple[int, ...]) -> Block:
        """The block of one data kind; on a value-cell column, SUM and COUNT(col) become weighted counts."""
        cells = self.values.get(kind.column) if kind.column is not None and not kind.squared else None
        if cells is None or kind.column is None:
            return Block(data=kind, kind=kind, workload=self._block(true, group_axes))
        position = self.position[kind.column]
        axis = self.axes[position]
        if kind.kind == "nonnull":
            weight = np.ones(axis.size)
            weight[-1] = 0.0 if axis.has_outside else 1.0  # the outside cell holds the NULLs
            return Block(data=COUNTS, kind=kind, workload=self._block(true, group_axes, (position, weight)))
        return Block(data=COUNTS, kind=kind, workload=self._block(true, group_axes, (position, cells.weights(axis))),
                     scale=cells.scale, bias=cells.bias(axis.column.domain))  # type: ignore[arg-type]


def _explicit(matrix: sp.csr_array) -> Explicit:
    """A block factor: dense up to DENSE_STACK entries, else kept sparse."""
    return Explicit(matrix.toarray() if matrix.shape[0] * matrix.shape[1] <= DENSE_STACK else sp.csr_array(matrix))


def _check_output_names(statement: ir.Statement, table: sch.Table) -> None:
    """Output column names must be unique, generated ones (<alias>_stddev, <group>_upper) included."""
    names: list[str] = []
    for item in statement.select:
        names.append(item.alias)
        if isinstance(item, ir.Aggregate):
            names.append(f"{item.alias}_stddev")
            names.extend(qs.output_names(item))
        elif item.key is None:
            domain = _resolve(table, item.column).domain
            if isinstance(domain, sch.Ordered) and domain.reports_upper:
                names.append(f"{item.alias}_upper")
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            raise InvalidQueryError(
                f"the output column name '{name}' would appear twice in the statement at {statement.span.describe()} "
                "(dpsql adds <alias>_stddev beside each aggregate and <column>_upper beside wide bins); "
                "choose another alias."
            )
        seen.add(name.lower())


def _check_order_by(statement: ir.Statement) -> None:
    """ORDER BY keys must name an output column (checked before anything is spent)."""
    outputs = [item.alias for item in statement.select]
    allowed = set(outputs) | {f"{a.alias}_stddev" for a in statement.aggregates}
    allowed |= {name for a in statement.aggregates for name in qs.output_names(a)}
    for item in statement.order_by:
        if isinstance(item.key, str) and item.key not in allowed:
            raise UnsupportedQueryError(
                f"ORDER BY {item.key} ({item.span.describe()}) names no output column; use one of {', '.join(outputs)} "
                "or a 1-based position."
            )


def label_value(label: object) -> object:
    """A group label's lower bound (bins are (low, high) tuples), else the label itself."""
    return label[0] if isinstance(label, tuple) else label


