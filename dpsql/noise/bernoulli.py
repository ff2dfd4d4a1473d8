"""Exact Bernoulli draws: Bernoulli(num/den), Bernoulli(exp(-γ)) and Bernoulli(e^-1) runs.

Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020),
called CKS, Algorithm 1: Bernoulli(exp(-γ)) from Bernoulli(γ/K) draws. Here in pure Python
integers (:func:`bernoulli_exp`, :func:`bernoulli_exp_unit`, the reference) and vectorised over
int64 numpy arrays (:func:`bernoulli_exp_vec`, :func:`exp1_vec`, :func:`geometric_vec`). Every
outcome is decided by uniform integers and integer comparisons only; their bit economy:
    Bernoulli(n/d)      4 random bits compared with floor(16 n/d), plus one uniform in [0, d) in
                        the 1/16 of cases where they are equal (:func:`bernoulli`);
    Bernoulli(e^-1)     the CKS chain length read off one uniform in [0, 5!) (:func:`exp1_vec`).
Chains that would pass the int64 guards (:mod:`dpsql.noise.limits`) finish exactly in Python
from the state they had reached.
"""

from __future__ import annotations

import functools
import math
import numbers
from fractions import Fraction

import numpy as np

from dpsql.errors import PrivacyParameterError
from dpsql.noise import limits
from dpsql.noise.sources import BoolArray, IntArray, RandomSource, below, fields


def bernoulli(rng: RandomSource, scaled: IntArray, bits: int, den: int) -> BoolArray:
    """Bernoulli(num/den) per element for one denominator, given scaled = num 2^bits.

    Requires 0 <= num <= den and den 2^bits within the arithmetic limit.

    Math:
        A uniform real R in [0, 1) is compared with num/den through its first w bits W
        (R in [W/2^w, (W+1)/2^w)) and T = floor(2^w num/den): R < num/den when W < T, and R >=
        num/den when W > T. When W = T (probability 2^-w), R < num/den iff the rest of R, a fresh
        uniform, is below frac(2^w num/den) = r/den with r = 2^w num - T den: one uniform integer
        in [0, den) decides it. P[1] = T/2^w + 2^-w r/den = num/den exactly, in ~w bits rather
        than the ~log2(den) + rejection bits of a uniform integer in [0, den). Here w = ``bits``;
        for w = 0 a uniform integer in [0, den) is compared with num directly.
    """
    if bits == 0:
        return below(rng, den, scaled.size) < scaled
    threshold = scaled // den
    draws = fields(rng, scaled.size, bits)
    out = draws < threshold
    tie = np.flatnonzero(draws == threshold)
    if tie.size:
        out[tie] = below(rng, den, tie.size) < scaled[tie] - threshold[tie] * den
    return out


def bernoulli_exp_unit(num: int, den: int, rng: RandomSource, k: int = 1) -> int:
    """Bernoulli(exp(-num/den)) for 0 <= num <= den, CKS Algorithm 1, continuing from K = k."""
    while rng.randbelow(den * k) < num:
        k += 1
    return k & 1


def count_exp1_successes(rng: RandomSource, limit: int | None = None) -> int:
    """Successes of iid Bernoulli(e^-1) before the first failure, stopping at ``limit``."""
    count = 0
    while (limit is None or count < limit) and bernoulli_exp_unit(1, 1, rng, k=2):
        count += 1
    return count


def bernoulli_exp(gamma: Fraction, *, rng: RandomSource) -> int:
    """One exact Bernoulli(exp(-gamma)) draw for a rational gamma >= 0.

    Math:
        CKS Algorithm 1 for gamma in [0, 1]: K <- 1; while Bernoulli(gamma/K) = 1: K <- K + 1;
        return 1 iff K is odd, because P[K >= k] = gamma^(k-1)/(k-1)!. For gamma > 1 the product
        of floor(gamma) Bernoulli(e^-1) draws and one Bernoulli(exp(-(gamma - floor(gamma)))),
        stopping at the first 0. Expected uniform draws: at most e + 1/(1 - e^-1).

    Privacy:
        A building block: exact, using only uniform integers from ``rng`` and comparisons.

    Raises:
        PrivacyParameterError: gamma is not a non-negative rational.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Rational) or gamma < 0:
        raise PrivacyParameterError(f"gamma must be a non-negative rational; got {gamma}.")
    whole, rest = divmod(int(gamma.numerator), int(gamma.denominator))
    if count_exp1_successes(rng, limit=whole) < whole:
        return 0
    return bernoulli_exp_unit(rest, int(gamma.denominator), rng)


def bernoulli_exp_vec(num: IntArray, den: int, rng: RandomSource, k: int = 1) -> BoolArray:
    """Bernoulli(exp(-num/den)) per element, 0 <= num <= den, CKS Algorithm 1 from K = k.

    Round K draws Bernoulli(num/(den K)) (:func:`bernoulli`) for the chains still running; a
    chain stops at its first 0 and returns 1 iff its K is odd. Every round compares
    limits.BERNOULLI_BITS random bits, or fewer when den K_max 2^bits would pass the arithmetic limit.
    Chains that would need den * K beyond the arithmetic limit or K > limits.MAX_CHAIN finish in
    Python from the K they reached.
    """
    out = np.full(num.size, bool(k & 1))
    idx = np.arange(num.size)
    k_max = min(limits.MAX_CHAIN, limits.ARITH_LIMIT // den)
    room = (limits.ARITH_LIMIT // (den * max(k_max, 1))).bit_length() - 1
    bits = max(0, min(limits.BERNOULLI_BITS, room))
    scaled = num << bits
    while idx.size and k <= k_max:
        going = np.flatnonzero(bernoulli(rng, scaled, bits, den * k))
        idx, scaled = idx[going], scaled[going]
        k += 1
        out[idx] = bool(k & 1)
    for i, n in zip(idx.tolist(), (scaled >> bits).tolist()):
        out[i] = bernoulli_exp_unit(n, den, rng, k)
    return out


@functools.lru_cache(maxsize=4)
def exp1_table(terms: int) -> BoolArray:
    """Per R in [0, terms!), whether K(R) = 1 + #{j in 1..terms : R < terms!/j!} is odd."""
    top = math.factorial(terms)
    thresholds = np.array([top // math.factorial(j) for j in range(1, terms + 1)])
    k = 1 + (np.arange(top)[:, None] < thresholds).sum(axis=1)
    return k % 2 == 1


def exp1_vec(n: int, rng: RandomSource) -> BoolArray:
    """n iid Bernoulli(e^-1): CKS Algorithm 1 for γ = 1, with its chain length K from one draw.

    For γ = 1, P[K >= k] = 1/(k-1)!. With J = limits.EXP1_TERMS and R uniform in [0, J!), exactly
    J!/(k-1)! values satisfy R < J!/(k-1)! for k <= J + 1, so K = 1 + #{j <= J : R < J!/j!} has
    the chain's law up to K = J + 1 (a table lookup). R = 0 is the event K >= J + 1 (P = 1/J!):
    those chains continue from K = J + 1 with fresh Bernoulli(1/K) draws, the chain's law given
    K >= J + 1.
    """
    table = exp1_table(limits.EXP1_TERMS)
    r = below(rng, table.size, n)
    out = np.take(table, r)
    more = np.flatnonzero(r == 0)
    if more.size:
        ones = np.ones(more.size, dtype=np.int64)
        out[more] = bernoulli_exp_vec(ones, 1, rng, limits.EXP1_TERMS + 1)
    return out


def geometric_vec(n: int, rng: RandomSource, limit: IntArray | None = None) -> IntArray:
    """Per element, successes of iid Bernoulli(e^-1) before the first failure, capped at limit.

    P[count >= v] = e^-v. Counts still running after limits.MAX_GEOMETRIC rounds finish in Python.
    """
    count = np.zeros(n, dtype=np.int64)
    idx = np.arange(n) if limit is None else np.flatnonzero(limit > 0)
    rounds = 0
    while idx.size and rounds < limits.MAX_GEOMETRIC:
        idx = np.compress(exp1_vec(idx.size, rng), idx)
        rounds += 1
        count[idx] = rounds
        if limit is not None:
            idx = np.compress(limit[idx] > rounds, idx)
    for i in idx.tolist():
        left = None if limit is None else int(limit[i]) - rounds
        count[i] = rounds + count_exp1_successes(rng, left)
    return count
