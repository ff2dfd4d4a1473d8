"""The budget split that keeps both promises: no statement worse than answering it alone, and the
batch objective at its least subject to that.

Notation (``dpsql.planning.weights``): measurement K gets the fraction x_K of the budget E (ε, or
ρ), Σ_K x_K = 1. Statement s's mean squared error relative to answering it alone is

    r_s(x) = β_s + Σ_K H_sK / x_K^p,     p = 2 (Laplace: Var ∝ 1/ε²), p = 1 (Gaussian: Var ∝ 1/ρ),

with H_sK ≥ 0 its noise terms (already divided by E^p) and β_s its bias part (rounded value
cells). The batch objective is J(x) = Σ_s w_s·r_s(x), and the split solves

    minimise J(x)   subject to   r_s(x) ≤ 1 for every statement s,   Σ_K x_K = 1,   x ≥ 0.

It is convex (x^{-p} is convex on x > 0). Without the constraints the optimum is closed form,
x_K ∝ A_K^{1/(p+1)} with A_K = Σ_s w_s·H_sK (``planner.split_budget``), J* = Σ_s w_s β_s +
(Σ_K A_K^{1/(p+1)})^{p+1}. With them, the KKT conditions (Boyd and Vandenberghe, "Convex
Optimization", 2004, §5.5.3) make the optimum that same closed form under the weights w_s + λ_s,
λ_s ≥ 0, λ_s·(r_s − 1) = 0: a statement held at its promise gets exactly the extra weight that keeps
it there, and the others keep theirs. The split is found by sequential quadratic programming
(Kraft, "A software package for sequential quadratic programming", 1988; scipy's SLSQP), bounded by
SPLIT_ITERATIONS iterations (a count of work, never time), then checked; λ is recovered from the
KKT conditions by non-negative least squares.

When no split meets every promise (a statement whose strategy, given the whole budget, is still
worse than alone, or whose bias alone exceeds it), the promise is relaxed to the least achievable
worst ratio t* = min_x max_s r_s(x) > 1 (first solved as its own convex problem), and J is
minimised subject to r_s ≤ t*.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize, nnls

from dpsql.noise import Noise

#: Iterations of each SLSQP solve (a count of work, not time).
SPLIT_ITERATIONS = 200

#: The least fraction of the budget a measurement with noise terms gets, as log x (e^-40 ≈ 4e-18).
FLOOR = -40.0

#: A solution meets a cap when every ratio is within this relative slack of it.
SLACK = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstrainedSplit:
    """The split and what it keeps.

    ``fractions``: x_K (0 for a measurement no statement's error depends on); ``ratios``: r_s at
    them; ``objective``: J there; ``unconstrained``: J*, the least J of any split, promises aside;
    ``cap``: the promise held (1, or the least achievable worst ratio t* when 1 cannot be met);
    ``weights``: w_s + λ_s, whose closed-form split is this one.
    """

    fractions: tuple[float, ...]
    ratios: tuple[float, ...]
    objective: float
    unconstrained: float
    cap: float
    weights: tuple[float, ...]


def power_of(noise: Noise) -> int:
    """p: the power of a measurement's share in its variance (2 for Laplace, 1 for Gaussian)."""
    return 2 if noise == "laplace" else 1


def ratios_at(H: np.ndarray, beta: np.ndarray, fractions: np.ndarray, power: int) -> np.ndarray:
    """r_s(x) = β_s + Σ_K H_sK / x_K^p (a measurement with no terms contributes 0 at any share)."""
    used = H.any(axis=0)
    inverse = np.zeros(H.shape[1])
    inverse[used] = np.power(fractions[used], -float(power))
    return beta + H @ inverse


def closed_form(H: np.ndarray, weights: np.ndarray, power: int) -> np.ndarray:
    """The unconstrained optimum x_K ∝ A_K^{1/(p+1)}, A_K = Σ_s w_s·H_sK (all zeros when A = 0)."""
    root = np.power(weights @ H, 1.0 / (power + 1))
    total = root.sum()
    return root / total if total > 0 else root


def solve(H: np.ndarray, beta: np.ndarray, weights: Sequence[float], noise: Noise) -> ConstrainedSplit:
    """The split of the module doc for ``H`` (statements × measurements), ``beta`` and ``weights``."""
    power = power_of(noise)
    w = np.asarray(weights, dtype=np.float64)
    free = closed_form(H, w, power)
    unconstrained = float(w @ ratios_at(H, beta, free, power))
    used = np.flatnonzero(H.any(axis=0))
    bound = np.flatnonzero(H.any(axis=1))  # statements a split can move
    start = ratios_at(H, beta, free, power)
    if used.size == 0 or bound.size == 0 or start[bound].max() <= 1:
        return ConstrainedSplit(fractions=tuple(free), ratios=tuple(start), objective=unconstrained,
                                unconstrained=unconstrained, cap=1.0, weights=tuple(w))
    h, b = H[np.ix_(bound, used)], beta[bound]
    least, worst = _least_worst(h, b, free[used], power)
    cap = 1.0 if worst <= 1 + SLACK else worst * (1 + SLACK)
    x = _least_objective(h, b, w @ H[:, used], least, cap, power, unconstrained)
    fractions = np.zeros(H.shape[1])
    fractions[used] = x
    ratios = ratios_at(H, beta, fractions, power)
    raised = w.copy()
    raised[bound] += _multipliers(h, b, w[bound], x, cap, power)
    return ConstrainedSplit(fractions=tuple(fractions), ratios=tuple(ratios), objective=float(w @ ratios),
                            unconstrained=unconstrained, cap=cap, weights=tuple(raised))


def _least_worst(h: np.ndarray, b: np.ndarray, start: np.ndarray, power: int) -> tuple[np.ndarray, float]:
    """(x, t*): a split of least worst ratio, min_x max_s r_s(x), as min t s.t. r_s(x) ≤ t (in
    y = log x: every function convex, the simplex as Σ e^y ≤ 1)."""
    n = start.size

    def rates(z: np.ndarray) -> np.ndarray:
        return b + h @ np.exp(-power * z[:n])

    def slopes(z: np.ndarray) -> np.ndarray:  # ∂(t − r_s)/∂(y, t)
        return np.hstack([power * h * np.exp(-power * z[:n]), np.ones((h.shape[0], 1))])

    y0 = np.log(start)
    z0 = np.append(y0, rates(np.append(y0, 0.0)).max())
    result = minimize(lambda z: z[n], z0, jac=lambda z: np.eye(n + 1)[n], method="SLSQP",
                      bounds=[(FLOOR, 0.0)] * n + [(0.0, None)],
                      constraints=[{"type": "ineq", "fun": lambda z: z[n] - rates(z), "jac": slopes},
                                   {"type": "ineq", "fun": lambda z: 1.0 - np.exp(z[:n]).sum(),
                                    "jac": lambda z: np.append(-np.exp(z[:n]), 0.0)}],
                      options={"maxiter": SPLIT_ITERATIONS, "ftol": 1e-12})
    x = _on_simplex(np.exp(result.x[:n]))
    worst = float((b + h @ np.power(x, -float(power))).max())
    first = float((b + h @ np.power(start, -float(power))).max())
    return (x, worst) if worst <= first else (start, first)


def _least_objective(h: np.ndarray, b: np.ndarray, a: np.ndarray, feasible: np.ndarray, cap: float, power: int,
                     scale: float) -> np.ndarray:
    """argmin_x Σ_K a_K/x_K^p (J less its constant part) s.t. r_s(x) ≤ cap, from the feasible
    ``feasible`` (in y = log x, as :func:`_least_worst`); that split itself when the solve does not
    return a better one meeting the cap."""
    n = feasible.size
    scale = scale if scale > 0 else 1.0
    result = minimize(lambda y: float(a @ np.exp(-power * y)) / scale, np.log(feasible),
                      jac=lambda y: -power * a * np.exp(-power * y) / scale, method="SLSQP",
                      bounds=[(FLOOR, 0.0)] * n,
                      constraints=[{"type": "ineq", "fun": lambda y: cap - (b + h @ np.exp(-power * y)),
                                    "jac": lambda y: power * h * np.exp(-power * y)},
                                   {"type": "ineq", "fun": lambda y: 1.0 - np.exp(y).sum(),
                                    "jac": lambda y: -np.exp(y)}],
                      options={"maxiter": SPLIT_ITERATIONS, "ftol": 1e-12})
    x = _on_simplex(np.exp(result.x))

    def inverse(v: np.ndarray) -> np.ndarray:
        return np.power(v, -float(power))

    meets = bool((b + h @ inverse(x)).max() <= cap * (1 + SLACK))
    return x if meets and a @ inverse(x) <= a @ inverse(feasible) else feasible


def _multipliers(h: np.ndarray, b: np.ndarray, w: np.ndarray, x: np.ndarray, cap: float, power: int) -> np.ndarray:
    """λ ≥ 0 of the statements held at the cap, from stationarity: Σ_s (w_s + λ_s)·h_sK = μ·x_K^{p+1}
    for every K (the closed form under w + λ is then x), by non-negative least squares on (λ, μ)."""
    held = np.flatnonzero(b + h @ np.power(x, -float(power)) >= cap * (1 - 1e-4))
    lam = np.zeros(h.shape[0])
    if held.size == 0:
        return lam
    a = w @ h
    norm = np.where(a > 0, a, 1.0)
    system = np.hstack([h[held].T, -np.power(x, power + 1)[:, None]]) / norm[:, None]
    solution, _ = nnls(system, -a / norm)
    lam[held] = solution[:-1]
    return lam


def _on_simplex(x: np.ndarray) -> np.ndarray:
    """x scaled to add up to 1 (a split under the budget stays under it: shares only grow)."""
    return x / x.sum()

