"""Generalized least squares over kept measurements of one data vector, on one group's cells.

Measurements y_i = A_i x + z_i with independent noise Var z_i = σ_i² I, each reduced onto the
pool's target cells T, which refine the group's (:mod:`dpsql.releases.reduce`: its information S_i
and score r_i about x_T), give the information M = Σ S_i and the score b = Σ r_i. A query row
over the group's cells is lifted onto T (a T cell lies in one group cell: w_T = w[cell of each T
cell]). A query row w is *answerable* when it lies in
the range of M (checked against the eigenvectors of M with non-negligible eigenvalues); then w x̂
with x̂ = M⁺ b is the best linear unbiased estimate from the reduced measurements (Gauss–Markov;
Aitken, "On least squares and linear combination of observations", 1935), with exact variance
w M⁺ wᵀ and, for two rows, Cov(u x̂, v x̂) = u M⁺ vᵀ. With a single measurement over the group's
own cells this is the matrix mechanism's own answer W A⁺ y. More measurements only add to M, so
no answer's variance grows when one joins (M' ⪰ M gives w M'⁺ wᵀ ≤ w M⁺ wᵀ on M's range).
Post-processing of released values: free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql.releases.kept import KeptMeasurement
from dpsql.releases.whitening import above_cutoff, whitening

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

#: Eigenvalues of M below this share of the largest are its null space.
EIGEN_CUTOFF = 1e-10
#: A row is answerable when its part outside the row space is below this share of its norm.
SPAN_TOLERANCE = 1e-7
#: A part (S_i, r_i, R_i) over the target cells: its information, score and a root of few rows
#: (RᵢᵀRᵢ = S_i) where one is known; S_i is None when R_i stands for it (:func:`information_of`).
Part = tuple[FloatArray | None, FloatArray, FloatArray | None]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Pool:
    """The information of ``members`` over the target cells: M's range (``basis``, or the target
    ``cells`` whose unit vectors span it), a whitening of M⁺ and the estimate x̂ = M⁺ b. ``lift``: per
    target cell, the group cell holding it (-1: a cell no row can fall in, a known zero)."""

    members: tuple[KeptMeasurement, ...]
    lift: IntArray
    basis: FloatArray | None  # V_r: orthonormal eigenvectors of M with λ > cutoff (None: ``cells`` span M's range)
    whitened: FloatArray      # W with M⁺ = W Wᵀ: u M⁺ vᵀ = (u·W)·(v·W)
    estimate: FloatArray      # x̂ = M⁺ b
    cells: IntArray | None = None  # target cells whose unit vectors span M's range (a full-rank M restricted to them)

    @property
    def nbytes(self) -> int:
        """Bytes of the factorisation held."""
        span = self.basis if self.basis is not None else self.cells
        return (0 if span is None else span.nbytes) + self.whitened.nbytes + self.estimate.nbytes

    @property
    def releases(self) -> tuple[int, ...]:
        """The releases whose measurements the pool holds, oldest first."""
        return tuple(sorted({m.release for m in self.members}))

    def _rows(self, rows: FloatArray) -> FloatArray:
        """Rows over the group's cells, lifted onto the target cells."""
        return np.where(self.lift[None, :] >= 0, rows[:, np.maximum(self.lift, 0)], 0.0)

    def projected(self, rows: FloatArray) -> Projection:
        """Rows over the group's cells as :meth:`answerable`, :meth:`values` and :meth:`covariances`
        read them, lifted and whitened once (the same floating-point operations)."""
        lifted = self._rows(rows)
        if self.basis is not None:
            outside = lifted - (lifted @ self.basis) @ self.basis.T
        else:  # the projection onto unit vectors keeps their entries: the rest is outside
            outside = lifted.copy()
            outside[:, self.cells] = 0.0
        scale = np.maximum(np.linalg.norm(lifted, axis=1), 1.0)
        return Projection(answerable=np.asarray(np.linalg.norm(outside, axis=1) <= SPAN_TOLERANCE * scale),
                          values=np.asarray(lifted @ self.estimate, dtype=np.float64),
                          whitened=lifted @ self.whitened)


@dataclass(frozen=True, slots=True)
class Projection:
    """Rows read through a pool: which lie in its span, their values u x̂, and u·whitened, so that
    Cov(u x̂, v x̂) = Σ (u·whitened)(v·whitened) (:meth:`Pool.covariances`)."""

    answerable: BoolArray
    values: FloatArray
    whitened: FloatArray

    def covariances(self, other: Projection) -> FloatArray:
        """Row by row, Cov(u x̂, v x̂) (``other`` = self: the variances)."""
        return np.asarray(np.sum(self.whitened * other.whitened, axis=1), dtype=np.float64)


def pool(members: Sequence[KeptMeasurement], parts: Sequence[Part], lift: IntArray) -> Pool | None:
    """Sum the reduced information ``parts`` ((S_i, r_i, root) over the target cells) and factor it
    (:func:`combined`); None if LAPACK cannot (then nothing is answered from them)."""
    return combined(members, parts, lift)[0]


@dataclass(frozen=True, slots=True)
class Sums:
    """Parts summed so far: Σ S_i (None: every part had a root and the pool was factored from them),
    Σ r_i and the parts' roots in order (None: some part had none)."""

    information: FloatArray | None
    score: FloatArray
    roots: tuple[FloatArray, ...] | None

    @property
    def nbytes(self) -> int:
        held = self.score.nbytes + (self.information.nbytes if self.information is not None else 0)
        return held + sum(R.nbytes for R in self.roots or ())


def combined(members: Sequence[KeptMeasurement], parts: Sequence[Part], lift: IntArray,
             start: Sums | None = None) -> tuple[Pool | None, Sums]:
    """The pool of ``parts`` added in order onto ``start`` (earlier parts' sums), and the new sums.

    When every part has a root and the stacked roots have fewer rows than cells they reach, M = RᵀR is
    factored from R (:func:`factor`) and Σ S_i is never formed; otherwise Σ S_i is summed in order,
    each part's S_i or RᵢᵀRᵢ, the same floating-point sums whatever was kept before."""
    n = lift.size
    score = (np.zeros(n) if start is None else start.score.copy())
    for _, r, _ in parts:
        score += r
    stacked = roots(parts, () if start is None else start.roots)
    if stacked is not None:
        root = np.concatenate(stacked) if stacked else np.zeros((0, n))
        if root.shape[0] < np.count_nonzero(np.any(root != 0, axis=0)):
            return _factor_root(members, root, score, lift), Sums(information=None, score=score, roots=stacked)
    earlier = None if start is None else start.information
    if start is not None and earlier is None:  # the earlier parts were kept as roots only
        earlier = summed((R.T @ R for R in start.roots or ()), n)
    information = summed((information_of(part) for part in parts), n, start=earlier)
    return factor(members, information, score, lift), Sums(information=information, score=score, roots=stacked)


def information_of(part: Part) -> FloatArray:
    """A part's S_i (RᵢᵀRᵢ where only its root is kept)."""
    S, _, root = part
    if S is not None:
        return S
    assert root is not None
    return root.T @ root


def summed(informations: Iterable[FloatArray], cells: int, start: FloatArray | None = None) -> FloatArray:
    """Σ S_i over ``cells`` target cells, added in order onto ``start`` (a sum of earlier parts, left
    untouched; default zeros): the same floating-point sums as adding every part to zeros."""
    information = np.zeros((cells, cells)) if start is None else start.copy()
    for S in informations:
        information += S
    return information


def roots(parts: Sequence[Part], start: tuple[FloatArray, ...] | None = ()) -> tuple[FloatArray, ...] | None:
    """The parts' roots after ``start`` (the earlier parts' roots; None: one of them had none), in
    order; None when some part has none."""
    if start is None or any(root is None for _, _, root in parts):
        return None
    return (*start, *(root for _, _, root in parts if root is not None))


def factor(members: Sequence[KeptMeasurement], information: FloatArray, score: FloatArray,
           lift: IntArray) -> Pool | None:
    """The pool of the information M = ``information`` and score b = ``score``: M's Cholesky factor when
    its full rank is certain (:mod:`dpsql.releases.whitening`), else one symmetric eigendecomposition
    of M (None if M is not finite or LAPACK cannot factor it).

    Given a root R of M (M = RᵀR, :func:`combined`) with fewer rows than the cells it reaches (M's
    non-zero diagonal entries), M is singular on those cells (no Cholesky factor exists) and its
    eigendecomposition is the thin SVD R = U Σ Vᵀ (:func:`_factor_root`): eigenpairs (σᵢ², vᵢ), kept by
    the same cutoff, at about 4m²n + 8m³ operations against the ≈ 9n³ of a symmetric eigendecomposition
    with vectors (Golub and Van Loan, "Matrix Computations", 2013, 8.3 and 8.6)."""
    if not np.all(np.isfinite(information)) or not np.all(np.isfinite(score)):
        return None
    found = whitening(information, EIGEN_CUTOFF)
    if found is not None:  # M's range: the cells with a non-zero diagonal entry
        kept, whitened = found
        return Pool(members=tuple(members), lift=lift, basis=None, cells=kept, whitened=whitened,
                    estimate=whitened @ (whitened.T @ score))
    try:
        eigenvalues, vectors = np.linalg.eigh(information)
    except np.linalg.LinAlgError:
        return None
    keep = above_cutoff(eigenvalues, EIGEN_CUTOFF)
    basis = vectors[:, keep]
    whitened = basis / np.sqrt(eigenvalues[keep])
    estimate = whitened @ (whitened.T @ score)
    return Pool(members=tuple(members), lift=lift, basis=basis, whitened=whitened, estimate=estimate)


def _factor_root(members: Sequence[KeptMeasurement], root: FloatArray, score: FloatArray,
                 lift: IntArray) -> Pool | None:
    """:func:`factor` of M = RᵀR from R, by its thin SVD (eigenvalues σᵢ² above the cutoff kept)."""
    if not np.all(np.isfinite(root)) or not np.all(np.isfinite(score)):
        return None
    try:
        _, singular, right = np.linalg.svd(root, full_matrices=False)
    except np.linalg.LinAlgError:
        return None
    keep = above_cutoff(singular**2, EIGEN_CUTOFF)
    basis = np.ascontiguousarray(right[keep].T)
    whitened = basis / singular[keep]
    return Pool(members=tuple(members), lift=lift, basis=basis, whitened=whitened,
                estimate=whitened @ (whitened.T @ score))
