"""A local strategy: the m × n matrix Q of an ε-LDP mechanism, checked on construction.

Notation (McKenna et al., PVLDB 2020): n cells (user types u), m outputs o,
Q[o, u] = Pr[a user of type u reports o], so every column q_u is a distribution.

Privacy:
    The mechanism M_Q(u) ~ q_u is ε-LDP iff Q ≥ 0, 1ᵀQ = 1ᵀ and Q[o, u] ≤ e^ε Q[o, u'] for every
    o, u, u' (their Prop. 2.6): for any set S of outputs, Pr[M(u) ∈ S] = Σ_{o∈S} Q[o, u] ≤
    e^ε Σ_{o∈S} Q[o, u']. A ``LocalStrategy`` holds a float Q that meets these conditions up to
    ``RATIO_TOLERANCE`` (floating-point rounding of e^ε); the strategy that clients actually sample
    is its integer form (``dpsql.local.quantize``), which meets them exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql.errors import PrivacyParameterError, ShapeError
from dpsql.matrix.workloads import FloatArray

#: Relative slack allowed in Q[o, u] ≤ e^ε Q[o, u'] for float strategies (rounding of e^ε and of sums).
RATIO_TOLERANCE = 1e-9
#: Allowed |1ᵀq_u − 1| for float strategies.
SUM_TOLERANCE = 1e-9


def check_epsilon(epsilon: object) -> float:
    """ε as a float, or PrivacyParameterError unless it is a finite number > 0.

    >>> check_epsilon(1)
    1.0
    """
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(epsilon)) or float(epsilon) <= 0:
        raise PrivacyParameterError(f"epsilon must be a finite number > 0; got {epsilon!r}. "
                                    "Pass the per-user privacy loss of one report, e.g. epsilon=1.0.")
    return float(epsilon)


def privacy_ratio(Q: npt.ArrayLike) -> float:
    """max_o max_u Q[o, u] / min_u Q[o, u]: the mechanism is ε-LDP iff this is ≤ e^ε (inf if a row has a zero)."""
    Q = np.asarray(Q, dtype=np.float64)
    low, high = Q.min(axis=1), Q.max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(high > 0, high / low, 1.0)
    return float(ratios.max(initial=1.0))


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalStrategy:
    """An ε-LDP strategy matrix Q (m × n) and its name.

    Attributes:
        Q: column-stochastic, non-negative, with every row's max/min ≤ e^ε (read-only copy).
        epsilon: the per-report privacy loss ε > 0.
        name: what built it, e.g. ``"randomized response"`` or ``"optimized (m=256, seed 0)"``.

    Raises:
        PrivacyParameterError: epsilon is not a finite number > 0, or Q violates the ratio
            constraint Q[o, u] ≤ e^ε Q[o, u'] (the message names the worst row).
        ShapeError: Q is not a non-empty 2-D array of finite, non-negative entries whose columns
            sum to 1.
    """

    Q: FloatArray
    epsilon: float
    name: str

    def __post_init__(self) -> None:
        epsilon = check_epsilon(self.epsilon)
        Q = np.array(self.Q, dtype=np.float64)
        if Q.ndim != 2 or Q.size == 0:
            raise ShapeError(f"a strategy needs a non-empty m × n matrix Q; got shape {Q.shape}.")
        if not np.all(np.isfinite(Q)) or Q.min() < 0:
            raise ShapeError("Q must hold finite, non-negative probabilities.")
        sums = Q.sum(axis=0)
        worst = int(np.argmax(np.abs(sums - 1.0)))
        if abs(sums[worst] - 1.0) > SUM_TOLERANCE:
            raise ShapeError(f"every column of Q must sum to 1 (a distribution over outputs); column {worst} sums "
                             f"to {sums[worst]:.12g}. Normalise the columns.")
        _check_ratio(Q, epsilon)
        Q.setflags(write=False)
        object.__setattr__(self, "Q", Q)
        object.__setattr__(self, "epsilon", epsilon)

    @property
    def n(self) -> int:
        """Number of cells (columns)."""
        return int(self.Q.shape[1])

    @property
    def m(self) -> int:
        """Number of outputs (rows)."""
        return int(self.Q.shape[0])


def _check_ratio(Q: FloatArray, epsilon: float) -> None:
    low, high = Q.min(axis=1), Q.max(axis=1)
    empty = np.flatnonzero(high == 0)
    if empty.size:
        raise ShapeError(f"row {int(empty[0])} of Q is all zero (an output that never occurs); drop it.")
    ratios = high / low  # inf where a row mixes zeros and non-zeros
    worst = int(np.argmax(ratios))
    if ratios[worst] > math.exp(epsilon) * (1 + RATIO_TOLERANCE):
        raise PrivacyParameterError(
            f"Q is not {epsilon:g}-LDP: row {worst} has max/min = {ratios[worst]:.6g} > e^ε = {math.exp(epsilon):.6g}. "
            "Every output must be at most e^ε times likelier for one cell than for another.")
