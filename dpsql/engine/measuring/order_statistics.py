"""The covariances and the noise law an order statistic's confidence interval needs (``dpsql.sql.quantiles``).

Post-processing of one measurement (no privacy cost): for each prefix block measured by
``release``, Cov(P̂_k, N̂) row by row, N̂ being the last prefix row of the same group, from the
measurement's noise (σ²·u (AᵀA)⁺ vᵀ, ``mechanism.answer_covariance``; Li, Miklau, Hay, McGregor
and Rastogi, "The matrix mechanism", 2015); and the law of that noise (its kind, parameter and
variance: public), from which MIN and MAX bound the tails of every prefix count's noise
(``dpsql.answers.tail_bounds``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dpsql.answers.tail_bounds import NoiseLaw
from dpsql.engine.vocabulary import AnswerKey
from dpsql.noise import Noise
from dpsql.planning import mechanism
from dpsql.sql.compile import Block, CompiledGroup


def add_total_covariances(group: CompiledGroup, index: int, positions: Sequence[int], release: mechanism.Measurement,
                          quantum: float, answers: dict[AnswerKey, mechanism.Answers]) -> None:
    """Store Cov(P̂_k, N̂) of each prefix block among ``positions`` under its own block index in
    ``Answers.covariances`` (an order statistic has one block; its key there means "with the totals"),
    and the release's noise law in ``Answers.law``."""
    for position in positions:
        block = group.blocks[position]
        if block.total is None:
            continue
        covariance = mechanism.answer_covariance(block.workload, block.total, release) * (block.scale * quantum) ** 2
        found = answers[AnswerKey(index, position)]
        law = NoiseLaw(kind=release.noise, scale=float(release.noise_scale), variance=release.noise_variance)
        answers[AnswerKey(index, position)] = replace(found, covariances={**found.covariances, position: covariance},
                                                      law=law)


def alone_sensitivity(block: Block, noise: Noise) -> float:
    """How far one row moves a block's answers, answered alone by the Laplace (L1) or Gaussian (L2)
    mechanism on its own rows, relative to one answer: a prefix block's largest column norm (one
    row is in up to K prefix rows of its group: K, or √K), 1 for every other block (its rows are
    disjoint groups, and a block of zeros: its WHERE clause is never TRUE). Scales the "answering
    alone" baselines of the guard and the weighing."""
    if block.total is None:
        return 1.0
    return block.workload.sensitivity("l1" if noise == "laplace" else "l2") or 1.0
