"""Each statement's expected error against answering it alone, and the guard that splits the budget
so that none does worse where a split can, at the least batch objective subject to that
(``dpsql.planning.weights`` has the objective and the baseline, ``dpsql.planning.constrained_split``
the split)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.measuring.measurements import DraftVector, PlannedVector, at_fractions
from dpsql.engine.measuring.order_statistics import alone_sensitivity
from dpsql.engine.plan.weighing import Weighing, row_bound
from dpsql.engine.vocabulary import AnswerKey, noise_of, unit_rows
from dpsql.planning import constrained_split
from dpsql.planning import weights as weighting
from dpsql.schema import Column
from dpsql.sql.compile import CompiledBatch

#: Σ (Var + bias²) over each block's answers, keyed by the block.
BlockSums = Mapping[AnswerKey, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class StatementError:
    """One statement's expected error under the plan against answering it alone (``dpsql.planning.weights``).

    ``parts``: per aggregate input (an AVG has its SUM and its COUNT), (label, expected RMSE per
    answer with the squared bias bound of rounded value cells, RMSE of answering that part alone
    with the Laplace mechanism at ε/(N·n_s) or the Gaussian at ρ/(N·n_s)), in data units.
    ``ratio``: the mean over the statement's answers of (Var + bias²)/baseline; above 1 the
    statement is expected to do worse than answering it alone.
    """

    parts: tuple[tuple[str, float, float], ...]
    ratio: float


@dataclass(frozen=True, slots=True)
class Part:
    """One aggregate input of a statement: its label, block, answers and per-answer alone variance."""

    label: str
    key: AnswerKey
    rows: int
    baseline: float


def statement_parts(compiled: CompiledBatch, cost: PrivacyCost,
                    columns: Mapping[str, Column] | None = None) -> list[list[Part]]:
    """Each statement's parts (an AVG has its SUM and its COUNT, a variance also its SUM of squares), with
    the variance of answering that part alone (``weights.baseline_variance``); ``columns`` as measured."""
    noise = noise_of(cost)
    columns = columns if columns is not None else compiled.table.columns
    rows_per_unit = unit_rows(compiled.table)
    result = []
    for statement in compiled.statements:
        group = compiled.groups[statement.group]
        labelled = [(output.aggregate.alias + ("" if len(output.blocks) == 1 else
                                               (" (SUM)", " (COUNT)", " (SUM of squares)")[j]), p)
                    for output in statement.aggregates for j, p in enumerate(output.blocks)]
        parts = []
        for label, p in labelled:
            block = group.blocks[p]
            baseline = weighting.baseline_variance(noise, cost.value, len(compiled.statements), len(labelled),
                                                   rows_per_unit * row_bound(block.kind, columns)
                                                   * alone_sensitivity(block, noise))
            parts.append(Part(label=label, key=AnswerKey(statement.group, p), rows=block.workload.shape[0],
                              baseline=baseline))
        result.append(parts)
    return result


def statement_errors(compiled: CompiledBatch, sums: BlockSums, cost: PrivacyCost,
                     columns: Mapping[str, Column] | None = None) -> list[StatementError]:
    """Each statement's :class:`StatementError`. ``sums`` holds Σ (Var + bias²) over each block's
    answers; ``columns`` as measured (truncated ones narrowed to ±θ)."""
    result = []
    for parts in statement_parts(compiled, cost, columns):
        totals = [sums.get(part.key, 0.0) for part in parts]
        result.append(StatementError(
            parts=tuple((part.label, math.sqrt(total / part.rows), math.sqrt(part.baseline))
                        for part, total in zip(parts, totals)),
            ratio=sum(total / part.baseline for part, total in zip(parts, totals)) / sum(p.rows for p in parts)))
    return result


def ratio_terms(compiled: CompiledBatch, measurements: Sequence[PlannedVector], cost: PrivacyCost,
                budget: float) -> tuple[np.ndarray, np.ndarray]:
    """(H, β) of ``constrained_split``: statement s's ratio to alone is r_s = β_s + Σ_K H_sK/x_K^p
    when measurement K gets the fraction x_K of ``budget`` (p = 2 Laplace, 1 Gaussian).

    A block of measurement K has Σ Var = t_b·(k·B_K)²·(q_K·scale_b)²·φ(e_K), φ(ε) = 1/ε² or
    φ(ρ) = 1/(2ρ) (``PlannedVector.noise_scale``), plus its bias sum; each is divided by the part's
    baseline and the statement's answer count, as ``statement_errors`` does."""
    power = constrained_split.power_of(noise_of(cost))
    factor = 1.0 if power == 2 else 0.5
    rows_per_unit = unit_rows(compiled.table)
    noise_terms: dict[AnswerKey, tuple[int, float]] = {}
    bias: dict[AnswerKey, float] = {}
    for k, m in enumerate(measurements):
        group = compiled.groups[m.group]
        positions = [p for p, block in enumerate(group.blocks) if block.data == m.vector]
        for p, total in zip(positions, m.block_totals):
            block = group.blocks[p]
            key = AnswerKey(m.group, p)
            noise_terms[key] = (k, total * factor * (m.row_scale * m.quantum * block.scale) ** 2 / budget**power)
            bias[key] = block.workload.shape[0] * (rows_per_unit * block.bias) ** 2
    statements = statement_parts(compiled, cost)
    H = np.zeros((len(statements), len(measurements)))
    beta = np.zeros(len(statements))
    for s, parts in enumerate(statements):
        answers = sum(part.rows for part in parts)
        for part in parts:
            if part.key in noise_terms:
                k, term = noise_terms[part.key]
                H[s, k] += term / (part.baseline * answers)
                beta[s] += bias[part.key] / (part.baseline * answers)
    return H, beta


def measured_sums(compiled: CompiledBatch, measurements: Sequence[PlannedVector]) -> dict[AnswerKey, float]:
    """Σ (Var + bias²) over each block's answers under the measurements; a rounded value-cell SUM
    answer counts one privacy unit's bias, k·h, as the scores do."""
    rows_per_unit = unit_rows(compiled.table)
    sums = {}
    for m in measurements:
        group = compiled.groups[m.group]
        positions = [p for p, block in enumerate(group.blocks) if block.data == m.vector]
        for p, total in zip(positions, m.block_totals):
            block = group.blocks[p]
            bias = block.workload.shape[0] * (rows_per_unit * block.bias) ** 2
            sums[AnswerKey(m.group, p)] = total * m.noise_scale * (m.quantum * block.scale) ** 2 + bias
    return sums


def vector_weights(compiled: CompiledBatch, m: DraftVector, weighing: Weighing,
                   columns: Mapping[str, Column]) -> tuple[float, ...]:
    """c_b of the blocks of one measurement's data vector under ``weighing``."""
    group = compiled.groups[m.group]
    members = [i for i, statement in enumerate(compiled.statements) if statement.group == m.group]
    found = weighing.blocks(group, [compiled.statements[i] for i in members], members, columns)
    return tuple(c for c, block in zip(found, group.blocks) if block.data == m.vector)


@dataclass(frozen=True, slots=True, kw_only=True)
class Guarded:
    """What the guard kept: the measurements, the weights they were split with (w_s + λ_s), the
    notes on statements still worse than alone, and the batch objective J at this split beside J*,
    its least over every split of the same measurements without the promise."""

    measurements: tuple[PlannedVector, ...]
    kept: Weighing
    notes: tuple[tuple[int, str], ...]
    objective: float
    unconstrained: float
    cap: float
    #: The weights to plan the strategies again with: w_s + λ_s, times r_s² for a statement still worse
    #: than alone at this split (λ cannot move it when no split can: one measurement shared by every statement).
    replan: Weighing


def guard(compiled: CompiledBatch, measurements: tuple[PlannedVector, ...], weighing: Weighing, cost: PrivacyCost,
          budget: float, weights: Sequence[float]) -> Guarded:
    """Split the budget so that no statement does worse than answering it alone, where a split can.

    ``measurements`` come split by ``weighing`` (the closed-form optimum of J under its weights);
    J is judged under the statements' own ``weights``. Where the two agree and every statement's
    ratio r_s is at most 1 (within ``weights.TOLERANCE``), the measurements are kept as they are.
    Otherwise the shares are ``constrained_split.solve``'s: the least J subject to r_s ≤ 1 (or to the
    least achievable worst ratio, when no split meets 1), and the measurements carry the block
    weights of w_s + λ_s, whose closed-form split that is. A note names each statement left worse
    than alone, and the weights to plan again with raise its weight by r_s² (the split alone cannot help
    it). Public information only: the plan and the schema.
    """
    H, beta = ratio_terms(compiled, measurements, cost, budget)
    solved = constrained_split.solve(H, beta, weights, weighing.noise)
    errors = statement_errors(compiled, measured_sums(compiled, measurements), cost)
    objective = float(np.dot(weights, [e.ratio for e in errors]))
    if tuple(weights) == weighing.weights and not weighting.worse_than_alone([e.ratio for e in errors]):
        return Guarded(measurements=measurements, kept=weighing, notes=(), objective=objective,
                       unconstrained=solved.unconstrained, cap=solved.cap, replan=weighing)
    raised = Weighing(weights=solved.weights, noise=weighing.noise)
    drafts = [m.draft(vector_weights(compiled, m, raised, compiled.table.columns)) for m in measurements]
    found = at_fractions(drafts, solved.fractions, budget)
    errors = statement_errors(compiled, measured_sums(compiled, found), cost)
    found_objective = float(np.dot(weights, [e.ratio for e in errors]))
    pushed = Weighing(weights=tuple(w * max(1.0, e.ratio) ** 2 for w, e in zip(solved.weights, errors)),
                      noise=weighing.noise)
    return Guarded(measurements=found, kept=raised, notes=guard_notes(errors, solved.cap), objective=found_objective,
                   unconstrained=solved.unconstrained, cap=solved.cap, replan=pushed)


def guard_notes(errors: Sequence[StatementError], cap: float | None) -> tuple[tuple[int, str], ...]:
    """(statement, note) for each statement expected to do worse than answering it alone; ``cap``:
    the least worst ratio any split of the plan's measurements reaches (None: no split was solved)."""
    notes = []
    for s in weighting.worse_than_alone([e.ratio for e in errors]):
        figures = "; ".join(f"{label} RMSE {rmse:.4g} against {alone:.4g} alone"
                            for label, rmse, alone in errors[s].parts)
        tried = ("" if cap is None else
                 f"; no split of the budget over this plan's measurements brings every statement under 1 "
                 f"(the least worst ratio is {cap:.4g}: a strategy shared with other statements, a rounding "
                 "bias, or a part that answering alone measures more cheaply)")
        note = (f"expected mean squared error {errors[s].ratio:.4g}× that of answering this statement alone at the "
                f"same share{tried} ({figures}); give it a larger weights= entry, or send it in its own batch.")
        notes.append((s, note))
    return tuple(notes)


def standing(compiled: CompiledBatch, measurements: Sequence[PlannedVector], cost: PrivacyCost) -> tuple[int, float]:
    """(statements worse than alone, worst ratio): the guard's order of plans, lower is better."""
    ratios = [e.ratio for e in statement_errors(compiled, measured_sums(compiled, measurements), cost)]
    return len(weighting.worse_than_alone(ratios)), max(ratios, default=0.0)
