"""How a block's released answers depend on the noise: covariances of any row combinations of them.

A block's answers a = s·W x̂ (s: the block's scale, W: its rows over the cells) carry, row by row,
their variances (``mechanism.Answers``). Outputs that combine answers of *several rows* (window
aggregates over the released groups: a share a_r / Σ_{r' ∈ w(r)} a_{r'}, a running total) need
Cov(Σ_j L_ij a_j, Σ_j R_ij a'_j) for combination matrices L and R over two blocks' rows, paired row
by row. With x̂ = Ã⁺y from one measurement of noise variance σ² (Li, Miklau, Hay, McGregor and
Rastogi, "The matrix mechanism: optimizing linear counting queries under differential privacy",
2015), Cov(a, a') = σ² s s' W (ÃᵀÃ)⁺ W'ᵀ, so the combinations' covariances are

    diag(L Σ Rᵀ)_i = σ² s s' Σ_j L_ij [W (ÃᵀÃ)⁺ W'ᵀ Rᵀ]_{j, i},

computed with W, W' and (ÃᵀÃ)⁺ as implicit operators on the distinct rows of R only (taking as R
the side with fewer: a share over the whole table has one), and the sum over j once per distinct
pair of rows (L_i, R_i): never a matrix over cells × cells, nor over outputs × rows.
Answers by generalized least squares over kept measurements carry a whitening instead
(``dpsql.releases.gls``: Cov(u x̂, v x̂) = (u·V)·(v·V)), so there diag(L Σ Rᵀ) = s s' Σ (L·V)∘(R·V').
Answers of different measurements (or pools) have independent noise: covariance 0. Exact zeros
have no noise. A measured and a pooled form never meet in one statement (its blocks are all
answered one way); were they to, 0 is returned, as for answers measured apart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql.matrix.workloads import Workload

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Combination:
    """A combination matrix over a block's answer rows, one row per output, stored by its few
    distinct rows: output i combines the answers by ``distinct[which[i]]``."""

    distinct: sp.csr_array
    which: IntArray

    @property
    def outputs(self) -> int:
        return int(self.which.size)


class NoiseForm(ABC):
    """The answers of one block as linear functions of their noise."""

    @abstractmethod
    def covariance(self, left: Combination, other: NoiseForm, right: Combination) -> FloatArray:
        """Row by row, Cov((left·a)_i, (right·a')_i) for this block's answers a and ``other``'s a';
        ``left`` and ``right`` are combinations over the two blocks' answer rows, one row per output."""


def _per_pair(left: Combination, right: Combination, paired: Callable[[IntArray, IntArray], FloatArray]) -> FloatArray:
    """``paired`` (distinct rows of ``left``, of ``right``) computed once per distinct pair of the two
    combinations' rows that some output pairs, then given to every output of that pair."""
    pairs, inverse = np.unique(np.stack([left.which, right.which]), axis=1, return_inverse=True)
    return np.asarray(paired(pairs[0], pairs[1])[inverse.ravel()], dtype=np.float64)


def _zeros(left: Combination) -> FloatArray:
    return np.zeros(left.outputs)


@dataclass(frozen=True, slots=True, eq=False)
class ExactForm(NoiseForm):
    """Answers with no noise (an identically zero workload's exact zeros)."""

    def covariance(self, left: Combination, other: NoiseForm, right: Combination) -> FloatArray:
        return _zeros(left)


@dataclass(frozen=True, slots=True, eq=False)
class MeasuredForm(NoiseForm):
    """a = scale · W x̂ with Cov(x̂) = variance · profile, profile = (ÃᵀÃ)⁺ of the measurement
    ``source`` (or a local-DP estimate's cell covariance, variance 1)."""

    workload: Workload
    profile: Workload
    variance: float
    scale: float
    source: object

    def covariance(self, left: Combination, other: NoiseForm, right: Combination) -> FloatArray:
        if not isinstance(other, MeasuredForm) or other.source is not self.source:
            return _zeros(left)
        if left.distinct.shape[0] < right.distinct.shape[0]:  # Cov is symmetric: spread the side with fewer
            return other.covariance(right, self, left)
        reach = np.asarray(other.workload.T @ right.distinct.T.toarray(), dtype=np.float64)  # W'ᵀ Rᵀ: cells × D
        spread = np.asarray(self.workload @ np.asarray(self.profile @ reach), dtype=np.float64)  # W M W'ᵀ Rᵀ

        def paired(lefts: IntArray, rights: IntArray) -> FloatArray:
            rows = sp.coo_array(left.distinct[lefts])
            return np.asarray(np.bincount(rows.row, weights=rows.data * spread[rows.col, rights[rows.row]],
                                          minlength=lefts.size), dtype=np.float64)

        return self.variance * self.scale * other.scale * _per_pair(left, right, paired)


@dataclass(frozen=True, slots=True, eq=False)
class WhitenedForm(NoiseForm):
    """a = scale · (rows lifted onto a GLS pool's cells) x̂ with Cov(u x̂, v x̂) = (u·V)·(v·V):
    ``whitened`` holds each answer row times V; ``source``: the pool."""

    whitened: FloatArray
    scale: float
    source: object

    def covariance(self, left: Combination, other: NoiseForm, right: Combination) -> FloatArray:
        if not isinstance(other, WhitenedForm) or other.source is not self.source:
            return _zeros(left)
        ours, theirs = left.distinct @ self.whitened, right.distinct @ other.whitened
        return self.scale * other.scale * _per_pair(
            left, right, lambda lefts, rights: np.einsum("ij,ij->i", ours[lefts], theirs[rights]))
