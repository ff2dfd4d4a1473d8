"""Planning one statement group's data vectors: a strategy per vector, its error per block, and a
support check before anything is charged; SUM vectors may use per-cell bounds.

Per-cell bounds: a SUM vector whose column is also an axis of its group can be measured with
b_j ≤ B, the most one row moves cell j's sum (from the schema's cell ranges): sensitivity
k·max_j b_j‖a_j‖ (``mechanism.calibrate(cell_bounds=...)``) instead of k·B·max_j‖a_j‖.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from dpsql.engine.measuring.measurements import CellBounds, DraftVector
from dpsql.engine.plan.weighing import value_scale
from dpsql.errors import DomainTooLargeError, ShapeError, UnsupportedStrategyError
from dpsql.matrix.linalg import diagonal_entries, gram_trace, pinv_gram, quadratic_diag
from dpsql.matrix.workloads import Kron, VStack, Workload, scale_columns
from dpsql.noise import Noise
from dpsql.planning import mechanism, plan_cache, planner
from dpsql.planning import weights as weighting
from dpsql.planning.accuracy import check_support, unit_noise_variance
from dpsql.planning.planner import Progress
from dpsql.schema import Column, Ordered
from dpsql.sql.compile import CompiledGroup
from dpsql.sql.vectors import COUNTS, DataVector

#: Per-cell bounds are raised to at least B / 2^CELL_BOUND_RANGE (a larger bound is still a bound):
#: cells that small add nothing to the error, and the strategy's integer entries stay moderate.
CELL_BOUND_RANGE = 16


def group_drafts(index: int, group: CompiledGroup, columns: Mapping[str, Column], unit_rows: int,
                 noise: Noise, progress: Progress | None,
                 known: Mapping[tuple[int, DataVector], planner.Plan] | None = None, quick: bool = False,
                 extra: Mapping[str, Workload] | None = None,
                 block_weights: Sequence[float] | None = None) -> list[DraftVector]:
    """Plan each data vector of one group (``known``: plans already made, by (group, vector);
    ``quick``: only the planner's quick templates; ``extra``: more candidate strategies for its counts;
    ``block_weights``: c_b of each block, default 1). The planner sees the workload with block b's
    rows scaled by √(c_b / max c) (unchanged when the weights are equal), so it minimises Σ_b c_b·t_b."""
    sizes = [axis.size for axis in group.axes]
    ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
    weights = list(block_weights) if block_weights is not None else [1.0] * len(group.blocks)
    drafts = []
    for vector in group.data_kinds():
        positions = [p for p, block in enumerate(group.blocks) if block.data == vector]
        rows = [group.blocks[p].workload.shape[0] for p in positions]
        workload = group.workload(vector)
        scales = weighting.normalized([weights[p] for p in positions])[1]
        planning = weighting.scaled_stack(workload, rows, scales)
        plan = (known or {}).get((index, vector)) or planner.plan(planning, noise=noise, sizes=sizes, ordered=ordered,
                                                                   quick=quick, progress=progress,
                                                                   extra=extra if vector == COUNTS else None,
                                                                   names=[axis.column.name for axis in group.axes])
        quantum, bound = value_scale(columns[vector.summed], vector.squared) if vector.is_sum else (1.0, 1)
        draft = DraftVector(group=index, vector=vector, plan=plan, row_scale=unit_rows * bound, quantum=quantum,
                            block_totals=block_totals(workload, rows, plan),
                            block_weights=tuple(weights[p] for p in positions))
        if vector.is_sum:
            draft = cell_bounded(draft, group, columns, unit_rows, noise, progress, rows=rows, scales=scales,
                                 quick=quick or known is not None)
        drafts.append(supported(draft, workload, rows, sizes, ordered))
    return drafts


def supported(draft: DraftVector, workload: Workload, rows: Sequence[int], sizes: Sequence[int],
              ordered: Sequence[bool]) -> DraftVector:
    """``draft``, or — when its strategy as measured (rounded to integers) does not support the
    workload its answers come from — the same draft with its best standard candidate (full column
    rank, so it supports every workload). A cell-bounded draft was checked by :func:`cell_bounded`.

    ``mechanism.answer`` makes exactly this check after the measurement; making it here, before
    anything is charged, means it can never fail then.
    """
    if draft.plan.expected_error == 0 or draft.cell_bounds is not None:
        return draft
    try:
        check_support(workload, mechanism.rounded_strategy(draft.plan.strategy))
        return draft
    except UnsupportedStrategyError as err:
        standard = planner.candidates(sizes, ordered)
        name = min((n for n in standard if n in draft.plan.candidates), key=draft.plan.candidates.__getitem__)
        note = f"{draft.plan.name} was replaced by {name}: rounded to integers it does not support every answer ({err})"
        plan = replace(draft.plan, strategy=standard[name], name=name, notes=draft.plan.notes + (note,))
        return replace(draft, plan=plan, block_totals=block_totals(workload, rows, plan))


def block_totals(workload: Workload, rows: Sequence[int], plan: planner.Plan) -> tuple[float, ...]:
    """t_b = v·trace(G_b (AᵀA)⁺): the unit error of the plan's strategy summed over each block of
    the (unweighted) workload, blocks in order (a dense stack's rows split by ``rows``); cached by
    the workload's and the strategy's structure (``dpsql.planning.plan_cache``)."""
    if plan.expected_error == 0:
        return (0.0,) * len(rows)
    strategy = plan.strategy
    key = plan_cache.decision_key(workload, noise=plan.noise, options=["block totals", *map(str, rows)],
                                  extra={"strategy": strategy})
    known = plan_cache.load_numbers(key, len(rows))
    if known is not None:
        return known
    M, v = pinv_gram(strategy), unit_noise_variance(strategy, plan.noise)
    if isinstance(workload, VStack):
        totals = tuple(v * gram_trace(block, M) for block in workload.blocks)
    else:
        diagonal = quadratic_diag(workload, M)
        ends = np.cumsum(rows)
        totals = tuple(v * float(diagonal[end - r:end].sum()) for r, end in zip(rows, ends))
    plan_cache.store_numbers(key, totals)
    return totals


def cell_bounded(draft: DraftVector, group: CompiledGroup, columns: Mapping[str, Column], unit_rows: int,
                 noise: Noise, progress: Progress | None, *, rows: Sequence[int], scales: Sequence[float],
                 quick: bool) -> DraftVector:
    """The SUM draft measured with per-cell bounds when its column is an axis of the group and that
    lowers the expected error; else ``draft`` (one global bound B).

    With b_j the most one row moves cell j's sum (:func:`cell_bounds`), the plan is made for
    W_y = W·diag(b)/B over y = x/b, where a row moves one cell of y by at most 1 (like a count):
    its scores are in units of B, as the global plan's, so the budget split and the TaMM choice
    compare them directly. The planner sees W_y's blocks scaled by ``scales`` (the statements'
    weights, as for the global plan) and the two plans are compared on the batch objective. The
    mechanism measures the strategy on x with sensitivity k·max_j b_j‖a_j‖
    (``mechanism.cell_bounded_strategy``).
    """
    column = columns[draft.vector.summed]
    bounds = cell_bounds(group, column, draft.quantum, squared=draft.vector.squared)
    if bounds is None:
        return draft
    top = draft.row_scale // unit_rows
    sizes = [axis.size for axis in group.axes]
    ordered = [isinstance(axis.column.domain, Ordered) for axis in group.axes]
    try:
        position = next(i for i, vector in enumerate(bounds) if len(set(vector)) > 1)  # the summed column's axis
        workload = scale_columns(group.workload(draft.vector),
                                 tuple(np.asarray(v, dtype=np.float64) / (top if i == position else 1)
                                       for i, v in enumerate(bounds)))
        plan = planner.plan(weighting.scaled_stack(workload, rows, scales), noise=noise, sizes=sizes, ordered=ordered,
                            quick=quick, progress=progress, names=[axis.column.name for axis in group.axes])
        scaled = tuple(tuple(unit_rows * v for v in vector) if i == position else vector
                       for i, vector in enumerate(bounds))
        measured = mechanism.cell_bounded_strategy(plan.strategy, scaled)
        check_support(group.workload(draft.vector), measured)  # as mechanism.answer will, after the charge
    except (DomainTooLargeError, ShapeError, UnsupportedStrategyError):
        return draft
    if not isinstance(measured, Kron) and diagonal_entries(measured) is None \
            and measured.shape[1] > mechanism.DENSE_SOLVE_LIMIT:
        return draft  # scaled columns lose a stack's marginal structure: answering would need LSMR over many cells
    bounded = replace(draft, plan=plan, block_totals=block_totals(workload, rows, plan), cell_bounds=scaled)
    if not bounded.objective < draft.objective * (1 - 1e-9):
        return draft
    cells = sorted(set(max(bounds, key=lambda vector: max(vector) - min(vector))))
    note = (f"cell-bounded {draft.vector.label}: per-cell bounds {cells[0] * draft.quantum:,.6g}…"
            f"{cells[-1] * draft.quantum:,.6g} (one row moves cell j's sum by at most b_j, not the global "
            f"{top * draft.quantum:,.6g}); expected squared error {bounded.objective / draft.objective:.3g}× that of "
            f"the global-bound plan ({draft.plan.name})")
    return replace(bounded, plan=replace(plan, notes=plan.notes + (note,)))


def cell_bounds(group: CompiledGroup, column: Column, quantum: float, *, squared: bool = False) -> CellBounds | None:
    """Per axis of ``group``, the most one row moves a cell's clamped sum of ``column`` (in quanta;
    all ones but on the column's own axis), or None when the column is not an axis. ``squared``: of
    its sum of squares, where a value in [a, b] clamped adds at most max(clamp(a)², clamp(b)²) (x² is
    largest at an end of an interval), the square of the plain bound.

    A row in batch cell j of the column's axis has a value in [b_first, b_last+1] (its base cells'
    boundaries; the edge cells reach to ±∞ when the domain clamps out-of-range values into them),
    which SUM clamps to the measure bounds [lo, hi] and rounds to quanta: it adds at most
    b_j = ⌈max(|clamp(b_first)|, |clamp(b_last+1)|)/q⌉. The outside cell holds NULL and NaN (adding
    0) and, unless the domain clamps or the table excludes them, out-of-domain values (B). Every
    b_j is at least 1 and B/2^CELL_BOUND_RANGE; all come from the schema only.
    """
    position = next((i for i, axis in enumerate(group.axes) if axis.column.name == column.name), None)
    if position is None or column.measure_bounds is None or not isinstance(group.axes[position].column.domain, Ordered):
        return None
    axis = group.axes[position]
    domain = axis.column.ordered_domain
    low, high = column.bounds
    power = 2 if squared else 1
    top = max(1, math.ceil(max(abs(low), abs(high)) ** power / quantum))
    floor = max(1, math.ceil(top / 2**CELL_BOUND_RANGE))
    edges = np.asarray(domain.boundaries, dtype=np.float64)
    cells = axis.cell_of_base[:-1]
    bounds = np.full(axis.size, floor, dtype=np.int64)
    base = np.arange(cells.size)
    first, last = np.full(axis.size, cells.size), np.full(axis.size, -1)
    np.minimum.at(first, cells, base)  # each batch cell's first and last base cell, in one pass
    np.maximum.at(last, cells, base)
    j = np.unique(cells)
    left = np.where(domain.clamp & (first[j] == 0), -math.inf, edges[first[j]])
    right = np.where(domain.clamp & (last[j] == domain.size - 1), math.inf, edges[last[j] + 1])
    most = np.maximum(np.abs(np.clip(left, low, high)), np.abs(np.clip(right, low, high))) ** power
    bounds[j] = np.maximum(floor, np.minimum(top, np.ceil(most / quantum))).astype(np.int64)
    if axis.has_outside:
        bounds[-1] = floor if domain.clamp or column.outside_excluded else top
    if int(bounds.max()) == int(bounds.min()):
        return None  # nothing to gain over the global bound
    return tuple(tuple(int(b) for b in bounds) if i == position else (1,) * a.size for i, a in enumerate(group.axes))
