"""EXPLAIN: a readable report of a prepared batch — routes compared, statement groups, each data
vector's candidate strategies with their expected RMSE and the SVD lower bound, each statement
against answering it alone, and the cost. Public information only: nothing is read or spent."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpsql.budget.accounting import PrivacyBudget
from dpsql.engine.measuring.measurements import PlannedVector
from dpsql.engine.plan.group_route import GroupsPlan
from dpsql.engine.plan.planning_size import planning_resources
from dpsql.engine.plan.residual_route import ResidualPlan
from dpsql.engine.plan.routes import Prepared
from dpsql.engine.reuse.reuse import not_kept_notes
from dpsql.engine.vocabulary import NotApplicable
from dpsql.matrix import blas
from dpsql.sql import quantiles as qs
from dpsql.sql.derived import explain_notes as derived_notes
from dpsql.sql.filters import statement_notes
from dpsql.sql.relations import explain_join


@blas.single_threaded()
@planning_resources()
def explain(prepared: Prepared, budget: PrivacyBudget | None = None) -> str:
    """The report; ``budget`` adds what is left of it."""
    chosen, groups, residual = prepared.chosen, prepared.groups, prepared.residual
    compiled = chosen.compiled
    lines = [f"Batch: {len(compiled.statements)} statement(s) on table '{compiled.table.name}'.",
             f"Cost: {prepared.cost.describe()}"
             + (f"; budget left {budget.remaining:.6g} of {budget.total.describe()}" if budget else ""),
             *explain_join(compiled.table)]
    if isinstance(groups, GroupsPlan):
        for plan in groups.thresholds:
            lines.append(f"Truncation: {plan.describe()}; the sums are then clamped at ±θ. The expected RMSEs "
                         "below use the outer bound (a smaller θ lowers them, and adds a bias toward zero).")
    if isinstance(groups, NotApplicable):
        assert isinstance(residual, ResidualPlan)
        lines.append("Route: ResidualPlanner — its expected error equals the SVD lower bound of this batch's workload, "
                     "so no strategy answers it more accurately; statement groups were not planned.")
        return "\n".join(lines + _statements(prepared) + ["", *residual.explain_lines()])
    if isinstance(residual, NotApplicable):
        lines.append(f"Route: statement groups. {residual.reason}")
    else:
        lines.append(f"Route: {chosen.name}, whose statement-weighted objective (Σ weight · mean squared error / "
                     f"answering alone) is the lower: ResidualPlanner {residual.objective:.6g}, statement groups "
                     f"{groups.objective:.6g}.")
    lines += _statements(prepared) + [""]  # the headline: each statement's expected error in its own units
    if isinstance(residual, ResidualPlan):
        lines.extend(residual.explain_lines())
        if chosen is residual:
            return "\n".join(lines)
        lines.append("")
    return "\n".join(lines + _groups(groups) + not_kept_notes(compiled, groups.measurements))


def _groups(plan: GroupsPlan) -> list[str]:
    """The statement groups and each data vector's candidates."""
    compiled = plan.compiled
    lines = [f"Statement groups: {len(compiled.groups)}, each answered jointly."]
    for index, group in enumerate(compiled.groups):
        members = runs([i + 1 for i, s in enumerate(compiled.statements) if s.group == index])
        columns = ", ".join(f"{a.column.name}({a.size})" for a in group.axes) or "no columns"
        lines.append(f"Group {index + 1}: statements {members}; {group.cells:,} cells over {columns}.")
        lines.extend(f"  sums: {note}" for g, note in plan.answering_notes if g == index)
    for m in plan.measurements:
        lines.extend(_measurement(plan, m))
    return lines


def _measurement(plan: GroupsPlan, m: PlannedVector) -> list[str]:
    """One data vector: its queries, noise and share; every candidate's expected RMSE; the SVD bound."""
    lines = [f"\n{m.name}: {m.plan.queries:,} queries, noise {m.plan.noise}, budget share "
             f"{'ε' if m.plan.noise == 'laplace' else 'ρ'}={m.share:.6g}"]
    width = max(map(len, m.plan.candidates))
    for name in sorted(m.plan.candidates, key=m.plan.candidates.__getitem__):
        marker = "*" if name == m.plan.name else " "
        lines.append(f"  {marker} {name:<{width}} expected RMSE {m.expected_rmse(name):12.4g}")
    lines.extend(f"    note: {note}" for note in m.plan.notes)
    if m.weighted:
        lines.append("    note: candidates are scored by the statement-weighted objective (see Statements below); "
                     "only the chosen strategy's RMSE is exact, the others are its score scaled alike")
    scales = sorted({b.scale for b in plan.compiled.groups[m.group].blocks if b.data == m.vector and b.scale != 1})
    if scales:
        lines.append(f"    note: read as value cells; SUM rows are weighted by value / s (s = "
                     f"{', '.join(f'{x:g}' for x in scales)}), so their errors are s times the figures here")
    bound, exact = m.plan.svd_bound()
    if bound is not None:
        floor = bound * (2 if m.plan.noise == "laplace" else 1)  # Laplace variance is 2b², b ≥ Δ₂
        ratio = m.plan.expected_error / floor if floor else float("nan")
        kind = "" if exact else " (partial: from the largest sub-workload, the true bound is higher)"
        lines.append(f"    SVD lower bound{kind}: RMSE {m.expected_rmse(m.plan.name) / math.sqrt(ratio):.4g}; "
                     f"chosen strategy's error / bound = {ratio:.3f}")
    else:
        lines.append("    SVD bound: not computed (domain too large for a dense spectrum)")
    return lines


def _statements(prepared: Prepared) -> list[str]:
    """Per statement: expected RMSE of each aggregate part against answering it alone, the ratio of
    mean squared errors, its weight when not 1, and the guard's note when it stays worse."""
    chosen = prepared.chosen
    errors = chosen.statement_errors()
    unit = "ε" if prepared.cost.family == "epsilon" else "ρ"
    lines = ["", f"Statements: the expected standard error of each one's answers (RMSE over its rows, in its own "
                 f"units: a count in rows, a SUM in its column's units), and answering it alone ({unit}/{len(errors)} "
                 "per statement, split evenly over its aggregate parts); ratio = mean squared error / alone's (at most "
                 "1 unless noted):"]
    notes = dict(chosen.guard_notes)
    for s, e in enumerate(errors):
        weight = chosen.weights[s] if chosen.weights else 1.0
        figures = "; ".join(f"{label} {rmse:.4g} (alone {alone:.4g})" for label, rmse, alone in e.parts)
        lines.append(f"  statement {s + 1}: {figures}; ratio {e.ratio:.3f}"
                     + (f"; weight {weight:.4g}" if weight != 1 else ""))
        if s in notes:
            lines.append(f"    note: {notes[s]}")
        compiled = chosen.compiled
        lines.extend(f"    note: {note}" for note in statement_notes(compiled.statements[s].statement, compiled.table))
        lines.extend(f"    note: {note}" for note in derived_notes(compiled.statements[s].statement))
        lines.extend(f"    {qs.explain_line(output.aggregate.alias, output.quantile)}"
                     for output in compiled.statements[s].aggregates if output.quantile is not None)
    if isinstance(chosen, GroupsPlan):
        lines.append(_objective(chosen, [e.ratio for e in errors]))
    return lines


def _objective(plan: GroupsPlan, ratios: Sequence[float]) -> str:
    """The batch objective J = Σ_s w_s·ratio_s at this split against J*, its least over every split of
    the same measurements without the promise, and which statements the promise holds back."""
    head = (f"Objective: J = Σ weight·ratio = {plan.split_objective:.6g} at this split; the least over every split "
            f"of these measurements without the promise J* = {plan.unconstrained:.6g}")
    if plan.split_cap > 1:
        worst = max(range(len(ratios)), key=ratios.__getitem__)
        return (f"{head}. No split brings every statement within answering it alone: the least worst ratio is "
                f"{plan.split_cap:.4g} (statement {worst + 1}); the split holds every statement at most there.")
    if plan.split_objective <= plan.unconstrained * (1 + 1e-9):
        return f"{head}: the split is the joint optimum, and no statement does worse than answering it alone."
    held = runs([s + 1 for s, r in enumerate(ratios) if r >= 1 - 1e-3])
    return (f"{head} ({plan.split_objective / plan.unconstrained:.4g}×): the joint optimum would leave statements "
            f"worse than alone, so the split is the least J with every ratio at most 1 (held at 1: statements {held}).")


def runs(numbers: Sequence[int]) -> str:
    """1, 2, 3, 5 → "1–3, 5"."""
    parts: list[list[int]] = []
    for n in numbers:
        if parts and n == parts[-1][1] + 1:
            parts[-1][1] = n
        else:
            parts.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in parts)
