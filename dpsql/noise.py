"""Exact integer noise: the discrete Laplace and discrete Gaussian samplers of dpsql.

This is the only module in dpsql that draws randomness. Every sampler follows Canonne, Kamath and
Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020), called CKS below, and
decides every outcome with uniform integers and integer comparisons only: no floating-point
uniform is ever transformed, so there is no Mironov-style low-order-bit leak.

Notation:
    t, ``scale``     the scale of the discrete Laplace Lap_Z(t), P[y] = tanh(1/(2t)) e^{-|y|/t}.
    σ², ``sigma2``   the variance parameter of the discrete Gaussian N_Z(0, σ²),
                     P[y] = e^{-y²/(2σ²)} / Σ_x e^{-x²/(2σ²)}.
    p/q              a parameter as a reduced fraction (numerator p, denominator q).
    γ                the exponent of a Bernoulli(exp(-γ)) draw.
    Bernoulli(n/d)   one uniform integer U in [0, d) and the outcome U < n.

Scale parameters are rationals (``Fraction`` or ``int``). A float must be converted explicitly
with :func:`fraction_at_least`, which rounds up: more noise, never less privacy.

Randomness comes from a :class:`RandomSource`. Production uses :class:`SystemRandomSource`
(``os.urandom``); tests inject :class:`SeededRandomSource`. There is no global seed.

The public samplers are numpy-vectorised versions of the CKS algorithms with int64 arithmetic
over the array of still-active samples. Every int64 expression is guarded by bounds computed from
the public parameters and the sample values; a sample that leaves the safe region is finished
exactly in Python integers from the state it had reached, and parameters outside the region use
the pure-Python reference samplers. The output is an exact sample whatever path it took.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import random
import secrets
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpsql.errors import PrivacyParameterError

__all__ = [
    "RandomSource",
    "SeededRandomSource",
    "SystemRandomSource",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_gaussian_normalizer",
    "discrete_gaussian_pmf",
    "discrete_gaussian_scalar",
    "discrete_gaussian_variance",
    "discrete_laplace",
    "discrete_laplace_pmf",
    "discrete_laplace_scalar",
    "discrete_laplace_variance",
    "fraction_at_least",
    "fraction_at_most",
    "resolve_rng",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_I64_MAX = 2**63 - 1
# Ceiling for every intermediate int64 value computed in numpy. It equals _I64_MAX; tests lower it
# to force the exact Python fallbacks.
_ARITH_LIMIT = _I64_MAX
# Bernoulli-exp chains (CKS Algorithm 1) longer than this finish in Python; P[K > 64] < 1e-89.
_MAX_CHAIN = 64
# Bernoulli(e^-1) draws one uniform in [0, N), N a multiple of 20! < 2^63; chains longer than
# 20 (P = 1/20! < 1e-18) finish in Python.
_EXP1_TERMS = 20
# Geometric counts of Bernoulli(e^-1) successes above this finish in Python; P = e^-64 < 1e-27.
_MAX_GEOMETRIC = 64
# Parameters whose integers exceed this use the pure-Python samplers: it keeps den * K < 2^63.
_MAX_VECTOR_INT = 2**56
# Largest parameters whose samples fit in int64 except with probability < 2 e^-128.
_MAX_LAPLACE_SCALE = 2**56
_MAX_GAUSSIAN_SIGMA2 = 2**118


# --------------------------------------------------------------------------------------------
# Random sources
# --------------------------------------------------------------------------------------------


@runtime_checkable
class RandomSource(Protocol):
    """A source of exactly uniform integers; the only randomness the samplers use."""

    def integers(self, high: IntArray) -> IntArray:
        """Independent uniform integers in [0, high) per element (high >= 1), same shape."""
        ...

    def randbelow(self, high: int) -> int:
        """One uniform integer in [0, high) for any Python int high >= 1."""
        ...


def _common_high(flat: IntArray) -> bool:
    """Check every bound is >= 1 (flat non-empty); True when all bounds are equal."""
    low = int(flat.min())
    if low < 1:
        raise ValueError(f"every high must be >= 1; got {low}")
    return low == int(flat.max())


def _smear(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The mask 2^k - 1 with k the bit length of x, per element."""
    x = x.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        x |= x >> np.uint64(shift)
    return x


def _urandom_words(count: int, widest: int) -> npt.NDArray[np.uint64]:
    """``count`` random words from os.urandom, of the narrowest width holding ``widest`` bits."""
    nbytes = next(b for b in (1, 2, 4, 8) if widest < 1 << (8 * b))
    raw = np.frombuffer(os.urandom(count * nbytes), dtype=f"<u{nbytes}")
    return raw.astype(np.uint64)


class SystemRandomSource:
    """Production randomness: bytes from ``os.urandom``, exact rejection sampling.

    Each value is drawn as random bits masked to the next power of two >= high and redrawn while
    it is >= high, so it is exactly uniform: no float, no modulo bias. Bits come from one
    ``os.urandom`` block per pass, 1, 2, 4 or 8 bytes per value (the fewest that cover the mask).
    """

    def integers(self, high: IntArray) -> IntArray:
        """Independent uniform integers in [0, high) per element (high >= 1), same shape."""
        high = np.asarray(high, dtype=np.int64)
        flat = high.ravel()
        if not flat.size:
            return np.zeros(high.shape, dtype=np.int64)
        if _common_high(flat):
            return self._uniform(int(flat[0]), flat.size).reshape(high.shape)
        bound = flat.astype(np.uint64)
        mask = _smear(bound - np.uint64(1))
        out = _urandom_words(bound.size, int(mask.max())) & mask
        todo = np.flatnonzero(out >= bound)
        while todo.size:
            cand = _urandom_words(todo.size, int(mask[todo].max())) & mask[todo]
            ok = cand < bound[todo]
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
        return out.astype(np.int64).reshape(high.shape)

    def randbelow(self, high: int) -> int:
        """One uniform integer in [0, high), from ``secrets`` (os.urandom, exact rejection)."""
        if high < 1:
            raise ValueError(f"high must be >= 1; got {high}")
        return secrets.randbelow(high)

    @staticmethod
    def _uniform(high: int, n: int) -> IntArray:
        """n uniform integers in [0, high) for one common bound."""
        if high == 1:
            return np.zeros(n, dtype=np.int64)
        mask = (1 << (high - 1).bit_length()) - 1
        out = _urandom_words(n, mask) & np.uint64(mask)
        redo = np.flatnonzero(out >= high)
        while redo.size:
            out[redo] = _urandom_words(redo.size, mask) & np.uint64(mask)
            redo = redo[out[redo] >= high]
        return out.astype(np.int64)


class SeededRandomSource:
    """Reproducible randomness for tests only: numpy PCG64 for arrays, random.Random for ints.

    Args:
        seed: a non-negative integer seed.
    """

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be a non-negative int; got {seed!r}")
        self._generator: np.random.Generator = np.random.Generator(np.random.PCG64(int(seed)))
        self._random: random.Random = random.Random(int(seed))

    def integers(self, high: IntArray) -> IntArray:
        """Independent uniform integers in [0, high) per element (high >= 1), same shape."""
        high = np.asarray(high, dtype=np.int64)
        flat = high.ravel()
        if not flat.size:
            return np.zeros(high.shape, dtype=np.int64)
        if _common_high(flat):
            return self._generator.integers(int(flat[0]), size=high.shape, dtype=np.int64)
        return self._generator.integers(high, dtype=np.int64)

    def randbelow(self, high: int) -> int:
        """One uniform integer in [0, high) from random.Random (exact rejection on bits)."""
        return self._random.randrange(high)


def resolve_rng(rng: RandomSource | None) -> RandomSource:
    """Return ``rng``, or a fresh :class:`SystemRandomSource` when it is None."""
    return SystemRandomSource() if rng is None else rng


# --------------------------------------------------------------------------------------------
# Parameters and rational rounding
# --------------------------------------------------------------------------------------------


def _positive_rational(value: object, name: str, maximum: int | None = None) -> Fraction:
    """``value`` as a Fraction in (0, maximum], else PrivacyParameterError naming it."""
    if isinstance(value, float) and math.isfinite(value) and value > 0:
        raise PrivacyParameterError(
            f"{name} must be a Fraction or int, not the float {value!r}; convert it with "
            f"fraction_at_least({value!r}), which rounds up (more noise, never less privacy)."
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Rational) or value <= 0:
        raise PrivacyParameterError(f"{name} must be a positive rational; got {value}.")
    frac = Fraction(int(value.numerator), int(value.denominator))
    if maximum is not None and frac > maximum:
        raise PrivacyParameterError(
            f"{name} must be at most {maximum} so that samples fit in int64; got {value}."
        )
    return frac


def _check_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
        raise PrivacyParameterError(f"size must be an int >= 0; got {size!r}.")
    return int(size)


def _exact_fraction(x: float | Fraction, max_denominator: int) -> Fraction:
    if isinstance(max_denominator, bool) or not isinstance(max_denominator, int):
        raise PrivacyParameterError(f"max_denominator must be an int; got {max_denominator!r}.")
    if max_denominator < 1:
        raise PrivacyParameterError(f"max_denominator must be >= 1; got {max_denominator}.")
    if isinstance(x, float) and not math.isfinite(x):
        raise PrivacyParameterError(f"x must be finite; got {x}.")
    return Fraction(x)


def _farey_neighbours(x: Fraction, max_denominator: int) -> tuple[Fraction, Fraction]:
    """The closest fractions below and above x with denominator <= max_denominator.

    Requires x.denominator > max_denominator. Same continued-fraction walk as
    Fraction.limit_denominator, which returns whichever of the two is closer.
    """
    p0, q0, p1, q1 = 0, 1, 1, 0
    n, d = x.numerator, x.denominator
    while True:
        a = n // d
        q2 = q0 + a * q1
        if q2 > max_denominator:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        n, d = d, n - a * d
    k = (max_denominator - q0) // q1
    first, second = Fraction(p0 + k * p1, q0 + k * q1), Fraction(p1, q1)
    return (first, second) if first < second else (second, first)


def fraction_at_least(x: float | Fraction, *, max_denominator: int = 2**20) -> Fraction:
    """The smallest rational >= x whose denominator is at most ``max_denominator``.

    Use it to turn a float scale or sigma2 into a sampler argument: rounding up adds noise, so
    the privacy guarantee computed from the returned value holds.

    Raises:
        PrivacyParameterError: x is not finite, or max_denominator < 1.

    >>> fraction_at_least(2.5)
    Fraction(5, 2)
    >>> fraction_at_least(Fraction(1, 3))
    Fraction(1, 3)
    >>> f = fraction_at_least(0.1, max_denominator=1000); f, f >= 0.1
    (Fraction(100, 999), True)
    """
    frac = _exact_fraction(x, max_denominator)
    if frac.denominator <= max_denominator:
        return frac
    return _farey_neighbours(frac, max_denominator)[1]


def fraction_at_most(x: float | Fraction, *, max_denominator: int = 2**20) -> Fraction:
    """The largest rational <= x whose denominator is at most ``max_denominator``.

    Use it for quantities that must not grow, such as epsilon. For x > 0 the result is > 0.

    Raises:
        PrivacyParameterError: x is not finite, max_denominator < 1, or 0 < x < 1/max_denominator
            (no positive rational <= x has a small enough denominator).

    >>> fraction_at_most(0.1, max_denominator=1000)
    Fraction(1, 10)
    >>> fraction_at_most(Fraction(2, 3))
    Fraction(2, 3)
    """
    frac = _exact_fraction(x, max_denominator)
    if frac.denominator <= max_denominator:
        return frac
    lower = _farey_neighbours(frac, max_denominator)[0]
    if frac > 0 >= lower:
        raise PrivacyParameterError(
            f"no positive rational <= {x} has denominator <= {max_denominator}; "
            "raise max_denominator."
        )
    return lower


# --------------------------------------------------------------------------------------------
# Scalar reference samplers (pure Python integers)
# --------------------------------------------------------------------------------------------


def _bernoulli_exp_unit(num: int, den: int, rng: RandomSource, k: int = 1) -> int:
    """Bernoulli(exp(-num/den)) for 0 <= num <= den, CKS Algorithm 1, continuing from K = k."""
    while rng.randbelow(den * k) < num:
        k += 1
    return k & 1


def _count_exp1_successes(rng: RandomSource, limit: int | None = None) -> int:
    """Successes of iid Bernoulli(e^-1) before the first failure, stopping at ``limit``."""
    count = 0
    while (limit is None or count < limit) and _bernoulli_exp_unit(1, 1, rng, k=2):
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
    if _count_exp1_successes(rng, limit=whole) < whole:
        return 0
    return _bernoulli_exp_unit(rest, int(gamma.denominator), rng)


def _laplace_magnitude_scalar(p: int, q: int, u: int, rng: RandomSource) -> int:
    """floor((u + p V)/q) with V the count of Bernoulli(e^-1) successes (CKS Algorithm 2)."""
    return (u + p * _count_exp1_successes(rng)) // q


def _signed_or_none(magnitude: int, rng: RandomSource) -> int | None:
    """Attach a uniform sign; None (reject) for "-0" so that 0 is not counted twice."""
    negative = rng.randbelow(2)
    if negative and magnitude == 0:
        return None
    return -magnitude if negative else magnitude


def discrete_laplace_scalar(scale: Fraction, *, rng: RandomSource) -> int:
    """One exact Lap_Z(scale) sample in pure Python (the reference implementation).

    Math:
        P[y] = tanh(1/(2t)) e^{-|y|/t} with t = scale = p/q. CKS Algorithm 2: U uniform in
        [0, p), restart unless Bernoulli(exp(-U/p)); V = successes of Bernoulli(e^-1) before a
        failure; X = U + pV is Geometric(1 - e^{-1/p}) and Y = floor(X/q) is
        Geometric(1 - e^{-1/t}); a uniform sign, restarting on "-0".

    Privacy:
        f(D) + Lap_Z(Δ₁/ε) is ε-DP for an integer query of L1 sensitivity Δ₁. The sample is exact;
        randomness comes from ``rng``.

    Raises:
        PrivacyParameterError: scale is a float or not a positive rational.
    """
    t = _positive_rational(scale, "scale")
    p, q = t.numerator, t.denominator
    while True:
        u = rng.randbelow(p)
        if not _bernoulli_exp_unit(u, p, rng):
            continue
        y = _signed_or_none(_laplace_magnitude_scalar(p, q, u, rng), rng)
        if y is not None:
            return y


def discrete_gaussian_scalar(sigma2: Fraction, *, rng: RandomSource) -> int:
    """One exact N_Z(0, sigma2) sample in pure Python (the reference implementation).

    Math:
        P[y] ∝ e^{-y²/(2σ²)}. CKS Algorithm 3: t = floor(σ) + 1 = isqrt(floor(σ²)) + 1; repeat
        Y ~ Lap_Z(t) until Bernoulli(exp(-γ)) with γ = (|Y| - σ²/t)²/(2σ²)
        = (|Y| q t - p)² / (2 p q t²) for σ² = p/q.

    Privacy:
        ρ-zCDP with ρ = Δ₂²/(2σ²) for an integer vector of L2 sensitivity Δ₂ with iid noise. The
        sample is exact; randomness comes from ``rng``.

    Raises:
        PrivacyParameterError: sigma2 is a float or not a positive rational.
    """
    s2 = _positive_rational(sigma2, "sigma2")
    p, q = s2.numerator, s2.denominator
    t = math.isqrt(p // q) + 1
    while True:
        y = discrete_laplace_scalar(Fraction(t), rng=rng)
        if bernoulli_exp(Fraction((abs(y) * q * t - p) ** 2, 2 * p * q * t * t), rng=rng):
            return y


# --------------------------------------------------------------------------------------------
# Vectorised primitives (int64 numpy over the still-active samples)
# --------------------------------------------------------------------------------------------


def _bernoulli_exp_vec(num: IntArray, den: IntArray, rng: RandomSource, k: int = 1) -> BoolArray:
    """Bernoulli(exp(-num/den)) per element, 0 <= num <= den, CKS Algorithm 1 from K = k.

    Chains that would need den * K beyond the arithmetic limit or K > _MAX_CHAIN finish in
    Python from the K they reached.
    """
    out = np.zeros(num.size, dtype=bool)
    idx = np.arange(num.size)
    k_max = min(_MAX_CHAIN, _ARITH_LIMIT // int(den.max(initial=1)))
    while idx.size and k <= k_max:
        going = rng.integers(den * k) < num
        out[idx[~going]] = bool(k & 1)
        idx, num, den = idx[going], num[going], den[going]
        k += 1
    for i, n, d in zip(idx.tolist(), num.tolist(), den.tolist()):
        out[i] = _bernoulli_exp_unit(n, d, rng, k)
    return out


@functools.lru_cache(maxsize=4)
def _exp1_table(terms: int) -> tuple[int, IntArray]:
    """(N, ascending N/j! for j = terms..1) with N the largest multiple of terms! below 2^63."""
    top = math.factorial(terms)
    n = (2**63 - 1) // top * top
    return n, np.array([n // math.factorial(j) for j in range(terms, 0, -1)], dtype=np.int64)


def _exp1_vec(n: int, rng: RandomSource) -> BoolArray:
    """n iid Bernoulli(e^-1): CKS Algorithm 1 for γ = 1, with its chain length K from one draw.

    For γ = 1, P[K >= k] = 1/(k-1)!. With R uniform in [0, N) and N divisible by j! for
    j <= _EXP1_TERMS, K >= k iff R < N/(k-1)!, so K = 1 + #{j : R < N/j!} exactly. When
    R < N/_EXP1_TERMS! the chain has reached K = _EXP1_TERMS + 1 and continues in Python.
    """
    top, thresholds = _exp1_table(_EXP1_TERMS)
    r = rng.integers(np.full(n, top, dtype=np.int64))
    k = 1 + thresholds.size - np.searchsorted(thresholds, r, side="right")
    out = (k & 1).astype(bool)
    for i in np.flatnonzero(r < thresholds[0]).tolist():
        out[i] = _bernoulli_exp_unit(1, 1, rng, _EXP1_TERMS + 1)
    return out


def _geometric_vec(n: int, rng: RandomSource, limit: IntArray | None = None) -> IntArray:
    """Per element, successes of iid Bernoulli(e^-1) before the first failure, capped at limit.

    P[count >= v] = e^-v. Counts still running after _MAX_GEOMETRIC rounds finish in Python.
    """
    count = np.zeros(n, dtype=np.int64)
    idx = np.arange(n) if limit is None else np.flatnonzero(limit > 0)
    rounds = 0
    while idx.size and rounds < _MAX_GEOMETRIC:
        idx = idx[_exp1_vec(idx.size, rng)]
        count[idx] += 1
        if limit is not None:
            idx = idx[count[idx] < limit[idx]]
        rounds += 1
    for i in idx.tolist():
        left = None if limit is None else int(limit[i]) - rounds
        count[i] = rounds + _count_exp1_successes(rng, left)
    return count


def _laplace_magnitudes(p: int, q: int, u: IntArray, rng: RandomSource) -> IntArray:
    """floor((U + pV)/q) per element; elements whose U + pV would overflow use Python ints."""
    v = _geometric_vec(u.size, rng)
    mag = np.empty(u.size, dtype=np.int64)
    safe = v <= (_ARITH_LIMIT - p) // p
    mag[safe] = (u[safe] + p * v[safe]) // q
    for i in np.flatnonzero(~safe).tolist():
        big = (int(u[i]) + p * int(v[i])) // q
        if big > _I64_MAX:
            raise OverflowError(f"a Lap_Z({Fraction(p, q)}) sample exceeds int64: {big}")
        mag[i] = big
    return mag


def _laplace_attempt(p: int, q: int, m: int, rng: RandomSource) -> tuple[IntArray, BoolArray]:
    """One pass of CKS Algorithm 2 on m elements: (values, accepted)."""
    den = np.full(m, p, dtype=np.int64)
    u = rng.integers(den)
    accepted = _bernoulli_exp_vec(u, den, rng)
    kept = np.flatnonzero(accepted)
    mag = _laplace_magnitudes(p, q, u[kept], rng)
    negative = rng.integers(np.full(kept.size, 2, dtype=np.int64)) == 1
    accepted[kept[negative & (mag == 0)]] = False
    values = np.zeros(m, dtype=np.int64)
    values[kept] = np.where(negative, -mag, mag)
    return values, accepted


def _laplace_vec(scale: Fraction, n: int, rng: RandomSource) -> IntArray:
    """n iid Lap_Z(scale), restarting only the rejected elements."""
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        values, accepted = _laplace_attempt(scale.numerator, scale.denominator, todo.size, rng)
        out[todo[accepted]] = values[accepted]
        todo = todo[~accepted]
    return out


@dataclass(frozen=True)
class _GaussPlan:
    """Rejection from Lap_Z(t) with acceptance exp(-γ), γ = (b|Y| - a)² · mult / den.

    Here a/b = σ²/t, so γ = (|Y| - σ²/t)² / (2σ²).
    """

    t: Fraction
    a: int
    b: int
    mult: int
    den: int

    @classmethod
    def for_sigma2(cls, sigma2: Fraction) -> _GaussPlan:
        """CKS t = 1 when σ < 1; otherwise t = σ²/c with c the integer nearest σ."""
        p, q = sigma2.numerator, sigma2.denominator
        if p < q:
            t, a, b = Fraction(1), p, q
        else:
            c = math.isqrt(p // q)
            if 4 * p >= q * (2 * c + 1) ** 2:  # σ >= c + 1/2
                c += 1
            t, a, b = sigma2 / c, c, 1
        g = math.gcd(q, 2 * p * b * b)
        return cls(t, a, b, q // g, 2 * p * b * b // g)

    def vectorizable(self) -> bool:
        """Whether every parameter integer is small enough for the int64 path."""
        ints = (self.t.numerator, self.t.denominator, self.a, self.b, self.mult, self.den)
        return max(ints) <= _MAX_VECTOR_INT

    def gamma(self, y: int) -> Fraction:
        """γ for one proposal y, exactly."""
        return Fraction((self.b * abs(y) - self.a) ** 2 * self.mult, self.den)


def _gaussian_accept(plan: _GaussPlan, y: IntArray, rng: RandomSource) -> BoolArray:
    """Bernoulli(exp(-γ(Y))) per proposal; proposals too large for int64 γ use Python ints."""
    mag = np.abs(y)
    y_max = (math.isqrt(_ARITH_LIMIT // plan.mult) - plan.a) // plan.b
    safe = np.flatnonzero(mag <= y_max)
    num = (plan.b * mag[safe] - plan.a) ** 2 * plan.mult
    whole, rest = np.divmod(num, plan.den)
    ok = _bernoulli_exp_vec(rest, np.full(safe.size, plan.den, dtype=np.int64), rng)
    ok[ok] = _geometric_vec(int(ok.sum()), rng, limit=whole[ok]) >= whole[ok]
    accepted = np.zeros(y.size, dtype=bool)
    accepted[safe] = ok
    for i in np.flatnonzero(mag > y_max).tolist():
        accepted[i] = bernoulli_exp(plan.gamma(int(y[i])), rng=rng)
    return accepted


def _gaussian_vec(plan: _GaussPlan, n: int, rng: RandomSource) -> IntArray:
    """n iid N_Z(0, σ²) by vectorised rejection, restarting only the rejected elements."""
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        proposals = _laplace_vec(plan.t, todo.size, rng)
        accepted = _gaussian_accept(plan, proposals, rng)
        out[todo[accepted]] = proposals[accepted]
        todo = todo[~accepted]
    return out


# --------------------------------------------------------------------------------------------
# Public samplers
# --------------------------------------------------------------------------------------------


def discrete_laplace(
    scale: Fraction, size: int, *, rng: RandomSource | None = None
) -> IntArray:
    """``size`` iid samples of the discrete Laplace distribution Lap_Z(scale).

    Math:
        P[y] = tanh(1/(2t)) e^{-|y|/t} for y in Z, t = scale; Var = 2e^{-1/t}/(1 - e^{-1/t})².
        CKS Algorithm 2 (see :func:`discrete_laplace_scalar`), vectorised in int64 numpy over the
        elements still running; only rejected elements restart. Scales whose numerator or
        denominator exceed 2^56 use the pure-Python reference sampler.

    Privacy:
        Adding the samples to an integer query of L1 sensitivity Δ₁ with scale = Δ₁/ε is pure
        ε-DP: P[y]/P[y + Δ₁] <= e^{Δ₁/t}. Sampling is exact (uniform integers and comparisons
        only). Randomness comes from the OS (``os.urandom``) unless a seeded source is injected
        for tests.

    Raises:
        PrivacyParameterError: scale is a float (use :func:`fraction_at_least`), is not a
            positive rational or exceeds 2^56; or size is not an int >= 0.
    """
    t = _positive_rational(scale, "scale", maximum=_MAX_LAPLACE_SCALE)
    n = _check_size(size)
    source = resolve_rng(rng)
    if max(t.numerator, t.denominator) <= _MAX_VECTOR_INT:
        return _laplace_vec(t, n, source)
    samples = [discrete_laplace_scalar(t, rng=source) for _ in range(n)]
    return np.array(samples, dtype=np.int64).reshape(n)


def discrete_gaussian(
    sigma2: Fraction, size: int, *, rng: RandomSource | None = None
) -> IntArray:
    """``size`` iid samples of the discrete Gaussian distribution N_Z(0, sigma2).

    Math:
        P[y] = e^{-y²/(2σ²)} / Σ_x e^{-x²/(2σ²)}; Var < σ² (:func:`discrete_gaussian_variance`).
        CKS Algorithm 3: propose Y ~ Lap_Z(t), accept with probability exp(-(|Y| - σ²/t)²/(2σ²)),
        which is correct for every t > 0. For σ < 1 this uses CKS's t = floor(σ) + 1 = 1; for
        σ >= 1 it uses t = σ²/c with c the integer nearest σ, so σ²/t = c is an integer and, with
        σ² = p/q, γ = (|Y| - c)² q/(2p) has denominator 2p instead of 2pqt²: int64 arithmetic
        then covers far larger σ² and denominators, at an acceptance rate like CKS's (0.65-0.76
        for σ >= 1, tending to √(π/2) e^{-1/2} = 0.760). γ is split into floor(γ) Bernoulli(e^-1)
        draws and one Bernoulli(exp(-frac(γ))). Vectorised in int64 numpy; parameters too large
        for int64 use the pure-Python reference sampler (:func:`discrete_gaussian_scalar`).

    Privacy:
        Adding iid samples to an integer vector of L2 sensitivity Δ₂ is ρ-zCDP with
        ρ = Δ₂²/(2σ²) (CKS; Rényi divergences add over coordinates). Sampling is exact (uniform
        integers and comparisons only). Randomness comes from the OS (``os.urandom``) unless a
        seeded source is injected for tests.

    Raises:
        PrivacyParameterError: sigma2 is a float (use :func:`fraction_at_least`), is not a
            positive rational or exceeds 2^118; or size is not an int >= 0.
    """
    s2 = _positive_rational(sigma2, "sigma2", maximum=_MAX_GAUSSIAN_SIGMA2)
    n = _check_size(size)
    source = resolve_rng(rng)
    plan = _GaussPlan.for_sigma2(s2)
    if plan.vectorizable():
        return _gaussian_vec(plan, n, source)
    samples = [discrete_gaussian_scalar(s2, rng=source) for _ in range(n)]
    return np.array(samples, dtype=np.int64).reshape(n)


# --------------------------------------------------------------------------------------------
# Distribution facts (floating point; never used to decide a sample)
# --------------------------------------------------------------------------------------------


def _positive_float(value: Fraction | float, name: str) -> float:
    x = float(value)
    if not (math.isfinite(x) and x > 0):
        raise PrivacyParameterError(f"{name} must be positive and finite; got {value}.")
    return x


def discrete_laplace_variance(scale: Fraction | float) -> float:
    """Variance of Lap_Z(t): 2 e^{-1/t} / (1 - e^{-1/t})².

    Raises:
        PrivacyParameterError: scale is not positive and finite.

    >>> round(discrete_laplace_variance(1), 6)
    1.841347
    >>> round(discrete_laplace_variance(Fraction(10)), 6)
    199.833417
    """
    x = 1.0 / _positive_float(scale, "scale")
    return 2.0 * math.exp(-x) / math.expm1(-x) ** 2


def discrete_laplace_pmf(y: npt.ArrayLike, scale: Fraction | float) -> npt.NDArray[np.float64]:
    """P[Y = y] for Y ~ Lap_Z(t): tanh(1/(2t)) e^{-|y|/t}, elementwise.

    Raises:
        PrivacyParameterError: scale is not positive and finite.

    >>> discrete_laplace_pmf([0, 1], 1).round(6)
    array([0.462117, 0.170003])
    """
    t = _positive_float(scale, "scale")
    return math.tanh(0.5 / t) * np.exp(-np.abs(np.asarray(y, dtype=np.float64)) / t)


def _gauss_terms(sigma2: float) -> npt.NDArray[np.float64]:
    """x = 0, 1, 2, ... far enough that e^{-x²/(2σ²)} is below 1e-300 of the x = 0 term."""
    return np.arange(math.ceil(math.sqrt(1400.0 * sigma2)) + 2, dtype=np.float64)


def _direct_moments(sigma2: float) -> tuple[float, float]:
    """(Σ_x e^{-x²/(2σ²)}, Σ_x x² e^{-x²/(2σ²)}) summed directly (accurate for small σ²)."""
    x = _gauss_terms(sigma2)
    w = np.exp(-(x**2) / (2.0 * sigma2))
    return float(w[0] + 2.0 * w[1:].sum()), float(2.0 * (x[1:] ** 2 * w[1:]).sum())


def discrete_gaussian_normalizer(sigma2: Fraction | float) -> float:
    """Σ_{x in Z} e^{-x²/(2σ²)}, summed directly for σ² < 1/(2π), else by Poisson summation.

    Poisson summation: Σ_x e^{-x²/(2σ²)} = √(2πσ²) Σ_y e^{-2π²σ²y²}.

    Raises:
        PrivacyParameterError: sigma2 is not positive and finite.

    >>> round(discrete_gaussian_normalizer(Fraction(1, 4)), 12)
    1.271341522189
    """
    s2 = _positive_float(sigma2, "sigma2")
    if s2 < 1.0 / (2.0 * math.pi):
        return _direct_moments(s2)[0]
    dual = 1.0 / (4.0 * math.pi**2 * s2)
    return math.sqrt(2.0 * math.pi * s2) * _direct_moments(dual)[0]


def discrete_gaussian_variance(sigma2: Fraction | float) -> float:
    """Var of N_Z(0, σ²), exactly (up to float rounding); always < σ².

    Direct sums for σ² < 1/(2π); otherwise CKS Lemma 20:
    Var(σ²) = σ² (1 - 4π²σ² Var(1/(4π²σ²))).

    Raises:
        PrivacyParameterError: sigma2 is not positive and finite.

    >>> round(discrete_gaussian_variance(Fraction(1, 2)), 10)
    0.4989791308
    """
    s2 = _positive_float(sigma2, "sigma2")
    if s2 < 1.0 / (2.0 * math.pi):
        z, m2 = _direct_moments(s2)
        return m2 / z
    dual = 1.0 / (4.0 * math.pi**2 * s2)
    z, m2 = _direct_moments(dual)
    return s2 * (1.0 - 4.0 * math.pi**2 * s2 * (m2 / z))


def discrete_gaussian_pmf(y: npt.ArrayLike, sigma2: Fraction | float) -> npt.NDArray[np.float64]:
    """P[Y = y] for Y ~ N_Z(0, σ²), elementwise.

    Raises:
        PrivacyParameterError: sigma2 is not positive and finite.

    >>> discrete_gaussian_pmf([0, 1], 1).round(6)
    array([0.398942, 0.241971])
    """
    s2 = _positive_float(sigma2, "sigma2")
    y2 = np.asarray(y, dtype=np.float64) ** 2
    return np.exp(-y2 / (2.0 * s2)) / discrete_gaussian_normalizer(s2)
