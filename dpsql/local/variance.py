"""Exact variances of the workload factorization mechanism, and its estimator, from WᵀW alone.

Notation (McKenna et al., PVLDB 2020): W (p × n) the workload, G = WᵀW, Q (m × n) the strategy,
d = Q1 (row sums), D = Diag(d), X = QᵀD⁻¹Q, y (m) the count of each report, x (n) the cell counts,
N = 1ᵀx the number of users.

Math:
    The optimal unbiased reconstruction (their Thm 3.10) is V = W X⁺ QᵀD⁻¹, so the answers are
    V y = W x̂ with x̂ = B y, B = X⁺QᵀD⁻¹ (n × m): a weighted least-squares estimate of x that is
    never formed as V (p may be huge). It is unbiased iff W lies in the row space of Q
    (G (I − X⁺X) = 0). With A = D⁻¹QX⁺ (so V = WAᵀ and ‖V[:, o]‖² = (AGAᵀ)_oo):
        per-user variance   z_u = Σ_o Q[o, u] (AGAᵀ)_oo − G_uu        (Thm 3.4, Gram-only form)
        total variance      xᵀz;   worst case N·max_u z_u (Cor 3.5);   average N·mean_u z_u
        sample complexity   max_u z_u / (p α): users needed for normalised variance α (Cor 5.4)
        answer variances    Var[(W x̂)_i] = w_iᵀ (B Diag(Qx) Bᵀ − Diag(x)) w_i,
    the last because Cov[y] = Diag(Qx) − Q Diag(x) Qᵀ and W B Q = W X⁺X = W.
    SVD lower bound (Thm 5.6 / Cor 5.7): every ε-LDP Q has L(Q) = tr(X⁺G) ≥ (Σλ)²/e^ε, λ the
    singular values of W, hence max_u z_u ≥ mean_u z_u ≥ ((Σλ)²/e^ε − tr G)/n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql.errors import ShapeError, UnsupportedStrategyError
from dpsql.local.strategy import LocalStrategy, check_epsilon
from dpsql.matrix.linalg import nuclear_norm_of_root, quadratic_diag
from dpsql.matrix.workloads import Explicit, FloatArray, Workload

#: Relative eigenvalue cut-off of X⁺ (X is singular exactly when Q has rank < n, e.g. low-order Fourier).
RCOND = 1e-13
#: Relative residual tr(G (I − X⁺X)) / tr(G) above which Q does not support W.
SUPPORT_TOLERANCE = 1e-8

WorkloadLike = Workload | npt.ArrayLike


@dataclass(frozen=True, slots=True)
class Factorization:
    """The pieces every formula shares: d = Q1, X⁺ and the projector X⁺X, computed once per strategy."""

    Q: FloatArray
    d: FloatArray
    X_pinv: FloatArray

    @classmethod
    def of(cls, strategy: LocalStrategy) -> Factorization:
        Q = strategy.Q
        d = Q.sum(axis=1)
        X = Q.T @ (Q / d[:, None])
        return cls(Q=Q, d=d, X_pinv=np.linalg.pinv(X, rcond=RCOND, hermitian=True))

    def estimator(self) -> FloatArray:
        """B = X⁺QᵀD⁻¹ (n × m): x̂ = B y."""
        return self.X_pinv @ (self.Q / self.d[:, None]).T

    def support_residual(self, G: FloatArray) -> float:
        """tr(G (I − X⁺X)) / tr(G): zero exactly when W is in the row space of Q."""
        total = float(np.trace(G))
        if total == 0.0:
            return 0.0
        projector = self.X_pinv @ (self.Q.T @ (self.Q / self.d[:, None]))
        return max(0.0, (total - float(np.sum(G * projector))) / total)


def as_workload(W: WorkloadLike) -> Workload:
    """A Workload as is; a dense array (p × n) as an Explicit workload."""
    return W if isinstance(W, Workload) else Explicit(np.asarray(W, dtype=np.float64))


def gram(W: WorkloadLike) -> FloatArray:
    """G = WᵀW as a dense n × n array (closed forms for Prefix, AllRange, Kronecker products…)."""
    return np.asarray(as_workload(W).gram().dense(), dtype=np.float64)


def per_user_variance(W: WorkloadLike, strategy: LocalStrategy) -> FloatArray:
    """z_u: the variance of the workload's answers that one user of cell u adds (total over queries).

    Raises:
        ShapeError: W and Q have different numbers of cells.
        UnsupportedStrategyError: W is not in the row space of Q (no unbiased answers exist).
    """
    return per_user_variance_of_gram(_checked_gram(W, strategy), strategy)


def per_user_variance_of_gram(G: FloatArray, strategy: LocalStrategy) -> FloatArray:
    """z_u from G = WᵀW alone (n × n): z = cᵀQ − diag(G), c_o = (A G Aᵀ)_oo, A = D⁻¹QX⁺."""
    parts = Factorization.of(strategy)
    _check_support(parts, G, strategy)
    A = (strategy.Q / parts.d[:, None]) @ parts.X_pinv
    column_norms = np.einsum("ok,ok->o", A @ G, A)             # ‖V[:, o]‖² = (A G Aᵀ)_oo
    return np.asarray(column_norms @ strategy.Q - np.diag(G), dtype=np.float64)


def worst_case_variance(W: WorkloadLike, strategy: LocalStrategy) -> float:
    """max_u z_u: total variance per user when every user holds the worst cell (L_worst / N)."""
    return float(per_user_variance(W, strategy).max())


def average_variance(W: WorkloadLike, strategy: LocalStrategy) -> float:
    """mean_u z_u: total variance per user with equally many users in every cell (L_avg / N)."""
    return float(per_user_variance(W, strategy).mean())


def sample_complexity(W: WorkloadLike, strategy: LocalStrategy, *, alpha: float) -> float:
    """Users needed so the worst-case normalised variance max_x E‖(Wx − V y)/N‖²/p is at most α.

    Math:
        N ≥ max_u z_u / (p α)   (Cor 5.4; p = number of queries).
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < math.inf:
        raise ShapeError(f"alpha (the target normalised variance) must be a finite number > 0; got {alpha!r}.")
    p = as_workload(W).shape[0]
    return worst_case_variance(W, strategy) / (p * alpha)


def total_variance(W: WorkloadLike, strategy: LocalStrategy, x: npt.ArrayLike) -> float:
    """E‖Wx − V y‖² = xᵀz for the cell counts x."""
    return float(_counts(x, strategy.n) @ per_user_variance(W, strategy))


def answer_variances(W: WorkloadLike, strategy: LocalStrategy, x: npt.ArrayLike) -> FloatArray:
    """Var[(W x̂)_i] for every query i, when the cells hold the counts x (p-vector).

    Raises:
        UnsupportedStrategyError: W is not in the row space of Q.
    """
    workload = as_workload(W)
    parts = Factorization.of(strategy)
    _check_support(parts, _checked_gram(workload, strategy), strategy)
    return np.maximum(quadratic_diag(workload, Explicit(cell_covariance(strategy, x, parts))), 0.0)


def cell_covariance(strategy: LocalStrategy, x: npt.ArrayLike, parts: Factorization | None = None) -> FloatArray:
    """Σ = B Diag(Qx) Bᵀ − Diag(x) (n × n): Var[wᵀx̂] = wᵀΣw for every w in the row space of Q."""
    parts = Factorization.of(strategy) if parts is None else parts
    counts = _counts(x, strategy.n)
    B = parts.estimator()
    sigma = (B * (strategy.Q @ counts)) @ B.T - np.diag(counts)
    return np.asarray((sigma + sigma.T) / 2, dtype=np.float64)


def check_support(W: WorkloadLike, strategy: LocalStrategy) -> None:
    """Raise UnsupportedStrategyError unless W is in the row space of Q (so W x̂ is unbiased)."""
    _check_support(Factorization.of(strategy), _checked_gram(W, strategy), strategy)


def estimate_cells(strategy: LocalStrategy, y: npt.ArrayLike) -> FloatArray:
    """x̂ = X⁺QᵀD⁻¹ y: the cell counts estimated from the report counts y (unbiased on the row space of Q)."""
    counts = np.asarray(y, dtype=np.float64)
    if counts.shape != (strategy.m,):
        raise ShapeError(f"y must hold one count per output of the strategy ({strategy.m}); got shape {counts.shape}.")
    return np.asarray(Factorization.of(strategy).estimator() @ counts, dtype=np.float64)


def reconstruction(W: WorkloadLike, strategy: LocalStrategy) -> FloatArray:
    """V = W X⁺QᵀD⁻¹ (p × m) as a dense matrix: for small workloads and tests only."""
    workload = as_workload(W)
    _checked_gram(workload, strategy)
    B = Factorization.of(strategy).estimator()
    return np.asarray(workload @ B, dtype=np.float64)


def lower_bound(W: WorkloadLike, *, epsilon: float) -> float:
    """A floor on max_u z_u for every ε-LDP strategy: ((Σλ)²/e^ε − tr G)/n, or 0 when that is negative."""
    epsilon = check_epsilon(epsilon)
    workload = as_workload(W)
    n = workload.shape[1]
    nuclear = nuclear_norm_of_root(workload.gram())
    return max(0.0, (nuclear**2 / math.exp(epsilon) - float(np.trace(gram(workload)))) / n)


def _checked_gram(W: WorkloadLike, strategy: LocalStrategy) -> FloatArray:
    workload = as_workload(W)
    if workload.shape[1] != strategy.n:
        raise ShapeError(f"the workload has {workload.shape[1]} cells but the strategy has {strategy.n}; "
                         "design the strategy over the workload's cells.")
    return gram(workload)


def _check_support(parts: Factorization, G: FloatArray, strategy: LocalStrategy) -> None:
    residual = parts.support_residual(G)
    if residual > SUPPORT_TOLERANCE:
        raise UnsupportedStrategyError(
            f"strategy '{strategy.name}' cannot answer this workload without bias: W is not in the row space of Q "
            f"(relative residual {residual:.3g}). Use a strategy of full rank (e.g. randomized_response or hadamard).")


def _counts(x: npt.ArrayLike, n: int) -> FloatArray:
    counts = np.asarray(x, dtype=np.float64)
    if counts.shape != (n,):
        raise ShapeError(f"x must hold one count per cell ({n}); got shape {counts.shape}.")
    if not np.all(np.isfinite(counts)) or counts.min(initial=0.0) < 0:
        raise ShapeError("x must hold finite, non-negative cell counts.")
    return counts
