"""Tests of dpsql.noise: exact discrete Laplace and discrete Gaussian sampling.

Statistical tests and how often they can fail by chance:
- Every z-test uses Z_TOL = 5.33 standard errors: a correct sampler fails it with probability
  1e-7 (two-sided normal tail).
- Every chi-square test compares with the 1 - 1e-7 quantile of its degrees of freedom, so a
  correct sampler fails it with probability 1e-7.
- Almost all tests use fixed SeededRandomSource seeds, so they are deterministic: the 1e-7 is the
  chance that a given seed is unlucky. The few tests of SystemRandomSource use real randomness
  and fail by chance with probability at most 1e-7 each per run.
The oracles of the research digest (exact-samplers.md §3 and §7) are checked to the digits it
quotes.
"""

from __future__ import annotations

import copy
import math
import os
import pickle
import threading
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpsql import noise
from dpsql.errors import PrivacyParameterError
from dpsql.noise import bernoulli, distributions, gaussian, inversion, laplace, limits, sources

FAIL_PROB = 1e-7
Z_TOL = float(stats.norm.isf(FAIL_PROB / 2))  # 5.33
CHI2_LEVEL = 1 - FAIL_PROB
HYPOTHESIS = settings(max_examples=60, deadline=None, database=None, derandomize=True)

LAPLACE_SCALES = [Fraction(1, 2), Fraction(1), Fraction(3), Fraction(10)]
GAUSSIAN_SIGMA2S = [Fraction(1, 4), Fraction(1), Fraction(100), Fraction(12345, 7)]


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def z_score(observed: float, expected: float, std_error: float) -> float:
    return abs(observed - expected) / std_error


def laplace_radius(scale: Fraction) -> int:
    """P[|Y| > radius] < 1e-13 for Lap_Z(scale)."""
    return math.ceil(30 * scale) + 2


def gaussian_radius(sigma2: Fraction) -> int:
    """P[|Y| > radius] < 1e-13 for N_Z(0, sigma2) (sub-Gaussian tail 2 e^{-r²/2σ²})."""
    return math.ceil(8 * math.sqrt(sigma2)) + 2


def pooled(observed: npt.NDArray[np.int64], expected: npt.NDArray[np.float64]) -> tuple[
    npt.NDArray[np.float64], npt.NDArray[np.float64]
]:
    """Merge neighbouring bins, left to right, until each expected count is at least 5."""
    obs_bins, exp_bins, obs_acc, exp_acc = [], [], 0.0, 0.0
    for o, e in zip(observed.tolist(), expected.tolist()):
        obs_acc, exp_acc = obs_acc + o, exp_acc + e
        if exp_acc >= 5:
            obs_bins.append(obs_acc)
            exp_bins.append(exp_acc)
            obs_acc, exp_acc = 0.0, 0.0
    obs_bins[-1] += obs_acc
    exp_bins[-1] += exp_acc
    return np.array(obs_bins), np.array(exp_bins)


def assert_fits(
    samples: npt.NDArray[np.int64], pmf: Callable[[npt.NDArray[np.int64]], npt.NDArray], radius: int
) -> None:
    """Chi-square goodness of fit against the exact pmf, below the 1 - 1e-7 quantile."""
    assert samples.dtype == np.int64
    assert np.abs(samples).max() <= radius  # fails with probability < n * 1e-13
    support = np.arange(-radius, radius + 1)
    observed = np.bincount(samples + radius, minlength=support.size)
    obs_bins, exp_bins = pooled(observed, pmf(support) * samples.size)
    statistic = float(((obs_bins - exp_bins) ** 2 / exp_bins).sum())
    dof = obs_bins.size - 1
    assert dof >= 1
    assert statistic < stats.chi2.ppf(CHI2_LEVEL, dof), (statistic, dof)


def assert_moments(samples: npt.NDArray[np.int64], pmf: Callable, radius: int, var: float) -> None:
    """Mean 0 and E[Y²] = var, each within Z_TOL standard errors (from the exact pmf)."""
    support = np.arange(-radius, radius + 1, dtype=np.float64)
    p = pmf(support)
    fourth = float((support**4 * p).sum())
    n = samples.size
    assert z_score(float(samples.mean()), 0.0, math.sqrt(var / n)) < Z_TOL
    second = float((samples.astype(np.float64) ** 2).mean())
    assert z_score(second, var, math.sqrt((fourth - var**2) / n)) < Z_TOL


def laplace_pmf(scale: Fraction) -> Callable:
    return lambda y: noise.discrete_laplace_pmf(y, scale)


def gaussian_pmf(sigma2: Fraction) -> Callable:
    return lambda y: noise.discrete_gaussian_pmf(y, sigma2)


class CountingSource:
    """A seeded source that counts scalar draws."""

    def __init__(self, seed: int) -> None:
        self.inner = noise.SeededRandomSource(seed)
        self.draws = 0

    def integers(self, high: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        self.draws += int(np.size(high))
        return self.inner.integers(high)

    def randbelow(self, high: int) -> int:
        self.draws += 1
        return self.inner.randbelow(high)


class IntegersOnly:
    """A seeded source with only the two RandomSource methods (no raw words)."""

    def __init__(self, seed: int) -> None:
        self.inner = noise.SeededRandomSource(seed)
        self.highs: set[int] = set()

    def integers(self, high: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        self.highs.update(np.unique(high).tolist())
        return self.inner.integers(high)

    def randbelow(self, high: int) -> int:
        return self.inner.randbelow(high)


class WordCountingSource(noise.SeededRandomSource):
    """A seeded source that counts the 64-bit words the vectorised samplers take."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.words = 0

    def raw_words(self, count: int) -> npt.NDArray[np.uint64]:
        self.words += count
        return super().raw_words(count)


class CountingUrandom:
    """A stand-in for os.urandom whose k-th 64-bit word over all calls is k, so that a word
    handed out twice, or skipped, shows; it records the size of every call."""

    def __init__(self) -> None:
        self.next = 0
        self.sizes: list[int] = []

    def __call__(self, nbytes: int) -> bytes:
        assert nbytes % 8 == 0
        self.sizes.append(nbytes)
        words = np.arange(self.next, self.next + nbytes // 8, dtype=np.uint64)
        self.next += nbytes // 8
        return words.tobytes()


# --------------------------------------------------------------------------------------------
# Bernoulli(exp(-gamma))
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [Fraction(3, 10), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_frequency(gamma: Fraction) -> None:
    rng = noise.SeededRandomSource(11)
    n = 100_000
    hits = sum(noise.bernoulli_exp(gamma, rng=rng) for _ in range(n))
    p = math.exp(-gamma)
    assert z_score(hits / n, p, math.sqrt(p * (1 - p) / n)) < Z_TOL


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(3, 10), Fraction(1, 2), Fraction(1)])
def test_bernoulli_exp_vector_frequency(gamma: Fraction) -> None:
    n = 400_000
    num = np.full(n, gamma.numerator, dtype=np.int64)
    hits = int(bernoulli.bernoulli_exp_vec(num, gamma.denominator, noise.SeededRandomSource(12)).sum())
    p = math.exp(-gamma)
    se = max(math.sqrt(p * (1 - p) / n), 1e-12)
    assert z_score(hits / n, p, se) < Z_TOL


def test_exp1_table_is_exact() -> None:
    # R uniform in [0, J!): #{R : K(R) >= k} = J!/(k-1)!, so P[K >= k] = 1/(k-1)! exactly as in CKS
    # Algorithm 1 at γ = 1, for k <= J + 1; only R = 0 has K = J + 1 (the chain continues).
    for terms in (2, 5, 7):
        odd = bernoulli.exp1_table(terms)
        top = math.factorial(terms)
        assert odd.size == top
        r = np.arange(top)
        k = 1 + sum((r * math.factorial(j) < top).astype(int) for j in range(1, terms + 1))
        assert np.array_equal(odd, k % 2 == 1)
        for length in range(1, terms + 2):
            assert int((k >= length).sum()) * math.factorial(length - 1) == top
        assert np.flatnonzero(k == terms + 1).tolist() == [0]


def test_exp1_vector_frequency() -> None:
    n = 1_000_000
    hits = int(bernoulli.exp1_vec(n, noise.SeededRandomSource(13)).sum())
    p = math.exp(-1)
    assert z_score(hits / n, p, math.sqrt(p * (1 - p) / n)) < Z_TOL


@pytest.mark.parametrize("gamma", [Fraction(1, 2), Fraction(1)])
def test_bernoulli_exp_chain_cost_is_e_to_gamma(gamma: Fraction) -> None:
    # Digest §7.2: E[K] = e^γ draws; Var[K] = e^γ (2γ + 1) - e^{2γ}.
    rng = CountingSource(14)
    n = 100_000
    for _ in range(n):
        bernoulli.bernoulli_exp_unit(gamma.numerator, gamma.denominator, rng)
    mean, var = math.exp(gamma), math.exp(gamma) * (2 * gamma + 1) - math.exp(2 * gamma)
    assert z_score(rng.draws / n, mean, math.sqrt(var / n)) < Z_TOL


def test_geometric_counts() -> None:
    # P[V >= v] = e^-v: V is geometric with mean 1/(e - 1), variance e/(e - 1)².
    n = 400_000
    counts = bernoulli.geometric_vec(n, noise.SeededRandomSource(15))
    e = math.e
    assert z_score(float(counts.mean()), 1 / (e - 1), math.sqrt(e / (e - 1) ** 2 / n)) < Z_TOL
    limited = bernoulli.geometric_vec(n, noise.SeededRandomSource(15), limit=np.full(n, 2))
    assert limited.max() == 2
    p = math.exp(-2)
    share = float((limited == 2).mean())
    assert z_score(share, p, math.sqrt(p * (1 - p) / n)) < Z_TOL


# --------------------------------------------------------------------------------------------
# Distribution facts (digest §3)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scale", "p0", "var"),
    [
        (Fraction(1, 2), 0.761594, 0.362031),
        (1, 0.462117, 1.841347),
        (3, 0.165140, 17.834255),
        (Fraction(10), 0.049958, 199.833417),
    ],
)
def test_discrete_laplace_oracles(scale: Fraction, p0: float, var: float) -> None:
    assert noise.discrete_laplace_pmf(0, scale) == pytest.approx(p0, abs=5e-7)
    assert noise.discrete_laplace_variance(scale) == pytest.approx(var, abs=5e-7)
    radius = laplace_radius(Fraction(scale))
    support = np.arange(-radius, radius + 1)
    p = noise.discrete_laplace_pmf(support, scale)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert (support.astype(float) ** 2 * p).sum() == pytest.approx(var, abs=5e-7)


@pytest.mark.parametrize(("delta", "epsilon"), [(1, Fraction(1, 2)), (3, Fraction(1))])
def test_discrete_laplace_privacy_ratio(delta: int, epsilon: Fraction) -> None:
    # Digest §4.1: max_y P[y]/P[y + Δ] = e^{Δ/t} = e^ε with t = Δ/ε.
    scale = delta / epsilon
    y = np.arange(-200, 200)
    ratio = noise.discrete_laplace_pmf(y, scale) / noise.discrete_laplace_pmf(y + delta, scale)
    assert ratio.max() == pytest.approx(math.exp(epsilon), rel=1e-12)
    assert ratio.min() == pytest.approx(math.exp(-epsilon), rel=1e-12)


@pytest.mark.parametrize(
    ("sigma2", "normalizer"),
    [
        (Fraction(1, 20), 1.000090799860),
        (Fraction(1, 10), 1.013475898120),
        (Fraction(1, 4), 1.271341522189),
        (Fraction(1, 2), 1.772637204827),
        (1, 2.506628288043),
        (2, 3.544907701811),
        (10, 7.926654595212),
        (100, 25.066282746310),
    ],
)
def test_discrete_gaussian_normalizer_table(sigma2: Fraction, normalizer: float) -> None:
    assert noise.discrete_gaussian_normalizer(sigma2) == pytest.approx(normalizer, abs=1e-11)
    direct = distributions.direct_moments(float(sigma2))[0]
    assert direct == pytest.approx(normalizer, abs=1e-11)


@pytest.mark.parametrize(
    ("sigma2", "variance", "tolerance"),
    [
        (Fraction(1, 20), 9.07916e-05, 1e-10),
        (Fraction(1, 10), 0.0132967252, 1e-10),
        (Fraction(1, 4), 0.2150126751, 1e-10),
        (Fraction(1, 2), 0.4989791308, 1e-10),
        (1, 0.9999997888, 1e-10),
        (2, 2.0000000000, 1e-10),
    ],
)
def test_discrete_gaussian_variance_table(
    sigma2: Fraction, variance: float, tolerance: float
) -> None:
    assert noise.discrete_gaussian_variance(sigma2) == pytest.approx(variance, abs=tolerance)


@pytest.mark.parametrize("sigma2", [0.1, 0.5, 1.0, 3.0, 0.15, 0.17])
def test_variance_poisson_identity_matches_direct_sum(sigma2: float) -> None:
    z, m2 = distributions.direct_moments(sigma2)
    assert noise.discrete_gaussian_variance(sigma2) == pytest.approx(m2 / z, abs=1e-12)
    assert noise.discrete_gaussian_normalizer(sigma2) == pytest.approx(z, rel=1e-13)


@HYPOTHESIS
@given(st.floats(min_value=1e-3, max_value=1e6))
def test_discrete_gaussian_variance_below_sigma2_and_pmf_sums_to_one(sigma2: float) -> None:
    assert 0 < noise.discrete_gaussian_variance(sigma2) <= sigma2
    radius = gaussian_radius(Fraction(sigma2))
    pmf = noise.discrete_gaussian_pmf(np.arange(-radius, radius + 1), sigma2)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)


# --------------------------------------------------------------------------------------------
# Goodness of fit and moments of the samplers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", LAPLACE_SCALES)
def test_discrete_laplace_fits_pmf(scale: Fraction) -> None:
    samples = noise.discrete_laplace(scale, 200_000, rng=noise.SeededRandomSource(21))
    assert_fits(samples, laplace_pmf(scale), laplace_radius(scale))


@pytest.mark.parametrize("sigma2", GAUSSIAN_SIGMA2S)
def test_discrete_gaussian_fits_pmf(sigma2: Fraction) -> None:
    samples = noise.discrete_gaussian(sigma2, 200_000, rng=noise.SeededRandomSource(22))
    assert_fits(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2))


@pytest.mark.parametrize("scale", LAPLACE_SCALES)
def test_discrete_laplace_scalar_fits_pmf(scale: Fraction) -> None:
    rng = noise.SeededRandomSource(23)
    samples = np.array([noise.discrete_laplace_scalar(scale, rng=rng) for _ in range(30_000)])
    assert_fits(samples, laplace_pmf(scale), laplace_radius(scale))


@pytest.mark.parametrize("sigma2", GAUSSIAN_SIGMA2S)
def test_discrete_gaussian_scalar_fits_pmf(sigma2: Fraction) -> None:
    rng = noise.SeededRandomSource(24)
    samples = np.array([noise.discrete_gaussian_scalar(sigma2, rng=rng) for _ in range(30_000)])
    assert_fits(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2))


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3), Fraction(10), Fraction(7, 3)])
def test_discrete_laplace_moments(scale: Fraction) -> None:
    samples = noise.discrete_laplace(scale, 500_000, rng=noise.SeededRandomSource(25))
    var = noise.discrete_laplace_variance(scale)
    assert_moments(samples, laplace_pmf(scale), laplace_radius(scale), var)


@pytest.mark.parametrize(
    "sigma2", [Fraction(1, 10), Fraction(1), Fraction(100), Fraction(12345, 7), Fraction(10**8)]
)
def test_discrete_gaussian_moments(sigma2: Fraction) -> None:
    samples = noise.discrete_gaussian(sigma2, 500_000, rng=noise.SeededRandomSource(26))
    var = noise.discrete_gaussian_variance(sigma2)
    assert_moments(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2), var)


def test_discrete_gaussian_with_large_denominator_fits() -> None:
    # A float σ² rounded up with a 2^20 denominator stays on the int64 path.
    sigma2 = noise.fraction_at_least(1234.5678)
    assert sigma2.denominator > 2**10 and gaussian.GaussPlan.for_sigma2(sigma2).vectorizable()
    samples = noise.discrete_gaussian(sigma2, 200_000, rng=noise.SeededRandomSource(27))
    assert_fits(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2))


@HYPOTHESIS
@given(st.fractions(min_value=Fraction(1, 1000), max_value=10**9, max_denominator=10**6),
       st.integers(min_value=-10**6, max_value=10**6))
def test_gauss_plan_gamma_is_cks_exponent(sigma2: Fraction, y: int) -> None:
    # γ(y) = (|y| - σ²/t)²/(2σ²) exactly, and t, σ²/t have the documented form.
    plan = gaussian.GaussPlan.for_sigma2(sigma2)
    assert plan.gamma(y) == (abs(y) - sigma2 / plan.t) ** 2 / (2 * sigma2)
    assert Fraction(plan.a, plan.b) == sigma2 / plan.t
    if sigma2 < 1:
        assert plan.t == 1
    else:
        assert plan.b == 1 and abs(plan.a - math.sqrt(sigma2)) <= 0.5 + 1e-9


# --------------------------------------------------------------------------------------------
# Fallback paths stay exact
# --------------------------------------------------------------------------------------------


def test_huge_sigma2_uses_python_path_and_is_gaussian() -> None:
    sigma2 = Fraction(10**19, 3)
    assert not gaussian.GaussPlan.for_sigma2(sigma2).vectorizable()
    samples = noise.discrete_gaussian(sigma2, 3000, rng=noise.SeededRandomSource(31))
    sigma = math.sqrt(sigma2)
    # At σ ≈ 1.8e9 N_Z(0, σ²) is N(0, σ²) up to O(1/σ): KS test at level 1e-7.
    assert stats.kstest(samples / sigma, "norm").pvalue > FAIL_PROB
    n = samples.size
    second = float(((samples / sigma) ** 2).mean())
    assert z_score(second, 1.0, math.sqrt(2 / n)) < Z_TOL


def test_huge_laplace_numerator_uses_python_path() -> None:
    scale = Fraction(2**60 + 1, 2**20)
    samples = noise.discrete_laplace(scale, 3000, rng=noise.SeededRandomSource(32))
    assert stats.kstest(samples / float(scale), "laplace").pvalue > FAIL_PROB


def test_tiny_sigma2() -> None:
    sigma2 = Fraction(1, 20)
    n = 1_000_000
    samples = noise.discrete_gaussian(sigma2, n, rng=noise.SeededRandomSource(33))
    p_nonzero = 1 - float(noise.discrete_gaussian_pmf(0, sigma2))
    nonzero = int(np.count_nonzero(samples))
    assert z_score(nonzero / n, p_nonzero, math.sqrt(p_nonzero * (1 - p_nonzero) / n)) < Z_TOL
    assert np.abs(samples).max() <= 2  # P[|Y| >= 3] ≈ e^-90
    var = noise.discrete_gaussian_variance(sigma2)
    assert_moments(samples, gaussian_pmf(sigma2), 3, var)


@pytest.mark.parametrize("limit", [25, 500, 5000])
def test_forced_python_fallbacks_stay_exact(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    # Lower the int64 ceiling and the chain caps so that chains, geometric counts, U + pV and γ
    # all leave the numpy path part-way; the continuation in Python must keep the distribution.
    monkeypatch.setattr(limits, "ARITH_LIMIT", limit)
    monkeypatch.setattr(limits, "MAX_CHAIN", 2)
    monkeypatch.setattr(limits, "MAX_GEOMETRIC", 1)
    monkeypatch.setattr(limits, "EXP1_TERMS", 2)
    rng = noise.SeededRandomSource(34 + limit)
    for scale in (Fraction(1, 2), Fraction(10)):
        samples = noise.discrete_laplace(scale, 30_000, rng=rng)
        assert_fits(samples, laplace_pmf(scale), laplace_radius(scale))
    for sigma2 in (Fraction(1, 4), Fraction(100), Fraction(12345, 7)):
        samples = noise.discrete_gaussian(sigma2, 30_000, rng=rng)
        assert_fits(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2))


def test_overflowing_magnitude_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "I64_MAX", 0)
    monkeypatch.setattr(limits, "ARITH_LIMIT", 0)
    with pytest.raises(OverflowError, match="exceeds int64"):
        laplace.laplace_magnitudes(3, 1, np.array([1, 2, 0]), noise.SeededRandomSource(35))


# --------------------------------------------------------------------------------------------
# Random sources and determinism
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampler", [noise.discrete_laplace, noise.discrete_gaussian])
@pytest.mark.parametrize("size", [1000, 3 * limits.BATCH + 5])
def test_same_seed_same_output(sampler: Callable, size: int) -> None:
    first = sampler(Fraction(7, 2), size, rng=noise.SeededRandomSource(41))
    again = sampler(Fraction(7, 2), size, rng=noise.SeededRandomSource(41))
    other = sampler(Fraction(7, 2), size, rng=noise.SeededRandomSource(42))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("sampler", [noise.discrete_laplace_scalar, noise.discrete_gaussian_scalar])
def test_scalar_same_seed_same_output(sampler: Callable) -> None:
    def run(seed: int) -> list[int]:
        rng = noise.SeededRandomSource(seed)
        return [sampler(Fraction(7, 2), rng=rng) for _ in range(200)]

    assert run(43) == run(43) != run(44)


@pytest.mark.parametrize("sampler", [noise.discrete_laplace, noise.discrete_gaussian])
def test_system_source_calls_differ(sampler: Callable) -> None:
    # Equal outputs would need 1000 equal draws: probability far below 1e-100.
    assert not np.array_equal(sampler(Fraction(100), 1000), sampler(Fraction(100), 1000))


def test_resolve_rng() -> None:
    assert isinstance(noise.resolve_rng(None), noise.SystemRandomSource)
    seeded = noise.SeededRandomSource(1)
    assert noise.resolve_rng(seeded) is seeded
    assert isinstance(seeded, noise.RandomSource)
    assert isinstance(noise.SystemRandomSource(), noise.RandomSource)


def assert_uniform(values: npt.NDArray[np.int64], high: int) -> None:
    """In range, and chi-square uniform (fails by chance with probability 1e-7)."""
    assert values.min() >= 0 and values.max() < high
    if high == 1:
        return
    observed = np.bincount(values, minlength=high)
    expected = values.size / high
    statistic = float(((observed - expected) ** 2 / expected).sum())
    assert statistic < stats.chi2.ppf(CHI2_LEVEL, high - 1)


@pytest.mark.parametrize(
    "source", [noise.SystemRandomSource(), noise.SeededRandomSource(51)], ids=["system", "seeded"]
)
def test_integers_common_and_mixed_bounds(source: noise.RandomSource) -> None:
    assert_uniform(source.integers(np.full(700_000, 7, dtype=np.int64)), 7)
    highs = np.tile(np.array([1, 3, 256, 257, 1000], dtype=np.int64), 200_000)
    values = source.integers(highs)
    assert values.dtype == np.int64 and values.shape == highs.shape
    for high in (1, 3, 256, 257, 1000):
        assert_uniform(values[highs == high], high)


@pytest.mark.parametrize(
    "source", [noise.SystemRandomSource(), noise.SeededRandomSource(52)], ids=["system", "seeded"]
)
@pytest.mark.parametrize("high", [2**32 + 1, 2**40 + 3, 3 * 2**61 + 1, 2**63 - 1])
def test_integers_wide_bounds(source: noise.RandomSource, high: int) -> None:
    n = 200_000
    mixed = np.tile(np.array([high, 5], dtype=np.int64), n // 2)
    for highs in (np.full(n, high, dtype=np.int64), mixed):
        values = source.integers(highs)
        assert (values >= 0).all() and (values < highs).all()
        # U/high is uniform on [0, 1) up to 1/high: mean 1/2, variance 1/12.
        wide = values[highs == high] / high
        assert z_score(float(wide.mean()), 0.5, math.sqrt(1 / 12 / wide.size)) < Z_TOL


@pytest.mark.parametrize(
    "source", [noise.SystemRandomSource(), noise.SeededRandomSource(53)], ids=["system", "seeded"]
)
def test_integers_shapes_and_bad_bounds(source: noise.RandomSource) -> None:
    assert source.integers(np.full((3, 4), 9, dtype=np.int64)).shape == (3, 4)
    assert source.integers(np.array([[2, 3], [4, 5]], dtype=np.int64)).shape == (2, 2)
    assert source.integers(np.zeros(0, dtype=np.int64)).shape == (0,)
    with pytest.raises(ValueError):
        source.integers(np.array([3, 0], dtype=np.int64))


@pytest.mark.parametrize(
    "source", [noise.SystemRandomSource(), noise.SeededRandomSource(54)], ids=["system", "seeded"]
)
def test_randbelow(source: noise.RandomSource) -> None:
    assert_uniform(np.array([source.randbelow(6) for _ in range(60_000)]), 6)
    big = 10**30 + 7
    assert all(0 <= source.randbelow(big) < big for _ in range(100))
    assert source.randbelow(1) == 0
    with pytest.raises(ValueError):
        source.randbelow(0)


def test_seeded_source_rejects_bad_seed() -> None:
    for seed in (-1, 1.5, True):
        with pytest.raises(ValueError):
            noise.SeededRandomSource(seed)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Random bits: the buffered system source, fields, uniforms below a bound, Bernoulli(num/den)
# --------------------------------------------------------------------------------------------


def test_system_buffer_hands_out_each_word_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Requests below, at and across the 4 KiB ... 1 MiB chunk boundaries and larger than a chunk:
    # the words handed out must be exactly the stream 0, 1, 2, ... (no word twice, none skipped),
    # and earlier results must not change when the buffer is refilled.
    fake = CountingUrandom()
    monkeypatch.setattr(os, "urandom", fake)
    source = noise.SystemRandomSource()
    sizes = [1, 7, 504, 1, 512, 513, 4096, 100_000, 3, 300_000, 2**17 + 5, 2**18, 0, 1]
    drawn = [source.raw_words(size) for size in sizes]
    assert [d.size for d in drawn] == sizes
    np.testing.assert_array_equal(np.concatenate(drawn), np.arange(sum(sizes)))
    # One call per refill: the i-th reads the chunk min(4 KiB 2^i, 1 MiB), or more when the
    # request still needs more; nothing read is lost: the rest waits in the buffer.
    assert fake.sizes == [4096, 8192, 16384, 32768, 783_632, 131_072, 2_268_952, 1_048_616,
                          2_097_152, 1_048_576]
    for i, size in enumerate(fake.sizes):
        assert size >= min(4096 << i, 2**20)
    # The words read and not yet handed out come next, in order, with no further read.
    rest = source.raw_words(fake.next - sum(sizes))
    np.testing.assert_array_equal(rest, np.arange(sum(sizes), fake.next))
    assert len(fake.sizes) == 10


def test_system_source_large_draws_use_few_large_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    real = os.urandom

    def recording(nbytes: int) -> bytes:
        sizes.append(nbytes)
        return real(nbytes)

    monkeypatch.setattr(os, "urandom", recording)
    noise.discrete_gaussian(Fraction(100), 10**6, rng=noise.SystemRandomSource())
    assert max(sizes) >= 2**20
    assert len(sizes) <= 9 + sum(sizes) // 2**20  # the doubling 4 KiB ... 1 MiB, then 1 MiB reads


def test_system_source_consecutive_draws_do_not_repeat_words() -> None:
    # Both draws straddle a refill. 400,000 uniform 64-bit words are all distinct except with
    # probability < 400000²/2^65 < 5e-9.
    source = noise.SystemRandomSource()
    first, second = source.raw_words(200_000), source.raw_words(200_000)
    assert np.unique(np.concatenate([first, second])).size == 400_000


def test_system_source_threads_take_disjoint_words(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = CountingUrandom()
    monkeypatch.setattr(os, "urandom", fake)
    source = noise.SystemRandomSource()
    results: list[npt.NDArray[np.uint64]] = []

    def draw(seed: int) -> None:
        sizes = np.random.default_rng(seed).integers(1, 3000, 200)
        results.extend(source.raw_words(int(size)) for size in sizes)

    threads = [threading.Thread(target=draw, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    words = np.sort(np.concatenate(results))
    np.testing.assert_array_equal(words, np.arange(words.size))


def test_copied_or_pickled_system_source_starts_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = CountingUrandom()
    monkeypatch.setattr(os, "urandom", fake)
    source = noise.SystemRandomSource()
    drawn = [source.raw_words(1)]
    for clone in (copy.copy(source), copy.deepcopy(source), pickle.loads(pickle.dumps(source))):
        drawn.append(clone.raw_words(10))
    drawn.append(source.raw_words(10))
    words = np.concatenate(drawn)
    assert np.unique(words).size == words.size


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_does_not_reuse_the_parent_buffer() -> None:
    source = noise.SystemRandomSource()
    source.raw_words(1)  # the buffer now holds unused words
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, source.raw_words(64).tobytes())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 4096):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    child = np.frombuffer(b"".join(chunks), dtype=np.uint64)
    parent = source.raw_words(64)
    assert child.size == 64
    assert not np.intersect1d(parent, child).size  # by chance with probability < 1e-15


@pytest.mark.parametrize("cut", [sources.fields, sources.narrow_fields], ids=["fields", "narrow"])
@pytest.mark.parametrize("bits", [1, 3, 4, 7, 8, 13, 14, 16, 21, 24, 32, 33, 63])
def test_fields_are_uniform(cut: Callable, bits: int) -> None:
    values = cut(noise.SeededRandomSource(71), 300_000, bits)
    assert values.dtype == np.int64 and values.size == 300_000
    assert values.min() >= 0 and values.max() < 2**bits
    if bits <= 8:
        assert_uniform(values, 2**bits)
    # Every bit position is a fair coin.
    ones = (values[:, None] >> np.arange(bits)) & 1
    share = ones.mean(axis=0)
    assert (np.abs(share - 0.5) / math.sqrt(0.25 / values.size) < Z_TOL).all()


@pytest.mark.parametrize("bound", [2, 3, 7, 10, 120, 1000, 4115])
def test_below_is_uniform(bound: int) -> None:
    assert_uniform(sources.below(noise.SeededRandomSource(72), bound, 60 * bound + 100_000), bound)


def test_below_wide_bounds_and_field_widths() -> None:
    # 4115 = 2^12 + 19: 16-bit fields (4 per word) accept 15 * 4115/2^16 and cost 16.99 bits per
    # value against 26 for 13-bit fields (4 per word) that accept 4115/2^13.
    assert sources.below_bits(4115) == 16
    assert sources.below_bits(1000) == 10 and sources.below_bits(2**20) == 20
    assert sources.below(noise.SeededRandomSource(73), 5, 0).shape == (0,)
    for bound in (2**31 + 1, 3 * 2**40 + 7, 2**62 + 1, 2**63 - 1):
        values = sources.below(noise.SeededRandomSource(73), bound, 200_000)
        assert values.min() >= 0 and values.max() < bound
        u = values / bound
        assert z_score(float(u.mean()), 0.5, math.sqrt(1 / 12 / u.size)) < Z_TOL


@pytest.mark.parametrize("bits", [0, 1, 4, 8])
@pytest.mark.parametrize(
    ("num", "den"), [(0, 7), (1, 3), (5, 7), (7, 7), (123_456, 1_000_003), (2**40 + 1, 2**41 + 3)]
)
def test_bernoulli_fraction_frequency(bits: int, num: int, den: int) -> None:
    # Ties W = floor(2^w num/den) (probability 2^-w) are decided by one more uniform; with no
    # bits a uniform in [0, den) decides directly.
    n = 400_000
    scaled = np.full(n, num << bits)
    hits = int(bernoulli.bernoulli(noise.SeededRandomSource(74), scaled, bits, den).sum())
    p = num / den
    if num in (0, den):
        assert hits == round(p * n)
    else:
        assert z_score(hits / n, p, math.sqrt(p * (1 - p) / n)) < Z_TOL


def test_sources_without_raw_words_drive_the_vector_samplers() -> None:
    # Any RandomSource works: the words are assembled from its uniform integers in [0, 2^32).
    rng = IntegersOnly(75)
    samples = noise.discrete_gaussian(Fraction(100), 100_000, rng=rng)
    assert_fits(samples, gaussian_pmf(Fraction(100)), gaussian_radius(Fraction(100)))
    samples = noise.discrete_laplace(Fraction(3), 100_000, rng=rng)
    assert_fits(samples, laplace_pmf(Fraction(3)), laplace_radius(Fraction(3)))
    assert rng.highs == {2**32}


@pytest.mark.parametrize("chunks", ["default", "tiny"])
def test_system_source_samples_fit_pmf(monkeypatch: pytest.MonkeyPatch, chunks: str) -> None:
    # The production path end to end; with tiny chunks nearly every request straddles a refill.
    if chunks == "tiny":
        monkeypatch.setattr(limits, "MIN_URANDOM_WORDS", 3)
        monkeypatch.setattr(limits, "MAX_URANDOM_WORDS", 37)
    rng = noise.SystemRandomSource()
    for sigma2 in (Fraction(1, 4), Fraction(100), Fraction(12345, 7)):
        samples = noise.discrete_gaussian(sigma2, 200_000, rng=rng)
        assert_fits(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2))
    for scale in (Fraction(1, 2), Fraction(10)):
        samples = noise.discrete_laplace(scale, 200_000, rng=rng)
        assert_fits(samples, laplace_pmf(scale), laplace_radius(scale))


@pytest.mark.parametrize("bits", [1, 2])
def test_tie_heavy_settings_stay_exact(monkeypatch: pytest.MonkeyPatch, bits: int) -> None:
    # 1- and 2-bit comparisons send 1/2 and 1/4 of all Bernoulli draws through the tie path, a
    # 3! table sends 1/6 of Bernoulli(e^-1) draws to the chain, and small batches make many of
    # them; the distributions must not move.
    monkeypatch.setattr(limits, "BERNOULLI_BITS", bits)
    monkeypatch.setattr(limits, "EXP1_TERMS", 3)
    monkeypatch.setattr(limits, "BATCH", 3000)
    rng = noise.SeededRandomSource(76 + bits)
    for scale in (Fraction(1, 2), Fraction(10)):
        samples = noise.discrete_laplace(scale, 100_000, rng=rng)
        assert_fits(samples, laplace_pmf(scale), laplace_radius(scale))
    for sigma2 in (Fraction(1, 4), Fraction(100), Fraction(12345, 7)):
        samples = noise.discrete_gaussian(sigma2, 100_000, rng=rng)
        assert_fits(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2))


@pytest.mark.parametrize(
    ("sampler", "parameter", "ceiling"),
    [(noise.discrete_gaussian, Fraction(10**6), 96), (noise.discrete_gaussian, Fraction(1), 56),
     (noise.discrete_laplace, Fraction(100), 64)],
)
def test_random_bits_per_sample(sampler: Callable, parameter: Fraction, ceiling: int) -> None:
    # The bit economy that makes os.urandom cheap enough: about 68, 40 and 50 bits per sample.
    rng = WordCountingSource(77)
    sampler(parameter, 200_000, rng=rng)
    assert 64 * rng.words / 200_000 < ceiling


# --------------------------------------------------------------------------------------------
# Rational rounding
# --------------------------------------------------------------------------------------------


def test_fraction_rounding_examples() -> None:
    assert noise.fraction_at_least(2.5) == Fraction(5, 2)
    assert noise.fraction_at_least(Fraction(1, 3)) == Fraction(1, 3)
    assert noise.fraction_at_least(0.1, max_denominator=1000) == Fraction(100, 999)
    assert noise.fraction_at_most(0.1, max_denominator=1000) == Fraction(1, 10)
    assert noise.fraction_at_least(math.pi, max_denominator=1000) == Fraction(355, 113)
    assert noise.fraction_at_most(math.pi, max_denominator=1000) == Fraction(2818, 897)
    assert noise.fraction_at_least(7) == 7 and noise.fraction_at_most(-2.25) == Fraction(-9, 4)


@HYPOTHESIS
@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
       st.integers(min_value=1, max_value=60))
def test_fraction_rounding_is_tight(x: float, max_denominator: int) -> None:
    up = noise.fraction_at_least(x, max_denominator=max_denominator)
    exact = Fraction(x)
    assert up >= exact and up.denominator <= max_denominator
    candidates = [Fraction(math.ceil(exact * d), d) for d in range(1, max_denominator + 1)]
    assert up == min(candidates)
    if exact > 0 and exact < Fraction(1, max_denominator):
        with pytest.raises(PrivacyParameterError, match="no positive rational"):
            noise.fraction_at_most(x, max_denominator=max_denominator)
        return
    down = noise.fraction_at_most(x, max_denominator=max_denominator)
    assert down <= exact and down.denominator <= max_denominator
    assert down == max(Fraction(math.floor(exact * d), d) for d in range(1, max_denominator + 1))
    assert exact <= 0 or down > 0


@HYPOTHESIS
@given(st.floats(min_value=1e-6, max_value=1e12))
def test_fraction_at_least_default_denominator(x: float) -> None:
    up = noise.fraction_at_least(x)
    assert Fraction(x) <= up <= Fraction(x) + Fraction(1, 2**20)
    assert up.denominator <= 2**20


@pytest.mark.parametrize("x", [math.inf, -math.inf, math.nan])
def test_fraction_rounding_rejects_non_finite(x: float) -> None:
    for rounding in (noise.fraction_at_least, noise.fraction_at_most):
        with pytest.raises(PrivacyParameterError, match="finite"):
            rounding(x)


def test_fraction_rounding_rejects_bad_denominator() -> None:
    with pytest.raises(PrivacyParameterError, match="max_denominator must be >= 1; got 0"):
        noise.fraction_at_least(0.5, max_denominator=0)
    with pytest.raises(PrivacyParameterError, match="max_denominator must be an int"):
        noise.fraction_at_most(0.5, max_denominator=2.0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

SAMPLERS = [
    ("scale", lambda v: noise.discrete_laplace(v, 3)),
    ("sigma2", lambda v: noise.discrete_gaussian(v, 3)),
    ("scale", lambda v: noise.discrete_laplace_scalar(v, rng=noise.SeededRandomSource(1))),
    ("sigma2", lambda v: noise.discrete_gaussian_scalar(v, rng=noise.SeededRandomSource(1))),
]


@pytest.mark.parametrize(("name", "call"), SAMPLERS)
def test_float_parameter_is_rejected_with_advice(name: str, call: Callable) -> None:
    with pytest.raises(PrivacyParameterError, match=rf"{name} .*float 2\.5.*fraction_at_least"):
        call(2.5)


@pytest.mark.parametrize(("name", "call"), SAMPLERS)
@pytest.mark.parametrize(
    ("value", "shown"),
    [(-1, "-1"), (0, "0"), (Fraction(-1, 3), "-1/3"), (math.inf, "inf"), (math.nan, "nan"),
     (-2.0, "-2.0"), ("3", "3"), (True, "True"), (None, "None")],
)
def test_bad_parameter_is_rejected(name: str, call: Callable, value: object, shown: str) -> None:
    with pytest.raises(PrivacyParameterError, match=rf"{name} must be a positive rational; got "
                       + f"{shown}\\."):
        call(value)


def test_too_large_parameters_are_rejected() -> None:
    message = rf"scale must be at most {2**56} .*got {2**57}\."
    with pytest.raises(PrivacyParameterError, match=message):
        noise.discrete_laplace(2**57, 1)
    with pytest.raises(PrivacyParameterError, match="sigma2 must be at most"):
        noise.discrete_gaussian(Fraction(2**119), 1)


@pytest.mark.parametrize("size", [-1, 2.0, True, "3", None])
def test_bad_size_is_rejected(size: object) -> None:
    for sampler in (noise.discrete_laplace, noise.discrete_gaussian):
        with pytest.raises(PrivacyParameterError, match=f"size must be an int >= 0; got {size!r}"):
            sampler(Fraction(1), size)


def test_integer_like_parameters_and_empty_size() -> None:
    rng = noise.SeededRandomSource(61)
    assert noise.discrete_laplace(np.int64(3), 0, rng=rng).shape == (0,)
    assert noise.discrete_gaussian(2, np.int64(5), rng=rng).dtype == np.int64
    assert noise.discrete_gaussian(Fraction(10**19, 3), 0, rng=rng).shape == (0,)


@pytest.mark.parametrize("gamma", [Fraction(-1, 2), -1, 0.5, True])
def test_bernoulli_exp_rejects_bad_gamma(gamma: object) -> None:
    with pytest.raises(PrivacyParameterError, match="gamma must be a non-negative rational"):
        noise.bernoulli_exp(gamma, rng=noise.SeededRandomSource(1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "helper",
    [noise.discrete_laplace_variance, noise.discrete_gaussian_variance,
     noise.discrete_gaussian_normalizer, lambda v: noise.discrete_laplace_pmf(0, v),
     lambda v: noise.discrete_gaussian_pmf(0, v)],
)
@pytest.mark.parametrize("value", [0, -1.5, math.inf, math.nan])
def test_helpers_reject_bad_parameters(helper: Callable, value: float) -> None:
    with pytest.raises(PrivacyParameterError, match=f"must be positive and finite; got {value}"):
        helper(value)


# --------------------------------------------------------------------------------------------
# Exact inversion from certified thresholds
# --------------------------------------------------------------------------------------------


@HYPOTHESIS
@given(st.integers(min_value=1, max_value=1000), st.fractions(min_value=0, max_value=1),
       st.integers(min_value=0, max_value=6), st.integers(min_value=1, max_value=100))
def test_exp_neg_bounds_enclose_the_exact_value(den: int, frac: Fraction, whole: int, prec: int) -> None:
    # Against the exact partial sum S_N of e^{-x} = Σ (-x)^k/k! with N = 90 > x: the rest is at
    # most x^{N+1}/(N+1)! < 2^-110 (alternating, decreasing terms), so the bounds must hold up to it.
    num = whole * den + math.floor(frac * den)
    lo, hi = inversion.exp_neg(num, den, prec)
    x = Fraction(num, den)
    total, term = Fraction(0), Fraction(1)
    for k in range(91):
        total += term if k % 2 == 0 else -term
        term = term * x / (k + 1)
    assert term < Fraction(1, 2**110)
    assert Fraction(lo, 2**prec) <= total + term and total - term <= Fraction(hi, 2**prec)
    assert 0 <= hi - lo <= 4


def test_exp_neg_large_exponents_stay_bounds() -> None:
    # e^{-100} and e^{-10^6} are below 2^-80: the bounds are 0 and one unit.
    assert inversion.exp_neg(100, 1, 80) == (0, 1)
    assert inversion.exp_neg(10**6, 1, 80) == (0, 1)
    lo, hi = inversion.exp_neg(100, 1, 200)
    assert hi - lo <= 4 and lo == pytest.approx(math.exp(-100) * 2**200, rel=1e-12)


@pytest.fixture
def narrow_inversion(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, int, int], None]:
    """Set the inversion widths (table tails, guide and refine bits) with fresh table caches."""

    def narrow(guide: int, refine: int, tail: int) -> None:
        monkeypatch.setattr(limits, "GUIDE_BITS", guide)
        monkeypatch.setattr(limits, "REFINE_BITS", refine)
        monkeypatch.setattr(limits, "TAIL_BITS", tail)
        laplace.laplace_staircase.cache_clear()
        gaussian.gauss_staircase.cache_clear()

    yield narrow
    laplace.laplace_staircase.cache_clear()
    gaussian.gauss_staircase.cache_clear()


def truncated_geometric(num: int, den: int, m: int) -> inversion.Survival:
    """S(j) = (r^j - r^m)/(1 - r^m), j = 1..m-1, r = e^{-num/den}: P[u] ∝ r^u on [0, m)."""

    def survival(prec: int, count: int) -> list[inversion.Interval]:
        work = prec + 40
        one, top = 1 << work, inversion.exp_neg(num * m, den, work)
        rest = (one - top[1], one - top[0])
        out = []
        for j in range(1, count + 1):
            lo, hi = inversion.exp_neg(num * j, den, work)
            lo, hi = inversion.div((max(lo - top[1], 0), hi - top[0]), rest, work)
            out.append((lo >> 40, -((-hi) >> 40)))
        return out

    return survival


def test_inversion_of_a_finite_law_is_exact(narrow_inversion: Callable[[int, int, int], None]) -> None:
    # The truncated geometric P[u] ∝ e^{-u/3} on [0, 8): with 2 + 2 bits most draws are decided
    # in Python integers, and every path must give the exact law.
    narrow_inversion(2, 2, 48)
    table = inversion.Inversion(truncated_geometric(1, 3, 8), 8, 0)
    values = table.sample(60_000, noise.SeededRandomSource(91))
    weights = np.exp(-np.arange(8) / 3)
    obs_bins, exp_bins = pooled(np.bincount(values, minlength=8), weights / weights.sum() * values.size)
    statistic = float(((obs_bins - exp_bins) ** 2 / exp_bins).sum())
    assert statistic < stats.chi2.ppf(CHI2_LEVEL, obs_bins.size - 1)


def test_inversion_resolves_prefixes_exactly() -> None:
    # Lap_Z(1): S(1) = P[Y != 0] = 2e^{-1}/(1 + e^{-1}) = 0.5379. A 1-bit prefix 0 (R < 1/2)
    # gives X >= 1 for certain; a prefix 1 (R in [1/2, 1)) gives X >= 1 with probability
    # (S(1) - 1/2)/(1/2) = 0.0758, decided by the Python path's further bits.
    table = inversion.Inversion(laplace.signed_survival(1, 1, 1), None, 60)
    rng = noise.SeededRandomSource(92)
    assert all(table.resolve(0, 1, rng) >= 1 for _ in range(200))
    n = 20_000
    above = sum(table.resolve(1, 1, rng) >= 1 for _ in range(n))
    p = 2 * (2 * math.exp(-1) / (1 + math.exp(-1))) - 1
    assert z_score(above / n, p, math.sqrt(p * (1 - p) / n)) < Z_TOL


@pytest.mark.slow
def test_narrow_inversion_settings_stay_exact(narrow_inversion: Callable[[int, int, int], None],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # 3-bit guides, 3 more bits and tables that stop at 2^-2: nearly every sample goes through the
    # Python path, often beyond the table (a Gaussian block past the tabulated ones takes the
    # scalar acceptance test); the laws must not move.
    narrow_inversion(3, 3, 2)
    resolved = []
    original = inversion.Inversion.resolve

    def spy(self: inversion.Inversion, prefix: int, bits: int, rng: noise.RandomSource) -> int:
        out = original(self, prefix, bits, rng)
        resolved.append(out > self.count)
        return out

    monkeypatch.setattr(inversion.Inversion, "resolve", spy)
    rng = noise.SeededRandomSource(93)
    for scale in (Fraction(1, 2), Fraction(3), Fraction(1000)):
        assert_fits(noise.discrete_laplace(scale, 20_000, rng=rng), laplace_pmf(scale), laplace_radius(scale))
    for sigma2 in (Fraction(1, 4), Fraction(100), Fraction(40_000)):
        samples = noise.discrete_gaussian(sigma2, 20_000, rng=rng)
        assert_fits(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2))
    assert len(resolved) > 10_000 and sum(resolved) > 100


@pytest.mark.parametrize("scale", [Fraction(100), Fraction(1000), Fraction(12345, 7), Fraction(10**5, 3)])
def test_discrete_laplace_tables_fit_pmf(scale: Fraction) -> None:
    stairs = laplace.laplace_staircase(scale.numerator, scale.denominator)
    assert (stairs.shift > 0) == (scale >= limits.DIRECT_SCALE) and stairs.vectorizable()
    assert stairs.shift == 0 or 16 <= scale / 2**stairs.shift < 32
    samples = noise.discrete_laplace(scale, 200_000, rng=noise.SeededRandomSource(94))
    assert_fits(samples, laplace_pmf(scale), laplace_radius(scale))


def test_discrete_laplace_large_scale_staircase() -> None:
    scale = Fraction(10**15, 7)  # blocks of 2^43 values: u from its own fields
    assert laplace.laplace_staircase(scale.numerator, scale.denominator).shift == 43
    samples = noise.discrete_laplace(scale, 20_000, rng=noise.SeededRandomSource(95))
    assert stats.kstest(samples / float(scale), "laplace").pvalue > FAIL_PROB
    assert_uniform(samples % 2**12, 2**12)  # the low bits: uniform up to O(2^12/t)


@pytest.mark.parametrize("sigma2", [Fraction(128**2), Fraction(20_000), Fraction(10**6), Fraction(987_654_321, 11)])
def test_discrete_gaussian_staircase_fits_pmf(sigma2: Fraction) -> None:
    stairs = gaussian.gauss_staircase(sigma2.numerator, sigma2.denominator)
    assert (stairs.shift > 0) == (sigma2 >= (limits.DIRECT_SIGMA + 1) ** 2) and stairs.vectorizable()
    samples = noise.discrete_gaussian(sigma2, 200_000, rng=noise.SeededRandomSource(96))
    assert_fits(samples, gaussian_pmf(sigma2), gaussian_radius(sigma2))


def test_discrete_gaussian_large_sigma_staircase() -> None:
    sigma2 = Fraction(10**12)
    assert gaussian.gauss_staircase(10**12, 1).shift == 14
    samples = noise.discrete_gaussian(sigma2, 200_000, rng=noise.SeededRandomSource(97))
    sigma = math.sqrt(sigma2)
    assert stats.kstest(samples / sigma, "norm").pvalue > FAIL_PROB
    second = float(((samples / sigma) ** 2).mean())
    assert z_score(second, 1.0, math.sqrt(2 / samples.size)) < Z_TOL


@pytest.mark.parametrize(("p", "q", "block"), [(1, 4, 1), (100, 1, 1), (12345, 7, 1), (10**12, 1, 2**14)])
def test_staircase_weights_by_ratios_match_direct_exponentials(p: int, q: int, block: int) -> None:
    # The block weights e^{-a_o² q/(2p)} built by running products enclose the directly computed
    # ones: both intervals hold the exact value, so they meet, and both are a few units wide.
    prec = 80
    weights = gaussian.block_weights(p, q, block, 400, prec)
    for o, (lo, hi) in enumerate(weights):
        a = (o // 2) * block + o % 2
        direct = inversion.exp_neg(a * a * q, 2 * p, prec)
        assert lo <= direct[1] and direct[0] <= hi and hi - lo <= 2**12


def test_small_calls_use_the_cks_samplers() -> None:
    # Below limits.TABLE_MIN_SIZE samples no inversion table is built (they would not repay it).
    gaussian.gauss_staircase.cache_clear()
    laplace.laplace_staircase.cache_clear()
    rng = noise.SeededRandomSource(98)
    noise.discrete_gaussian(Fraction(7, 3), limits.TABLE_MIN_SIZE - 1, rng=rng)
    noise.discrete_laplace(Fraction(7, 3), limits.TABLE_MIN_SIZE - 1, rng=rng)
    assert gaussian.gauss_staircase.cache_info().currsize == laplace.laplace_staircase.cache_info().currsize == 0
    noise.discrete_gaussian(Fraction(7, 3), limits.TABLE_MIN_SIZE, rng=rng)
    noise.discrete_laplace(Fraction(7, 3), limits.TABLE_MIN_SIZE, rng=rng)
    assert gaussian.gauss_staircase.cache_info().currsize == laplace.laplace_staircase.cache_info().currsize == 1


def test_staircase_block_beyond_int64_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    stairs = laplace.laplace_staircase(10**6, 1)
    monkeypatch.setattr(limits, "I64_MAX", 2**20)
    with pytest.raises(OverflowError, match="exceeds int64"):
        stairs.batch(10_000, noise.SeededRandomSource(99))
