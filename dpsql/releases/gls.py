"""Generalized least squares over every kept measurement of one data vector.

Measurements y_i = A_i x + z_i with independent noise Var z_i = σ_i² I, lifted onto joint cells
(:mod:`dpsql.releases.joint`), give the information M = Σ A_iᵀ A_i / σ_i² and b = Σ A_iᵀ y_i / σ_i².
A query row w is *answerable* when it lies in the row space of the stacked A_i, i.e. w M⁺ M = w
(checked against the eigenvectors of M with non-negligible eigenvalues); then w x̂ with
x̂ = M⁺ b is the best linear unbiased estimate (Gauss–Markov; Aitken, "On least squares and linear
combination of observations", 1935), with exact variance w M⁺ wᵀ and, for two rows,
Cov(u x̂, v x̂) = u M⁺ vᵀ. With a single measurement this is the matrix mechanism's own answer
W A⁺ y. Post-processing of released values: free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql.releases.joint import JointDomain
from dpsql.releases.kept import KeptMeasurement

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Eigenvalues of M below this share of the largest are its null space.
EIGEN_CUTOFF = 1e-10
#: A row is answerable when its part outside the row space is below this share of its norm.
SPAN_TOLERANCE = 1e-7


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Pool:
    """The information of ``members`` over ``domain``: M's range (``basis``, columns scaled by
    λ^(-1/2)) and the estimate x̂ = M⁺ b."""

    domain: JointDomain
    members: tuple[KeptMeasurement, ...]
    basis: FloatArray      # V_r: orthonormal eigenvectors of M with λ > cutoff
    whitened: FloatArray   # V_r λ_r^(-1/2): u M⁺ vᵀ = (u·whitened)·(v·whitened)
    estimate: FloatArray   # x̂ = M⁺ b

    @property
    def releases(self) -> tuple[int, ...]:
        """The releases whose measurements the pool holds, oldest first."""
        return tuple(sorted({m.release for m in self.members}))

    def answerable(self, rows: FloatArray) -> BoolArray:
        """Which rows (over the joint cells) lie in the span of the measurements."""
        outside = rows - (rows @ self.basis) @ self.basis.T
        scale = np.maximum(np.linalg.norm(rows, axis=1), 1.0)
        return np.asarray(np.linalg.norm(outside, axis=1) <= SPAN_TOLERANCE * scale)

    def values(self, rows: FloatArray) -> FloatArray:
        return np.asarray(rows @ self.estimate, dtype=np.float64)

    def covariances(self, first: FloatArray, second: FloatArray) -> FloatArray:
        """Row by row, Cov(u x̂, v x̂) = u M⁺ vᵀ (first = second: the variances)."""
        return np.asarray(np.sum((first @ self.whitened) * (second @ self.whitened), axis=1), dtype=np.float64)


def pool(domain: JointDomain, members: Sequence[KeptMeasurement]) -> Pool | None:
    """Sum the members' information on the joint cells and factor it (one symmetric
    eigendecomposition); None if LAPACK cannot (then nothing is answered from these members)."""
    n = domain.cells
    information, weighted = np.zeros((n, n)), np.zeros(n)
    for member in members:
        index = domain.index(member.axes)
        gram, rhs = member.information()
        information += gram[np.ix_(index, index)]
        weighted += rhs[index]
    if not np.all(np.isfinite(information)) or not np.all(np.isfinite(weighted)):
        return None
    try:
        eigenvalues, vectors = np.linalg.eigh(information)
    except np.linalg.LinAlgError:
        return None
    largest = float(eigenvalues.max()) if n else 0.0
    keep = eigenvalues > EIGEN_CUTOFF * largest if largest > 0 else np.zeros(n, dtype=bool)
    basis = vectors[:, keep]
    whitened = basis / np.sqrt(eigenvalues[keep])
    estimate = whitened @ (whitened.T @ weighted)
    return Pool(domain=domain, members=tuple(members), basis=basis, whitened=whitened, estimate=estimate)
