"""Euclidean projection of a matrix onto the ε-LDP polytope with row floors z (corrected Algorithm 1).

Notation: R (m × n) the point to project, z (m) the row floors, e = e^ε.

Math:
    Π_{z,ε}(R) = argmin ‖Q − R‖_F s.t. 1ᵀq_u = 1 and z ≤ q_u ≤ e z for every column u
    (McKenna et al., Problem 4.1). It separates by column: q_u = clip(r_u + λ_u, z, e z), with
    λ_u the root of f(λ) = Σ_k clip(r_k + λ, z_k, e z_k) = 1 (Prop. 4.2). f is piecewise linear
    and non-decreasing with breakpoints z_k − r_k (slope +1 after it) and e z_k − r_k (slope −1
    after it); f(−∞) = 1ᵀz and f(+∞) = e 1ᵀz, so a root exists iff 1ᵀz ≤ 1 ≤ e 1ᵀz. Sorting the
    2m breakpoints u_1 ≤ … ≤ u_2m with running slopes S_i, f(u_1) = 1ᵀz and
    f(u_{i+1}) = f(u_i) + S_i (u_{i+1} − u_i); with i* the first index where f(u_i) ≥ 1,
    λ = u_1 if i* = 1, else u_{i*−1} + (1 − f(u_{i*−1})) / S_{i*−1}. (The paper's printed
    Algorithm 1 has inconsistent signs; this is the corrected form.)
    Cost O(m log m) per column, vectorised over all columns.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from dpsql.errors import DpsqlError, ProgrammingError, ShapeError
from dpsql.matrix.workloads import FloatArray


class InfeasibleFloorError(DpsqlError, ProgrammingError, ValueError):
    """The row floors z admit no distribution: 1ᵀz > 1 or e^ε 1ᵀz < 1."""


def project(R: npt.ArrayLike, z: npt.ArrayLike, *, epsilon: float) -> FloatArray:
    """Π_{z,ε}(R): the nearest matrix whose columns are distributions within [z, e^ε z].

    The returned entries are exactly ``z`` or exactly ``math.exp(epsilon) * z`` where a bound is
    active, so callers can detect active bounds with ``==``.

    >>> project([[1.0], [0.0], [0.0], [0.0]], [0.1] * 4, epsilon=math.log(3)).ravel().round(4).tolist()
    [0.3, 0.2333, 0.2333, 0.2333]

    Raises:
        ShapeError: R is not m × n or z is not an m-vector of finite non-negative floors.
        InfeasibleFloorError: 1ᵀz > 1 or e^ε 1ᵀz < 1 (no column can satisfy the bounds).
    """
    R = np.asarray(R, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64)
    if R.ndim != 2 or z.shape != (R.shape[0],):
        raise ShapeError(f"project needs R (m × n) and z (m); got shapes {R.shape} and {z.shape}.")
    if not (np.all(np.isfinite(R)) and np.all(np.isfinite(z))) or z.min(initial=0.0) < 0:
        raise ShapeError("project needs finite R and finite, non-negative floors z.")
    upper = math.exp(epsilon) * z
    floor_total, ceiling_total = float(z.sum()), float(upper.sum())
    if not floor_total <= 1.0 <= ceiling_total:
        raise InfeasibleFloorError(f"the row floors admit no distribution: 1ᵀz = {floor_total:.6g} and "
                                   f"e^ε 1ᵀz = {ceiling_total:.6g} must bracket 1.")
    m, n = R.shape
    breakpoints = np.concatenate([z[None, :] - R.T, upper[None, :] - R.T], axis=1)   # (n, 2m): one column per row
    order = np.argsort(breakpoints, axis=1)
    points = np.take_along_axis(breakpoints, order, axis=1)
    slopes = np.cumsum(np.where(order < m, 1.0, -1.0), axis=1)                      # S_i: slope right of u_i
    values = floor_total + np.concatenate([np.zeros((n, 1)),
                                           np.cumsum(slopes[:, :-1] * np.diff(points, axis=1), axis=1)],
                                          axis=1)
    # f(u_2m) = e 1ᵀz ≥ 1, up to rounding
    reached = values >= 1.0
    first = np.where(reached.any(axis=1), np.argmax(reached, axis=1), 2 * m - 1)      # i* (0-based)
    columns = np.arange(n)
    previous = np.maximum(first - 1, 0)
    slope = slopes[columns, previous]
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.where(slope > 0, (1.0 - values[columns, previous]) / slope, 0.0)
    lam = np.where(first == 0, points[:, 0], points[columns, previous] + step)
    return np.asarray(np.clip(R + lam[None, :], z[:, None], upper[:, None]), dtype=np.float64)
