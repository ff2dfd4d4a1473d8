"""Strategy optimisation for the workload factorization mechanism: projected gradient descent on Q.

Notation (McKenna et al., PVLDB 2020): G = WᵀW (n × n), Q (m × n), d = Q1, D = Diag(d),
X = QᵀD⁻¹Q, e = e^ε, z (m) the row floors, β the step size.

Math:
    Minimise the scaled average-case loss f(Q) = (tr(X⁻¹G) − tr G)/n (= L_avg/N, Thm 3.9/3.11)
    over Q ≥ 0, 1ᵀQ = 1ᵀ, z ≤ q_u ≤ e z (Problem 3.12). Closed-form gradient (no autodiff):
        ∇_Q tr(X⁻¹G) = −2 D⁻¹ Q M + c 1ᵀ,   M = X⁻¹ G X⁻¹,   c_o = (Q M Qᵀ)_oo / d_o²,
    divided by n for f. The floors move by the chain rule through the clip of the projection
    (λ held fixed): dz_o = Σ_u [Q_ou = z_o] ∇_ou + e Σ_u [Q_ou = e z_o] ∇_ou. One iteration:
        z ← clip(z − β/(n e) dz, 0, 1);  Q ← Π_{z,ε}(Q − β∇f);  drop the rows with z_o ≤ 1e-10,
    halving β every 50 iterations and returning the best iterate (the reference implementation's
    choices, which its published numbers need). ``tune`` picks β by halving from 1 until 50
    iterations run without leaving the feasible region, compares β, β/2, β/4 over 50
    iterations by worst-case variance and continues the best. The row-space constraint needs no
    handling: f blows up at its boundary, so small steps from a feasible start never cross it.
    Cost per iteration O(mn² + n³) plus the O(nm log m) projection.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql.errors import DpsqlError, InternalError
from dpsql.local.projection import InfeasibleFloorError, project
from dpsql.local.strategy import LocalStrategy, check_epsilon
from dpsql.local.variance import per_user_variance_of_gram
from dpsql.matrix.workloads import FloatArray

#: Rows whose floor falls to this are outputs that (almost) never occur: they are dropped.
PRUNE_FLOOR = 1e-10
#: Iterations between halvings of β, and per candidate step size while tuning.
HALVING_PERIOD = 50


class DivergedError(DpsqlError, InternalError, ArithmeticError):
    """A step left the region where the objective is finite (infeasible floors or a singular X)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """The best iterate of a descent and its scaled loss f = L_avg / N."""

    Q: FloatArray
    loss: float


def loss_and_gradient(Q: FloatArray, G: FloatArray) -> tuple[float, FloatArray]:
    """(tr(X⁻¹G), its gradient −2 D⁻¹QM + c1ᵀ) for X = QᵀD⁻¹Q.

    Raises:
        DivergedError: X is singular or the loss is not finite or below tr(G) (X ≼ I forces
            tr(X⁻¹G) ≥ tr G, so a smaller value can only be numerical breakdown).
    """
    d = Q.sum(axis=1)
    scaled = Q / d[:, None]
    try:
        X_inv = np.linalg.inv(Q.T @ scaled)
    except np.linalg.LinAlgError as err:
        raise DivergedError("X = QᵀD⁻¹Q became singular.") from err
    loss = float(np.sum(X_inv * G))
    if not math.isfinite(loss) or loss < float(np.trace(G)) * (1 - 1e-9):
        raise DivergedError(f"the loss became {loss!r}, outside [tr G, ∞).")
    M = X_inv @ G @ X_inv
    QM = Q @ M
    c = np.einsum("ok,ok->o", QM, Q) / d**2
    return loss, -2.0 * QM / d[:, None] + c[:, None]


def initial_strategy(n: int, *, epsilon: float, m: int, rng: np.random.Generator) -> FloatArray:
    """A random feasible start: R ~ U[0,1]^{m×n} projected with floors z = (e^{−ε} + 1)/(2m).

    The randomness only picks a starting point of an offline, data-independent design: it has no
    privacy role, so a numpy Generator (seeded for reproducible designs) is appropriate.
    """
    z = np.full(m, (math.exp(-epsilon) + 1.0) / (2.0 * m))
    return project(rng.random((m, n)), z, epsilon=epsilon)


def descend(G: FloatArray, Q0: FloatArray, *, epsilon: float, iterations: int, step: float,
            deadline: float = math.inf) -> Run:
    """Projected gradient descent from Q0 (details as in the reference implementation of McKenna, Maity,
    Mazumdar and Miklau, PVLDB 2020); the best iterate seen.

    Stops early at ``deadline`` (a ``time.monotonic()`` value).

    Raises:
        DivergedError: a step left the feasible region (the caller shrinks the step).
    """
    n = G.shape[0]
    e, trace = math.exp(epsilon), float(np.trace(G))
    Q = np.array(Q0, dtype=np.float64)
    z = Q.min(axis=1)
    best = Run(Q=Q, loss=math.inf)
    for t in range(1, iterations + 1):
        if time.monotonic() > deadline:
            break
        loss, gradient = loss_and_gradient(Q, G)
        loss, gradient = (loss - trace) / n, gradient / n
        if loss < best.loss:
            best = Run(Q=Q, loss=loss)
        dz = np.sum(gradient * (Q == z[:, None]), axis=1) + e * np.sum(gradient * (Q == e * z[:, None]), axis=1)
        if t % HALVING_PERIOD == 0:
            step /= 2
        z = np.clip(z - step / (n * e) * dz, 0.0, 1.0)
        try:
            Q = project(Q - step * gradient, z, epsilon=epsilon)
        except InfeasibleFloorError as err:
            raise DivergedError(str(err)) from err
        if not np.all(np.isfinite(Q)):
            raise DivergedError("the strategy became non-finite.")
        keep = z > PRUNE_FLOOR
        Q, z = Q[keep], z[keep]
    return best


def tune(G: FloatArray, Q0: FloatArray, *, epsilon: float, iterations: int = 250,
         deadline: float = math.inf) -> FloatArray:
    """Descent with the step size found by search (halve from 1 until 50 iterations succeed; try β, β/2, β/4).

    Returns a feasible Q (Q0 itself if Q0 has rank < n, e.g. a low-order Fourier strategy, or if
    no step size works before the deadline): the best iterate, re-projected onto its own row
    minima so its columns sum to 1 after row pruning.
    """
    try:
        loss_and_gradient(Q0, G)
    except DivergedError:
        return np.array(Q0, dtype=np.float64)  # X singular at the start: no step size can help
    step, first = 1.0, None
    while step > 1e-50 and time.monotonic() < deadline:
        try:
            first = descend(G, Q0, epsilon=epsilon, iterations=HALVING_PERIOD, step=step, deadline=deadline)
            break
        except DivergedError:
            step /= 2
    if first is None or not math.isfinite(first.loss):
        return np.array(Q0, dtype=np.float64)
    runs = [(first, step)]
    for factor in (2, 4):
        try:
            runs.append((descend(G, Q0, epsilon=epsilon, iterations=HALVING_PERIOD, step=step / factor,
                                 deadline=deadline), step / factor))
        except DivergedError:
            continue
    scored = [(_worst(G, run.Q, epsilon), run, beta) for run, beta in runs if math.isfinite(run.loss)]
    _, chosen, beta = min(scored, key=lambda item: item[0])
    try:
        final = descend(G, chosen.Q, epsilon=epsilon, iterations=iterations, step=beta, deadline=deadline)
    except DivergedError:
        final = chosen
    best = final if final.loss <= chosen.loss else chosen
    try:
        return project(best.Q, best.Q.min(axis=1), epsilon=epsilon)
    except InfeasibleFloorError:  # pruning removed too much mass to re-project: keep the start
        return np.array(Q0, dtype=np.float64)


def optimize_strategy(G: npt.ArrayLike, *, epsilon: float, m: int | None = None, seed: int = 0,
                      iterations: int = 250, time_limit: float | None = None,
                      start: LocalStrategy | None = None) -> LocalStrategy:
    """One tuned descent for the Gram matrix G, from a random start (m = 4n by default) or from ``start``.

    Privacy:
        The result is an ε-LDP strategy: every iterate is projected onto the constraints
        z ≤ q_u ≤ e^ε z, 1ᵀq_u = 1 (checked again by LocalStrategy). The design reads no data.
    """
    epsilon = check_epsilon(epsilon)
    G = np.asarray(G, dtype=np.float64)
    n = G.shape[0]
    deadline = math.inf if time_limit is None else time.monotonic() + time_limit
    if start is not None:
        Q0, label = np.array(start.Q), f"optimized from {start.name}"
    else:
        outputs = 4 * n if m is None else m
        Q0 = initial_strategy(n, epsilon=epsilon, m=outputs, rng=np.random.default_rng(seed))
        label = f"optimized (m={outputs}, seed {seed})"
    Q = tune(G, Q0, epsilon=epsilon, iterations=iterations, deadline=deadline)
    return LocalStrategy(Q=Q, epsilon=epsilon, name=label)


def _worst(G: FloatArray, Q: FloatArray, epsilon: float) -> float:
    """Worst-case per-user variance of a descent iterate (its columns are re-projected to sum to 1 first)."""
    try:
        strategy = LocalStrategy(Q=project(Q, Q.min(axis=1), epsilon=epsilon), epsilon=epsilon, name="candidate")
        return float(per_user_variance_of_gram(G, strategy).max())
    except (DpsqlError, np.linalg.LinAlgError):
        return math.inf
