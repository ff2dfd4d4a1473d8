"""Exact inversion sampling from certified thresholds: one table lookup per sample.

A distribution on the outcomes 0, 1, 2, ... is given by its survival function S(i) = P[X >= i]
(S(0) = 1, strictly decreasing). With R a uniform real in [0, 1), X = #{i >= 1 : R < S(i)} has
exactly this law (inversion). The S(i) here are sums and ratios of e^{-x} for rational x, which
no finite table holds exactly; instead a *survival function* returns, for any
precision P, integer intervals lo <= 2^P S(i) <= hi computed in exact integer arithmetic
(:func:`exp_neg`, fixed point with directed rounding). R is read lazily, as a binary prefix:
with its first n bits W, R lies in [W 2^-n, (W + 1) 2^-n), so

    R < S(i) for certain   when (W + 1) 2^(P-n) <= lo_i,
    R >= S(i) for certain  when W 2^(P-n) >= hi_i,

and X is decided as soon as every threshold is decided; otherwise more bits of R are read and
the thresholds recomputed at a higher precision (Devroye, "Non-Uniform Random Variate
Generation", 1986, chapter III on inversion and guide tables; the interval refining of Haney,
Desfontaines, Hartman, Shrestha and Hay, "Precision-based attacks and interval refining: how to
break, then fix, differential privacy on finite computers", 2022). No float takes part in any
decision: every sample is exact given exactly uniform bits.

Vectorised (:meth:`Inversion.sample`): a 16-bit prefix indexes a table of 2^16 entries; a bucket
that no threshold crosses gives X at once. The rest read 32 more bits and compare the 48-bit
prefix with 48-bit thresholds (``numpy.searchsorted``); the few left undecided (a prefix equal to
a rounded threshold, probability about 2^-32 each, or R below the last tabulated threshold)
continue one by one in Python integers (:meth:`Inversion.resolve`).

:class:`Staircase` turns an inversion over blocks into a sampler of a two-sided law e^{-φ(|y|)}
with a uniform value in the block and an exact acceptance test: the discrete Laplace's and
discrete Gaussian's vectorised samplers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.noise import limits
from dpsql.noise.bernoulli import bernoulli_exp, bernoulli_exp_vec
from dpsql.noise.sources import BoolArray, IntArray, RandomSource, below, narrow_fields, oversample

Interval = tuple[int, int]
#: (precision P, count) -> the intervals of 2^P S(i) for i = 1..count.
Survival = Callable[[int, int], list[Interval]]


def _ceil_shift(x: int, bits: int) -> int:
    """ceil(x / 2^bits) for bits >= 0."""
    return -((-x) >> bits)


def mul(a: Interval, b: Interval, prec: int) -> Interval:
    """The product of two non-negative fixed-point intervals at precision ``prec``."""
    return (a[0] * b[0]) >> prec, _ceil_shift(a[1] * b[1], prec)


def div(a: Interval, b: Interval, prec: int) -> Interval:
    """The quotient a/b of non-negative fixed-point intervals (b > 0) at precision ``prec``."""
    return (a[0] << prec) // b[1], -((-(a[1] << prec)) // b[0])


def _exp_unit(num: int, den: int, prec: int) -> Interval:
    """Bounds of 2^prec e^{-x} for x = num/den in [0, 1]: the alternating Taylor series.

    The terms x^k/k! decrease, so the sum lies within one term of any partial sum; each term is
    bounded below and above by floor and ceil, the sum is stopped once a term is below 2^-prec,
    and one unit is added on each side for the tail.
    """
    lo_t = hi_t = 1 << prec
    lo, hi = lo_t, hi_t
    k = 0
    while hi_t > 1:
        k += 1
        lo_t = lo_t * num // (den * k)
        hi_t = -((-hi_t * num) // (den * k))
        if k & 1:
            lo, hi = lo - hi_t, hi - lo_t
        else:
            lo, hi = lo + lo_t, hi + hi_t
    return max(lo - 1, 0), hi + 1


def exp_neg(num: int, den: int, prec: int) -> Interval:
    """Integers lo <= 2^prec e^{-num/den} <= hi, for integers num >= 0 and den >= 1.

    e^{-x} = (e^{-1})^floor(x) e^{-frac(x)}: both factors by :func:`_exp_unit`, the power by
    repeated squaring, all at ``prec`` plus guard bits that absorb the rounding of every product.
    """
    whole, rest = divmod(num, den)
    guard = 16 + 2 * whole.bit_length()
    work = prec + guard
    out = _exp_unit(rest, den, work)
    base = _exp_unit(1, 1, work)
    while whole:
        if whole & 1:
            out = mul(out, base, work)
        whole >>= 1
        if whole:
            base = mul(base, base, work)
    return out[0] >> guard, _ceil_shift(out[1], guard)


def _monotone(intervals: list[Interval]) -> list[Interval]:
    """Running minima of both ends: still bounds of a decreasing S, and themselves decreasing.

    For j <= i, S(i) <= S(j) <= hi_j, and min_j lo_j <= lo_i <= S(i).
    """
    out, lo_min, hi_min = [], None, None
    for lo, hi in intervals:
        lo_min = lo if lo_min is None else min(lo_min, lo)
        hi_min = hi if hi_min is None else min(hi_min, hi)
        out.append((lo_min, hi_min))
    return out


class Inversion:
    """Exact inversion sampling of X in {0, 1, ...} from a certified survival function.

    Args:
        survival: (P, count) -> intervals of 2^P S(i), i = 1..count.
        size: the number of outcomes when finite (S(i) = 0 for i >= size), else None.
        count: how many thresholds to tabulate for an infinite support; S(count) should be
            below 2^-limits.TAIL_BITS so that R is rarely below every tabulated threshold.
    """

    def __init__(self, survival: Survival, size: int | None, count: int) -> None:
        self.survival, self.size = survival, size
        self._cache: dict[tuple[int, int], list[Interval]] = {}
        self.count = size - 1 if size is not None else count
        self.guide_bits, self.refine_bits = limits.GUIDE_BITS, limits.REFINE_BITS
        guide, refine = self.guide_bits, self.guide_bits + self.refine_bits
        prec = refine + limits.GUARD_BITS
        bounds = _monotone(survival(prec, self.count))  # not cached: resolve caches its own
        lo48 = np.array([lo >> (prec - refine) for lo, _ in bounds], dtype=np.int64)
        hi48 = np.array([_ceil_shift(hi, prec - refine) for _, hi in bounds], dtype=np.int64)
        # Buckets b < lo16_i have R < S(i) for certain; buckets b >= hi16_i have R >= S(i).
        lo16 = np.minimum(lo48 >> self.refine_bits, 1 << guide)
        hi16 = np.minimum(-((-hi48) >> self.refine_bits), 1 << guide)
        certain = _count_above(lo16, 1 << guide)
        possible = _count_above(hi16, 1 << guide)
        decided = certain == possible
        if size is None:  # R below every tabulated threshold: X >= count, not yet known
            decided &= certain < self.count
        self.guide: IntArray = np.where(decided, certain, -1)
        self.ascending: IntArray = lo48[::-1].copy()  # 48-bit lower thresholds, ascending
        # hi48 of threshold value + 1 (0-based: value), and a sentinel at value = count that
        # leaves X = count decided for a finite support and undecided (X >= count) otherwise.
        sentinel = -1 if size is not None else 1 << 62
        self.next_hi: IntArray = np.append(hi48, np.int64(sentinel))

    def bounds(self, prec: int, count: int) -> list[Interval]:
        """Decreasing intervals of 2^prec S(i), i = 1..count (cached)."""
        key = (prec, count)
        if key not in self._cache:
            self._cache[key] = _monotone(self.survival(prec, count))
        return self._cache[key]

    def sample(self, n: int, rng: RandomSource) -> IntArray:
        """n iid outcomes, exact: a 16-bit lookup, 48-bit comparisons, then Python integers."""
        return self.sample_with_spare(n, rng, 0)[0]

    def sample_with_spare(self, n: int, rng: RandomSource, spare: int) -> tuple[IntArray, IntArray]:
        """n iid outcomes and, independent of them, n uniform integers of ``spare`` bits.

        One field of guide + spare bits per sample: its top bits index the table, and where the
        bucket decides the outcome its low bits were not looked at, so they are uniform and
        independent of the outcome; undecided samples get fresh spare bits.
        """
        bucket = narrow_fields(rng, n, self.guide_bits + spare)
        low = bucket & ((1 << spare) - 1) if spare else bucket[:0]
        if spare:
            bucket >>= spare
        out = self.guide[bucket]
        todo = np.flatnonzero(out < 0)
        if not todo.size:
            return out, low
        if spare:
            low[todo] = narrow_fields(rng, todo.size, spare)
        prefix = (bucket[todo] << self.refine_bits) | narrow_fields(rng, todo.size, self.refine_bits)
        # X = #{i : prefix < lo48_i} when no threshold is undecided at 48 bits.
        value = self.count - np.searchsorted(self.ascending, prefix, side="right")
        undecided = prefix < self.next_hi[value]
        out[todo] = value
        bits = self.guide_bits + self.refine_bits
        for i in np.flatnonzero(undecided).tolist():
            out[todo[i]] = self.resolve(int(prefix[i]), bits, rng)
        return out, low

    def resolve(self, prefix: int, bits: int, rng: RandomSource) -> int:
        """The outcome for R = (prefix + R') 2^-bits, R' read 64 bits at a time (exact)."""
        count = max(self.count, 1)
        while True:
            prec = bits + limits.GUARD_BITS
            low, high = prefix << limits.GUARD_BITS, (prefix + 1) << limits.GUARD_BITS
            while True:
                bounds = self.bounds(prec, count)
                below = sum(1 for lo, _ in bounds if lo >= high)
                above = sum(1 for _, hi in bounds if hi <= low)
                complete = self.size is not None or above > 0
                if below + above == len(bounds) and complete:
                    return below
                if below + above < len(bounds) or low == 0:
                    break  # a threshold straddles R's interval: read more bits
                count *= 2  # R is below every tabulated threshold: tabulate more
            prefix = (prefix << 64) | rng.randbelow(1 << 64)
            bits += 64


def _count_above(thresholds: IntArray, buckets: int) -> IntArray:
    """Per bucket b in [0, buckets), #{i : thresholds_i > b}."""
    counts = np.bincount(thresholds, minlength=buckets + 1)
    return np.asarray(counts[::-1].cumsum()[::-1][1:], dtype=np.int64)



@dataclass(frozen=True)
class Staircase:
    """Rejection from a staircase envelope whose steps are drawn by exact inversion.

    A target P[y] ∝ e^{-φ(|y|)} on Z, φ increasing, with φ(a + u) - φ(a) = u (c_a a + c_u u + c_1)
    q/den for integer constants (discrete Laplace: c_1 = 1; discrete Gaussian: c_a = 2, c_u = 1).
    Signed block o (:attr:`signed`, weights e^{-φ(a_o)}) covers |y| = a_o + u, u in [0, M),
    a_o = (o // 2) M + (o % 2), with y >= 0 for even o and y < 0 for odd o; u is uniform and the
    proposal is accepted with probability e^{-(φ(a + u) - φ(a))} <= 1 (exact Bernoulli(exp(-γ)),
    CKS Algorithm 1), the target over the envelope. For M = 1 every proposal is accepted: plain
    inversion of the pmf.
    """

    signed: Inversion
    shift: int  # M = 2^shift
    coefficients: tuple[int, int, int]  # (c_a, c_u, c_1)
    q: int
    den: int
    rate: float  # acceptance probability, floats: to size batches only
    a_max: int  # the largest a_o of the tabulated blocks

    def vectorizable(self) -> bool:
        """Whether γ <= 1 and 2^8 times γ's numerator and its denominator stay in int64, over
        the tabulated blocks (CKS Algorithm 1 as :func:`bernoulli_exp_vec` runs it needs γ <= 1)."""
        top = self.scalar_numerator(self.a_max, (1 << self.shift) - 1)
        return self.den <= limits.MAX_VECTOR_INT and top <= self.den and top << 8 <= limits.ARITH_LIMIT

    def scalar_numerator(self, a: int, u: int) -> int:
        """γ den = u (c_a a + c_u u + c_1) q, in Python integers."""
        c_a, c_u, c_1 = self.coefficients
        return u * (c_a * a + c_u * u + c_1) * self.q

    def numerator(self, a: IntArray, u: IntArray) -> IntArray:
        """γ den per proposal, in int64 (a <= a_max)."""
        c_a, c_u, c_1 = self.coefficients
        return u * (c_a * a + c_u * u + c_1) * self.q

    @functools.cached_property
    def quick(self) -> IntArray:
        """Per tabulated block o, ceil(2^8 γ_max(o)) with γ_max(o) = γ(a_o, M - 1), and 2^8 for
        the blocks beyond: a byte F >= quick[o] shows U = (F + U')/2^8 >= γ."""
        block = 1 << self.shift
        out = [-(-(self.scalar_numerator(o // 2 * block + o % 2, block - 1) << 8) // self.den)
               for o in range(self.signed.count + 1)]
        return np.minimum(np.array(out + [1 << 8], dtype=np.int64), 1 << 8)

    def batch(self, m: int, rng: RandomSource) -> IntArray:
        """The accepted samples of about m / rate proposals, in order."""
        if not self.shift:
            o = self.signed.sample(m, rng)
            return (o >> 1) ^ -(o & 1)  # y = k or -(k + 1)
        spare = self.shift if self.shift + self.signed.guide_bits <= 32 else 0
        o, u = self.signed.sample_with_spare(oversample(m, self.rate), rng, spare)
        if int(o.max(initial=0)) >> 1 > (limits.I64_MAX >> self.shift) - 2:
            raise OverflowError(f"a sample exceeds int64: block {int(o.max()) >> 1} of 2^{self.shift} values")
        if not spare:
            u = narrow_fields(rng, o.size, self.shift)
        negative = o & 1
        a = (o >> 1 << self.shift) + negative
        magnitude = a + u
        return np.compress(self.accept(o, a, u, rng), (magnitude ^ -negative) + negative)

    def accept(self, o: IntArray, a: IntArray, u: IntArray, rng: RandomSource) -> BoolArray:
        """Bernoulli(e^{-γ}) per proposal, CKS Algorithm 1 with its first draw U read lazily.

        The chain stops at K = 1 (accept) unless U < γ. A byte F of U with F >= ceil(2^8 γ_max)
        already shows U >= γ; otherwise U < γ is decided exactly, U = (F + U')/2^8 compared with
        γ as in :func:`dpsql.noise.bernoulli.bernoulli`, and chains with U < γ continue from
        K = 2. Blocks beyond the table are decided in Python integers.
        """
        quick = self.quick
        byte = narrow_fields(rng, o.size, 8)
        index = o if o.max(initial=0) < quick.size else np.minimum(o, quick.size - 1)
        out = np.ones(o.size, dtype=bool)
        maybe = np.flatnonzero(byte < quick[index])
        if not maybe.size:
            return out
        a_sub, u_sub, byte = a[maybe], u[maybe], byte[maybe]
        big = np.flatnonzero(a_sub > self.a_max)
        if big.size:  # decided below in Python integers; zeros keep int64 safe meanwhile
            a_sub[big] = u_sub[big] = 0
        num = self.numerator(a_sub, u_sub)
        scaled = num << 8
        threshold = scaled // self.den
        below_gamma = byte < threshold
        tie = np.flatnonzero(byte == threshold)
        if tie.size:
            below_gamma[tie] = below(rng, self.den, tie.size) < scaled[tie] - threshold[tie] * self.den
        going = np.flatnonzero(below_gamma)
        decided = ~below_gamma
        decided[going] = bernoulli_exp_vec(num[going], self.den, rng, 2)
        out[maybe] = decided
        for i in maybe[big].tolist():
            gamma = Fraction(self.scalar_numerator(int(a[i]), int(u[i])), self.den)
            out[i] = bool(bernoulli_exp(gamma, rng=rng))
        return out
