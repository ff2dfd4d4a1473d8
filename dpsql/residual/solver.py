"""The convex program behind the max-variance selections: min Σ P/u subject to C u ≤ 1, u > 0.

Both ResidualPlanner and ResidualPlanner+ (Xiao, He, Zhang and Kifer, "An Optimal and Scalable
Matrix Mechanism for Noisy Marginals under Convex Loss Functions", NeurIPS 2023; He, Xiao, Toksoz,
Ding, Zhang and Kifer, "ResidualPlanner+: a scalable matrix mechanism for marginals and beyond",
arXiv:2305.08175, 2023) choose noise scales u_S = σ_S² that minimise the privacy cost Σ_S P_S/u_S
subject to linear variance constraints C u ≤ 1, C ≥ 0 (one row per constrained variance, one
column per noise scale), then rescale to the budget. The objective is strictly convex and the
constraints linear, so the optimum is unique; a primal–dual interior-point method (Mehrotra
predictor–corrector, about a dozen factorisations on the paper's workloads) finds it and stops at a
certified relative gap of GAP_TOLERANCE against the dual bound (Σ √(P·Cᵀλ))²/Σλ, valid for every
λ ≥ 0. Chosen over SLSQP/trust-constr (dense, slower, no certificate) and over first-order dual
methods (too slow to reach the 1e-6 the paper's tables need). Problems with more than
DENSE_KKT_LIMIT columns solve the Newton systems by Jacobi-preconditioned conjugate gradients on
the sparse C. Pure optimisation over public quantities: no data, no privacy cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dpsql.residual.lattice import FloatArray, IntArray

__all__ = ["DENSE_KKT_LIMIT", "GAP_TOLERANCE", "IPM_ITERATIONS", "kkt_solver", "minimise_cost", "normalise"]

#: Relative duality gap at which the max-variance solver stops.
GAP_TOLERANCE = 1e-9
#: Largest problem (columns) whose Newton systems are solved densely.
DENSE_KKT_LIMIT = 2000
#: Most interior-point iterations (each one factorisation).
IPM_ITERATIONS = 200


def normalise(p: FloatArray, count: IntArray, sigma2: FloatArray, c: float) -> FloatArray:
    """σ² rescaled so that Σ count·p/σ² = c to a few ulps (each term positive, summed exactly)."""
    cost = math.fsum((count * p / sigma2).tolist())
    return sigma2 * (cost / c)


def minimise_cost(P: FloatArray, C: sp.csr_array) -> tuple[FloatArray, float]:
    """u > 0 minimising F(u) = Σ P/u subject to C u ≤ 1, and a lower bound on min F.

    Primal–dual interior point (Mehrotra predictor–corrector) on the KKT system
        −P/u² + Cᵀλ = 0,  Cu + s = 1,  λ∘s = σμ,  with s, λ, u > 0,
    one factorisation of H = diag(2P/u³) + Cᵀ diag(λ/s) C per iteration. Every λ ≥ 0 gives the
    lower bound a²/Σλ, a = Σ √(P·Cᵀλ) (the Lagrange dual function maximised over the scale of λ),
    and u/max(Cu) is feasible: stop once their values are within GAP_TOLERANCE.
    """
    m = C.shape[0]
    u = np.sqrt(P / np.asarray(C.sum(axis=0)).ravel())
    u *= 0.5 / float((C @ u).max())
    s = 1.0 - C @ u
    lam = math.fsum((P / u).tolist()) / m / s
    best, lower = u, 0.0
    for _ in range(IPM_ITERATIONS):
        a = float(np.sum(np.sqrt(P * (C.T @ lam))))
        lower = max(lower, a * a / float(lam.sum()))
        best = u / float((C @ u).max())
        value = math.fsum((P / best).tolist())
        if value - lower <= GAP_TOLERANCE * value:
            break
        mu = float(s @ lam) / m
        try:
            solve = kkt_solver(C, 2.0 * P / u**3, lam / s)
        except np.linalg.LinAlgError:  # numerically singular this close to the optimum: keep the certified point
            break
        residuals = (-P / u**2 + C.T @ lam, C @ u + s - 1.0)
        du, ds, dl = _direction(C, solve, residuals, s, lam, lam * s)
        alpha = _step_length((u, s, lam), (du, ds, dl))
        affine = float((s + alpha * ds) @ (lam + alpha * dl)) / m
        du, ds, dl = _direction(C, solve, residuals, s, lam, lam * s + ds * dl - (affine / mu) ** 3 * mu)
        # fraction to the boundary, and u may at most halve per step: the objective P/u is
        # nonlinear, and a full Newton step can collapse a scale towards 0
        alpha = min(0.99 * _step_length((u, s, lam), (du, ds, dl)), _step_length((0.5 * u,), (du,)))
        u, s, lam = u + alpha * du, s + alpha * ds, lam + alpha * dl
    return best, lower


def _direction(
    C: sp.csr_array, solve: Callable[[FloatArray], FloatArray], residuals: tuple[FloatArray, FloatArray],
    s: FloatArray, lam: FloatArray, complementarity: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(Δu, Δs, Δλ) of the linearised KKT system with λ∘s − target = ``complementarity`` (r_c).

    With the dual residual r_d = −P/u² + Cᵀλ and the primal r_p = Cu + s − 1, eliminating
    Δs = −r_p − CΔu and Δλ = −(r_c + λ∘Δs)/s leaves H Δu = −r_d + Cᵀ((r_c − λ∘r_p)/s).
    """
    dual, primal = residuals
    du = solve(-dual + C.T @ ((complementarity - lam * primal) / s))
    ds = -primal - C @ du
    return du, ds, -(complementarity + lam * ds) / s


def _step_length(point: tuple[FloatArray, ...], step: tuple[FloatArray, ...]) -> float:
    """The largest α ≤ 1 keeping every component of every point + α·step positive."""
    alpha = 1.0
    for x, dx in zip(point, step):
        shrink = dx < 0
        if shrink.any():
            alpha = min(alpha, float(np.min(-x[shrink] / dx[shrink])))
    return alpha


def kkt_solver(C: sp.csr_array, curvature: FloatArray, weight: FloatArray) -> Callable[[FloatArray], FloatArray]:
    """x ↦ (diag(curvature) + Cᵀ diag(weight) C)⁻¹ x: Jacobi-scaled Cholesky, or Jacobi-CG when large."""
    scaled = sp.diags_array(np.sqrt(weight)) @ C
    diagonal = curvature + np.asarray(scaled.multiply(scaled).sum(axis=0)).ravel()
    if C.shape[1] <= DENSE_KKT_LIMIT:
        d = 1.0 / np.sqrt(diagonal)
        H = (scaled.T @ scaled).toarray()
        H[np.diag_indices_from(H)] += curvature
        factor = sla.cho_factor(H * d[:, None] * d[None, :])
        return lambda x: d * sla.cho_solve(factor, x * d)
    operator = spla.LinearOperator(
        (C.shape[1], C.shape[1]), dtype=np.float64, matvec=lambda x: curvature * x + scaled.T @ (scaled @ x),
    )
    jacobi = spla.LinearOperator(operator.shape, dtype=np.float64, matvec=lambda x: x / diagonal)
    return lambda x: spla.cg(operator, x, rtol=1e-12, maxiter=10 * C.shape[1], M=jacobi)[0]

