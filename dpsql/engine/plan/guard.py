"""Each statement's expected error against answering it alone, and the guard that raises the weight
of a statement expected to do worse (``dpsql.planning.weights`` has the objective and the baseline)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.measuring.measurements import DraftVector, PlannedVector, split
from dpsql.engine.measuring.order_statistics import alone_sensitivity
from dpsql.engine.plan.weighing import Weighing, row_bound
from dpsql.engine.vocabulary import AnswerKey, noise_of, unit_rows
from dpsql.planning import weights as weighting
from dpsql.schema import Column
from dpsql.sql.compile import CompiledBatch

#: Rounds of the guard: each raises the weight of every statement expected to do worse than
#: answering it alone by that ratio squared and splits the budget again (a count of work, not time).
GUARD_ROUNDS = 4

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


def statement_errors(compiled: CompiledBatch, sums: BlockSums, cost: PrivacyCost,
                     columns: Mapping[str, Column] | None = None) -> list[StatementError]:
    """Each statement's :class:`StatementError`. ``sums`` holds Σ (Var + bias²) over each block's
    answers; ``columns`` as measured (truncated ones narrowed to ±θ)."""
    noise = noise_of(cost)
    columns = columns if columns is not None else compiled.table.columns
    rows_per_unit = unit_rows(compiled.table)
    result = []
    for statement in compiled.statements:
        group = compiled.groups[statement.group]
        labelled = [(output.aggregate.alias + ("" if len(output.blocks) == 1 else (" (SUM)", " (COUNT)")[j]), p)
                    for output in statement.aggregates for j, p in enumerate(output.blocks)]
        parts, relative, answers = [], 0.0, 0
        for label, p in labelled:
            block = group.blocks[p]
            rows = block.workload.shape[0]
            baseline = weighting.baseline_variance(noise, cost.value, len(compiled.statements), len(labelled),
                                                   rows_per_unit * row_bound(block.kind, columns)
                                                   * alone_sensitivity(block, noise))
            total = sums.get(AnswerKey(statement.group, p), 0.0)
            parts.append((label, math.sqrt(total / rows), math.sqrt(baseline)))
            relative += total / baseline
            answers += rows
        result.append(StatementError(parts=tuple(parts), ratio=relative / answers))
    return result


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
    """What the guard kept: the measurements, the weights they were split with, the notes on
    statements still worse than alone, and the weights as last raised (to plan again with)."""

    measurements: tuple[PlannedVector, ...]
    kept: Weighing
    notes: tuple[tuple[int, str], ...]
    raised: Weighing


def guard(compiled: CompiledBatch, measurements: tuple[PlannedVector, ...], weighing: Weighing, cost: PrivacyCost,
          budget: float) -> Guarded:
    """Bring every statement's expected error to at most answering it alone, where a split can.

    Each round raises w_s of every statement with ratio r_s > 1 to w_s·r_s² and splits the budget
    again over the same strategies (GUARD_ROUNDS rounds at most): a measurement's variance falls
    as c^{-2/3} (Laplace, ε_k ∝ c_k^{1/3}) or c^{-1/2} (Gaussian) in its weight, so r² covers
    the ratio when the statement has its measurement to itself; the round with the fewest such
    statements, then the smallest worst ratio, is kept (with its weights), and a note names each
    statement left worse than alone. Public information only: the plan and the schema.
    """
    columns = compiled.table.columns
    weights = list(weighing.weights)
    best: tuple[tuple[int, float], tuple[PlannedVector, ...], tuple[float, ...], list[StatementError]] | None = None
    for _ in range(GUARD_ROUNDS + 1):
        errors = statement_errors(compiled, measured_sums(compiled, measurements), cost)
        ratios = [e.ratio for e in errors]
        losers = weighting.worse_than_alone(ratios)
        key = (len(losers), max(ratios, default=0.0))
        if best is None or key < best[0]:
            best = (key, measurements, tuple(weights), errors)
        if not losers:
            break
        for s in losers:
            weights[s] *= ratios[s] ** 2
        raised = Weighing(weights=tuple(weights), noise=weighing.noise)
        drafts = [m.draft(vector_weights(compiled, m, raised, columns)) for m in measurements]
        measurements = split(drafts, budget, weighing.noise)
    assert best is not None
    _, kept, final, errors = best
    return Guarded(measurements=kept, kept=Weighing(weights=final, noise=weighing.noise),
                   notes=guard_notes(errors, GUARD_ROUNDS),
                   raised=Weighing(weights=tuple(weights), noise=weighing.noise))


def guard_notes(errors: Sequence[StatementError], rounds: int) -> tuple[tuple[int, str], ...]:
    """(statement, note) for each statement expected to do worse than answering it alone."""
    notes = []
    for s in weighting.worse_than_alone([e.ratio for e in errors]):
        figures = "; ".join(f"{label} RMSE {rmse:.4g} against {alone:.4g} alone"
                            for label, rmse, alone in errors[s].parts)
        tried = f" after {rounds} rounds of raising its weight and splitting the budget again" if rounds else ""
        note = (f"expected mean squared error {errors[s].ratio:.4g}× that of answering this statement alone at the "
                f"same share{tried} ({figures}); give it a larger weights= entry, or send it in its own batch.")
        notes.append((s, note))
    return tuple(notes)


def standing(compiled: CompiledBatch, measurements: Sequence[PlannedVector], cost: PrivacyCost) -> tuple[int, float]:
    """(statements worse than alone, worst ratio): the guard's order of plans, lower is better."""
    ratios = [e.ratio for e in statement_errors(compiled, measured_sums(compiled, measurements), cost)]
    return len(weighting.worse_than_alone(ratios)), max(ratios, default=0.0)
