"""The whitening of a positive definite information matrix by its Cholesky factor, when its rank is
certain, before falling back to an eigendecomposition.

A symmetric M whose eigenvalues all exceed ``cutoff`` times the largest is of full rank under the
cutoff rule the pools and reductions use (eigenvalues below that share are the null space). Its
Cholesky factor M = L Lᵀ gives M⁻¹ = L⁻ᵀ L⁻¹, so u M⁻¹ vᵀ = (u L⁻ᵀ)·(v L⁻ᵀ): W = L⁻ᵀ plays the part
of V λ^(-1/2). The rank is certain from traces alone: λ_max ≤ tr M and 1/λ_min ≤ tr M⁻¹ = ‖L⁻¹‖²_F,
so λ_max/λ_min ≤ tr M · tr M⁻¹; when that bound is below 1/cutoff (with a margin of
:data:`MARGIN` for rounding), every eigenvalue is kept. About n³/3 + n³/3 multiply-adds against the
≈ 9n³ of a symmetric eigendecomposition with vectors (Golub and Van Loan, "Matrix Computations",
2013, 4.2 and 8.3).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.linalg import solve_triangular

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: The condition bound tr M · tr M⁻¹ must stay below 1/cutoff by this factor.
MARGIN = 100.0


def above_cutoff(eigenvalues: FloatArray, cutoff: float) -> npt.NDArray[np.bool_]:
    """The cutoff rule: which eigenvalues exceed ``cutoff`` times the largest (none when the largest is
    not positive); the others are the null space."""
    largest = float(eigenvalues.max()) if eigenvalues.size else 0.0
    return eigenvalues > cutoff * largest if largest > 0 else np.zeros(eigenvalues.size, dtype=bool)


def whitening(information: FloatArray, cutoff: float) -> tuple[IntArray, FloatArray] | None:
    """(kept, W): the cells whose diagonal entry is not zero, and W (n × kept) with W Wᵀ = M⁺, when M
    restricted to them is certainly of full rank under ``cutoff`` (module docstring; a zero diagonal
    entry of a positive semidefinite M is a zero row and column: e_i spans an exact null direction,
    which the eigendecomposition's cutoff drops too); None otherwise (then decompose M)."""
    found = certain_cholesky(information, cutoff)
    if found is None:
        return None
    kept, _, inverse = found
    whitened = np.zeros((information.shape[0], kept.size))
    whitened[kept] = inverse.T
    return kept, whitened


def certain_cholesky(information: FloatArray, cutoff: float) -> tuple[IntArray, FloatArray, FloatArray] | None:
    """(kept, L, L⁻¹): the cells whose diagonal entry is not zero and the Cholesky factor of M restricted
    to them (M[kept, kept] = L Lᵀ) with its inverse, when that restriction is certainly of full rank
    under ``cutoff`` (tr M · tr M⁻¹ · cutoff · MARGIN < 1: no eigenvalue of M outside the zero rows is
    at or below ``cutoff`` of the largest); None otherwise."""
    n = information.shape[0]
    kept = np.flatnonzero(np.diagonal(information) != 0)
    if kept.size == 0:
        return None
    part = information[np.ix_(kept, kept)] if kept.size < n else information
    try:
        lower = np.asarray(np.linalg.cholesky(part), dtype=np.float64)
    except np.linalg.LinAlgError:
        return None
    inverse: FloatArray = solve_triangular(lower, np.eye(kept.size), lower=True, check_finite=False)  # L⁻¹
    bound = float(np.trace(part)) * float(np.sum(inverse * inverse))
    if not bound * cutoff * MARGIN < 1.0:
        return None
    return kept.astype(np.int64), lower, inverse
