"""Measuring the statement groups' data vectors and answering their blocks.

Privacy: each :class:`~dpsql.engine.measuring.measurements.PlannedVector` is measured once by
``mechanism.measure`` at its share (ε_j-DP or ρ_j-zCDP for sensitivity k·B_j, see
:mod:`dpsql.engine.measuring.measurements`); everything after is post-processing of the noisy values and the
public plan. This module and :mod:`dpsql.engine.measuring.scan` are where the statement-group route touches
data and randomness, only after the batch's cost is charged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dpsql.backends import Backend
from dpsql.engine.measuring.measurements import PlannedVector
from dpsql.engine.measuring.order_statistics import add_total_covariances
from dpsql.engine.measuring.scan import batch_vector, scan
from dpsql.engine.vocabulary import AnswerKey, AnswerSet, Report
from dpsql.matrix import linalg
from dpsql.noise import RandomSource
from dpsql.planning import mechanism
from dpsql.planning.noise_forms import ExactForm, MeasuredForm
from dpsql.schema import Column
from dpsql.sql.compile import CompiledBatch, CompiledGroup
from dpsql.sql.derived import covariance_pairs
from dpsql.sql.vectors import DataVector


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredVector:
    """One data vector of one statement group as measured: its columns as measured (sums: the
    bounds and quantum they were clamped to) and the noisy release (public: kept for reuse)."""

    group: int
    vector: DataVector
    quantum: float
    bounds: tuple[float, float] | None
    measurement: mechanism.Measurement
    axes: tuple[int, ...] | None = None  # the group's axes it is over, in order (None: all; a marginal's: some)


def measure_groups(compiled: CompiledBatch, measurements: Sequence[PlannedVector], truncated: Mapping[str, Column], *,
                   backend: Backend, rng: RandomSource | None, report: Report,
                   measured: list[MeasuredVector] | None = None) -> AnswerSet:
    """One scan for the statement groups (:func:`~dpsql.engine.measuring.scan.scan`), each data vector measured
    with its plan's strategy, every block answered with its exact variance.

    ``truncated``: the table's columns as measured (truncated measures narrowed to ±θ; the
    measurements already carry the narrowed quantum and per-unit scale). AVG answers whose SUM and
    COUNT come from one measurement (value cells) carry their covariance for the delta method.
    Each release is appended to ``measured`` when one is given.
    """
    answers: dict[AnswerKey, mechanism.Answers] = {}
    scans = scan(compiled, measurements, truncated, backend=backend, report=report)
    for index, group in enumerate(compiled.groups):
        zero = [m for m in measurements if m.group == index and m.share == 0]
        answers.update(zero_answers(group, index, zero))
        mine = [m for m in measurements if m.group == index and m.share != 0]
        if not mine:
            continue  # nothing to measure: not scanned
        data = scans[index]
        for m in mine:
            report(f"measuring {m.name} with {m.plan.name} ({m.plan.strategy.shape[0]:,} noisy values)")
            x = batch_vector(group, data, m.vector)
            planned = m.measured()
            release = mechanism.measure(planned.strategy, x, epsilon=planned.epsilon, rho=planned.rho,
                                        max_contribution=planned.max_contribution,
                                        cell_bounds=planned.cell_bounds, rng=rng)
            if measured is not None:
                bounds = truncated[m.vector.summed].measure_bounds if m.vector.is_sum else None
                measured.append(MeasuredVector(group=index, vector=m.vector, quantum=m.quantum, bounds=bounds,
                                               measurement=release))
            positions = [p for p, block in enumerate(group.blocks) if block.data == m.vector]
            stacked = mechanism.answer(group.workload(m.vector), release)
            profile = linalg.pinv_gram(release.strategy)
            ends = np.cumsum([group.blocks[p].workload.shape[0] for p in positions])
            for position, end in zip(positions, ends):
                rows = slice(end - group.blocks[position].workload.shape[0], end)
                unit = group.blocks[position].scale * m.quantum
                form = MeasuredForm(workload=group.blocks[position].workload, profile=profile,
                                    variance=release.noise_variance, scale=unit, source=release)
                answers[AnswerKey(index, position)] = mechanism.Answers(values=stacked.values[rows] * unit,
                                                                        variances=stacked.variances[rows] * unit**2,
                                                                        form=form)
            add_covariances(compiled, index, positions, release, m.quantum, answers)
            add_total_covariances(group, index, positions, release, m.quantum, answers)
    return AnswerSet(answers)


def zero_answers(group: CompiledGroup, index: int, zero: Sequence[PlannedVector]) -> dict[AnswerKey, mechanism.Answers]:
    """Exact zeros (variance 0) for the blocks of data vectors with an identically zero workload."""
    vectors = {m.vector for m in zero}
    return {AnswerKey(index, position): mechanism.Answers(values=np.zeros(block.workload.shape[0]),
                                                          variances=np.zeros(block.workload.shape[0]),
                                                          form=ExactForm())
            for position, block in enumerate(group.blocks) if block.data in vectors}


def add_covariances(compiled: CompiledBatch, index: int, positions: Sequence[int], release: mechanism.Measurement,
                    quantum: float, answers: dict[AnswerKey, mechanism.Answers]) -> None:
    """Cov(SUM, COUNT) row by row for AVGs whose two blocks share ``release`` (and of every two of a
    variance's SUM, COUNT and SUM of squares that share it); for statements with derived outputs
    (``dpsql.sql.derived``), of every two of their blocks that share it. Blocks of different data vectors
    have independent noise: covariance 0, left out."""
    group = compiled.groups[index]
    for statement in compiled.statements:
        if statement.group == index and covariance_pairs(statement.statement):
            shared = sorted({b for output in statement.aggregates for b in output.blocks if b in positions})
            for first, second in ((a, b) for a in shared for b in shared if a < b):
                covariance = mechanism.answer_covariance(group.blocks[first].workload, group.blocks[second].workload,
                                                         release)
                unit = group.blocks[first].scale * group.blocks[second].scale * quantum**2
                found = answers[AnswerKey(index, first)]
                answers[AnswerKey(index, first)] = replace(
                    found, covariances={**found.covariances, second: covariance * unit})
            continue
        for output in statement.aggregates:  # AVG (SUM, COUNT); a variance (SUM, COUNT, SUM of squares)
            if statement.group != index:
                continue
            blocks = group.blocks
            shared = [b for b in output.blocks if b in positions]
            for first, second in ((a, b) for j, a in enumerate(shared) for b in shared[j + 1:]):
                covariance = mechanism.answer_covariance(blocks[first].workload, blocks[second].workload, release)
                unit = blocks[first].scale * blocks[second].scale * quantum**2
                found = answers[AnswerKey(index, first)]
                answers[AnswerKey(index, first)] = replace(
                    found, covariances={**found.covariances, second: covariance * unit})
