"""The discrete Gaussian distribution N_Z(0, σ²): exact samplers after CKS Algorithm 3.

Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020),
called CKS, Algorithm 3: propose Y ~ Lap_Z(t) and accept it with probability
exp(-(|Y| - σ²/t)²/(2σ²)). :func:`discrete_gaussian_scalar` is the pure-Python reference;
:func:`discrete_gaussian` runs it vectorised in int64 numpy over batches of proposals
(:class:`GaussPlan` holds the exact integer form of the acceptance exponent), the accepted
proposals kept in order, so they are iid from the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsql.noise import limits
from dpsql.noise.bernoulli import bernoulli_exp, bernoulli_exp_vec, geometric_vec
from dpsql.noise.distributions import discrete_gaussian_normalizer
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
    s2 = positive_rational(sigma2, "sigma2", maximum=limits.MAX_GAUSSIAN_SIGMA2)
    n = check_size(size)
    source = resolve_rng(rng)
    plan = GaussPlan.for_sigma2(s2)
    if plan.vectorizable():
        return _gaussian_vec(plan, n, source)
    samples = [discrete_gaussian_scalar(s2, rng=source) for _ in range(n)]
    return np.array(samples, dtype=np.int64).reshape(n)
