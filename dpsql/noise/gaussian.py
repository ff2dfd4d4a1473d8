"""The discrete Gaussian distribution N_Z(0, σ²): exact samplers.

:func:`discrete_gaussian` draws by exact inversion from certified thresholds
(:mod:`dpsql.noise.inversion`): for σ <= 128 of the pmf itself, above of a staircase envelope
(:func:`gauss_staircase`: blocks of about σ/32 values, a uniform value in the block accepted with
probability e^{-((a + u)² - a²)/(2σ²)}). Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), called CKS, Algorithm 3: propose Y ~ Lap_Z(t) and accept it
with probability exp(-(|Y| - σ²/t)²/(2σ²)). :func:`discrete_gaussian_scalar` is its pure-Python
reference; when γ's integers leave int64 :func:`discrete_gaussian` runs it vectorised in int64
numpy over batches of proposals (:class:`GaussPlan` holds the exact integer form of the
acceptance exponent), the accepted proposals kept in order, so they are iid from the target.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.noise import limits
from dpsql.noise.bernoulli import bernoulli_exp, bernoulli_exp_vec, geometric_vec
from dpsql.noise.distributions import discrete_gaussian_normalizer
from dpsql.noise.inversion import Interval, Inversion, Staircase, div, exp_neg, mul
from dpsql.noise.laplace import discrete_laplace_scalar, fill, laplace_batch, laplace_rate
from dpsql.noise.parameters import check_size, positive_rational
from dpsql.noise.sources import BoolArray, IntArray, RandomSource, oversample, resolve_rng


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
    s2 = positive_rational(sigma2, "sigma2")
    p, q = s2.numerator, s2.denominator
    t = math.isqrt(p // q) + 1
    while True:
        y = discrete_laplace_scalar(Fraction(t), rng=rng)
        if bernoulli_exp(Fraction((abs(y) * q * t - p) ** 2, 2 * p * q * t * t), rng=rng):
            return y


@dataclass(frozen=True)
class GaussPlan:
    """Rejection from Lap_Z(t) with acceptance exp(-γ), γ = (b|Y| - a)² · mult / den.

    Here a/b = σ²/t, so γ = (|Y| - σ²/t)² / (2σ²).
    """

    t: Fraction
    a: int
    b: int
    mult: int
    den: int

    @classmethod
    def for_sigma2(cls, sigma2: Fraction) -> GaussPlan:
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
        return max(ints) <= limits.MAX_VECTOR_INT

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


def _gaussian_accept(plan: GaussPlan, y: IntArray, rng: RandomSource) -> BoolArray:
    """Bernoulli(exp(-γ(Y))) per proposal; proposals too large for int64 γ use Python ints.

    With γ = W + R/den (W = floor(γ)), exp(-γ) is the product of W Bernoulli(e^-1) draws and one
    Bernoulli(exp(-R/den)): a geometric count of Bernoulli(e^-1) successes capped at W must
    reach W, and only then is the last factor drawn.
    """
    mag = np.abs(y)
    y_max = (math.isqrt(limits.ARITH_LIMIT // plan.mult) - plan.a) // plan.b
    safe: IntArray | slice = slice(None)
    big = np.zeros(0, dtype=np.int64)
    if mag.max(initial=0) > y_max:
        safe, big = np.flatnonzero(mag <= y_max), np.flatnonzero(mag > y_max)
    num = (plan.b * mag[safe] - plan.a) ** 2 * plan.mult
    whole = num // plan.den
    rest = num - whole * plan.den
    ok = geometric_vec(whole.size, rng, limit=whole) >= whole
    live = np.flatnonzero(ok & (rest > 0))  # exp(-0) = 1 needs no draw
    ok[live] = bernoulli_exp_vec(rest[live], plan.den, rng)
    accepted = np.zeros(y.size, dtype=bool)
    accepted[safe] = ok
    for i in big.tolist():
        accepted[i] = bernoulli_exp(plan.gamma(int(y[i])), rng=rng)
    return accepted


def _gaussian_vec(plan: GaussPlan, n: int, rng: RandomSource) -> IntArray:
    """n iid N_Z(0, σ²): batches of Lap_Z(t) proposals, sized by the overall acceptance rate."""
    p, q = plan.t.numerator, plan.t.denominator
    rate = laplace_rate(p, q) * plan.acceptance()

    def batch(m: int) -> IntArray:
        proposals = laplace_batch(p, q, oversample(m, rate), rng)
        return np.compress(_gaussian_accept(plan, proposals, rng), proposals)

    return fill(n, batch)


def block_survival(p: int, q: int, block: int) -> Callable[[int, int], list[Interval]]:
    """Survival of the signed block index o of the staircase envelope of N_Z(0, p/q).

    Block o covers |y| = a_o + u, u in [0, M), with a_o = (o // 2) M + (o % 2), positive for
    even o and negative for odd o (y = a + u or -(a + u)); its weight is the largest target
    value in it, w_o = e^{-a_o² q/(2p)}. The sums run to N blocks, N grown until the bound
    Σ_{o >= N} w_o <= 2 e^{-k² c}/(1 - e^{-(2k+1)c}) <= 2 w_{2k} (1 + x)/x (k = N/2,
    c = M² q/(2p), x = (2k + 1)c, by (k + j)² >= k² + (2k + 1)j and 1 - e^{-x} >= x/(1 + x))
    is below one unit; with T that tail, S(i) = (C_i + T)/(Z + T) lies between C_i/Z and
    (C_i + T_max)/(Z + T_max), C_i the finite suffix sums and Z their total.
    """

    def weight(o: int, prec: int) -> Interval:
        a = (o // 2) * block + o % 2
        return exp_neg(a * a * q, 2 * p, prec)

    def survival(prec: int, count: int) -> list[Interval]:
        n = count + 2 + count % 2
        while True:
            extra = 32 + n.bit_length()
            work = prec + extra
            k = n // 2
            lead = weight(2 * k, work)[1]
            x_num, x_den = (2 * k + 1) * block * block * q, 2 * p
            tail = -((-2 * lead * (x_den + x_num)) // x_num)
            if tail <= 1 << extra:
                break
            n *= 2
        weights = block_weights(p, q, block, n, work)
        suffix: list[Interval] = [(0, 0)] * (n + 1)
        for o in range(n - 1, -1, -1):
            suffix[o] = (suffix[o + 1][0] + weights[o][0], suffix[o + 1][1] + weights[o][1])
        total = suffix[0]
        out = []
        for i in range(1, count + 1):
            lo = div(suffix[i], total, work)[0]
            hi = div((suffix[i][1] + tail, suffix[i][1] + tail), (total[0] + tail, total[0] + tail), work)[1]
            out.append((lo >> extra, -((-hi) >> extra)))
        return out

    return survival


def block_weights(p: int, q: int, block: int, n: int, prec: int) -> list[Interval]:
    """w_o = e^{-a_o² q/(2p)} for o < n, by the ratios of consecutive blocks of each sign:
    a² grows by (2k + 1)M² from kM to (k + 1)M and by (2k + 1)M² + 2M from kM + 1 to
    (k + 1)M + 1, so each ratio is the previous one times e^{-2c}, c = M² q/(2p)."""
    den, step = 2 * p, exp_neg(2 * block * block * q, 2 * p, prec)
    weights: list[list[Interval]] = []
    for first, ratio in ((exp_neg(0, 1, prec), exp_neg(block * block * q, den, prec)),
                         (exp_neg(q, den, prec), exp_neg((block * block + 2 * block) * q, den, prec))):
        w, out = first, list[Interval]()
        for _ in range((n + 1) // 2):
            out.append(w)
            w, ratio = mul(w, ratio, prec), mul(ratio, step, prec)
        weights.append(out)
    return [weights[o % 2][o // 2] for o in range(n)]


@functools.lru_cache(maxsize=16)
def gauss_staircase(p: int, q: int) -> Staircase:
    """N_Z(0, p/q) as a :class:`Staircase` (cached: built once per σ²).

    φ(v) = v² q/(2p), so φ(a + u) - φ(a) = u(2a + u) q/(2p). Blocks of M = 2^floor(log2(σ/32))
    values for σ > limits.DIRECT_SIGMA (γ <= 1/2 over the tabulated blocks, about 99% of
    proposals accepted), else M = 1: plain inversion. S(o) < 2^-TAIL_BITS once
    a_o > σ sqrt(2 TAIL_BITS ln 2): the table size (floats size tables and batches only).
    """
    sigma = math.isqrt(p // q)
    shift = max(0, (sigma // 32).bit_length() - 1) if sigma > limits.DIRECT_SIGMA else 0
    block = 1 << shift
    count = 2 * (math.ceil(math.sqrt(2 * limits.TAIL_BITS * math.log(2)) * (sigma + 1) / block) + 2)
    signed = Inversion(block_survival(p, q, block), None, count)
    sigma2 = p / q
    bases = (np.arange(4 * count) // 2) * block + np.arange(4 * count) % 2
    envelope = float(np.exp(-(bases.astype(np.float64) ** 2) / (2 * sigma2)).sum()) * block
    rate = discrete_gaussian_normalizer(sigma2) / envelope
    return Staircase(signed, shift, (2, 1, 0), q, 2 * p, rate, (count // 2 + 1) * block)


def discrete_gaussian(
    sigma2: Fraction, size: int, *, rng: RandomSource | None = None
) -> IntArray:
    """``size`` iid samples of the discrete Gaussian distribution N_Z(0, sigma2).

    Math:
        P[y] = e^{-y²/(2σ²)} / Σ_x e^{-x²/(2σ²)}; Var < σ² (:func:`discrete_gaussian_variance`).
        For σ <= limits.DIRECT_SIGMA, exact inversion of the pmf (:mod:`dpsql.noise.inversion`);
        above, rejection from a staircase envelope: a block of M ≈ σ/32 values drawn by exact
        inversion, a uniform value in it, accepted with probability
        e^{-((a + u)² - a²)/(2σ²)} <= 1 (exact Bernoulli(exp(-γ)), CKS Algorithm 1): about
        99% of proposals are accepted (:func:`gauss_staircase`). Parameters whose integers leave
        int64, and calls of fewer than limits.TABLE_MIN_SIZE samples (which would not repay the
        tables), use CKS Algorithm 3 (propose Y ~ Lap_Z(t), accept with probability
        exp(-(|Y| - σ²/t)²/(2σ²)), t = σ²/c with c the integer nearest σ) vectorised, and beyond
        that the pure-Python reference sampler (:func:`discrete_gaussian_scalar`).

    Privacy:
        Adding iid samples to an integer vector of L2 sensitivity Δ₂ is ρ-zCDP with
        ρ = Δ₂²/(2σ²) (CKS; Rényi divergences add over coordinates). Sampling is exact (uniform
        integers and comparisons only). Randomness comes from the OS (``os.urandom``) unless a
        seeded source is injected for tests.

    Raises:
        PrivacyParameterError: sigma2 is a float (use :func:`fraction_at_least`), is not a
            positive rational or exceeds 2^118; or size is not an int >= 0.
    """
    s2 = positive_rational(sigma2, "sigma2", maximum=limits.MAX_GAUSSIAN_SIGMA2)
    n = check_size(size)
    source = resolve_rng(rng)
    p, q = s2.numerator, s2.denominator
    if n >= limits.TABLE_MIN_SIZE and 2 * p <= limits.MAX_VECTOR_INT:
        stairs = gauss_staircase(p, q)
        if stairs.vectorizable():
            return fill(n, lambda m: stairs.batch(m, source))
    plan = GaussPlan.for_sigma2(s2)
    if plan.vectorizable():
        return _gaussian_vec(plan, n, source)
    samples = [discrete_gaussian_scalar(s2, rng=source) for _ in range(n)]
    return np.array(samples, dtype=np.int64).reshape(n)
