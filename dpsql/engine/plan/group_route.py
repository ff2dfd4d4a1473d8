"""The statement-group route: statements grouped by the columns they read, each group's data
vectors measured with the strategy of lowest expected error, the batch's budget split over them.

Privacy: each data vector the batch needs (cell counts; per column, non-NULL counts and clamped
sums) is measured once with the strategy its plan chose, at its share of the budget
(:mod:`dpsql.engine.measuring.measurements`: sensitivity k for counts, k·B for sums, k·max_j b_j‖a_j‖ for
cell-bounded sums); the shares add up to the batch's ε (sequential composition) or ρ (zCDP
composition). A truncated SUM first has its threshold θ chosen with a share of the batch's budget
(``dpsql.engine.plan.thresholds``, pure ε_sel-DP, or ρ_sel = ε_sel²/2) and its sums are then measured
clamped at ±θ with B = θ/quantum; the measurements split the rest. Once θ is released, the groups
summing a truncated column are decided again at ±θ (``final_answering``: public θ, public plan).
Everything after the measurements is post-processing. Nothing is read from the data before the
whole cost is charged, and the cells come from the schema only.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass

from dpsql.backends import Backend
from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.measuring.measure import MeasuredVector, measure_groups
from dpsql.engine.measuring.measurements import PlannedVector, check_calibrations, split
from dpsql.engine.plan.grouping import batch_memo, choose_partition
from dpsql.engine.plan.guard import StatementError, guard, measured_sums, standing, statement_errors
from dpsql.engine.plan.metadata import Release, ReleaseMetadata, family_name
from dpsql.engine.plan.sum_answering import answering_groups, bias_bounds
from dpsql.engine.plan.thresholds import ThresholdPlan, choose_thresholds, measured_columns, threshold_plans
from dpsql.engine.plan.weighing import Weighing
from dpsql.engine.vocabulary import Report, noise_of
from dpsql.errors import PrivacyParameterError
from dpsql.noise import RandomSource
from dpsql.planning.planner import Plan, Progress
from dpsql.schema import Schema
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, StatementMemo, batch_table, compile_batch
from dpsql.sql.value_cells import ValueCells
from dpsql.sql.vectors import DataVector

#: Times the statement groups may be planned again with the guard's weights w_s + λ_s when its split
#: binds (each is a full planning pass: a count of work, not time).
GUARD_REPLANS = 2


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, weakref_slot=True)
class GroupsPlan:
    """The statement-group route, planned before any data is read.

    ``separate``: the statement groups with every SUM measured apart; ``compiled``: the groups as
    answered (some read as value cells); ``measurements``: each data vector's plan and share;
    ``thresholds``: the truncated columns' θ selections, released first; ``answering_notes``:
    (group, why its sums are answered as they are); ``weights``: each statement's weight as planned
    (w_s + λ_s: the guard raises those its split holds at their promise); ``guard_notes``:
    (statement, why it is still expected to do worse than answering it alone); ``split_objective``
    and ``unconstrained``: the batch objective J at this split and J*, its least over every split of
    the same measurements without the promise; ``split_cap``: the promise the split holds (1, or the
    least achievable worst ratio).
    """

    cost: PrivacyCost
    batch: ir.Batch
    separate: CompiledBatch
    compiled: CompiledBatch
    measurements: tuple[PlannedVector, ...]
    thresholds: tuple[ThresholdPlan, ...]
    answering_notes: tuple[tuple[int, str], ...]
    weights: tuple[float, ...]
    guard_notes: tuple[tuple[int, str], ...]
    split_objective: float
    unconstrained: float
    split_cap: float

    name = "statement groups"

    @property
    def measures_nothing(self) -> bool:
        """Whether every statement is identically zero (its WHERE never TRUE): answered with exact
        zeros, no data read and nothing charged."""
        return not self.thresholds and bool(self.measurements) and all(m.share == 0 for m in self.measurements)

    @property
    def expected_total(self) -> float:
        """Expected total squared error of the answers."""
        return sum(m.expected_total(m.plan.name) for m in self.measurements)

    @property
    def answer_count(self) -> int:
        return sum(m.plan.queries for m in self.measurements)

    @property
    def objective(self) -> float:
        """The batch objective (``dpsql.planning.weights``): Σ_K Σ_b c_b·t_b·(noise variance of one unit of
        measurement K, in units of its per-unit bound k·B)."""
        return sum(m.objective * m.noise_scale / m.row_scale**2 for m in self.measurements)

    def statement_errors(self) -> list[StatementError]:
        return statement_errors(self.compiled, measured_sums(self.compiled, self.measurements), self.cost)

    def cost_parts(self) -> list[PrivacyCost]:
        """What the plan spends: each measured share and each threshold selection."""
        parts = [PrivacyCost.of(self.cost.family, m.share) for m in self.measurements if m.share > 0]
        return parts + [PrivacyCost(epsilon=t.epsilon) for t in self.thresholds]

    def answer(self, *, backend: Backend, rng: RandomSource | None, report: Report) -> Release:
        """Release θ, decide the sums at θ, scan once, measure every data vector, answer every block."""
        chosen = choose_thresholds(self.thresholds, self.compiled.table, backend=backend, rng=rng, report=report)
        final = final_answering(self, chosen, report=report)
        columns = measured_columns(final.compiled.table, chosen)
        measured: list[MeasuredVector] = []
        answers = measure_groups(final.compiled, final.measurements, columns, backend=backend, rng=rng, report=report,
                                 measured=measured)
        errors = statement_errors(final.compiled, measured_sums(final.compiled, final.measurements), self.cost, columns)
        metadata = ReleaseMetadata(
            mechanism=f"matrix mechanism, {family_name(self.cost)}",
            strategy={m.name: m.plan.name for m in final.measurements},
            expected_rmse={m.name: m.expected_rmse(m.plan.name) for m in final.measurements},
            answering=tuple(f"Group {g + 1}: {note}" for g, note in final.notes),
            bias_bound=bias_bounds(final.compiled),
            truncation_threshold=chosen,
            truncation={plan.column.name: plan.describe() for plan in self.thresholds} if chosen else {})
        return Release(compiled=final.compiled, answers=answers, errors=errors, metadata=metadata,
                       split_cap=self.split_cap, measured=tuple(measured))


def plan_route(batch: ir.Batch, schema: Schema, cost: PrivacyCost, weights: tuple[float, ...],
               progress: Progress | None, memo: StatementMemo | None = None) -> GroupsPlan:
    """The statement-group route: planned with the statements' weights w, then — while the guard's
    split binds (some statement held at its promise, or still worse than alone) — again with the
    strategies chosen under its weights w_s + λ_s, the split still judged by J under w
    (GUARD_REPLANS times at most; kept only when fewer statements lose, the worst loses less, or
    J is lower). ``memo``: the batch's statements compiled so far (one memo serves every pass: a
    statement's blocks do not depend on the weights)."""
    memo = memo if memo is not None else batch_memo(batch)
    plan, raised = plan_groups(batch, schema, cost, Weighing(weights=weights, noise=noise_of(cost)), progress, weights,
                               memo)
    for _ in range(GUARD_REPLANS):
        if not plan.guard_notes and plan.split_objective <= plan.unconstrained * (1 + 1e-9):
            break
        again, raised = plan_groups(batch, schema, cost, raised, progress, weights, memo)
        if _order(again) >= _order(plan):
            break
        plan = again
    return plan


def _order(plan: GroupsPlan) -> tuple[int, float, float]:
    """(statements worse than alone, their worst ratio, J): lower is better."""
    losers, worst = standing(plan.compiled, plan.measurements, plan.cost)
    return losers, worst if losers else 0.0, plan.split_objective


def plan_groups(batch: ir.Batch, schema: Schema, cost: PrivacyCost, weighing: Weighing,
                progress: Progress | None, weights: tuple[float, ...],
                memo: StatementMemo | None = None) -> tuple[GroupsPlan, Weighing]:
    """The route with strategies chosen under ``weighing``: statement groups, value cells or apart,
    and the guard's constrained split under the statements' own ``weights``. Also returns the
    guard's weights w_s + λ_s, to plan again with. ``memo``: the batch's statements compiled so far."""
    noise = weighing.noise
    table = batch_table(batch, schema)
    memo = memo if memo is not None else batch_memo(batch)
    separate = compile_batch(batch, schema, choose_partition(batch, table, noise, weighing, memo), memo)
    columns = separate.table.columns
    measured = [columns[str(v.column)] for g in separate.groups for v in g.data_kinds() if v.is_sum]
    selections, selection_share = threshold_plans(list(dict.fromkeys(measured)), family=cost.family, total=cost.value)
    bounds = {c.name: ValueCells(low=c.bounds[0], high=c.bounds[1]) for c in measured if c.truncation is None}
    budget = cost.value * (1 - selection_share)
    choice = answering_groups(batch, separate, columns, bounds, noise=noise, budget=budget, progress=progress,
                              weighing=weighing)
    pending = [(g, f"SUM({v.column}) is read as value cells (TaMM) or measured apart (TiMM) once its θ is released; "
                   "the figures below measure it apart at the outer bound")
               for g, group in enumerate(separate.groups) for v in group.data_kinds()
               if v.is_sum and v.column not in bounds]
    notes = tuple(sorted(choice.notes + pending))
    guarded = guard(choice.compiled, split(choice.drafts, budget, noise), weighing, cost, budget, weights)
    check_calibrations(guarded.measurements)  # every noise scale is representable: checked before anything is charged
    plan = GroupsPlan(cost=cost, batch=batch, separate=separate, compiled=choice.compiled,
                      measurements=guarded.measurements, thresholds=tuple(selections), answering_notes=notes,
                      weights=guarded.kept.weights, guard_notes=guarded.notes, split_objective=guarded.objective,
                      unconstrained=guarded.unconstrained, split_cap=guarded.cap)
    return plan, guarded.replan


# ===================================================================== after θ is released
@dataclass(frozen=True, slots=True, kw_only=True)
class FinalAnswering:
    """The statement groups and measurements that answer once θ is known, and why each group's sums
    are answered as they are."""

    compiled: CompiledBatch
    measurements: tuple[PlannedVector, ...]
    notes: tuple[tuple[int, str], ...]


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
    redo = [g for g, group in enumerate(separate.groups)
            if any(v.is_sum and v.column in chosen for v in group.data_kinds())]
    bounds = {name: ValueCells(low=c.bounds[0], high=c.bounds[1])
              for name, c in columns.items() if c.measure_bounds is not None}
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
