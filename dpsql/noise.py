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

The vectorised samplers spend random bits sparingly, because reading ``os.urandom`` is a large
part of their cost. They take uniform 64-bit words from the source and cut them into fields of
as few bits as each decision needs:
    uniform in [0, m)   rejection sampling on fields of about log2(m) bits (:func:`_below`);
    Bernoulli(n/d)      4 random bits compared with floor(16 n/d), plus one uniform in [0, d) in
                        the 1/16 of cases where they are equal (:func:`_bernoulli`);
    Bernoulli(e^-1)     the CKS chain length read off one uniform in [0, 5!) (:func:`_exp1_vec`).
Each is exact: the proofs are in the docstrings. Samples are produced in batches of about
_BATCH; how many proposals a batch draws comes from the expected acceptance rates, computed in
floating point, but such counts never decide a sample: every proposal is accepted or rejected
exactly and the accepted ones are kept in order, so they are iid from the target.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import random
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpsql.errors import PrivacyParameterError

#: The noise distribution of a measurement: discrete Gaussian (ρ-zCDP) or discrete Laplace (ε-DP).
#: The one definition; every layer that names a noise kind imports it from here.
Noise = Literal["gaussian", "laplace"]

__all__ = [
    "Noise",
    "RandomSource",
    "SeededRandomSource",
    "SystemRandomSource",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_gaussian_normalizer",
    "discrete_gaussian_pmf",
    "discrete_gaussian_scalar",
    "discrete_gaussian_variance",
    "discrete_gaussian_wide",
    "discrete_laplace",
    "discrete_laplace_pmf",
    "discrete_laplace_scalar",
    "discrete_laplace_variance",
    "discrete_laplace_wide",
    "fraction_at_least",
    "fraction_at_most",
    "resolve_rng",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
WordArray = npt.NDArray[np.uint64]

_I64_MAX = 2**63 - 1
# Ceiling for every intermediate int64 value computed in numpy. It equals _I64_MAX; tests lower it
# to force the exact Python fallbacks.
_ARITH_LIMIT = _I64_MAX
# Bernoulli-exp chains (CKS Algorithm 1) longer than this finish in Python; P[K > 64] < 1e-89.
_MAX_CHAIN = 64
# Bernoulli(e^-1) reads the chain length K <= _EXP1_TERMS from one uniform integer in
# [0, _EXP1_TERMS!) (7 bits for 5! = 120); longer chains (P = 1/120) continue vectorised.
_EXP1_TERMS = 5
# Geometric counts of Bernoulli(e^-1) successes above this finish in Python; P = e^-64 < 1e-27.
_MAX_GEOMETRIC = 64
# Bits per truncated Bernoulli(num/den) comparison; a tie (P = 2^-4) costs one more uniform.
_BERNOULLI_BITS = 4
# Samples produced per batch: the working arrays of a batch stay in the CPU caches.
_BATCH = 2**16
# os.urandom chunks of SystemRandomSource, in 64-bit words: 4 KiB doubling up to 1 MiB.
_MIN_URANDOM_WORDS = 2**9
_MAX_URANDOM_WORDS = 2**17
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


def _smear(x: WordArray) -> WordArray:
    """The mask 2^k - 1 with k the bit length of x, per element."""
    x = x.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        x |= x >> np.uint64(shift)
    return x


class SystemRandomSource:
    """Production randomness: words from ``os.urandom`` in large chunks, exact rejection.

    Random bytes are read in chunks and handed out as 64-bit words, each exactly once: a request
    takes the words at the front of the buffer and the buffer keeps only the words after them
    (a fresh, read-only array per chunk, never overwritten). A refill reads max(what the request
    still needs, the current chunk) bytes in one ``os.urandom`` call; the chunk starts at 4 KiB,
    so small one-off draws stay cheap, and doubles at every refill up to 1 MiB, so large draws
    cost one system call per MiB. The buffer is dropped in a forked child (it would otherwise
    repeat the parent's words) and is not copied or pickled; a lock makes concurrent draws from
    several threads take disjoint words.

    Uniform integers below a bound are random bits masked to the next power of two >= the bound
    and redrawn while they are >= the bound, so they are exactly uniform: no float, no modulo bias.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._buffer: WordArray = np.empty(0, dtype=np.uint64)
        self._chunk = _MIN_URANDOM_WORDS

    def __getstate__(self) -> dict[str, object]:
        """Copies and pickles start with an empty buffer, so no word is ever handed out twice."""
        return {}

    def __setstate__(self, state: dict[str, object]) -> None:
        self._lock = threading.Lock()
        self._reset()

    def integers(self, high: IntArray) -> IntArray:
        """Independent uniform integers in [0, high) per element (high >= 1), same shape."""
        high = np.asarray(high, dtype=np.int64)
        flat = high.ravel()
        if not flat.size:
            return np.zeros(high.shape, dtype=np.int64)
        if _common_high(flat):
            return _below(self, int(flat[0]), flat.size).reshape(high.shape)
        bound = flat.astype(np.uint64)
        mask = _smear(bound - np.uint64(1))
        out = self._words(bound.size) & mask
        todo = np.flatnonzero(out >= bound)
        while todo.size:
            cand = self._words(todo.size) & mask[todo]
            ok = cand < bound[todo]
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
        return out.astype(np.int64).reshape(high.shape)

    def randbelow(self, high: int) -> int:
        """One uniform integer in [0, high), from ``secrets`` (os.urandom, exact rejection)."""
        if high < 1:
            raise ValueError(f"high must be >= 1; got {high}")
        return secrets.randbelow(high)

    def _words(self, count: int) -> WordArray:
        """The next ``count`` unused uniform 64-bit words of the buffer, refilling it as needed."""
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            if count <= self._buffer.size:
                out, self._buffer = self._buffer[:count], self._buffer[count:]
                return out
            need = count - self._buffer.size
            size = max(need, self._chunk)
            self._chunk = min(2 * self._chunk, _MAX_URANDOM_WORDS)
            fresh = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
            out = np.concatenate([self._buffer, fresh[:need]])
            self._buffer = fresh[need:]
            return out


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

    def _words(self, count: int) -> WordArray:
        """``count`` raw 64-bit outputs of the PCG64 stream."""
        return np.asarray(self._generator.bit_generator.random_raw(count), dtype=np.uint64)


def resolve_rng(rng: RandomSource | None) -> RandomSource:
    """Return ``rng``, or a fresh :class:`SystemRandomSource` when it is None."""
    return SystemRandomSource() if rng is None else rng


# --------------------------------------------------------------------------------------------
# Random bits: words, fields, uniform integers below a bound, Bernoulli(num/den)
# --------------------------------------------------------------------------------------------


def _words(rng: RandomSource, count: int) -> WordArray:
    """``count`` independent uniform 64-bit words from ``rng``.

    The two built-in sources hand out raw words; any other source is asked for pairs of uniform
    integers in [0, 2^32), which it draws exactly by its own contract.
    """
    if isinstance(rng, (SystemRandomSource, SeededRandomSource)):
        return rng._words(count)
    halves = rng.integers(np.full(2 * count, 2**32, dtype=np.int64)).astype(np.uint64)
    return (halves[:count] << np.uint64(32)) | halves[count:]


def _fields(rng: RandomSource, count: int, bits: int) -> IntArray:
    """``count`` independent uniform integers in [0, 2^bits), 1 <= bits <= 63.

    Each word is cut into floor(64/bits) disjoint fields of ``bits`` bits; disjoint bits of a
    uniform word are independent and uniform. Fields left over in the last word are discarded.
    """
    per_word = 64 // bits
    words = _words(rng, -(-count // per_word))
    if per_word == 1:
        return (words >> np.uint64(64 - bits)).view(np.int64)
    shifts = np.arange(0, per_word * bits, bits, dtype=np.uint64)[:, None]
    fields = words[None, :] >> shifts
    fields &= np.uint64((1 << bits) - 1)
    return fields.ravel()[:count].view(np.int64)


def _oversample(count: int, rate: float) -> int:
    """Trials to draw so that ``count`` successes at probability ``rate`` are very likely.

    count/rate plus about three binomial standard deviations. Floats only size batches: which
    trials succeed is decided exactly, and the successes are kept in trial order.
    """
    return math.ceil((count + 3.0 * math.sqrt(count) + 8.0) / rate)


def _below(rng: RandomSource, bound: int, count: int) -> IntArray:
    """``count`` independent uniform integers in [0, bound) for one bound, 1 <= bound < 2^63.

    Math:
        Fields F of b bits are uniform on [0, 2^b). With L = floor(2^b/bound) bound, the F < L,
        taken in order, are iid uniform on [0, L) (rejection sampling), and F mod bound is then
        exactly uniform on [0, bound) because L is a multiple of bound. b runs from
        bitlength(bound - 1) up to 8 more bits and is the one with the fewest expected bits per
        output, (64/floor(64/b)) 2^b/L counting the unused bits of each word: a bound just above
        a power of two such as 4115 costs 16 bits instead of 26. A batch draws enough fields for
        the acceptance L/2^b; a short batch is topped up.
    """
    if bound == 1:
        return np.zeros(count, dtype=np.int64)
    bits = _below_bits(bound)
    if bound == 1 << bits:
        return _fields(rng, count, bits)
    limit = (1 << bits) // bound * bound
    kept = np.zeros(0, dtype=np.int64)
    while kept.size < count:
        fields = _fields(rng, _oversample(count - kept.size, limit / 2**bits), bits)
        fresh = np.compress(fields < limit, fields)[: count - kept.size]
        kept = np.concatenate([kept, fresh]) if kept.size else fresh
    return kept - kept // bound * bound if limit > bound else kept


@functools.lru_cache(maxsize=256)
def _below_bits(bound: int) -> int:
    """The field width b >= bitlength(bound - 1) minimising (64/floor(64/b)) 2^b / L."""
    low = (bound - 1).bit_length()
    widths = range(low, min(low + 8, 63) + 1)
    return min(widths, key=lambda b: Fraction(64 << b, 64 // b * ((1 << b) // bound * bound)))


def _bernoulli(rng: RandomSource, scaled: IntArray, bits: int, den: int) -> BoolArray:
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
        return _below(rng, den, scaled.size) < scaled
    threshold = scaled // den
    draws = _fields(rng, scaled.size, bits)
    out = draws < threshold
    tie = np.flatnonzero(draws == threshold)
    if tie.size:
        out[tie] = _below(rng, den, tie.size) < scaled[tie] - threshold[tie] * den
    return out


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
# Vectorised samplers (int64 numpy over the still-active samples)
# --------------------------------------------------------------------------------------------


def _bernoulli_exp_vec(num: IntArray, den: int, rng: RandomSource, k: int = 1) -> BoolArray:
    """Bernoulli(exp(-num/den)) per element, 0 <= num <= den, CKS Algorithm 1 from K = k.

    Round K draws Bernoulli(num/(den K)) (:func:`_bernoulli`) for the chains still running; a
    chain stops at its first 0 and returns 1 iff its K is odd. Every round compares
    _BERNOULLI_BITS random bits, or fewer when den K_max 2^bits would pass the arithmetic limit.
    Chains that would need den * K beyond the arithmetic limit or K > _MAX_CHAIN finish in
    Python from the K they reached.
    """
    out = np.full(num.size, bool(k & 1))
    idx = np.arange(num.size)
    k_max = min(_MAX_CHAIN, _ARITH_LIMIT // den)
    room = (_ARITH_LIMIT // (den * max(k_max, 1))).bit_length() - 1
    bits = max(0, min(_BERNOULLI_BITS, room))
    scaled = num << bits
    while idx.size and k <= k_max:
        going = np.flatnonzero(_bernoulli(rng, scaled, bits, den * k))
        idx, scaled = idx[going], scaled[going]
        k += 1
        out[idx] = bool(k & 1)
    for i, n in zip(idx.tolist(), (scaled >> bits).tolist()):
        out[i] = _bernoulli_exp_unit(n, den, rng, k)
    return out


@functools.lru_cache(maxsize=4)
def _exp1_table(terms: int) -> BoolArray:
    """Per R in [0, terms!), whether K(R) = 1 + #{j in 1..terms : R < terms!/j!} is odd."""
    top = math.factorial(terms)
    thresholds = np.array([top // math.factorial(j) for j in range(1, terms + 1)])
    k = 1 + (np.arange(top)[:, None] < thresholds).sum(axis=1)
    return k % 2 == 1


def _exp1_vec(n: int, rng: RandomSource) -> BoolArray:
    """n iid Bernoulli(e^-1): CKS Algorithm 1 for γ = 1, with its chain length K from one draw.

    For γ = 1, P[K >= k] = 1/(k-1)!. With J = _EXP1_TERMS and R uniform in [0, J!), exactly
    J!/(k-1)! values satisfy R < J!/(k-1)! for k <= J + 1, so K = 1 + #{j <= J : R < J!/j!} has
    the chain's law up to K = J + 1 (a table lookup). R = 0 is the event K >= J + 1 (P = 1/J!):
    those chains continue from K = J + 1 with fresh Bernoulli(1/K) draws, the chain's law given
    K >= J + 1.
    """
    table = _exp1_table(_EXP1_TERMS)
    r = _below(rng, table.size, n)
    out = np.take(table, r)
    more = np.flatnonzero(r == 0)
    if more.size:
        ones = np.ones(more.size, dtype=np.int64)
        out[more] = _bernoulli_exp_vec(ones, 1, rng, _EXP1_TERMS + 1)
    return out


def _geometric_vec(n: int, rng: RandomSource, limit: IntArray | None = None) -> IntArray:
    """Per element, successes of iid Bernoulli(e^-1) before the first failure, capped at limit.

    P[count >= v] = e^-v. Counts still running after _MAX_GEOMETRIC rounds finish in Python.
    """
    count = np.zeros(n, dtype=np.int64)
    idx = np.arange(n) if limit is None else np.flatnonzero(limit > 0)
    rounds = 0
    while idx.size and rounds < _MAX_GEOMETRIC:
        idx = np.compress(_exp1_vec(idx.size, rng), idx)
        rounds += 1
        count[idx] = rounds
        if limit is not None:
            idx = np.compress(limit[idx] > rounds, idx)
    for i in idx.tolist():
        left = None if limit is None else int(limit[i]) - rounds
        count[i] = rounds + _count_exp1_successes(rng, left)
    return count


def _laplace_magnitudes(p: int, q: int, u: IntArray, rng: RandomSource) -> IntArray:
    """floor((U + pV)/q) per element; elements whose U + pV would overflow use Python ints."""
    v = _geometric_vec(u.size, rng)
    v_max = (_ARITH_LIMIT - p) // p
    big = np.flatnonzero(v > v_max) if v.max(initial=0) > v_max else np.zeros(0, dtype=np.int64)
    mag = u + p * (np.minimum(v, v_max) if big.size else v)
    if q > 1:
        mag //= q
    for i in big.tolist():
        value = (int(u[i]) + p * int(v[i])) // q
        if value > _I64_MAX:
            raise OverflowError(f"a Lap_Z({Fraction(p, q)}) sample exceeds int64: {value}")
        mag[i] = value
    return mag


def _laplace_rate(p: int, q: int) -> float:
    """P[one run of CKS Algorithm 2 returns a sample] for t = p/q; floats, to size batches only.

    U is kept with probability (1/p) Σ_u e^{-u/p} = (1 - e^-1)/(p (1 - e^{-1/p})), and a sign
    survives unless it makes "-0": probability 1 - P[Y = 0]/2 = (1 + e^{-1/t})/2.
    """
    keep_u = -math.expm1(-1.0) / (p * -math.expm1(-1.0 / p))
    return keep_u * (1.0 + math.exp(-q / p)) / 2.0


def _laplace_batch(p: int, q: int, runs: int, rng: RandomSource) -> IntArray:
    """The samples that ``runs`` independent runs of CKS Algorithm 2 for t = p/q return, in order.

    A run: U uniform in [0, p), kept with probability exp(-U/p); V the count of Bernoulli(e^-1)
    successes before a failure; magnitude floor((U + pV)/q); a uniform sign; "-0" returns nothing.
    """
    u = _below(rng, p, runs)
    if p > 1:  # for p = 1, U = 0 is always kept
        u = np.compress(_bernoulli_exp_vec(u, p, rng), u)
    mag = _laplace_magnitudes(p, q, u, rng)
    negative = _fields(rng, mag.size, 1)
    signed = (mag ^ -negative) + negative  # two's complement: -mag where negative = 1
    return np.compress((negative == 0) | (mag != 0), signed)


def _fill(n: int, batch: Callable[[int], IntArray]) -> IntArray:
    """n samples from ``batch(m)``, which returns about m or more iid samples (m <= _BATCH).

    Batches are kept whole, in order, except the surplus of the last one: a rule that depends on
    counts only, so the n samples are iid from the batches' distribution.
    """
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        got = batch(min(n - filled, _BATCH))[: n - filled]
        out[filled : filled + got.size] = got
        filled += got.size
    return out


def _laplace_vec(scale: Fraction, n: int, rng: RandomSource) -> IntArray:
    """n iid Lap_Z(scale): batches of runs of CKS Algorithm 2, sized by its return rate."""
    p, q = scale.numerator, scale.denominator
    rate = _laplace_rate(p, q)
    return _fill(n, lambda m: _laplace_batch(p, q, _oversample(m, rate), rng))


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

    def acceptance(self) -> float:
        """P[a proposal is accepted]; floats, to size batches only.

        Σ_y tanh(1/(2t)) e^{-|y|/t} e^{-(|y| - σ²/t)²/(2σ²)} = tanh(1/(2t)) e^{-σ²/(2t²)} Σ_y
        e^{-y²/(2σ²)}, with σ²/(2t²) = a/(2bt).
        """
        t = float(self.t)
        sigma2 = float(self.t * self.a / self.b)
        shift = float(Fraction(self.a, 2 * self.b) / self.t)
        return math.tanh(0.5 / t) * math.exp(-shift) * discrete_gaussian_normalizer(sigma2)


def _gaussian_accept(plan: _GaussPlan, y: IntArray, rng: RandomSource) -> BoolArray:
    """Bernoulli(exp(-γ(Y))) per proposal; proposals too large for int64 γ use Python ints.

    With γ = W + R/den (W = floor(γ)), exp(-γ) is the product of W Bernoulli(e^-1) draws and one
    Bernoulli(exp(-R/den)): a geometric count of Bernoulli(e^-1) successes capped at W must
    reach W, and only then is the last factor drawn.
    """
    mag = np.abs(y)
    y_max = (math.isqrt(_ARITH_LIMIT // plan.mult) - plan.a) // plan.b
    safe: IntArray | slice = slice(None)
    big = np.zeros(0, dtype=np.int64)
    if mag.max(initial=0) > y_max:
        safe, big = np.flatnonzero(mag <= y_max), np.flatnonzero(mag > y_max)
    num = (plan.b * mag[safe] - plan.a) ** 2 * plan.mult
    whole = num // plan.den
    rest = num - whole * plan.den
    ok = _geometric_vec(whole.size, rng, limit=whole) >= whole
    live = np.flatnonzero(ok & (rest > 0))  # exp(-0) = 1 needs no draw
    ok[live] = _bernoulli_exp_vec(rest[live], plan.den, rng)
    accepted = np.zeros(y.size, dtype=bool)
    accepted[safe] = ok
    for i in big.tolist():
        accepted[i] = bernoulli_exp(plan.gamma(int(y[i])), rng=rng)
    return accepted


def _gaussian_vec(plan: _GaussPlan, n: int, rng: RandomSource) -> IntArray:
    """n iid N_Z(0, σ²): batches of Lap_Z(t) proposals, sized by the overall acceptance rate."""
    p, q = plan.t.numerator, plan.t.denominator
    rate = _laplace_rate(p, q) * plan.acceptance()

    def batch(m: int) -> IntArray:
        proposals = _laplace_batch(p, q, _oversample(m, rate), rng)
        return np.compress(_gaussian_accept(plan, proposals, rng), proposals)

    return _fill(n, batch)


# --------------------------------------------------------------------------------------------
# Public samplers
# --------------------------------------------------------------------------------------------


def discrete_laplace(
    scale: Fraction, size: int, *, rng: RandomSource | None = None
) -> IntArray:
    """``size`` iid samples of the discrete Laplace distribution Lap_Z(scale).

    Math:
        P[y] = tanh(1/(2t)) e^{-|y|/t} for y in Z, t = scale; Var = 2e^{-1/t}/(1 - e^{-1/t})².
        CKS Algorithm 2 (see :func:`discrete_laplace_scalar`), vectorised in int64 numpy: batches
        of independent runs, each run's rejections decided exactly, the returned samples kept in
        order (module doc). Scales whose numerator or denominator exceed 2^56 use the pure-Python
        reference sampler.

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
        draws and one Bernoulli(exp(-frac(γ))). Vectorised in int64 numpy over batches of
        proposals, the accepted ones kept in order (module doc); parameters too large for int64
        use the pure-Python reference sampler (:func:`discrete_gaussian_scalar`).

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


WideArray = npt.NDArray[np.int64] | npt.NDArray[np.object_]


def discrete_laplace_wide(scale: Fraction, size: int, *, rng: RandomSource | None = None) -> WideArray:
    """``size`` iid Lap_Z(scale) samples for any positive rational scale.

    Math / Privacy: as :func:`discrete_laplace` (ε-DP at scale = Δ₁/ε, exact sampling). Up to
    scale 2^56 it is that sampler (int64 samples); beyond, the samples are drawn one by one with
    the pure-Python reference sampler (CKS Algorithm 2, exact for any rational parameter) and
    returned as Python integers in an object array.

    Raises:
        PrivacyParameterError: scale is a float or not a positive rational; size is not an int >= 0.
    """
    t = _positive_rational(scale, "scale")
    if t <= _MAX_LAPLACE_SCALE:
        return discrete_laplace(t, size, rng=rng)
    return _one_by_one(discrete_laplace_scalar, t, size, rng)


def discrete_gaussian_wide(sigma2: Fraction, size: int, *, rng: RandomSource | None = None) -> WideArray:
    """``size`` iid N_Z(0, sigma2) samples for any positive rational sigma2.

    Math / Privacy: as :func:`discrete_gaussian` (ρ-zCDP with ρ = Δ₂²/(2σ²), exact sampling). Up
    to σ² = 2^118 it is that sampler (int64 samples); beyond, the samples are drawn one by one
    with the pure-Python reference sampler (CKS Algorithm 3, exact for any rational parameter)
    and returned as Python integers in an object array.

    Raises:
        PrivacyParameterError: sigma2 is a float or not a positive rational; size is not an int >= 0.
    """
    s2 = _positive_rational(sigma2, "sigma2")
    if s2 <= _MAX_GAUSSIAN_SIGMA2:
        return discrete_gaussian(s2, size, rng=rng)
    return _one_by_one(discrete_gaussian_scalar, s2, size, rng)


def _one_by_one(sampler: Callable[..., int], parameter: Fraction, size: int, rng: RandomSource | None) -> WideArray:
    """``size`` draws of an exact scalar sampler, as Python integers in an object array."""
    n = _check_size(size)
    source = resolve_rng(rng)
    return np.array([sampler(parameter, rng=source) for _ in range(n)], dtype=object).reshape(n)


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
