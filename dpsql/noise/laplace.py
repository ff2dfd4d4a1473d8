"""The discrete Laplace distribution Lap_Z(t): exact samplers.

:func:`discrete_laplace` draws by exact inversion from certified thresholds
(:mod:`dpsql.noise.inversion`): for t < 256 of the pmf itself, above of a staircase envelope
(:func:`laplace_staircase`: blocks of about t/16 values, a uniform value in the block accepted
with probability e^{-u/t}). Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential
Privacy" (NeurIPS 2020), called CKS, Algorithm 2: U uniform in [0, p), kept with probability
exp(-U/p); V the count of Bernoulli(e^-1) successes before a failure; magnitude
floor((U + pV)/q) for t = p/q; a uniform sign, "-0" rejected. :func:`discrete_laplace_scalar`
is its pure-Python reference; :func:`laplace_batch` runs it vectorised in int64 numpy over
batches of runs (:func:`fill`), the proposals of the discrete Gaussian's CKS fallback and the
Laplace's own when γ's integers leave int64. How many runs or proposals a batch draws comes from
expected rates computed in floating point, but such counts never decide a sample, so the samples
are iid from the target.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpsql.noise import limits
from dpsql.noise.bernoulli import bernoulli_exp_unit, bernoulli_exp_vec, count_exp1_successes, geometric_vec
from dpsql.noise.inversion import Interval, Inversion, Staircase, div, exp_neg, mul
from dpsql.noise.parameters import check_size, positive_rational
from dpsql.noise.sources import IntArray, RandomSource, below, fields, oversample, resolve_rng


def _laplace_magnitude_scalar(p: int, q: int, u: int, rng: RandomSource) -> int:
    """floor((u + p V)/q) with V the count of Bernoulli(e^-1) successes (CKS Algorithm 2)."""
    return (u + p * count_exp1_successes(rng)) // q


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
    t = positive_rational(scale, "scale")
    p, q = t.numerator, t.denominator
    while True:
        u = rng.randbelow(p)
        if not bernoulli_exp_unit(u, p, rng):
            continue
        y = _signed_or_none(_laplace_magnitude_scalar(p, q, u, rng), rng)
        if y is not None:
            return y


def laplace_magnitudes(p: int, q: int, u: IntArray, rng: RandomSource) -> IntArray:
    """floor((U + pV)/q) per element; elements whose U + pV would overflow use Python ints."""
    v = geometric_vec(u.size, rng)
    v_max = (limits.ARITH_LIMIT - p) // p
    big = np.flatnonzero(v > v_max) if v.max(initial=0) > v_max else np.zeros(0, dtype=np.int64)
    mag = u + p * (np.minimum(v, v_max) if big.size else v)
    if q > 1:
        mag //= q
    for i in big.tolist():
        value = (int(u[i]) + p * int(v[i])) // q
        if value > limits.I64_MAX:
            raise OverflowError(f"a Lap_Z({Fraction(p, q)}) sample exceeds int64: {value}")
        mag[i] = value
    return mag


def laplace_rate(p: int, q: int) -> float:
    """P[one run of CKS Algorithm 2 returns a sample] for t = p/q; floats, to size batches only.

    U is kept with probability (1/p) Σ_u e^{-u/p} = (1 - e^-1)/(p (1 - e^{-1/p})), and a sign
    survives unless it makes "-0": probability 1 - P[Y = 0]/2 = (1 + e^{-1/t})/2.
    """
    keep_u = -math.expm1(-1.0) / (p * -math.expm1(-1.0 / p))
    return keep_u * (1.0 + math.exp(-q / p)) / 2.0


def laplace_batch(p: int, q: int, runs: int, rng: RandomSource) -> IntArray:
    """The samples that ``runs`` independent runs of CKS Algorithm 2 for t = p/q return, in order.

    A run: U uniform in [0, p), kept with probability exp(-U/p); V the count of Bernoulli(e^-1)
    successes before a failure; magnitude floor((U + pV)/q); a uniform sign; "-0" returns nothing.
    """
    u = below(rng, p, runs)
    if p > 1:  # for p = 1, U = 0 is always kept
        u = np.compress(bernoulli_exp_vec(u, p, rng), u)
    mag = laplace_magnitudes(p, q, u, rng)
    negative = fields(rng, mag.size, 1)
    signed = (mag ^ -negative) + negative  # two's complement: -mag where negative = 1
    return np.compress((negative == 0) | (mag != 0), signed)


def fill(n: int, batch: Callable[[int], IntArray]) -> IntArray:
    """n samples from ``batch(m)``, which returns about m or more iid samples (m <= limits.BATCH).

    Batches are kept whole, in order, except the surplus of the last one: a rule that depends on
    counts only, so the n samples are iid from the batches' distribution.
    """
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        got = batch(min(n - filled, limits.BATCH))[: n - filled]
        out[filled : filled + got.size] = got
        filled += got.size
    return out


def _rescale(bounds: list[Interval], extra: int) -> list[Interval]:
    """Intervals at precision P + extra rounded outward to precision P."""
    return [(lo >> extra, -((-hi) >> extra)) for lo, hi in bounds]


def _powers(ratio: Interval, count: int, prec: int) -> list[Interval]:
    """Intervals of 2^prec r^j for j = 0..count, by repeated multiplication."""
    out = [(1 << prec, 1 << prec)]
    for _ in range(count):
        out.append(mul(out[-1], ratio, prec))
    return out


def signed_survival(num: int, den: int, block: int) -> Callable[[int, int], list[Interval]]:
    """Survival of the signed block index o = 2k + s of Lap_Z(den/num) in blocks of ``block``.

    Block k >= 0 holds y = kM + v (s = 0) or y = -(1 + kM + v) (s = 1), v in [0, M), with
    weights β^k and ρ β^k (ρ = e^{-num/den}, β = ρ^M): S(2k) = β^k and
    S(2k + 1) = β^k (ρ + β)/(1 + ρ).
    """

    def survival(prec: int, count: int) -> list[Interval]:
        extra = 32 + count.bit_length()
        work = prec + extra
        rho, beta = exp_neg(num, den, work), exp_neg(num * block, den, work)
        one = 1 << work
        odd = div((rho[0] + beta[0], rho[1] + beta[1]), (one + rho[0], one + rho[1]), work)
        powers = _powers(beta, count // 2 + 1, work)
        out = [powers[i // 2] if i % 2 == 0 else mul(powers[i // 2], odd, work) for i in range(1, count + 1)]
        return _rescale(out, extra)

    return survival


@functools.lru_cache(maxsize=16)
def laplace_staircase(p: int, q: int) -> Staircase:
    """Lap_Z(p/q) as a :class:`Staircase` (cached: built once per scale).

    φ(v) = v q/p. Blocks of M = 2^(floor(log2 t) - 4) values (t/M in [16, 32), so proposals are
    accepted with probability (1 - e^{-M/t})/(M (1 - e^{-1/t})) > 0.97) or, for
    t < limits.DIRECT_SCALE, M = 1: plain inversion. S(2k) = β^k < 2^-TAIL_BITS once
    k > TAIL_BITS ln 2 · t/M: the table size (floats size tables and batches only).
    """
    t = p / q
    shift = max(0, (p // q).bit_length() - 5) if t >= limits.DIRECT_SCALE else 0
    block = 1 << shift
    count = 2 * (math.ceil(limits.TAIL_BITS * math.log(2) * t / block) + 2)
    rate = -math.expm1(-block / t) / (block * -math.expm1(-1 / t))
    signed = Inversion(signed_survival(q, p, block), None, count)
    return Staircase(signed, shift, (0, 0, 1), q, p, rate, (count // 2 + 1) * block)


def discrete_laplace(
    scale: Fraction, size: int, *, rng: RandomSource | None = None
) -> IntArray:
    """``size`` iid samples of the discrete Laplace distribution Lap_Z(scale).

    Math:
        P[y] = tanh(1/(2t)) e^{-|y|/t} for y in Z, t = scale; Var = 2e^{-1/t}/(1 - e^{-1/t})².
        Exact inversion (:mod:`dpsql.noise.inversion`): for t < 256 of the pmf itself, above of
        blocks of M ≈ t/16 values with weights e^{-a/t}, a uniform value u in the block accepted
        with probability e^{-u/t} (:func:`laplace_staircase`). For calls of fewer than
        limits.TABLE_MIN_SIZE samples (which would not repay the tables) and when int64 cannot
        hold γ's integers, CKS Algorithm 2 (see :func:`discrete_laplace_scalar`) vectorised; scales whose
        numerator or denominator exceed 2^56 use the pure-Python reference sampler.

    Privacy:
        Adding the samples to an integer query of L1 sensitivity Δ₁ with scale = Δ₁/ε is pure
        ε-DP: P[y]/P[y + Δ₁] <= e^{Δ₁/t}. Sampling is exact (uniform integers and comparisons
        only). Randomness comes from the OS (``os.urandom``) unless a seeded source is injected
        for tests.

    Raises:
        PrivacyParameterError: scale is a float (use :func:`fraction_at_least`), is not a
            positive rational or exceeds 2^56; or size is not an int >= 0.
    """
    t = positive_rational(scale, "scale", maximum=limits.MAX_LAPLACE_SCALE)
    n = check_size(size)
    source = resolve_rng(rng)
    p, q = t.numerator, t.denominator
    if max(p, q) <= limits.MAX_VECTOR_INT:
        stairs = laplace_staircase(p, q) if n >= limits.TABLE_MIN_SIZE else None
        if stairs is not None and stairs.vectorizable():
            return fill(n, lambda m: stairs.batch(m, source))
        rate = laplace_rate(p, q)
        return fill(n, lambda m: laplace_batch(p, q, oversample(m, rate), source))
    samples = [discrete_laplace_scalar(t, rng=source) for _ in range(n)]
    return np.array(samples, dtype=np.int64).reshape(n)
