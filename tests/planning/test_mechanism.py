"""The matrix mechanism: unbiased answers whose spread matches the predicted variances."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dpsql import strategies
from dpsql.errors import DataError, DpsqlWarning, PrivacyParameterError, ShapeError, UnsupportedStrategyError
from dpsql.matrix import workloads
from dpsql.noise import SeededRandomSource
from dpsql.planning import accuracy, mechanism

TRIALS = 2000


def _batch() -> tuple[workloads.Workload, workloads.Workload, np.ndarray]:
    W = workloads.VStack([
        workloads.Kron([workloads.AllRange(6), workloads.Identity(2)]),
        workloads.Kron([workloads.Prefix(6), workloads.Total(2)]),
    ])
    A = strategies.kron([strategies.hierarchical(6, 2), strategies.identity(2)])
    x = np.array([5, 0, 12, 3, 40, 41, 7, 0, 0, 1, 9, 2])
    return W, A, x


@pytest.mark.slow
@pytest.mark.parametrize(("budget", "seed"), [({"rho": 0.25}, 11), ({"epsilon": 0.7}, 12)])
def test_answers_are_unbiased_with_the_predicted_variance(budget: dict[str, float], seed: int) -> None:
    W, A, x = _batch()
    truth = W @ x
    rng = SeededRandomSource(seed)
    runs = [mechanism.answer(W, mechanism.measure(A, x, rng=rng, **budget)) for _ in range(TRIALS)]
    errors = np.array([r.values for r in runs]) - truth
    predicted = runs[0].variances
    # Standardised squared error per trial: E[S] = m exactly when the variances are right. The
    # trials are iid, so the mean of S is within 6 estimated standard errors of m except with
    # probability ~2e-9 (CLT); a variance formula off by a few percent fails.
    S = np.sum(errors**2 / predicted, axis=1)
    assert abs(S.mean() - W.shape[0]) <= 6 * S.std(ddof=1) / np.sqrt(TRIALS)
    # Bias: each query's mean error is within 6 standard errors of zero (P ≈ 2e-9 per query).
    assert np.all(np.abs(errors.mean(axis=0)) <= 6 * np.sqrt(predicted / TRIALS))
    # Per query, the empirical variance is within 1 ± 6·sqrt((2 + κ)/T), κ = 3 bounding the excess
    # kurtosis of sums of Laplace or Gaussian noise.
    ratio = errors.var(axis=0, ddof=1) / predicted
    assert np.all(np.abs(ratio - 1) <= 6 * np.sqrt(5 / TRIALS))


def test_reported_variance_uses_the_exact_discrete_noise() -> None:
    W, A, x = _batch()
    release = mechanism.measure(A, x, rho=Fraction(1, 2), rng=SeededRandomSource(1))
    assert release.rho == Fraction(1, 2)  # σ² = Δ₂²/(2ρ) = Δ₂² is rational already: nothing rounded
    assert release.noise_scale == A.max_column_power_sum(2) == 4  # H2(6) has 4 levels
    unit = accuracy.per_query_variance(W, A)  # at σ² = Δ₂²
    np.testing.assert_allclose(mechanism.answer(W, release).variances, unit * release.noise_variance / 4)
    small = mechanism.measure(A, x, rho=8, rng=SeededRandomSource(1))
    assert small.noise_scale == Fraction(1, 4)
    assert small.noise_variance == pytest.approx(0.2150126751, rel=1e-9)  # exact-samplers §3.2: Var < σ²


def test_spent_budget_never_exceeds_the_request() -> None:
    _, A, x = _batch()
    for epsilon in (0.1, 1 / 3, 2.0):
        release = mechanism.measure(A, x, epsilon=epsilon, rng=SeededRandomSource(2))
        assert release.epsilon is not None and release.epsilon <= Fraction(epsilon)
        assert float(release.epsilon) == pytest.approx(epsilon, rel=1e-6)
        assert release.noise_scale >= Fraction(3) / Fraction(epsilon) * (1 - Fraction(1, 10**6))


def test_noise_free_round_trip_recovers_the_data() -> None:
    for A in [strategies.hierarchical(11, 3), strategies.wavelet(11),
              strategies.kron([strategies.wavelet(5), strategies.hierarchical(3)])]:
        x = np.arange(A.shape[1], dtype=float) ** 2
        exact = mechanism.Measurement(strategy=A, y=A @ x, noise="gaussian", noise_scale=Fraction(1),
                                      noise_variance=1.0)
        np.testing.assert_allclose(mechanism.reconstruct(exact), x, atol=1e-8)


def test_lsmr_path_agrees_with_the_dense_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    A = strategies.hierarchical(40, 2)
    y = np.random.default_rng(3).normal(size=A.shape[0])
    dense = mechanism.pseudo_inverse(A) @ y
    monkeypatch.setattr(mechanism, "DENSE_SOLVE_LIMIT", 10)
    iterative = mechanism.pseudo_inverse(A)
    assert isinstance(iterative, mechanism.LeastSquares)
    np.testing.assert_allclose(iterative @ y, dense, atol=1e-7)


def test_real_valued_strategy_is_rounded_to_integers() -> None:
    rng = np.random.default_rng(4)
    A = workloads.Explicit(rng.normal(size=(8, 5)))
    rounded = mechanism.integral_strategy(A)
    assert rounded.integral and rounded.shape[1] == 5
    W = workloads.AllRange(5)
    assert accuracy.expected_error(W, rounded) == pytest.approx(accuracy.expected_error(W, A), rel=1e-4)
    kron = mechanism.integral_strategy(workloads.Kron([A, workloads.Weighted(0.5, workloads.Identity(2))]))
    assert kron.integral
    release = mechanism.measure(A, np.arange(5), rho=1.0, rng=SeededRandomSource(5))
    assert release.strategy.integral and np.all(np.mod(release.y, 1) == 0)


def test_stacked_strategy_keeps_its_blocks_and_relative_weights_when_rounded() -> None:
    marginal = lambda a, b: workloads.Kron([a, b])  # noqa: E731
    blocks = [workloads.Weighted(0.3, marginal(workloads.Identity(3), workloads.Total(4))),
              workloads.Weighted(1.7, marginal(workloads.Total(3), workloads.Identity(4))),
              workloads.Weighted(1e-3, workloads.Identity(12))]
    A = workloads.VStack(blocks)
    rounded = mechanism.integral_strategy(A)
    assert rounded.integral and isinstance(rounded, workloads.VStack) and len(rounded.blocks) == 3
    bases = [b.base if isinstance(b, workloads.Weighted) else b for b in rounded.blocks]
    assert all(isinstance(b, (workloads.Kron, workloads.Identity)) for b in bases)  # no dense matrix
    weights = [b.weight if isinstance(b, workloads.Weighted) else 1.0 for b in rounded.blocks]
    assert weights[0] / weights[1] == pytest.approx(0.3 / 1.7, rel=2.0**-19)
    assert weights[2] / weights[1] == pytest.approx(1e-3 / 1.7, rel=1e-3)
    W = workloads.Kron([workloads.AllRange(3), workloads.AllRange(4)])
    # the smallest weight is rounded by at most 1/2 unit, and the error scales at most as weight⁻²
    assert accuracy.expected_error(W, rounded) == pytest.approx(accuracy.expected_error(W, A), rel=1.0 / weights[2])
    tiny = mechanism.integral_strategy(
        workloads.VStack([workloads.Identity(4), workloads.Weighted(1e-9, workloads.Total(4))]))
    weights = [getattr(b, "weight", 1.0) for b in tiny.blocks]  # type: ignore[attr-defined]
    assert weights[1] == 2.0**20 and weights[0] == pytest.approx(2.0**20 * 1e9, rel=2.0**-50)  # tiny keeps 20 bits


def test_unsupported_strategy_is_refused() -> None:
    x = np.arange(4)
    release = mechanism.measure(workloads.Total(4), x, rho=1.0, rng=SeededRandomSource(6))
    with pytest.raises(UnsupportedStrategyError, match="W A⁺ A ≠ W"):
        mechanism.answer(workloads.Prefix(4), release)
    assert mechanism.answer(workloads.Total(4), release).values.shape == (1,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": -1.0}, "epsilon must be a finite number > 0; got -1.0"),
        ({"rho": 0}, "rho must be a finite number > 0; got 0"),
        ({"rho": float("nan")}, "rho must be a finite number > 0"),
        ({"epsilon": "1"}, "epsilon must be a finite number > 0"),
        ({}, "exactly one of epsilon"),
        ({"epsilon": 1.0, "rho": 1.0}, "exactly one of epsilon"),
    ],
)
def test_bad_privacy_parameters(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PrivacyParameterError, match=message):
        mechanism.measure(strategies.identity(3), np.ones(3), **kwargs)  # type: ignore[arg-type]


def test_bad_data_vectors() -> None:
    with pytest.raises(ShapeError, match="one entry per cell \\(3\\)"):
        mechanism.measure(strategies.identity(3), np.ones(4), rho=1.0)
    with pytest.raises(DataError, match="integer counts"):
        mechanism.measure(strategies.identity(3), np.array([1.5, 0, 0]), rho=1.0)


def test_large_epsilon_warns() -> None:
    with pytest.warns(DpsqlWarning, match="above 5"):
        mechanism.measure(strategies.identity(3), np.ones(3), epsilon=8.0, rng=SeededRandomSource(7))


def test_exact_product_beyond_float_precision() -> None:
    """Ã x stays exact when max|Ã|·Σ|x| passes 2^53 (large sums in small quanta, 20-bit strategies)."""
    rng = np.random.default_rng(8)
    A = workloads.Explicit(rng.integers(-2**20, 2**20, size=(7, 5)).astype(float))
    for x in (rng.integers(-10**13, 10**13, size=5), rng.integers(0, 2**40, size=5), np.zeros(5, dtype=np.int64)):
        expected = [sum(int(a) * int(b) for a, b in zip(row, x)) for row in A.matrix.astype(np.int64)]
        assert [int(v) for v in mechanism.exact_product(A, x)] == expected
    release = mechanism.measure(A, rng.integers(0, 2**40, size=5), rho=1.0, rng=SeededRandomSource(9))
    assert release.y.shape == (7,) and np.all(np.isfinite(release.y))


def _reference_product(A: workloads.Workload, x: np.ndarray) -> list[int]:
    """Ã x in Python integers from the dense integer matrix (exact for entries below 2^53)."""
    dense = [[int(v) for v in row] for row in A.dense()]
    return [sum(a * int(b) for a, b in zip(row, x)) for row in dense]


def test_structured_exact_product_with_entries_far_beyond_float_precision() -> None:
    """A stack of weighted Kronecker products whose dense entries reach 2^70: computed block by block
    and axis by axis, every answer is the exact integer."""
    rng = np.random.default_rng(12)
    factor = lambda r, n: workloads.Explicit(rng.integers(-2**20, 2**20, size=(r, n)).astype(float))  # noqa: E731
    A = workloads.VStack([workloads.Weighted(float(2**30 + 7), workloads.Kron([factor(3, 4), factor(2, 5)])),
                          workloads.Kron([workloads.Identity(4), workloads.Total(5)]),
                          workloads.Weighted(3.0, workloads.Kron([factor(2, 4), workloads.Identity(5)]))])
    x = rng.integers(0, 10**9, size=20)
    expected = [(2**30 + 7) * v for v in _reference_product(workloads.Kron(A.blocks[0].base.factors), x)]  # type: ignore[attr-defined]
    expected += _reference_product(A.blocks[1], x) + [3 * v for v in _reference_product(A.blocks[2].base, x)]  # type: ignore[attr-defined]
    assert [int(v) for v in mechanism.exact_product(A, x)] == expected


def test_sensitivity_beyond_exact_floats_is_rounded_up() -> None:
    assert mechanism.integer_sensitivity(12.0) == 12
    huge = float(2**60)
    assert 2**60 <= mechanism.integer_sensitivity(huge) <= 2**60 * (1 + 2.0**-39)
    with pytest.raises(Exception, match="non-integer sensitivity"):
        mechanism.integer_sensitivity(12.5)


def test_a_checked_calibration_is_not_computed_again_when_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    """engine.prepare calibrates every measurement before the charge; measure() reuses the rounded
    strategy and its sensitivity instead of recomputing them (same object, same noise)."""
    A = workloads.Kron([workloads.Explicit(np.array([[0.5, 0.25], [1.0, 0.0]])), workloads.Prefix(3)])
    checked = mechanism.calibrate(A, epsilon=1.0, max_contribution=3)
    calls: list[int] = []
    rounded = mechanism.integral_strategy
    monkeypatch.setattr(mechanism, "integral_strategy", lambda *a, **k: calls.append(1) or rounded(*a, **k))
    again = mechanism.calibrate(A, epsilon=1.0, max_contribution=3)
    release = mechanism.measure(A, np.arange(6), epsilon=1.0, max_contribution=3, rng=SeededRandomSource(1))
    assert calls == [] and again.strategy is checked.strategy and release.strategy is checked.strategy
    assert again == checked and release.noise_scale == checked.scale
    assert checked.scale == 3 * checked.strategy.sensitivity("l1")  # Δ₁ of the rounded strategy, times c, at ε = 1


def _least_squares_row(A: np.ndarray, w: np.ndarray) -> list[Fraction]:
    """w (AᵀA)⁻¹ Aᵀ in exact rational arithmetic (A an integer matrix of full column rank)."""
    n = A.shape[1]
    gram = (A.T @ A).astype(np.int64)
    rows = [[Fraction(int(v)) for v in gram[i]] + [Fraction(int(w[i]))] for i in range(n)]  # solve (AᵀA) u = w
    for c in range(n):
        pivot = next(r for r in range(c, n) if rows[r][c] != 0)
        rows[c], rows[pivot] = rows[pivot], rows[c]
        rows[c] = [v / rows[c][c] for v in rows[c]]
        for r in range(n):
            if r != c and rows[r][c] != 0:
                rows[r] = [a - rows[r][c] * b for a, b in zip(rows[r], rows[c])]
    u = [row[n] for row in rows]
    return [sum((u[j] * int(A[k, j]) for j in range(n)), Fraction(0)) for k in range(A.shape[0])]


@settings(max_examples=25, deadline=None)
@given(axes=st.lists(st.tuples(st.integers(2, 4), st.integers(1, 16)), min_size=3, max_size=4), seed=st.integers(0, 99))
@example(axes=[(4, 1), (4, 1), (4, 1), (4, 1)], seed=0)
def test_kronecker_answers_are_the_exact_least_squares_answers_however_heavy_the_total_rows(
        axes: list[tuple[int, int]], seed: int) -> None:
    """Integer Kronecker strategies as HDMM-Kron's are rounded (KRON_FACTOR_BITS = 12): per axis,
    light identity rows (weight 1–16) under a total row of weight 4,096. A total over all cells
    then reads mostly the heavy rows, while each cell estimate carries the light rows' noise,
    (4096/light)^axes times larger. Each answer W Ã⁺ y must equal its exact rational value to
    1e-6 of its reported standard error; through the cell estimate x̂ = Ã⁺ y its float64
    rounding, cancelled by the sum, made errors of up to 600 standard errors (issue 29 §5)."""
    factors = [np.vstack([light * np.eye(n), np.full((1, n), 4096)]) for n, light in axes] + [np.eye(2)]
    A = workloads.Kron([workloads.Explicit(f) for f in factors])
    W = workloads.Kron([workloads.Explicit(np.ones((1, n))) for n, _ in axes] + [workloads.Explicit(np.eye(2))])
    z = [int(v) for v in np.random.default_rng(seed).integers(-2**53, 2**53, A.shape[0])]  # noise of scale ~2^52
    release = mechanism.Measurement(strategy=A, y=np.array(z, dtype=np.float64), noise="gaussian",
                                    noise_scale=Fraction(2**104), noise_variance=2.0**104)
    got = mechanism.answer(W, release)
    totals = [_least_squares_row(f, np.ones(f.shape[1])) for f in factors[:-1]]
    for k, selector in enumerate(np.eye(2)):
        coefficients = [Fraction(1)]
        for row in [*totals, [Fraction(int(v)) for v in selector]]:
            coefficients = [a * b for a in coefficients for b in row]
        exact = sum(c * v for c, v in zip(coefficients, z))
        assert abs(got.values[k] - float(exact)) <= 1e-6 * got.stddevs[k], (k, got.values[k], float(exact))
