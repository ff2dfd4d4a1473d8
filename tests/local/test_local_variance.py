"""Variances of the factorization mechanism: closed forms, identities of the paper, and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql import local
from dpsql.local import LocalStrategy
from dpsql.local.factorization import initial_strategy
from dpsql.local.protocol import publish
from dpsql.local.simulate import simulate
from dpsql.local.variance import Factorization
from dpsql.matrix import workloads


def random_strategy(n: int, epsilon: float, seed: int, m: int | None = None) -> LocalStrategy:
    """A random feasible strategy (the optimizer's random start): a generic point of the LDP polytope."""
    Q = initial_strategy(n, epsilon=epsilon, m=m or 4 * n, rng=np.random.default_rng(seed))
    return LocalStrategy(Q=Q, epsilon=epsilon, name="random")


def explicit_per_user(W: np.ndarray, strategy: LocalStrategy) -> np.ndarray:
    """Thm 3.4 term by term with the dense optimal V: z_u = Σ_i v_iᵀDiag(q_u)v_i − (v_iᵀq_u)²."""
    V = local.reconstruction(W, strategy)
    Q = strategy.Q
    return np.array([sum(V[i] @ (Q[:, u] * V[i]) - (V[i] @ Q[:, u]) ** 2 for i in range(V.shape[0]))
                     for u in range(Q.shape[1])])


def test_randomized_response_reconstruction_is_its_inverse() -> None:
    # Ex 3.3: V* = Q⁻¹ = [(e^ε + n − 2) on the diagonal, −1 off it] / (e^ε − 1)
    n, epsilon = 6, 1.0
    e = math.exp(epsilon)
    expected = (np.full((n, n), -1.0) + (e + n - 1) * np.eye(n)) / (e - 1)
    np.testing.assert_allclose(local.reconstruction(np.eye(n), local.randomized_response(n, epsilon=epsilon)),
                               expected, rtol=1e-12, atol=1e-12)


@given(n=st.integers(2, 8), epsilon=st.floats(0.2, 5.0), seed=st.integers(0, 2**32 - 1))
def test_gram_only_variance_matches_the_explicit_reconstruction(n: int, epsilon: float, seed: int) -> None:
    W = np.random.default_rng(seed).normal(size=(5, n))
    strategy = random_strategy(n, epsilon, seed)
    np.testing.assert_allclose(local.per_user_variance(W, strategy), explicit_per_user(W, strategy), rtol=1e-8,
                               atol=1e-8)


@given(n=st.integers(1, 10), epsilon=st.floats(0.1, 6.0), seed=st.integers(0, 2**32 - 1))
def test_total_count_has_loss_n_and_no_variance_for_every_strategy(n: int, epsilon: float, seed: int) -> None:
    # digest §10.1 item 7: X1 = 1, so L(Q) = 1ᵀX⁺1 = n, V* = 1ᵀ and the variance is 0 (N is known)
    strategy = random_strategy(n, epsilon, seed)
    parts = Factorization.of(strategy)
    assert float(np.ones(n) @ parts.X_pinv @ np.ones(n)) == pytest.approx(n, rel=1e-9)
    np.testing.assert_allclose(local.reconstruction(workloads.Total(n), strategy), 1.0, rtol=1e-9)
    np.testing.assert_allclose(local.per_user_variance(workloads.Total(n), strategy), 0.0, atol=1e-8)


@given(n=st.integers(2, 8), epsilon=st.floats(0.2, 4.0), seed=st.integers(0, 2**32 - 1))
def test_loss_identity_and_the_bounds_of_section_5(n: int, epsilon: float, seed: int) -> None:
    W = workloads.AllRange(n)
    strategy = random_strategy(n, epsilon, seed)
    G = W.gram().dense()
    L = float(np.sum(Factorization.of(strategy).X_pinv * G))
    average, worst = local.average_variance(W, strategy), local.worst_case_variance(W, strategy)
    assert average == pytest.approx((L - np.trace(G)) / n, rel=1e-9)          # Thm 3.9 / 3.11
    assert average <= worst * (1 + 1e-12)                                       # Thm 5.1, left
    assert worst <= math.exp(epsilon) * (average + np.trace(G) / n) * (1 + 1e-12)   # Thm 5.1, right
    nuclear = np.sqrt(np.maximum(np.linalg.eigvalsh(G), 0)).sum()
    assert nuclear**2 / math.exp(epsilon) <= L * (1 + 1e-9)                    # Thm 5.6
    assert local.lower_bound(W, epsilon=epsilon) <= worst * (1 + 1e-9)


def test_histogram_lower_bound_oracle() -> None:
    # Ex 5.8 / digest §10.1 item 3: (1/α)(e^-ε − 1/n) at n = 512, ε = 1, α = 0.01 (p = n)
    bound = local.lower_bound(workloads.Identity(512), epsilon=1.0) / (512 * 0.01)
    assert bound == pytest.approx(36.592631617144232, rel=1e-10)


# digest §10.1 item 8: x = [10, 20, 5, 0, 0], Prefix, randomized response at ε = 1
EXAMPLE_X = np.array([10, 20, 5, 0, 0])


def test_prefix_example_oracles() -> None:
    rr = local.randomized_response(5, epsilon=1.0)
    z = local.per_user_variance(workloads.Prefix(5), rr)
    np.testing.assert_allclose(z, [12.5937048155, 10.8477746949, 10.2657979880, 10.8477746949, 12.5937048155],
                               rtol=1e-10)
    assert local.total_variance(workloads.Prefix(5), rr, EXAMPLE_X) == pytest.approx(394.2215319916438, rel=1e-12)
    np.testing.assert_allclose(local.answer_variances(workloads.Prefix(5), rr, EXAMPLE_X),
                               [85.2460502, 129.324017, 111.864716, 67.786749, 0.0], rtol=1e-8, atol=1e-8)
    assert local.total_variance(np.eye(5), rr, EXAMPLE_X) == pytest.approx(400.04129906033753, rel=1e-12)


@given(n=st.integers(2, 7), epsilon=st.floats(0.3, 4.0), seed=st.integers(0, 2**32 - 1))
def test_answer_variances_equal_the_dense_formula(n: int, epsilon: float, seed: int) -> None:
    # Var[(V y)_i] = (S x)_i with S = (V∘V)Q − W∘W (§3.1)
    rng = np.random.default_rng(seed)
    W, x = rng.normal(size=(4, n)), rng.integers(0, 50, size=n)
    strategy = random_strategy(n, epsilon, seed)
    V = local.reconstruction(W, strategy)
    S = (V**2) @ strategy.Q - W**2
    np.testing.assert_allclose(local.answer_variances(W, strategy, x), S @ x, rtol=1e-7, atol=1e-7)


def monte_carlo(strategy: LocalStrategy, W: np.ndarray, x: np.ndarray, trials: int, seed: int) -> np.ndarray:
    """Answers W x̂ of `trials` collection rounds: y = Σ_u Multinomial(x_u, q_u), vectorised over rounds."""
    rng = np.random.default_rng(seed)
    Y = sum(rng.multinomial(int(x[u]), strategy.Q[:, u], size=trials) for u in np.flatnonzero(x))
    return np.asarray(Y, dtype=np.float64) @ (W @ Factorization.of(strategy).estimator()).T


def test_simulation_draws_the_reports_of_each_cell() -> None:
    # E[y] = Q x and 1ᵀy = N; 4000 rounds, 6 standard errors per output (chance < 1e-7 overall)
    strategy = local.hadamard(6, epsilon=1.0)
    published, x = publish(strategy), np.array([7, 0, 30, 2, 0, 11])
    rng = np.random.default_rng(7)
    Y = np.array([simulate(published, x, rng=rng) for _ in range(4000)])
    assert np.all(Y.sum(axis=1) == x.sum())
    Q = published.strategy.Q
    se = np.sqrt((Q * (1 - Q)) @ x / 4000)  # Var[y_o] = Σ_u x_u q_ou (1 − q_ou)
    np.testing.assert_array_less(np.abs(Y.mean(axis=0) - Q @ x), 6 * se)


@pytest.mark.parametrize(("strategy", "workload", "x"), [
    (local.randomized_response(5, epsilon=1.0), np.tril(np.ones((5, 5))), EXAMPLE_X),
    (local.hierarchical(8, epsilon=2.0), workloads.AllRange(8).dense(), np.array([40, 0, 3, 9, 0, 0, 25, 1])),
], ids=["rr-prefix", "hierarchical-allrange"])
def test_estimator_is_unbiased_and_its_variance_matches_the_formula(strategy: LocalStrategy, workload: np.ndarray,
                                                                    x: np.ndarray) -> None:
    trials = 200_000
    answers = monte_carlo(strategy, workload, x, trials, seed=20240611)
    predicted = local.answer_variances(workload, strategy, x)
    mean, variance = answers.mean(axis=0), answers.var(axis=0, ddof=1)
    # Mean: 6 standard errors (Gaussian tail 2e-9 per query). Queries with zero predicted variance are exact.
    np.testing.assert_array_less(np.abs(mean - workload @ x), 6 * np.sqrt(predicted / trials) + 1e-9)
    # Variance: 6 estimated standard errors of the sample variance, SE² ≈ (μ₄ − σ⁴)/T (chance < 1e-6 overall);
    # at 200,000 rounds that is about 2% of the variance, so a formula off by 5% fails.
    centred = answers - mean
    se = np.sqrt(np.maximum((centred**4).mean(axis=0) - variance**2, 0) / trials)
    np.testing.assert_array_less(np.abs(variance - predicted), 6 * se + 1e-9)
    if strategy.name == "randomized response":  # the digest's theoretical total for this example
        assert predicted.sum() == pytest.approx(394.2215319916438, rel=1e-8)
