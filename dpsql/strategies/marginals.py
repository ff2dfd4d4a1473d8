"""HDMM OPT_M: a weighted stack of marginals chosen for a workload, in the residual eigenbasis.

Guarantee: this module only *chooses* a strategy. The result is normalised to sensitivity 1 by
construction (Δ₁ = Σ weights for Laplace, Δ₂² = Σ weights² for Gaussian), but nothing here spends
privacy budget: the mechanism recomputes the sensitivity of the strategy it actually measures.
The random starts are numerical initialisation only (seeded), never privacy randomness.

Notation (dpsql.residual.basis): keys a ⊆ {0..d−1}, Q_a the marginal on a, G_a = Q_aᵀQ_a,
μ(a) = Π_{i∉a} nᵢ, m_r = Π_{i∈r}(nᵢ − 1), λ_r(u) = Σ_{a⊇r} u_a μ(a) the eigenvalue of Σ u_a G_a on
the residual space V_r. The workload enters only through its marginal weights w (WᵀW projected
onto span{G_a}, exact against marginal strategies), with λ_r(w) ≥ 0.

Laplace: A(θ) = [θ_a Q_a]_a (θ ≥ 0), Δ₁ = Σθ (each Q_a has one 1 per column), AᵀA = G(θ²):
    L(θ) = (Σθ)² F,  F = Σ_r m_r λ_r(w) / λ_r(θ²),
    ∂L/∂θ_a = 2(Σθ) F − (Σθ)² · 2θ_a μ(a) · Σ_{r⊆a} m_r λ_r(w) / λ_r(θ²)².
Gaussian: θ are squared weights, A(θ) = [√θ_a Q_a], Δ₂² = Σθ, AᵀA = G(θ):
    L(θ) = (Σθ) F,  F = Σ_r m_r λ_r(w) / λ_r(θ),
    ∂L/∂θ_a = F − (Σθ) μ(a) Σ_{r⊆a} m_r λ_r(w) / λ_r(θ)².
L is the expected total squared error at noise variance 1 per unit sensitivity (the HDMM
normalisation; dpsql.planning.accuracy.expected_error reports 2L for Laplace at ε = 1 and L for Gaussian).
Both superset-sums λ(·) and subset-sums Σ_{r⊆a} are zeta transforms, so one evaluation of loss and
gradient costs O(d·2^d). L is finite iff λ_r(θ-form) > 0 wherever λ_r(w) > 0 (A supports W);
eigenvalues below dpsql.matrix.linalg.RANK_TOLERANCE of the largest count as zero, as in pinv_gram.

Search: L-BFGS-B with bounds θ ≥ 0 from the identity (θ = e_full, always supported), the workload
itself (θ² ∝ w₊ resp. θ ∝ w₊) and `restarts` seeded U[0,1) starts; an unsupported trial point
scores a large finite penalty with zero gradient so that the line search backs off. Weights below
PRUNE·Σθ are then dropped when that keeps the strategy supported and its loss within PRUNE_SLACK.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from dpsql.errors import ShapeError
from dpsql.matrix.linalg import RANK_TOLERANCE
from dpsql.matrix.workloads import Workload
from dpsql.noise import Noise
from dpsql.residual.basis import (
    MAX_ATTRIBUTES,
    complement_sizes,
    eigenvalues,
    marginal_weights,
    marginals_strategy,
    residual_dimensions,
    subset_sum,
    superset_sum,
    workload_sizes,
)
from dpsql.strategies.budget import MAX_EVALUATIONS, Exhausted, WorkBudget

FloatArray = npt.NDArray[np.float64]
Objective = Callable[[FloatArray], tuple[float, FloatArray]]

#: L-BFGS-B stopping tolerances (the loss is scaled to 1 at the identity strategy).
FTOL = 1e-12
GTOL = 1e-10
MAXITER = 5000
#: Residuals whose share m_r λ_r(w) of trace(WᵀW) is below this are treated as absent.
WORKLOAD_TOLERANCE = 1e-12
#: Unsupported trial points score this multiple of their run's starting loss.
PENALTY = 100.0
#: Weights below PRUNE · Σθ are dropped if the loss grows by at most a factor 1 + PRUNE_SLACK.
PRUNE = 1e-7
PRUNE_SLACK = 1e-6


@dataclass(frozen=True, slots=True)
class _Lattice:
    """Per-key constants: μ(a), m_r, and the workload's eigenvalues λ_r(w) (module doc)."""

    mu: FloatArray
    dims: FloatArray
    lam_w: FloatArray

    @classmethod
    def build(cls, sizes: Sequence[int], w: FloatArray) -> _Lattice:
        """Constants for ``sizes``; λ_r(w) is clipped at 0 and negligible residuals are zeroed."""
        dims = residual_dimensions(sizes)
        lam_w = np.clip(eigenvalues(sizes, w), 0.0, None) * (dims > 0)
        share = dims * lam_w
        lam_w[share <= WORKLOAD_TOLERANCE * share.sum()] = 0.0
        return cls(mu=complement_sizes(sizes), dims=dims, lam_w=lam_w)

    def objective(self, theta: FloatArray, noise: Noise) -> tuple[float, FloatArray]:
        """(L(θ), ∇L(θ)) as in the module doc; (inf, 0) when A(θ) does not support W."""
        u = theta * theta if noise == "laplace" else theta
        lam = superset_sum(u * self.mu)
        top = float(lam[self.dims > 0].max(initial=0.0))
        needed = self.lam_w > 0
        if np.any(lam[needed] <= RANK_TOLERANCE * top) or not np.any(theta > 0):
            return np.inf, np.zeros_like(theta)
        ratio = np.zeros_like(lam)
        ratio[needed] = self.dims[needed] * self.lam_w[needed] / lam[needed]
        F, total = float(ratio.sum()), float(theta.sum())
        ratio[needed] /= lam[needed]
        back = subset_sum(ratio) * self.mu  # μ(a) Σ_{r⊆a} m_r λ_r(w) / λ_r²
        if noise == "laplace":
            return total * total * F, 2.0 * total * F - 2.0 * total * total * theta * back
        return total * F, F - total * back


def _check_noise(noise: str) -> Noise:
    if noise not in ("gaussian", "laplace"):
        raise ValueError(f"noise must be 'gaussian' or 'laplace'; got {noise!r}.")
    return noise  # type: ignore[return-value]


def marginals_loss(theta: npt.ArrayLike, w: npt.ArrayLike, sizes: Sequence[int],
                   noise: Noise = "laplace") -> tuple[float, FloatArray]:
    """(L(θ), ∇L(θ)) for the marginals strategy with parameters θ on workload weights w (module doc).

    θ and w have 2^d entries (key order of dpsql.residual.basis); L is +inf (zero gradient) when the
    strategy does not support the workload.
    """
    noise = _check_noise(noise)
    values = np.asarray(theta, dtype=np.float64)
    lattice = _Lattice.build(sizes, np.asarray(w, dtype=np.float64))
    if values.shape != lattice.mu.shape:
        raise ShapeError(f"θ needs {lattice.mu.size} entries (one per attribute subset); got shape {values.shape}.")
    return lattice.objective(values, noise)


# ======================================================================== search
@dataclass(slots=True)
class _Best:
    """The lowest finite loss seen so far and its θ."""

    loss: float
    theta: FloatArray

    def offer(self, loss: float, theta: FloatArray) -> None:
        if loss < self.loss:
            self.loss, self.theta = loss, theta.copy()


def _minimise(objective: Objective, start: FloatArray, best: _Best, budget: WorkBudget) -> None:
    """L-BFGS-B (θ ≥ 0) from one supported start, offering every finite point to ``best``; every
    evaluation spends one unit of ``budget``."""
    penalty = PENALTY * objective(start)[0]

    def fun(theta: FloatArray) -> tuple[float, FloatArray]:
        loss, grad = objective(theta)
        if not np.isfinite(loss):
            return penalty, np.zeros_like(theta)
        best.offer(loss, theta)
        budget.spend()
        return loss, grad

    try:
        minimize(fun, start, jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * start.size,
                 options={"ftol": FTOL, "gtol": GTOL, "maxiter": MAXITER})
    except Exhausted:
        pass


def _prune(objective: Objective, theta: FloatArray, loss: float) -> FloatArray:
    """θ with entries below PRUNE·Σθ set to 0, unless that breaks support or costs > PRUNE_SLACK."""
    pruned = np.where(theta < PRUNE * theta.sum(), 0.0, theta)
    return pruned if objective(pruned)[0] <= loss * (1.0 + PRUNE_SLACK) else theta


def _deterministic_starts(w: FloatArray, noise: Noise) -> list[FloatArray]:
    """The identity strategy e_full, and the workload's own marginals (θ² ∝ w₊ or θ ∝ w₊)."""
    identity = np.zeros_like(w)
    identity[-1] = 1.0
    own = np.clip(w, 0.0, None)
    own = np.sqrt(own) if noise == "laplace" else own
    return [identity] + ([own / own.max()] if own.any() else [])


def _search(lattice: _Lattice, w: FloatArray, noise: Noise, seed: int, restarts: int,
            budget: WorkBudget) -> FloatArray:
    """The best θ over the deterministic and `restarts` seeded random starts (module doc)."""
    def objective(theta: FloatArray) -> tuple[float, FloatArray]:
        return lattice.objective(theta, noise)

    starts = _deterministic_starts(w, noise)
    best = _Best(np.inf, starts[0])
    for start in starts:
        best.offer(objective(start)[0], start)
    rng = np.random.default_rng(seed)
    starts += [rng.random(start.size) for _ in range(max(0, restarts))]
    for start in starts:
        if budget.exhausted:
            break
        if np.isfinite(objective(start)[0]):
            _minimise(objective, start, best, budget)
    return _prune(objective, best.theta, best.loss)


# ======================================================================== public API
def _workload_weights(W: Workload) -> tuple[tuple[int, ...], FloatArray]:
    """(sizes, w): W's attribute sizes and marginal weights, or ShapeError for unusable input."""
    m, n = W.shape
    if m == 0 or n == 0:
        raise ShapeError(f"the workload is empty ({m} × {n}); OPT_M needs at least one query and one cell.")
    sizes = workload_sizes(W, "opt_marginals")
    if len(sizes) > MAX_ATTRIBUTES:
        raise ShapeError(f"opt_marginals handles at most {MAX_ATTRIBUTES} attributes (2^d subsets); got {len(sizes)}.")
    return sizes, marginal_weights(W, sizes)


def _unit_sensitivity(theta: FloatArray, noise: Noise) -> FloatArray:
    """Block weights with Δ₁ = Σ weights = 1 (Laplace) or Δ₂² = Σ weights² = 1 (Gaussian)."""
    share = theta / theta.sum()
    return share if noise == "laplace" else np.sqrt(share)


def opt_marginals(W: Workload, *, noise: Noise = "gaussian", seed: int = 0, restarts: int = 3,
                  max_evaluations: int = MAX_EVALUATIONS) -> Workload:
    """HDMM OPT_M: the weighted marginals strategy minimising the expected error on W (module doc).

    W is a Kron, or a VStack / Weighted of Krons, over one set of attribute sizes (a non-Kron W is
    a one-attribute product). Runs L-BFGS-B from the identity, the workload's own marginals and
    `restarts` seeded random starts, stopping after `max_evaluations` evaluations of the loss and its
    gradient (all starts together) with the best found so far, so the result does not depend on machine speed.
    Returns dpsql.residual.basis.marginals_strategy with sensitivity 1 (Δ₁ for Laplace, Δ₂ for Gaussian).
    Raises ShapeError for empty or non-finite workloads and unsupported structures.
    """
    noise = _check_noise(noise)
    sizes, w = _workload_weights(W)
    budget = WorkBudget(max_evaluations)
    lattice = _Lattice.build(sizes, w)
    scale = float(lattice.dims @ lattice.lam_w)  # trace(WᵀW): the loss of the identity strategy
    if scale <= 0.0:
        theta = _deterministic_starts(w, noise)[0]  # nothing to answer: the identity
    else:
        scaled = replace(lattice, lam_w=lattice.lam_w / scale)  # the argmin is scale-invariant
        theta = _search(scaled, w, noise, seed, int(restarts), budget)
    return marginals_strategy(sizes, _unit_sensitivity(theta, noise))
