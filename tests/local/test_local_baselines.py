"""Fixed LDP mechanisms: their definitions, their privacy, and the research digest's variance oracles (§10)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql import local
from dpsql.errors import DomainTooLargeError, PrivacyParameterError, ShapeError, UnsupportedStrategyError
from dpsql.local import LocalStrategy, privacy_ratio
from dpsql.matrix import workloads

BUILDERS = {
    "randomized_response": lambda n, e: local.randomized_response(n, epsilon=e),
    "hadamard": lambda n, e: local.hadamard(n, epsilon=e),
    "hadamard_high_privacy": lambda n, e: local.hadamard(n, epsilon=e, form="high_privacy"),
    "hierarchical": lambda n, e: local.hierarchical(n, epsilon=e),
    "hierarchical_high_privacy": lambda n, e: local.hierarchical(n, epsilon=e, form="high_privacy"),
    "subset_selection": lambda n, e: local.subset_selection(min(n, 10), epsilon=e),
    "rappor": lambda n, e: local.rappor(min(n, 8), epsilon=e),
    "fourier": lambda n, e: local.fourier(2 ** max(1, n.bit_length() - 1), epsilon=e),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@given(n=st.integers(1, 70), epsilon=st.floats(0.01, 8.0))
@pytest.mark.slow
def test_every_baseline_is_epsilon_ldp(name: str, n: int, epsilon: float) -> None:
    strategy = BUILDERS[name](n, epsilon)
    np.testing.assert_allclose(strategy.Q.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    assert strategy.Q.min() > 0
    assert privacy_ratio(strategy.Q) <= math.exp(epsilon) * (1 + 1e-12)


# (n, ε, per-user variance) of randomized response on the histogram, exact to 17 digits (digest §10.1)
RR_HISTOGRAM = [(5, 1.0, 11.429751401723929), (8, 0.5, 154.64834151928924), (64, 2.0, 118.49624167384691),
                (512, 1.0, 89208.724222557961)]


@pytest.mark.parametrize(("n", "epsilon", "expected"), RR_HISTOGRAM)
def test_randomized_response_closed_form(n: int, epsilon: float, expected: float) -> None:
    rr = local.randomized_response(n, epsilon=epsilon)
    e = math.exp(epsilon)
    closed_form = (n - 1) * (n / (e - 1) ** 2 + 2 / (e - 1))  # Ex 3.7
    assert math.isclose(closed_form, expected, rel_tol=1e-14)
    z = local.per_user_variance(workloads.Identity(n), rr)
    np.testing.assert_allclose(z, expected, rtol=1e-9)  # worst = average, by symmetry


def test_issue_oracle_randomized_response_at_512() -> None:
    rr = local.randomized_response(n=512, epsilon=1.0)
    assert math.isclose(local.worst_case_variance(workloads.Identity(512), rr), 89208.724222557961, rel_tol=1e-9)
    assert math.isclose(local.sample_complexity(workloads.Identity(512), rr, alpha=0.01), 17423.578949718352,
                        rel_tol=1e-9)


# Hadamard on the histogram, per-user worst case (digest §10.2; 10-12 significant digits given)
HADAMARD = [(7, 1.0, "high_privacy", 25.3842061921), (8, 1.0, "high_privacy", 30.5542699845),
            (15, 0.5, "high_privacy", 228.6469706984), (512, 0.5, "high_privacy", 8515.7899119293),
            (8, 1.0, "general", 41.2370306075), (512, 1.0, "general", 3669.9417314990),
            (512, 2.0, "general", 927.8635876130), (512, 4.0, "general", 103.3396287162)]


@pytest.mark.parametrize(("n", "epsilon", "form", "expected"), HADAMARD)
def test_hadamard_oracles(n: int, epsilon: float, form: str, expected: float) -> None:
    strategy = local.hadamard(n, epsilon=epsilon, form=form)  # type: ignore[arg-type]
    assert math.isclose(local.worst_case_variance(workloads.Identity(n), strategy), expected, rel_tol=1e-10)


def test_hadamard_average_and_output_counts() -> None:
    strategy = local.hadamard(8, epsilon=1.0, form="high_privacy")
    assert strategy.m == 16 and local.hadamard(7, epsilon=1.0, form="high_privacy").m == 8
    assert math.isclose(local.average_variance(workloads.Identity(8), strategy), 30.2748461790, rel_tol=1e-10)
    # the forms coincide while e^ε ≤ 2 and differ above
    np.testing.assert_array_equal(local.hadamard(20, epsilon=0.6).Q,
                                  local.hadamard(20, epsilon=0.6, form="high_privacy").Q)
    assert local.hadamard(20, epsilon=3.0).m != local.hadamard(20, epsilon=3.0, form="high_privacy").m


def test_hierarchical_oracle() -> None:
    # digest §6 and §10.4: n = 128, ε = 1 has levels of 128, 32, 8, 2 buckets, m = 340; optimal-V worst case on Prefix
    strategy = local.hierarchical(128, epsilon=1.0)
    assert strategy.m == 256 + 64 + 16 + 4
    assert math.isclose(local.worst_case_variance(workloads.Prefix(128), strategy), 5466.13182905848, rel_tol=1e-9)


# worst-case sample complexity at α = 0.01, n = 512 (digest §10.3, rounded to 0.1)
TABLE_10_3 = [("Prefix", 1.0, "hierarchical", 6916.7), ("AllRange", 4.0, "hadamard", 358.5),
              ("AllRange", 4.0, "randomized_response", 1843.5), ("Identity", 1.0, "fourier", 467.2)]


@pytest.mark.parametrize(("workload", "epsilon", "name", "expected"), TABLE_10_3)
def test_sample_complexity_table(workload: str, epsilon: float, name: str, expected: float) -> None:
    W = getattr(workloads, workload)(512)
    strategy = BUILDERS[name](512, epsilon)
    assert local.sample_complexity(W, strategy, alpha=0.01) == pytest.approx(expected, abs=0.05)


def test_rappor_and_subset_selection_match_their_definitions() -> None:
    n, epsilon = 4, 1.3
    half = math.exp(epsilon / 2)
    rappor = local.rappor(n, epsilon=epsilon)
    for o, u in itertools.product(range(2**n), range(n)):
        bits = [(o >> j) & 1 for j in range(n)]
        agree = sum(b == (j == u) for j, b in enumerate(bits))
        assert math.isclose(rappor.Q[o, u], half**agree / (1 + half) ** n, rel_tol=1e-12)
    subsets = local.subset_selection(5, epsilon=epsilon, d=2)
    assert subsets.m == math.comb(5, 2)
    assert set(np.round(subsets.Q[:, 0] / subsets.Q[:, 0].min(), 9)) == {1.0, round(math.exp(epsilon), 9)}


def test_fourier_of_low_order_supports_marginals_but_not_the_histogram() -> None:
    strategy = local.fourier(8, epsilon=1.0, order=1)
    assert strategy.m == 2 * 4  # ∅ and the three single attributes
    one_way = workloads.Kron([workloads.Identity(2), workloads.Total(2), workloads.Total(2)])
    assert local.worst_case_variance(one_way, strategy) > 0
    with pytest.raises(UnsupportedStrategyError, match="row space"):
        local.worst_case_variance(workloads.Identity(8), strategy)


def test_bad_parameters_are_refused() -> None:
    for epsilon in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(PrivacyParameterError, match="epsilon must be a finite number > 0"):
            local.randomized_response(4, epsilon=epsilon)
    with pytest.raises(ShapeError, match="power of two"):
        local.fourier(6, epsilon=1.0)
    with pytest.raises(DomainTooLargeError):
        local.rappor(40, epsilon=1.0)
    with pytest.raises(ShapeError, match="positive integer"):
        local.hadamard(0, epsilon=1.0)


def test_a_strategy_that_breaks_the_ratio_constraint_is_refused() -> None:
    Q = np.array([[0.9, 0.1], [0.1, 0.9]])  # ratio 9 > e^1
    with pytest.raises(PrivacyParameterError, match="row 0 has max/min = 9"):
        LocalStrategy(Q=Q, epsilon=1.0, name="too revealing")
    with pytest.raises(ShapeError, match="sum to 1"):
        LocalStrategy(Q=np.array([[0.5, 0.5], [0.4, 0.5]]), epsilon=1.0, name="not stochastic")
