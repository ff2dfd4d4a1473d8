"""Truncated sums: the seed-003 worked example, variances of the four batch mechanisms, SVT and
race-to-the-top thresholds, Theorem 1, and isotonic regression — the digests' oracles."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql.engine.plan import thresholds
from dpsql.errors import PrivacyParameterError, ShapeError
from dpsql.matrix.workloads import Explicit, Prefix
from dpsql.noise import SeededRandomSource
from dpsql.planning import sum_truncation

VALUES = np.array([10.0, 20.0, 30.0, 100.0])
COUNTS = np.array([3.0, 1.0, 0.0, 2.0])
W = Prefix(4)
H2 = Explicit(np.array([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0],
                        [0, 0, 0, 1]], dtype=float))


# ----------------------------------------------------------------------------- worked example (digest §7)
def test_worked_example_truncation_bias_and_sensitivities() -> None:
    t = sum_truncation.clipped(VALUES, 25)
    assert t.tolist() == [10, 20, 25, 25]
    assert (W @ (VALUES * COUNTS)).tolist() == [30, 50, 50, 250]
    assert (sum_truncation.weighted(W, t) @ COUNTS).tolist() == [30, 50, 50, 100]
    b = sum_truncation.bias(W, VALUES, COUNTS, 25)
    assert b.tolist() == [0, 0, 0, -150] and float(b @ b) == 22500
    assert sum_truncation.weighted(W, VALUES).sensitivity("l1") == 100
    assert sum_truncation.weighted(W, t).sensitivity("l1") == 60


@pytest.mark.parametrize(("mechanism", "theta", "strategy", "total"), [
    ("identity", 25, None, 6950.0),
    ("workload", 25, None, 28800.0),
    ("timm", 25, "I", 12500.0),
    ("timm", 25, "H2", 28928.571428571428),
    ("tamm", 25, "H2", 18064.285714285714),
    ("identity", None, None, 26800.0),
    ("workload", None, None, 80000.0),
])
def test_worked_example_variances(mechanism: sum_truncation.Mechanism, theta: float | None, strategy: str | None,
                                  total: float) -> None:
    A = {"I": Explicit(np.eye(4)), "H2": H2, None: None}[strategy]
    v = sum_truncation.variances(mechanism, W, VALUES, theta, A)
    assert float(v.sum()) == pytest.approx(total, rel=1e-12)
    if mechanism == "identity" and theta == 25:
        assert v.tolist() == pytest.approx([200, 1000, 2250, 3500])


def test_workload_is_tamm_with_the_weighted_workload_as_strategy() -> None:
    WT = sum_truncation.weighted(W, sum_truncation.clipped(VALUES, 25))
    np.testing.assert_allclose(sum_truncation.variances("tamm", W, VALUES, 25, Explicit(WT.dense())),
                               sum_truncation.variances("workload", W, VALUES, 25))


@pytest.mark.parametrize(("mechanism", "predicted"), [("timm", 51428.571428571428), ("tamm", 40564.285714285714)])
def test_monte_carlo_error_is_bias_squared_plus_variance(mechanism: str, predicted: float) -> None:
    """20,000 continuous-Laplace draws at ε₂ = 1 (the digest's check of the formulas): within 2 %."""
    rng = np.random.default_rng(7)
    A = H2.dense()
    t = sum_truncation.clipped(VALUES, 25)
    pinv = np.linalg.pinv(A)
    truth = W.dense() @ (VALUES * COUNTS)
    if mechanism == "timm":
        data, scale, answer = t * COUNTS, float(np.max(np.abs(A * t).sum(axis=0))), W.dense()
    else:
        data, scale, answer = COUNTS, float(np.abs(A).sum(axis=0).max()), W.dense() * t
    noisy = (A @ data)[None, :] + rng.laplace(scale=scale, size=(20_000, A.shape[0]))
    estimates = (noisy @ pinv.T) @ answer.T
    mse = float(np.mean(np.sum((estimates - truth) ** 2, axis=1)))
    assert mse == pytest.approx(predicted, rel=0.02)
    assert float(sum_truncation.variances(mechanism, W, VALUES, 25, H2).sum()) + 22500 == pytest.approx(predicted)  # type: ignore[arg-type]


def test_bias_variance_crossovers() -> None:
    """Truncation pays iff 22500 + V_trunc/ε² < V_full/ε²: ε₂ < 0.93926 (Identity), 1.50850 (Workload)."""
    for mechanism, crossing in (("identity", 0.93926), ("workload", 1.50850)):
        full = float(sum_truncation.variances(mechanism, W, VALUES, None).sum())  # type: ignore[arg-type]
        cut = float(sum_truncation.variances(mechanism, W, VALUES, 25).sum())  # type: ignore[arg-type]
        assert math.sqrt((full - cut) / 22500) == pytest.approx(crossing, abs=1e-5)  # the digest truncates to 5 places


def test_gaussian_variances_use_l2_sensitivities() -> None:
    v = sum_truncation.variances("timm", W, VALUES, 25, H2, noise_kind="gaussian")
    # ‖H2·T‖₂² = max_j t_j²·3 = 1875; diag(W (H2ᵀH2)⁻¹ Wᵀ) from the dense matrices
    expected = 1875 * np.diag(W.dense() @ np.linalg.inv(H2.dense().T @ H2.dense()) @ W.dense().T)
    np.testing.assert_allclose(v, expected)


# ----------------------------------------------------------------------------- SVT (seed-003 §3.1)
SVT_VALUES = np.array([1e3, 2e4, 4e4, 5.5e4, 7e4, 9e4, 1.2e5, 3e5, 9e5, 2e6])


def below(values: np.ndarray, grid: np.ndarray) -> list[int]:
    return [int(np.sum(values <= u)) for u in grid]


def test_svt_grid_values() -> None:
    grid = sum_truncation.geometric_grid(5e4 * 1.2**17, 1.2, 18)
    assert grid[:5].tolist() == pytest.approx([50000, 60000, 72000, 86400, 103680])
    assert grid[16] == pytest.approx(924421.2944751816) and grid[-1] >= 1e6 > grid[-2]


def test_svt_without_noise_returns_the_quantile_rounded_up_to_the_grid() -> None:
    grid = sum_truncation.geometric_grid(5e4 * 1.2**23, 1.2, 24)
    counts = below(SVT_VALUES, grid)
    assert counts[:12] == [3, 4, 5, 5, 6, 7, 7, 7, 7, 7, 8, 8]
    for r, theta in ((0.8, 924421.2944751816), (0.5, 103680.0)):
        found = sum_truncation.svt_threshold(counts, 10, grid, fraction=r, epsilon=1e9, rng=SeededRandomSource(0))
        assert found.theta == pytest.approx(theta) and found.epsilon == 1e9


def test_svt_falls_back_to_the_cap_when_it_never_fires() -> None:
    grid = sum_truncation.geometric_grid(64.0, 2.0, 7)
    found = sum_truncation.svt_threshold([0] * len(grid), 1000, grid, fraction=0.9, epsilon=1e9,
                                         rng=SeededRandomSource(0))
    assert found.index is None and found.theta == 64.0


@pytest.mark.slow
def test_svt_output_distribution_is_close_on_neighbours() -> None:
    """ε₁ = 0.5, 5,000 seeded runs on D and D + one large row: for every grid index with at least
    200 hits the frequency ratio is below e^{ε₁} plus 5 binomial standard errors."""
    grid = sum_truncation.geometric_grid(2.0**12, 2.0, 13)
    rng = np.random.default_rng(1)
    data = np.floor(rng.pareto(1.3, 60) * 10) + 1
    neighbour = np.append(data, 4000.0)
    runs, eps = 5_000, 0.5
    hist = []
    for values, seed in ((data, 10), (neighbour, 11)):
        source = SeededRandomSource(seed)
        counts = below(values, grid)
        picks = [sum_truncation.svt_threshold(counts, len(values), grid, fraction=0.9, epsilon=eps, rng=source).index
                 for _ in range(runs)]
        hist.append(np.bincount([len(grid) if p is None else p for p in picks], minlength=len(grid) + 1) / runs)
    for a, b in zip(*hist):
        if min(a, b) * runs >= 200:
            slack = 5 * math.sqrt(max(a, b) / runs) / min(a, b)
            assert max(a / b, b / a) <= math.exp(eps) * (1 + slack)


def test_svt_rejects_bad_parameters() -> None:
    grid = sum_truncation.geometric_grid(8.0, 2.0, 4)
    with pytest.raises(PrivacyParameterError, match="fraction"):
        sum_truncation.svt_threshold([0] * len(grid), 5, grid, fraction=1.0, epsilon=1.0)
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        sum_truncation.svt_threshold([0] * len(grid), 5, grid, fraction=0.5, epsilon=0.0)
    with pytest.raises(ShapeError, match="one count per grid value"):
        sum_truncation.svt_threshold([0], 5, grid, fraction=0.5, epsilon=1.0)


# ----------------------------------------------------------------------------- race to the top (r2t §7, §10)
ONE_TO_HUNDRED = np.arange(1, 101)
TAUS = [2, 4, 8, 16, 32, 64, 128]


def test_clip_sums_oracle() -> None:
    assert [int(np.minimum(ONE_TO_HUNDRED, t).sum()) for t in TAUS] == [199, 394, 772, 1480, 2704, 4384, 5050]


def test_r2t_scores_without_noise_match_the_digest() -> None:
    scales, penalties = sum_truncation.r2t_penalties(TAUS, epsilon=1.0, beta=0.1)
    assert scales.tolist() == [14, 28, 56, 112, 224, 448, 896]
    assert 7 * math.log(7 / 0.1) == pytest.approx(29.739466694345516)
    np.testing.assert_allclose(penalties,
                               [59.478933, 118.957867, 237.915734, 475.831467, 951.662934, 1903.325868, 3806.651737],
                               atol=1e-6)
    sums = np.array([199, 394, 772, 1480, 2704, 4384, 5050])
    np.testing.assert_allclose(sums - penalties, [139.521067, 275.042133, 534.084266, 1004.168533, 1752.337066,
                                                  2480.674132, 1243.348263], atol=1e-6)
    huge = sum_truncation.r2t_threshold(sums.tolist(), TAUS, epsilon=1e9, rng=SeededRandomSource(0))
    assert huge.theta == 128.0  # with ε → ∞ the penalties vanish and the full sum wins
    _, at_one = sum_truncation.r2t_penalties(TAUS, epsilon=1.0)
    assert TAUS[int(np.argmax(sums - at_one))] == 64  # the digest's noiseless argmax at ε = 1


@pytest.mark.slow
def test_r2t_on_zero_data_returns_the_floor_with_high_probability() -> None:
    source = SeededRandomSource(3)
    picks = [sum_truncation.r2t_threshold([0] * 7, TAUS, epsilon=1.0, beta=0.1, rng=source).theta for _ in range(200)]
    assert picks.count(2.0) >= 180  # P ≥ 1 − β = 0.9 each; 180 of 200 fails with probability < 1e-4


def test_r2t_grid_and_errors() -> None:
    assert sum_truncation.geometric_grid(128.0, 2.0, 8).tolist() == [1, 2, 4, 8, 16, 32, 64, 128]
    with pytest.raises(ShapeError):
        sum_truncation.r2t_threshold([1, 2], [1], epsilon=1.0)
    with pytest.raises(PrivacyParameterError):
        sum_truncation.r2t_penalties([1, 2], epsilon=1.0, beta=1.5)


@given(st.lists(st.integers(0, 1000), max_size=24), st.integers(0, 1200))
def test_theorem_1_recursive_second_phase_is_truncation(values: list[int], delta: int) -> None:
    """min_{0≤i≤N} (H_i + (N − i)Δ) = Σ min(v, Δ), H_i the sum of the i smallest values."""
    ordered = sorted(values)
    n = len(ordered)
    recursive = min(sum(ordered[:i]) + (n - i) * delta for i in range(n + 1))
    assert recursive == sum(min(v, delta) for v in values)


# ----------------------------------------------------------------------------- isotonic regression
@pytest.mark.parametrize(("y", "expected"),
                         [([3, 1, 2], [2, 2, 2]), ([1, 3, 2, 4], [1, 2.5, 2.5, 4]), ([5, 4, 3], [4, 4, 4])])
def test_pava_oracles(y: list[float], expected: list[float]) -> None:
    assert sum_truncation.isotonic_increasing(y).tolist() == expected


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=40))
def test_pava_is_monotone_and_keeps_the_sum(y: list[float]) -> None:
    out = sum_truncation.isotonic_increasing(y)
    assert np.all(np.diff(out) >= -1e-9 * (1 + np.abs(out[1:]))) and out.sum() == pytest.approx(sum(y), abs=1e-6)


def test_clipping_rejects_non_positive_thresholds_and_fractions_are_exact() -> None:
    with pytest.raises(ShapeError):
        sum_truncation.clipped([1.0], 0.0)
    grid = sum_truncation.geometric_grid(4.0, 2.0, 3)
    assert sum_truncation.svt_threshold(below(np.array([1.0, 1.0, 3.0]), grid), 3, grid, fraction=Fraction(1, 2),
                                    epsilon=1e9, rng=SeededRandomSource(0)).theta == 1.0


# ----------------------------------------------------------------------------- one grid convention
@given(st.floats(1e-6, 1e12, allow_nan=False, allow_infinity=False))
def test_svt_candidates_are_the_engines_previous_grid_bit_for_bit(bound: float) -> None:
    """The engine's SVT candidates U·1.2^(k−63), k = 0…63, as thresholds.svt_points wrote them."""
    previous = [bound * 1.2 ** (k - 64 + 1) for k in range(64)]
    grid = sum_truncation.geometric_grid(bound, thresholds.SVT_RATIO, thresholds.SVT_POINTS).tolist()
    assert grid == previous and grid[-1] == bound


@given(st.one_of(st.integers(1, 5000), st.integers(1, 2**53)))
def test_r2t_candidates_are_the_engines_previous_levels(units: int) -> None:
    """The engine's race-to-the-top levels ⌊U/2^(J−1−j)⌋, as thresholds.r2t_levels shifted them."""
    levels = min(24, units.bit_length())
    assert sum_truncation.halving_grid(units, thresholds.R2T_POINTS) == [max(1, units >> (levels - 1 - j))
                                                                         for j in range(levels)]


def test_one_grid_implementation() -> None:
    """The selectors' candidates come from sum_truncation.geometric_grid alone: neither module keeps
    a second grid of its own convention."""
    for name in ("svt_grid", "r2t_grid"):
        assert not hasattr(sum_truncation, name)
    for name in ("svt_points", "r2t_levels"):
        assert not hasattr(thresholds, name)
    with pytest.raises(ShapeError):
        sum_truncation.geometric_grid(1.0, 1.0, 3)
    with pytest.raises(ShapeError):
        sum_truncation.halving_grid(2**53 + 1, 24)
