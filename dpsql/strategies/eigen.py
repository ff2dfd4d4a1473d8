"""Eigen-Design (Li's thesis, ch. 5): a near-optimal Gaussian strategy from the workload's eigen-queries.

Math (L2 / Gaussian matrix mechanism, unit privacy, total error Δ₂(A)²·trace(G (AᵀA)⁺)):

1. Eigendecompose G = WᵀW = Σᵢ dᵢ qᵢ qᵢᵀ (orthonormal qᵢ) and keep the dᵢ > 0: the eigen-queries.
2. Weight them, A′ = diag(√u) Qᵀ, by Program 5.1.1: minimise Σᵢ dᵢ/uᵢ subject to
   (M u)_j = Σᵢ uᵢ qᵢ(j)² ≤ 1 for every cell j (Δ₂(A′) ≤ 1), with M_ji = qᵢ(j)².
   Its Lagrange dual is max_{y ≥ 0} g(y) = 2 Σᵢ √(dᵢ (Mᵀy)ᵢ) − 1ᵀy (concave), with minimiser
   uᵢ(y) = √(dᵢ / (Mᵀy)ᵢ) and ∇g = M u(y) − 1. Writing y = t·w with w on the simplex and
   maximising over t gives the equivalent max_w h(w)², h(w) = Σᵢ √(dᵢ cᵢ(w)), cᵢ(w) = (Mᵀw)ᵢ;
   uniform w gives h² = svdb(W) (as Mᵀ1 = 1), so the optimum never beats the SVD bound.
   We maximise g with L-BFGS-B (bounds y ≥ 0) from the uniform point and recover the primal by
   u = u(y) / max_j (M u(y))_j (feasible). Its value Σ dᵢ/uᵢ and the dual value g(y) bracket the
   optimum; the relative gap is reported in :class:`EigenDesignInfo`.
3. Column completion (thesis Lemma 3 / Thm 3.11): with s_j = (M u)_j ≤ 1, append the rows
   √(1 − s_j)·e_jᵀ for the cells where s_j < 1. This keeps Δ₂ = 1 and only adds to AᵀA, so the error
   cannot increase (usually it drops noticeably: AllRange(2048) 1.0606 → 1.0278 × svdb).

``principal=k`` (thesis §5.2.2.2): weight the top-k eigen-queries individually and give one shared
weight to all the remaining non-zero ones (never dropped, so the strategy still supports W). This
shrinks the weighting problem to k+1 unknowns; the dense eigendecomposition is still needed.

``group_size=s`` (eigen-query separation, thesis §5.2.2.1): split the eigen-queries, in eigenvalue
order, into consecutive groups of s. Step 1 solves Program 5.1.1 for each group g alone (the other
eigenvalues treated as zero), giving relative weights r_g. Step 2 treats each group as one design
unit with weights t_g·r_g: its cost is Σ_{i∈g} dᵢ/(t_g r_{g,i}) = c_g/t_g with c_g = Σ_{i∈g} dᵢ/r_{g,i}
and its load on cell j is t_g (M_g r_g)_j, so the group scales solve the same program
    minimise Σ_g c_g/t_g  subject to  Σ_g t_g (M_g r_g)_j ≤ 1,
and uᵢ = t_g r_{g,i}. Both steps are Program 5.1.1 with k/s or s unknowns; the result is feasible
(Δ₂ ≤ 1 before completion) and keeps every eigen-query, so it supports W. The full design is the
case of one group; ``principal`` is the case r = 1 (shared weights).

Privacy note: this only *chooses* a strategy; it never touches data. The returned matrix is
normalised to Δ₂ = 1 (every non-empty column has unit L2 norm after completion); the mechanism
computes the sensitivity itself, and dpsql rounds strategies to integers before measuring, so the
strategy as measured may differ slightly from the real-valued design returned here.

If the solver has not converged within ``max_evaluations`` evaluations of the dual objective and
its gradient (all solves together), the best primal-feasible iterate found so far is used (it is
always a valid, supporting strategy, just less optimised). The budget counts work, not wall time,
so the strategy does not depend on machine speed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla
import scipy.optimize as sopt

from dpsql.errors import DomainTooLargeError, ShapeError
from dpsql.matrix.workloads import Explicit, FloatArray, Kron, Workload, kron_factors
from dpsql.strategies.budget import MAX_EVALUATIONS, Exhausted, WorkBudget

#: Largest number of cells Eigen-Design will eigendecompose densely.
MAX_EIGEN_CELLS = 4096

#: Eigenvalues below this fraction of the largest are treated as zero.
EIGEN_TOLERANCE = 1e-10

#: Column squared norms within this of the maximum are not completed.
COMPLETION_TOLERANCE = 1e-12


@dataclass(frozen=True)
class EigenDesignInfo:
    """Diagnostics of the weighting (restricted to weighted eigen-queries, before completion).

    ``primal``, ``dual`` and ``gap`` describe the final solve: over the eigen-queries (or the
    ``principal`` units), or with ``group_size`` over the group scales t_g.

    Attributes:
        primal: Σ cᵢ/uᵢ of the returned (feasible) weights, in units of the normalised costs cᵢ.
        dual: the best dual value found (a lower bound on the final solve's optimum).
        gap: (primal − dual) / primal.
        converged: False when the work budget stopped any of the solves early.
        evaluations: dual objective evaluations spent by all weighting solves.
    """

    primal: float
    dual: float
    gap: float
    converged: bool
    evaluations: int


def eigen_design(W: Workload, *, completion: bool = True, principal: int | None = None,
                 group_size: int | None = None, max_evaluations: int = MAX_EVALUATIONS) -> Workload:
    """Gaussian Eigen-Design strategy for W; see :func:`eigen_design_with_info` for the arguments."""
    return eigen_design_with_info(W, completion=completion, principal=principal, group_size=group_size,
                                  max_evaluations=max_evaluations)[0]


def eigen_design_with_info(W: Workload, *, completion: bool = True, principal: int | None = None,
                           group_size: int | None = None,
                           max_evaluations: int = MAX_EVALUATIONS) -> tuple[Workload, EigenDesignInfo]:
    """Gaussian Eigen-Design strategy for W and the weighting's diagnostics (module docstring: the math).

    Args:
        W: the workload (m × n), n ≤ MAX_EIGEN_CELLS.
        completion: append the column-completion rows (never increases the error).
        principal: if given, optimise only the top-``principal`` eigen-queries individually and
            share one weight among the rest.
        group_size: if given, eigen-query separation with groups of this many eigen-queries.
        max_evaluations: evaluations of the dual objective and its gradient (one unit of work
            each) for all weighting solves together; once spent, the best iterates so far are used.

    Returns:
        An :class:`Explicit` strategy with Δ₂ = 1 that supports W, and the weighting's diagnostics.

    Raises:
        ShapeError: W has no rows or columns, or no non-zero entry.
        DomainTooLargeError: W has more than MAX_EIGEN_CELLS cells.
        ValueError: ``principal``, ``group_size`` or ``max_evaluations`` is not positive, or both
            ``principal`` and ``group_size`` are given.
    """
    _check_arguments(principal, group_size)
    budget = WorkBudget(max_evaluations)  # ValueError unless a positive integer
    d, Q = _eigen_queries(W)
    M = Q**2
    groups = _groups(len(d), principal, group_size)
    relative, converged = (np.ones(len(d)), True) if group_size is None else _separate(d, M, groups, budget)
    u, info = _scale_groups(d, M, groups, relative, budget)
    info = replace(info, converged=info.converged and converged, evaluations=budget.used)
    return _assemble(Q, u, _column_mask(W), completion), info


def _check_arguments(principal: int | None, group_size: int | None) -> None:
    """ValueError unless principal / group_size are positive and not both given."""
    if principal is not None and group_size is not None:
        raise ValueError("principal and group_size are alternative speed-ups; give at most one of them.")
    if principal is not None and principal < 1:
        raise ValueError(f"principal must be a positive number of eigen-queries; got {principal!r}.")
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer))
                                   or group_size < 1):
        raise ValueError(f"group_size must be a positive integer number of eigen-queries; got {group_size!r}.")


def _eigen_queries(W: Workload) -> tuple[FloatArray, FloatArray]:
    """(d, Q): the positive eigenvalues of G = WᵀW, descending, and their eigenvectors as columns."""
    m, n = W.shape
    if m == 0 or n == 0:
        raise ShapeError(f"Eigen-Design needs a non-empty workload; got shape {W.shape}.")
    if n > MAX_EIGEN_CELLS:
        raise DomainTooLargeError(
            f"Eigen-Design eigendecomposes the dense {n} × {n} Gram matrix; the limit is "
            f"{MAX_EIGEN_CELLS} cells. Use a Kronecker strategy (strategies.kron of per-attribute "
            "strategies, e.g. eigen_design on each attribute's factor) for larger domains."
        )
    G = W.gram()
    if isinstance(G, Kron):  # factor by factor: cheaper, and a canonical basis for repeated eigenvalues
        d, Q = np.ones(1), np.ones((1, 1))
        for factor in kron_factors(G):
            fd, fQ = sla.eigh(factor.dense(), driver="evd")
            d, Q = np.kron(d, fd), np.kron(Q, fQ)
    else:
        d, Q = sla.eigh(G.dense(), driver="evd")
    if d.size == 0 or d.max() <= 0.0:
        raise ShapeError(f"workload {W!r} has no non-zero query: there is nothing to measure.")
    keep = d > EIGEN_TOLERANCE * d.max()
    order = np.argsort(-d[keep], kind="stable")
    return d[keep][order], Q[:, keep][:, order]


def _groups(k: int, principal: int | None, group_size: int | None) -> list[npt.NDArray[np.int64]]:
    """Index groups of eigen-queries (in eigenvalue order) that are scaled together: consecutive runs
    of ``group_size``, the top ``principal`` singly plus one group for the rest, or singletons."""
    if group_size is not None:
        return [np.arange(lo, min(lo + group_size, k)) for lo in range(0, k, group_size)]
    if principal is None or principal >= k:
        return [np.array([i]) for i in range(k)]
    return [np.array([i]) for i in range(principal)] + [np.arange(principal, k)]


def _separate(d: FloatArray, M: FloatArray, groups: list[npt.NDArray[np.int64]],
              budget: WorkBudget) -> tuple[FloatArray, bool]:
    """Separation step 1: each group's Program 5.1.1 on its own eigen-queries.

    Returns the relative weights r (r_g feasible for group g alone) and whether every solve converged.
    """
    relative = np.empty(len(d))
    converged = True
    for g in groups:
        relative[g], info = _weights(d[g] / d[g].max(), M[:, g], budget)
        converged = converged and info.converged
    return relative, converged


def _scale_groups(d: FloatArray, M: FloatArray, groups: list[npt.NDArray[np.int64]], relative: FloatArray,
                  budget: WorkBudget) -> tuple[FloatArray, EigenDesignInfo]:
    """Weights uᵢ = t_g rᵢ (i ∈ g), the scales t_g solving Program 5.1.1 over the groups as design units.

    Unit g costs c_g/t_g with c_g = Σ_{i∈g} dᵢ/rᵢ and loads cell j by t_g Σ_{i∈g} M_ji rᵢ (module doc).
    """
    cost = np.array([np.sum(d[g] / relative[g]) for g in groups])
    load = np.stack([M[:, g] @ relative[g] for g in groups], axis=1)
    scales, info = _weights(cost / cost.max(), load, budget)
    u = np.empty(len(d))
    for g, scale in zip(groups, scales):
        u[g] = scale * relative[g]
    return u, info


def _column_mask(W: Workload) -> npt.NDArray[np.bool_]:
    """True for the cells some query of W touches (only those are completed)."""
    return np.asarray(W.column_norms("l2") > 0.0)


class _Tracker:
    """The dual objective −g(y) and its gradient, remembering the best primal and dual values seen."""

    def __init__(self, d: FloatArray, M: FloatArray, budget: WorkBudget) -> None:
        self.sd, self.M, self.budget = np.sqrt(d), M, budget
        self.best_primal, self.best_dual = np.inf, -np.inf
        self.best_u: FloatArray = np.zeros(len(d))

    def __call__(self, y: FloatArray) -> tuple[float, FloatArray]:
        root_c = np.sqrt(np.maximum(self.M.T @ y, np.finfo(float).tiny))
        u = self.sd / root_c
        Mu = self.M @ u
        dual = 2.0 * float(self.sd @ root_c) - float(y.sum())
        scale = float(Mu.max())
        primal = scale * float(self.sd @ root_c)  # Σ dᵢ/uᵢ after rescaling u to max_j (M u)_j = 1
        self.best_dual = max(self.best_dual, dual)
        if primal < self.best_primal:
            self.best_primal, self.best_u = primal, u / scale
        self.budget.spend()
        return -dual, -(Mu - 1.0)


def _weights(d: FloatArray, M: FloatArray, budget: WorkBudget) -> tuple[FloatArray, EigenDesignInfo]:
    """Solve Program 5.1.1 (min Σ dᵢ/uᵢ s.t. M u ≤ 1) through its dual with L-BFGS-B.

    The start is the best uniform dual point y = t·1: g(t·1) = 2√t Σᵢ √(dᵢ sᵢ) − t n with column
    sums sᵢ = (Mᵀ1)ᵢ peaks at t = (Σᵢ √(dᵢ sᵢ) / n)² (for orthonormal eigen-queries sᵢ = 1 and
    g(y0) is the SVD bound, in units of the normalised costs).

    Args:
        d: positive design costs (normalised so max = 1), length k.
        M: n × k non-negative matrix, M_ji = load of design unit i on cell j (for an eigen-query,
            its squared entry in cell j).
        budget: each objective evaluation spends one unit; once it is spent the best feasible
            iterate so far is returned (the objective is always evaluated at least once).

    Returns:
        (u, info): feasible weights (max_j (M u)_j = 1) and solver diagnostics.
    """
    used = budget.used
    tracker = _Tracker(d, M, budget)
    y0 = np.full(M.shape[0], (np.sqrt(d * M.sum(axis=0)).sum() / M.shape[0]) ** 2)
    converged = True
    try:
        sopt.minimize(tracker, y0, jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * M.shape[0],
                      options={"maxiter": 20000, "maxfun": 40000, "ftol": 1e-15, "gtol": 1e-12})
    except Exhausted:
        converged = False
    gap = (tracker.best_primal - tracker.best_dual) / tracker.best_primal
    info = EigenDesignInfo(tracker.best_primal, tracker.best_dual, gap, converged, budget.used - used)
    return tracker.best_u, info


def _assemble(Q: FloatArray, u: FloatArray, mask: npt.NDArray[np.bool_], completion: bool) -> Explicit:
    """[diag(√u) Qᵀ; completion rows], scaled to Δ₂ = 1.

    Args:
        Q: n × k eigenvectors (columns).
        u: k positive weights.
        mask: the cells W touches; only those are completed.
        completion: whether to append the rows √(max s − s_j) e_jᵀ.
    """
    rows = np.sqrt(u)[:, None] * Q.T
    s = (Q**2) @ u
    top = float(s.max())
    if completion:
        deficit = top - s
        cells = np.flatnonzero(mask & (deficit > COMPLETION_TOLERANCE * top))
        extra = np.zeros((len(cells), Q.shape[0]))
        extra[np.arange(len(cells)), cells] = np.sqrt(deficit[cells])
        rows = np.vstack([rows, extra])
    return Explicit(rows / np.sqrt(top))
