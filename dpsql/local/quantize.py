"""The published form of a strategy: integer weights K with Q = K / T, ε-LDP exactly.

Notation: Q (m × n) a float strategy, T = 2^52 the common column total, K (m × n) int64 with
1ᵀK = T·1ᵀ, e = e^ε, γ the mixing weight.

Math:
    K is the largest-remainder rounding of T·Q' with Q' = (1 − γ) Q + γ/m, a mixture with the
    uniform distribution. Mixing shrinks every row's max/min ratio strictly below e^ε (for
    a ≥ b, ((1−γ)a + γ/m) / ((1−γ)b + γ/m) < a/b), which absorbs the ±1 rounding of K and the
    rounding of e^ε in floating point. γ starts at 2⁻³⁰ and grows until the exact check passes.
    K / T is exact in binary floating point (K ≤ 2^52), so the estimator and its variances are
    computed for exactly the distribution the clients sample.
Privacy:
    ``exactly_ldp`` checks max_u K[o, u] ≤ r · min_u K[o, u] in integer arithmetic for a rational
    r < e^ε, so the published mechanism is ε-LDP with no floating-point caveat, and a client that
    draws a uniform integer below T and reports the output whose cumulative weight interval holds
    it samples K[:, u] / T exactly.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpsql.errors import InternalError
from dpsql.local.strategy import LocalStrategy

IntArray = npt.NDArray[np.int64]

#: The common column total: every column of K sums to it.
TOTAL = 2**52
_MIXING = tuple(2.0**-k for k in range(30, 0, -2))


def exp_lower(epsilon: float) -> Fraction:
    """A rational r < e^ε (below the float e^ε by 2⁻⁴⁰ relative, far more than its rounding error)."""
    return Fraction(math.exp(epsilon)) * (1 - Fraction(1, 2**40))


def exactly_ldp(K: npt.ArrayLike, epsilon: float) -> bool:
    """Whether every row of the integer weights has max ≤ r·min, r = exp_lower(ε) < e^ε, in exact arithmetic."""
    K = np.asarray(K, dtype=np.int64)
    bound = exp_lower(epsilon)
    low, high = K.min(axis=1), K.max(axis=1)
    return bool(low.min() > 0) and all(int(h) * bound.denominator <= bound.numerator * int(lo)
                                       for lo, h in zip(low.tolist(), high.tolist()))


def integer_weights(strategy: LocalStrategy) -> IntArray:
    """K (int64, m × n): columns summing to TOTAL, exactly ε-LDP, within ~2⁻³⁰ of strategy.Q.

    Raises:
        InternalError: no mixing weight up to 1/4 gives exact ε-LDP weights (not expected for a
            valid LocalStrategy).
    """
    Q = strategy.Q
    m = Q.shape[0]
    for gamma in _MIXING:
        K = _round_columns((1 - gamma) * Q + gamma / m)
        if exactly_ldp(K, strategy.epsilon):
            return K
    raise InternalError(f"could not publish strategy '{strategy.name}' with exactly ε-LDP integer weights.")


def _round_columns(P: npt.NDArray[np.float64]) -> IntArray:
    """Largest-remainder rounding of TOTAL·P, column by column, so each column sums to TOTAL exactly."""
    scaled = P / P.sum(axis=0) * TOTAL
    K = np.floor(scaled).astype(np.int64)
    short = TOTAL - K.sum(axis=0)
    order = np.argsort(-(scaled - K), axis=0, kind="stable")        # largest remainder first
    rank = np.arange(P.shape[0])[:, None]
    # ±1 where float sums overshoot
    bump = (rank < short[None, :]).astype(np.int64) - (rank >= P.shape[0] + short[None, :])
    np.put_along_axis(K, order, np.take_along_axis(K, order, axis=0) + bump, axis=0)
    return np.asarray(K, dtype=np.int64)
