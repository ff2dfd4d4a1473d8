"""Bounded work before any charge: each statement group's planning size, estimated from its
compiled workloads before anything is planned, refused above named limits — for EXPLAIN as for
execute — and a last guard that turns running out of memory or recursion depth into a refusal.

What planning allocates, per data vector of a group over axes of n₁ … n_d cells:

- nothing dense when its queries partition the cells (a plain GROUP BY, a COUNT with any WHERE, an
  IN list): the optimal strategy and its errors are in closed form, O(cells) (``dpsql.matrix.partitions``);
- otherwise dense matrices over each axis — the per-attribute strategies' (AᵀA)⁺, HDMM's OPT₀,
  the SVD bound's spectrum — n_i × n_i entries, O(n_i³) operations to factor each, a constant
  number of times per planning (standard candidates, support checks, block errors, the guard's
  re-plans); whole-domain steps (Eigen-Design, OPT₊, the workload's own rows) have their own
  limits in :mod:`dpsql.planning.planner`.

Statements that share their columns but together exceed a limit are planned apart, one group per
statement (:func:`bounded_partition`). Then a group is refused when an axis it must plan densely
has more than MAX_DENSE_CELLS cells, and a batch when it must plan more than MAX_DENSE_VECTORS data
vectors densely (each runs the optimized templates, whose work per vector is capped by
``planner.hdmm_evaluations``) or their dense work, Σ n_i³, exceeds MAX_DENSE_WORK. The message
names the limit, the value, the statements (their SQL positions) and a rewrite.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from dpsql.errors import PlanningLimitError, UnsupportedQueryError
from dpsql.matrix.partitions import partition_form
from dpsql.schema import Table
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, CompiledGroup, StatementMemo, compile_group, initial_partition

#: The most cells of one axis planned with dense n × n algebra (a group whose queries do not
#: partition its cells: e.g. a GROUP BY and a range over the same column in one batch).
MAX_DENSE_CELLS = 1024
#: The most dense work of one batch: Σ over its groups' densely planned data vectors of Σ_axes n³
#: (one and a half one-axis groups of MAX_DENSE_CELLS cells: one of 1,024 cells and one of 812, two
#: of 930, eight of 586).
MAX_DENSE_WORK = 3 * MAX_DENSE_CELLS**3 // 2
#: The most data vectors of one batch planned densely (over all its statement groups).
MAX_DENSE_VECTORS = 8


def dense_vectors(group: CompiledGroup) -> list[tuple[int, ...]]:
    """The axis sizes of each of ``group``'s data vectors that planning works on densely: none for a
    vector whose queries partition the cells (a SUM whose column is an axis only when its parts are
    single cells, as per-cell bounds scale the columns)."""
    names = {axis.column.name for axis in group.axes}
    sizes = tuple(axis.size for axis in group.axes)
    dense = []
    for vector in group.data_kinds():
        form = partition_form(group.workload(vector))
        if form is None or (vector.is_sum and vector.summed in names and not form.single_cells):
            dense.append(sizes)
    return dense


def excess(vectors: Sequence[tuple[int, ...]]) -> tuple[str, int, int] | None:
    """(limit, value, bound) of the first limit that densely planned ``vectors`` exceed, or None."""
    widest = max((n for sizes in vectors for n in sizes), default=0)
    work = sum(n**3 for sizes in vectors for n in sizes)
    for name, value, bound in (("MAX_DENSE_CELLS", widest, MAX_DENSE_CELLS), ("MAX_DENSE_WORK", work, MAX_DENSE_WORK),
                               ("MAX_DENSE_VECTORS", len(vectors), MAX_DENSE_VECTORS)):
        if value > bound:
            return name, value, bound
    return None


def bounded_partition(batch: ir.Batch, table: Table, memo: StatementMemo | None = None) -> list[list[int]]:
    """The initial statement groups (one per column set, ``compile.initial_partition``), except that
    a group whose statements together exceed a dense limit is split into one group per statement:
    each is then planned alone — a GROUP BY day in closed form beside a range over the same column,
    whose own cells are few — and the merge search may join those that fit together again. ``memo``
    keeps the statements compiled (``compile.StatementMemo``)."""
    partition: list[list[int]] = []
    for members in initial_partition(batch, table):
        if len(members) > 1 and excess(dense_vectors(compile_group(batch, table, members, memo=memo)[0])) is not None:
            partition.extend([member] for member in members)
        else:
            partition.append(members)
    return partition


def check_planning_size(batch: ir.Batch, compiled: CompiledBatch) -> None:
    """Refuse ``compiled`` (``batch`` in its statement groups) when it would plan beyond a limit."""
    dense = [dense_vectors(group) for group in compiled.groups]
    for index, group in enumerate(compiled.groups):
        found = excess(dense[index])
        if found is not None and found[0] == "MAX_DENSE_CELLS":
            members = [i for i, s in enumerate(compiled.statements) if s.group == index]
            axis = max(group.axes, key=lambda a: a.size)
            raise UnsupportedQueryError(
                f"{_statements(batch, members)} must be planned with dense algebra over the {found[1]:,} cells of "
                f"{axis.column.name}, as its queries do not partition those cells; the limit is MAX_DENSE_CELLS = "
                f"{MAX_DENSE_CELLS:,}. Split it into statements whose queries do (a plain GROUP BY, a COUNT with any "
                f"WHERE or an IN list is planned in closed form at any size), or declare a coarser bin_width or "
                f"resolution for {axis.column.key}.")
    found = excess([sizes for vectors in dense for sizes in vectors])
    if found is not None:
        name, value, bound = found
        members = [i for i, s in enumerate(compiled.statements) if dense[s.group]]
        what = "data vectors planned densely" if name == "MAX_DENSE_VECTORS" else \
            "units of dense planning work (Σ n³ over the axes planned densely)"
        raise UnsupportedQueryError(
            f"the batch needs {value:,} {what}, for {_statements(batch, members)}; the limit is {name} = {bound:,}. "
            "Split the batch into smaller batches (statements whose queries partition their cells, such as a plain "
            "GROUP BY, need none).")


def _statements(batch: ir.Batch, members: Sequence[int]) -> str:
    """'the statement at line 1, col 1' or 'statements 1, 3 (at line 1, col 1; line 2, col 1)'."""
    spans = "; ".join(batch.statements[i].span.describe() for i in members)
    if len(members) == 1:
        return f"the statement at {spans}"
    return f"statements {', '.join(str(i + 1) for i in members)} (at {spans})"


@contextmanager
def planning_resources() -> Iterator[None]:
    """Turn a MemoryError or RecursionError raised while planning into a PlanningLimitError (a
    NotSupportedError): planning comes before any charge, so nothing was spent."""
    try:
        yield
    except MemoryError:
        raise PlanningLimitError(
            "planning this batch needed more memory than this process has; nothing was charged. Split the batch, "
            "or group and filter on coarser columns.") from None
    except RecursionError:
        raise PlanningLimitError(
            "planning this batch nested deeper than Python's recursion limit; nothing was charged. Split the batch "
            "or simplify its expressions.") from None
