"""Strategy selection: the best of the optimized and the fixed mechanisms by worst-case variance.

Math:
    Every candidate Q is scored by max_u z_u, the worst-case variance per user with the optimal
    reconstruction (``dpsql.local.variance``); candidates whose row space misses the workload are
    skipped. Descent is non-convex and single runs can lose to a fixed mechanism (by up to ~10% at
    large ε and small n when McKenna et al.'s PVLDB 2020 experiments are reproduced), so the
    selected strategy is never worse than
    the best baseline by construction. Scoring needs no data, so the search costs no privacy.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from dpsql.errors import DomainTooLargeError, UnsupportedStrategyError
from dpsql.local import baselines as fixed
from dpsql.local.factorization import optimize_strategy
from dpsql.local.strategy import LocalStrategy, check_epsilon
from dpsql.local.variance import WorkloadLike, as_workload, gram, per_user_variance_of_gram

#: Exponential-size baselines (RAPPOR, subset selection) are tried only up to this many outputs.
MAX_BASELINE_OUTPUTS = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class Scored:
    """A candidate strategy and its worst-case per-user variance on the workload."""

    strategy: LocalStrategy
    worst_case_variance: float


def baselines(n: int, *, epsilon: float) -> list[LocalStrategy]:
    """Every fixed mechanism that applies to n cells at ε (RAPPOR and subset selection only when small)."""
    epsilon = check_epsilon(epsilon)
    builders: list[Callable[[], LocalStrategy]] = [
        lambda: fixed.randomized_response(n, epsilon=epsilon),
        lambda: fixed.hadamard(n, epsilon=epsilon, form="general"),
        lambda: fixed.hadamard(n, epsilon=epsilon, form="high_privacy"),
        lambda: fixed.hierarchical(n, epsilon=epsilon, form="general"),
        lambda: fixed.hierarchical(n, epsilon=epsilon, form="high_privacy"),
    ]
    if n == 2 ** (n.bit_length() - 1):
        builders += [functools.partial(fixed.fourier, n, epsilon=epsilon, order=k) for k in range(1, n.bit_length())]
    if 2**n <= MAX_BASELINE_OUTPUTS:
        builders.append(lambda: fixed.rappor(n, epsilon=epsilon))
    d = max(1, math.ceil(n / (math.exp(epsilon) + 1)))
    if math.comb(n, d) <= MAX_BASELINE_OUTPUTS:
        builders.append(lambda: fixed.subset_selection(n, epsilon=epsilon, d=d))
    built: dict[tuple[str, bytes], LocalStrategy] = {}
    for build in builders:
        try:
            strategy = build()
        except DomainTooLargeError:
            continue
        built.setdefault((str(strategy.Q.shape), strategy.Q.tobytes()), strategy)  # equal forms (e ≤ 2) count once
    return list(built.values())


def score(workload: WorkloadLike, strategies: list[LocalStrategy]) -> list[Scored]:
    """Each strategy that supports the workload with its worst-case per-user variance, best first."""
    G = gram(workload)
    scored = []
    for strategy in strategies:
        try:
            scored.append(Scored(strategy=strategy,
                                 worst_case_variance=float(per_user_variance_of_gram(G, strategy).max())))
        except UnsupportedStrategyError:
            continue
    return sorted(scored, key=lambda s: s.worst_case_variance)


def optimize(workload: WorkloadLike, *, epsilon: float, seed: int = 0, restarts: int = 1, m: int | None = None,
             iterations: int = 250, time_limit: float | None = None) -> LocalStrategy:
    """The strategy with the lowest worst-case variance among the baselines and optimized ones.

    Optimized candidates: ``restarts`` tuned descents from random starts (seeds seed, seed+1, …,
    m = 4n outputs by default) and one from the best baseline. ``time_limit`` (seconds) bounds
    the descents together; each returns its best iterate when its share runs out.

    Privacy:
        Every candidate is ε-LDP (LocalStrategy checks it), so the chosen one is. The choice
        depends on the workload only, never on data.
    Raises:
        PrivacyParameterError: epsilon is not a finite number > 0.
        UnsupportedStrategyError: no candidate can answer the workload.
    """
    return rank(workload, epsilon=epsilon, seed=seed, restarts=restarts, m=m, iterations=iterations,
                time_limit=time_limit)[0].strategy


def rank(workload: WorkloadLike, *, epsilon: float, seed: int = 0, restarts: int = 1, m: int | None = None,
         iterations: int = 250, time_limit: float | None = None) -> list[Scored]:
    """Every candidate of ``optimize`` that supports the workload, scored, best first."""
    epsilon = check_epsilon(epsilon)
    W = as_workload(workload)
    n = W.shape[1]
    G = gram(W)
    ranked = score(W, baselines(n, epsilon=epsilon))
    if not ranked:
        raise UnsupportedStrategyError(f"no local strategy supports this {W.shape[0]} × {n} workload.")
    deadline = math.inf if time_limit is None else time.monotonic() + time_limit
    optimized = []
    for run in range(restarts + 1):
        share = None if math.isinf(deadline) else max(0.0, (deadline - time.monotonic()) / (restarts + 1 - run))
        start = ranked[0].strategy if run == restarts else None
        optimized.append(optimize_strategy(G, epsilon=epsilon, m=m, seed=seed + run, iterations=iterations,
                                           time_limit=share, start=start))
    return sorted([*score(W, optimized), *ranked], key=lambda s: s.worst_case_variance)
