"""Value cells (TaMM) or separate measurements (TiMM): how each statement group answers its SUMs.

Truncation-aware answering (TaMM; Wu, Pujol, Kotsogiannis, Machanavajjhala, "Answering Summation
Queries for Numerical Attributes under Differential Privacy", Table 1): a statement group with
SUM/AVG on a measure column is also compiled with that column read as value cells
(``dpsql.sql.value_cells.ValueCells``): COUNT, SUM and AVG then share one count vector of sensitivity
k, measured once with the strategy optimized for the weighted workload W·T. The separate
measurements (counts, and sums clamped at ±θ with sensitivity k·θ) are the alternative; each group
keeps whichever has the lower expected error, scored with sums in units of their bound as the
budget split scores them. Value cells are used only where exact (one value per cell) unless the
column declares ``value_cells = "rounded"``: then each value is rounded to its cell's midpoint, the
score adds the squared bias bound, and EXPLAIN and the metadata (``bias_bound``) report the most a
row moves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.engine.measuring.measurements import DraftVector
from dpsql.engine.plan.planning_size import dense_vectors, excess
from dpsql.engine.plan.vector_plans import group_drafts
from dpsql.engine.plan.weighing import Weighing
from dpsql.engine.vocabulary import unit_rows
from dpsql.matrix.workloads import Explicit, Identity, Kron, Workload
from dpsql.noise import Noise
from dpsql.planning.planner import Plan, Progress
from dpsql.schema import Column
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, CompiledGroup, compile_group
from dpsql.sql.units import reads_units
from dpsql.sql.value_cells import WEIGHT_BITS, ValueCells, value_cells_problem
from dpsql.sql.vectors import DataVector

#: A group is read as value cells only while it has at most this many cells (planning stays seconds).
VALUE_CELLS_MAX = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class Answering:
    """Statement groups as answered (some read as value cells), their data vectors, and why."""

    compiled: CompiledBatch
    drafts: list[DraftVector]
    notes: list[tuple[int, str]]  # (group index, why it is answered as it is)


def planned_densely(dense: Sequence[Sequence[tuple[int, ...]]], index: int,
                    replaced: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The batch's densely planned vectors (``dense``, by group) with group ``index``'s replaced."""
    return [sizes for g, vectors in enumerate(dense) for sizes in (replaced if g == index else vectors)]


def answering_groups(batch: ir.Batch, separate: CompiledBatch, columns: Mapping[str, Column],
                     bounds: Mapping[str, ValueCells], *, noise: Noise, budget: float, progress: Progress | None,
                     groups: Sequence[int] | None = None, start: CompiledBatch | None = None,
                     known: Mapping[tuple[int, DataVector], Plan] | None = None,
                     weighing: Weighing | None = None) -> Answering:
    """Per statement group: separate measurements, or — where ``bounds`` lets a SUM column be read
    as value cells and that lowers the group's error score — one count measurement (TaMM).

    Value cells are used only where they are exact (one clamped value per cell) unless the column
    declares ``value_cells = "rounded"``. The score of a form is its expected total squared error
    at the optimal split of ``budget`` over its measurements, (Σ_k c_k^p)^{1/p}/ε² (Laplace,
    p = 1/3) or /(2ρ) (Gaussian, p = 1/2), in units of one privacy unit's bound (k rows; k·s for
    sums); rounded value cells add their squared bias bound. A SUM over n rows on cells rounding
    by at most h per row is off by at most n·h, and n is private: the score counts one privacy
    unit's rows per answer (bias k·h, i.e. (h/s)² per SUM answer in these units), the one public
    row count, and the results report h as ``bias_bound`` (EXPLAIN shows it). With opted-in
    rounding the analyst accepts the n-fold rest; the full budget (not the group's share) makes
    the variances, and so the pull toward value cells, the smallest they can be.

    ``columns`` are the table's columns as measured (truncated ones narrowed to ±θ); ``groups``
    limits the work to those group indices of ``separate`` (the others keep their form in
    ``start`` and are left out of the result's drafts). ``known`` gives plans made before (by
    group and vector of ``separate``); when given, new plans skip the SVD bound (EXPLAIN is done).
    ``weighing`` gives each statement's weight in the scores (default: all 1).
    """
    table = separate.table
    rows_per_unit = unit_rows(table)
    weighing = weighing or Weighing(weights=(1.0,) * len(separate.statements), noise=noise)
    base = start or separate
    compiled_groups, statements = list(base.groups), list(base.statements)
    drafts: list[DraftVector] = []
    notes: list[tuple[int, str]] = []
    dense = [dense_vectors(group) for group in base.groups]  # the batch's densely planned vectors, group by group
    for index in range(len(separate.groups)) if groups is None else groups:
        group = separate.groups[index]
        members = [i for i, s in enumerate(separate.statements) if s.group == index]
        chosen = group_drafts(index, group, columns, rows_per_unit, noise, progress, known,
                              block_weights=weighing.blocks(group, [separate.statements[m] for m in members],
                                                            members, columns))
        sums = sorted({vector.summed for vector in group.data_kinds() if vector.is_sum})
        touched = {axis.column.name for axis in group.axes}
        usable = {}
        for name in (n for n in sums if n in bounds):
            problem = (value_cells_problem(table.columns[name], name in touched)
                       or rounding_problem(table.columns[name], bounds[name]))
            if problem is None:
                usable[name] = bounds[name]
            else:
                notes.append((index, f"SUM({name}) is measured apart from the counts: {problem}."))
        compiled_groups[index] = group
        for member in members:
            statements[member] = separate.statements[member]
        if usable and any(reads_units(separate.statements[m].statement, table) for m in members):
            notes.append((index, "sums are measured apart from the counts: a distinct-unit count reads its own cells "
                                 "(dpsql.sql.units), which a value-cell axis would split."))
        elif usable:
            cells_group, cells_statements = compile_group(batch, table, members, index, usable)
            label = ", ".join(usable)
            if cells_group.cells > VALUE_CELLS_MAX:
                notes.append((index, f"reading {label} as value cells would need {cells_group.cells:,} cells "
                                      f"(limit {VALUE_CELLS_MAX:,}); sums are measured apart."))
            elif (found := excess(planned_densely(dense, index, dense_vectors(cells_group)))) is not None:
                notes.append((index, f"reading {label} as value cells would exceed {found[0]} = {found[2]:,} "
                                      f"({found[1]:,}); sums are measured apart."))
            else:
                # quick templates only with several axes (OPT⊗ and OPT₊ would take their full time limit per group)
                # and after θ is released (each θ is a new workload; optimizing would delay every release)
                basis = {} if touched & set(usable) else {"value basis": value_basis(cells_group, usable)}
                cell_weights = weighing.blocks(cells_group, cells_statements, members, columns)
                alternative = group_drafts(index, cells_group, columns, rows_per_unit, noise, progress,
                                           {} if known is not None else None,
                                           quick=len(cells_group.axes) > 1 or known is not None,
                                           extra=basis, block_weights=cell_weights)
                apart = error_score(chosen, noise, budget)
                joint = error_score(alternative, noise, budget) + squared_bias_bound(cells_group, cell_weights)
                rounding = "; ".join(rounding_note(name, cells, table.columns[name]) for name, cells in usable.items())
                use = joint < apart * (1 - 1e-9)
                verdict = "answered from one count vector (TaMM)" if use else "measured apart (TiMM)"
                notes.append((index, f"{verdict} — error score with {label} as value cells {joint:.4g} "
                                      f"({cells_group.cells:,} cells; {rounding}) against separate count and sum "
                                      f"measurements {apart:.4g}."))
                if use:
                    dense[index] = dense_vectors(cells_group)
                    chosen = alternative
                    compiled_groups[index] = cells_group
                    for member, statement in zip(members, cells_statements):
                        statements[member] = statement
        drafts.extend(chosen)
    compiled = CompiledBatch(table=table, groups=tuple(compiled_groups), statements=tuple(statements))
    return Answering(compiled=compiled, drafts=drafts, notes=notes)


def rounding_problem(column: Column, cells: ValueCells) -> str | None:
    """Why rounded value cells are not allowed for ``column`` (None: exact, or opted in)."""
    most = cells.bias(column.ordered_domain)
    if most == 0 or column.rounded_value_cells:
        return None
    return (f"value cells would round each value of {column.name} to its cell's midpoint (up to ±{most:.6g} per row, a "
            f"bias outside the standard errors); declare {column.key}.value_cells = \"rounded\" to allow it")


def error_score(drafts: Sequence[DraftVector], noise: Noise, budget: float) -> float:
    """Batch objective of measuring ``drafts`` with all of ``budget`` split optimally:
    (Σ c_k^{1/3})³/ε² (Laplace) or (Σ √c_k)²/(2ρ) (Gaussian), c_k the weighted unit errors
    Σ_b c_b·t_b (``dpsql.planning.weights``)."""
    power = 1 / 3 if noise == "laplace" else 1 / 2
    total = sum(d.objective ** power for d in drafts) ** (1 / power)
    return total / budget**2 if noise == "laplace" else total / (2 * budget)


def squared_bias_bound(group: CompiledGroup, weights: Sequence[float] | None = None) -> float:
    """Σ over a group's value-cell SUM answers of c_b·(h/s)²: one privacy unit's rounding bias in
    units of its bound, weighted as :func:`error_score` weighs the variances; 0 on exact cells."""
    c = weights if weights is not None else [1.0] * len(group.blocks)
    return float(sum(w * block.workload.shape[0] * (block.bias / block.scale) ** 2
                     for w, block in zip(c, group.blocks) if block.bias))


def bias_bounds(compiled: CompiledBatch) -> dict[str, dict[str, object]]:
    """Per column read as rounded value cells: ``bias_bound`` of the result metadata."""
    found: dict[str, float] = {}
    for group in compiled.groups:
        for block in group.blocks:
            if block.bias:
                found[str(block.kind.column)] = max(found.get(str(block.kind.column), 0.0), block.bias)
    return {name: {"sum_per_row": h, "avg": h,
                   "note": f"value cells round each value to its cell's midpoint: a SUM over n rows is off by at most "
                           f"n × {h:.6g}, an AVG by at most {h:.6g}; this bias is not in the standard errors"}
            for name, h in found.items()}


def value_basis(group: CompiledGroup, cells: Mapping[str, ValueCells]) -> Workload:
    """A strategy for value cells that no statement filters or groups on: identity on the other
    axes ⊗, on each value axis, the rows [outside; non-NULL; r/s] (no outside row on an axis
    without an outside cell: ``out_of_domain = "exclude"``).

    COUNT(*), COUNT(col) and SUM(col) are sums of these rows, and one row moves one count and
    one r/s ≤ 1: L1 sensitivity ≤ 2 (L2 ≤ √2), against the budget of three separate measurements.
    The rows are scaled by 2^WEIGHT_BITS, which makes them integers holding the weights exactly.
    """
    factors: list[Workload] = []
    for axis in group.axes:
        if axis.column.name in cells:
            outside = np.zeros(axis.size)
            outside[-1] = 1.0 if axis.has_outside else 0.0
            first = 0 if axis.has_outside else 1
            rows = np.vstack([outside, 1.0 - outside, cells[axis.column.name].weights(axis)])[first:]
            rows = rows * 2**WEIGHT_BITS
            factors.append(Explicit(rows))
        else:
            factors.append(Identity(axis.size))
    return Kron(factors)


def rounding_note(name: str, cells: ValueCells, column: Column) -> str:
    """How value cells round the column's values (EXPLAIN and metadata)."""
    most = cells.rounding(column.ordered_domain)
    if cells.bias(column.ordered_domain) == 0:  # only the weights' binary rounding
        return f"{name} exact (one value per cell, weights to 2^-{WEIGHT_BITS})"
    return (f"{name} rounded to cell midpoints, at most ±{most:.6g} per row "
            f"(bias_bound: SUM ±{most:.6g} × rows summed, "
            f"AVG ±{most:.6g}; not in the standard errors)")
