"""After the thresholds θ of truncated measure columns are released: the columns narrowed to ±θ,
and the statement groups summing them decided again (value cells or apart) at those bounds.

The decision is a function of public information and the released θs only; the same θs give the
same decision, which is memoized per plan outside the (frozen) plan itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpsql import thresholds
from dpsql.backends import Backend
from dpsql.engine.measurements import PlannedVector, check_calibrations, split
from dpsql.engine.sum_answering import answering_groups
from dpsql.engine.vocabulary import Report, noise_of
from dpsql.engine.weighing import Weighing
from dpsql.errors import PrivacyParameterError
from dpsql.noise import RandomSource
from dpsql.planner import Plan
from dpsql.schema import Column, Table
from dpsql.sql.compile import CompiledBatch
from dpsql.sql.value_cells import ValueCells
from dpsql.sql.vectors import DataVector

if TYPE_CHECKING:  # the group route imports this module
    from dpsql.engine.group_route import GroupsPlan


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalAnswering:
    """The statement groups and measurements that answer once θ is known, and why each group's sums
    are answered as they are."""

    compiled: CompiledBatch
    measurements: tuple[PlannedVector, ...]
    notes: tuple[tuple[int, str], ...]


def choose_thresholds(plan: GroupsPlan, *, backend: Backend, rng: RandomSource | None, report: Report) -> dict[str, float]:
    """θ for every truncated measure column (the batch is already charged for these selections)."""
    chosen = {}
    for threshold in plan.thresholds:
        report(f"choosing the truncation threshold of {threshold.column.name} ({threshold.method}, "
               f"ε = {threshold.epsilon:.4g})")
        chosen[threshold.column.name] = thresholds.choose(threshold, backend=backend, table=plan.compiled.table, rng=rng)
    return chosen


def measured_columns(table: Table, chosen: Mapping[str, float]) -> dict[str, Column]:
    """The table's columns with each truncated measure narrowed to its released θ."""
    return {name: thresholds.truncated(c, chosen[name]) if name in chosen else c for name, c in table.columns.items()}


_DECIDED: weakref.WeakKeyDictionary[GroupsPlan, dict[tuple[tuple[str, float], ...], FinalAnswering]] = \
    weakref.WeakKeyDictionary()


def final_answering(plan: GroupsPlan, chosen: Mapping[str, float], *, report: Report) -> FinalAnswering:
    """The groups and measurements that answer, once the thresholds θ are released.

    Groups summing a truncated column are decided again (value cells or apart) with the column
    narrowed to ±θ; the others keep the plan made before the data was read. The measurements'
    budget (the batch's, less the selections' share) is split again over the final set. Memoized
    by the released θs (the SVT grid repeats them from one release to the next).
    """
    if not chosen:
        return FinalAnswering(compiled=plan.compiled, measurements=plan.measurements, notes=plan.answering_notes)
    decided = _DECIDED.setdefault(plan, {})
    key = tuple(sorted(chosen.items()))
    if key not in decided:
        decided[key] = decide_at_thresholds(plan, chosen, report=report)
    return decided[key]


def decide_at_thresholds(plan: GroupsPlan, chosen: Mapping[str, float], *, report: Report) -> FinalAnswering:
    """:func:`final_answering` for one set of released θs."""
    columns = measured_columns(plan.compiled.table, chosen)
    separate = plan.separate
    redo = [g for g, group in enumerate(separate.groups) if any(v.is_sum and v.column in chosen for v in group.data_kinds())]
    bounds = {name: ValueCells(low=c.bounds[0], high=c.bounds[1]) for name, c in columns.items() if c.measure_bounds is not None}
    noise = noise_of(plan.cost)
    report("planning the sums at the released thresholds")
    known: dict[tuple[int, DataVector], Plan] = {
        (m.group, m.vector): m.plan for m in plan.measurements
        if plan.compiled.groups[m.group] is separate.groups[m.group] and m.cell_bounds is None}
    budget = sum(m.share for m in plan.measurements)
    weighing = Weighing(weights=plan.weights, noise=noise)
    result = answering_groups(plan.batch, separate, columns, bounds, noise=noise, budget=budget, progress=report,
                              groups=redo, start=plan.compiled, known=known, weighing=weighing)
    kept = [m.draft() for m in plan.measurements if m.group not in redo]
    drafts = sorted(kept + result.drafts, key=lambda d: d.group)
    notes = [note for note in plan.answering_notes if note[0] not in redo] + result.notes
    measurements = split(drafts, budget, noise)
    try:
        check_calibrations(measurements)
    except PrivacyParameterError:  # a share too small for the new plans: the plan checked before the charge measures
        fallback = "the plan made before θ was released is used: a budget share of the re-planned sums was too small"
        return FinalAnswering(compiled=plan.compiled, measurements=plan.measurements,
                              notes=tuple(sorted([*plan.answering_notes, *((g, fallback) for g in redo)])))
    return FinalAnswering(compiled=result.compiled, measurements=measurements, notes=tuple(sorted(notes)))
