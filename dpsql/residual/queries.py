"""Linear queries over one marginal table: Kronecker-factored rows, their answers and exact variances.

The SQL route of ResidualPlanner (Xiao, He, Zhang and Kifer, "An Optimal and Scalable Matrix
Mechanism for Noisy Marginals under Convex Loss Functions", NeurIPS 2023) answers a GROUP BY with
a WHERE clause as linear queries over the reconstructed marginal tables; this module gives their
answers, their exact variances and their weight in the selection. Pure post-processing.

A block of queries on the marginal A (attribute tuple, table shape (nᵢ)_{i∈A}) is
    F = Σ_t ⊗_{i∈A} F_{t,i},   F_{t,i} of shape (rᵢ × nᵢ),
so F has Π rᵢ rows in row-major order and answers F·vec(q_A). GROUP BY counts are the case of one
term whose factors pick one cell per row (rows of the identity); a WHERE clause masks cells, and
an OR of boxes adds terms.

Variance: ResidualPlanner's reconstruction q_A has covariance (He, Xiao, Toksoz, Ding, Zhang and
Kifer, "ResidualPlanner+: a scalable matrix mechanism for marginals and beyond", arXiv:2305.08175,
2023, Thm 4.4)
    Cov(q_A) = Σ_{S⊆A} σ_S² ⊗_{i∈S} (I − J/nᵢ) ⊗_{i∈A∖S} J/nᵢ²,
so every row of F has the variance
    Var(F q_A)_r = Σ_{S⊆A} σ_S² Σ_{t,u} Π_{i∈S} a_{tu,i}[rᵢ] Π_{i∈A∖S} b_{tu,i}[rᵢ],
    a_{tu,i} = rowsum(F_{t,i} ∘ F_{u,i}) − rowsum(F_{t,i})·rowsum(F_{u,i})/nᵢ,
    b_{tu,i} = rowsum(F_{t,i})·rowsum(F_{u,i})/nᵢ²,
the diagonal of a Kronecker product being the Kronecker product of the diagonals. Cost
O(T² 2^|A| Π rᵢ) per block; nothing of size Π nᵢ² is formed.

Selection weight: when every factor's rows each pick one cell (GROUP BY on the marginal's own
cells, rᵢ of the nᵢ cells reported), every row has a = 1 − 1/nᵢ and b = 1/nᵢ², so the block's
total variance is w·cells(A)·Σ_{S⊆A} σ_S² p_S Π_{A∖S} nᵢ⁻² = w·cells(A)·V_A with w = Π rᵢ/nᵢ:
exactly ResidualPlanner's weighted sum-of-variances objective with weight w on A.
``selection_weight`` returns Σ_t Π ‖F_{t,i}‖²_F/nᵢ, which is that w for such blocks and a close
proxy otherwise (the reported variances stay exact).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql.errors import ShapeError
from dpsql.residual.lattice import FloatArray, Marginal


@dataclass(frozen=True, slots=True)
class MarginalQueries:
    """Rows Σ_t ⊗_{i∈A} F_{t,i} over the cells of the marginal ``marginal`` (row-major)."""

    marginal: Marginal
    terms: tuple[tuple[FloatArray, ...], ...]

    def __post_init__(self) -> None:
        if not self.terms:
            raise ShapeError("a block of marginal queries needs at least one Kronecker term.")
        for term in self.terms:
            if len(term) != len(self.marginal):
                raise ShapeError(f"each term needs one factor per attribute of {self.marginal}; got {len(term)}.")
            if [f.shape for f in term] != [f.shape for f in self.terms[0]]:
                raise ShapeError("every term of a block must have factors of the same shapes.")

    @property
    def row_counts(self) -> tuple[int, ...]:
        return tuple(f.shape[0] for f in self.terms[0])

    @property
    def shape(self) -> tuple[int, ...]:
        """The marginal table's shape (nᵢ)_{i∈A}."""
        return tuple(f.shape[1] for f in self.terms[0])

    @property
    def rows(self) -> int:
        return math.prod(self.row_counts)


def answer(queries: MarginalQueries, table: npt.ArrayLike) -> FloatArray:
    """F·vec(q_A): each term applied axis by axis to the table (mode products), then summed."""
    q = np.asarray(table, dtype=np.float64)
    if q.shape != queries.shape:
        raise ShapeError(f"the table of {queries.marginal} must have shape {queries.shape}; got {q.shape}.")
    total = np.zeros(queries.row_counts)
    for term in queries.terms:
        out = q
        for axis, factor in enumerate(term):
            out = np.moveaxis(np.tensordot(factor, out, axes=([1], [axis])), 0, axis)
        total += out
    return total.reshape(-1)


def variances(queries: MarginalQueries, sigma2: Callable[[Marginal], float]) -> FloatArray:
    """Exact per-row variance of F q_A when q_A is ResidualPlanner's reconstruction (module doc).

    ``sigma2(S)`` is the noise scale σ_S² of the residual measurement of every subset S of A.
    """
    k = len(queries.marginal)
    out = np.zeros(queries.rows)
    pairs = [(t, u) for t in queries.terms for u in queries.terms]
    per_axis = []  # per pair, per axis: (a, b) row vectors
    for t, u in pairs:
        axes = []
        for ft, fu, n in zip(t, u, queries.shape):
            st, su = ft.sum(axis=1), fu.sum(axis=1)
            axes.append(((ft * fu).sum(axis=1) - st * su / n, st * su / n**2))
        per_axis.append(axes)
    for mask in range(1 << k):
        subset = tuple(i for bit, i in enumerate(queries.marginal) if mask >> bit & 1)
        scale = sigma2(subset)
        if scale == 0.0:
            continue
        for axes in per_axis:
            row = np.ones(1)
            for bit, (a, b) in enumerate(axes):
                row = np.kron(row, a if mask >> bit & 1 else b)
            out += scale * row
    return out


def selection_weight(queries: MarginalQueries) -> float:
    """Σ_t Π_i ‖F_{t,i}‖²_F / nᵢ: the weight of A in the sum-of-variances selection (module doc)."""
    return float(sum(math.prod(float(np.sum(f * f)) / f.shape[1] for f in term) for term in queries.terms))


def is_zero(queries: MarginalQueries) -> bool:
    """Whether every row is identically zero (a WHERE clause that is never TRUE)."""
    return all(any(not np.any(f) for f in term) for term in queries.terms)

