"""The accountant: exact composition, the ρ → (ε, δ) conversions against known values, and the in-memory budget."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql.budget.accounting import (
    Budget,
    PrivacyCost,
    delta_from_rho,
    epsilon_from_rho,
    epsilon_from_rho_simple,
    exact,
    gaussian_delta,
    gaussian_epsilon,
    parallel,
    price,
    rho_from_epsilon,
    sequential,
)
from dpsql.errors import BudgetExhaustedError, PrivacyParameterError


def test_sequential_composition_is_exact() -> None:
    budget = Budget(epsilon=1.0)
    for _ in range(4):
        budget.charge(PrivacyCost(epsilon=0.25))
    assert budget.spent == 1.0 and budget.remaining == 0.0
    with pytest.raises(BudgetExhaustedError, match="Nothing was run or charged"):
        budget.charge(PrivacyCost(epsilon=0.01))
    assert budget.spent == 1.0


def test_pure_costs_charge_a_rho_budget_as_epsilon_squared_over_two() -> None:
    budget = Budget(rho=0.5)
    budget.charge(PrivacyCost(epsilon=0.6))
    assert budget.spent == pytest.approx(0.18, abs=1e-12)
    budget.charge(PrivacyCost(rho=0.32))
    assert budget.remaining == pytest.approx(0.0, abs=1e-12)


def test_rho_cost_on_an_epsilon_budget_is_refused() -> None:
    with pytest.raises(PrivacyParameterError, match="has no pure ε-DP cost"):
        Budget(epsilon=1.0).charge(PrivacyCost(rho=0.1))


@pytest.mark.parametrize("kwargs", [{}, {"epsilon": 1.0, "rho": 1.0}, {"epsilon": -1.0}, {"rho": float("inf")}])
def test_bad_costs(kwargs: dict[str, float]) -> None:
    with pytest.raises(PrivacyParameterError):
        PrivacyCost(**kwargs)
    with pytest.raises(PrivacyParameterError):
        Budget(**kwargs)



def test_a_cost_is_any_real_number_kept_as_a_float() -> None:
    import numpy as np

    assert PrivacyCost(epsilon=Fraction(1, 2)).epsilon == 0.5
    assert isinstance(PrivacyCost(rho=np.float32(0.25)).rho, float)
    assert PrivacyCost(epsilon=np.int64(2)).exact == 2 and PrivacyCost(epsilon=Fraction(1)).describe() == "ε=1"


@pytest.mark.parametrize(("value", "message"), [
    ("1", r"epsilon must be a real number > 0 \(an int, float or Fraction\); got str '1'"),
    (True, r"epsilon must be a real number > 0 .*; got bool True"),
    (Fraction(-1, 2), r"epsilon must be a finite number > 0; got Fraction\(-1, 2\)"),
])
def test_a_cost_that_is_not_a_positive_real_number_is_named(value: object, message: str) -> None:
    with pytest.raises(PrivacyParameterError, match=message):
        PrivacyCost(epsilon=value)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- composition
def test_costs_are_the_decimals_written() -> None:
    assert exact(0.1) == Fraction(1, 10) and exact(2.5e-7) == Fraction(1, 4_000_000) and exact(3) == 3
    assert PrivacyCost(epsilon=0.3).exact == Fraction(3, 10)


def test_sequential_composition_adds_epsilons_and_rhos() -> None:
    # 0.1 summed ten times in floats is 0.9999999999999999
    assert sequential([PrivacyCost(epsilon=0.1)] * 10) == PrivacyCost(epsilon=1.0)
    assert sequential([PrivacyCost(rho=0.125), PrivacyCost(rho=0.375)]) == PrivacyCost(rho=0.5)
    # a pure ε-DP release is ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4): ε = 1 joins a ρ sum as 0.5
    assert sequential([PrivacyCost(epsilon=1.0), PrivacyCost(rho=0.25)]) == PrivacyCost(rho=0.75)


def test_parallel_composition_takes_the_largest_cost() -> None:
    assert parallel([PrivacyCost(epsilon=0.5), PrivacyCost(epsilon=1.0),
                     PrivacyCost(epsilon=0.25)]) == PrivacyCost(epsilon=1.0)
    assert parallel([PrivacyCost(epsilon=1.0), PrivacyCost(rho=0.25)]) == PrivacyCost(rho=0.5)


def test_composing_nothing_is_an_error() -> None:
    with pytest.raises(PrivacyParameterError, match="at least one"):
        sequential([])


@given(st.lists(st.sampled_from(["epsilon", "rho"]), min_size=1, max_size=6),
       st.lists(st.integers(min_value=1, max_value=1000), min_size=6, max_size=6))
@pytest.mark.slow
def test_parallel_never_exceeds_sequential(families: list[str], values: list[int]) -> None:
    costs = [PrivacyCost(**{family: value / 100}) for family, value in zip(families, values)]
    family = sequential(costs).family
    assert parallel(costs).family == family
    assert price(parallel(costs), family) <= price(sequential(costs), family)


def test_price_refuses_rho_in_epsilon() -> None:
    assert price(PrivacyCost(epsilon=0.6), "rho") == Fraction(9, 50)
    with pytest.raises(PrivacyParameterError, match="no pure ε-DP equivalent"):
        price(PrivacyCost(rho=0.1), "epsilon")


# ------------------------------------------------------------------------------- ρ → (ε, δ)
# Known values of the Canonne–Kamath–Steinke conversion, as asserted by OpenDP's tests of its own
# implementation (rust/src/combinators/measure_cast/zCDP_to_approxDP); the tolerance covers the
# difference between two bisections in floating point.
@pytest.mark.parametrize("rho, epsilon, delta", [
    (1 / 32, 0.0, 0.1508457845622862),          # a Gaussian of scale 4 at sensitivity 1
    (0.5, 0.0, 0.5588356393474351),
    (0.05, 0.25, 8.17727531036956e-2),
    (5e-30, 1e-13, 2.619676329730346e-234),     # the optimal α exceeds 2^53
])
def test_delta_from_rho_matches_known_values(rho: float, epsilon: float, delta: float) -> None:
    assert delta_from_rho(rho, epsilon=epsilon) == pytest.approx(delta, rel=1e-9)


def test_epsilon_from_rho_matches_a_known_value() -> None:
    assert epsilon_from_rho(1 / 32, delta=1e-3) == pytest.approx(0.6880024554878086, rel=1e-12)


@given(st.floats(min_value=1e-4, max_value=50), st.floats(min_value=1e-12, max_value=0.1))
def test_the_tight_conversion_is_between_the_gaussian_curve_and_the_simple_bound(rho: float, delta: float) -> None:
    tight = epsilon_from_rho(rho, delta=delta)
    assert gaussian_epsilon(rho, delta=delta) <= tight * (1 + 1e-9) + 1e-12
    assert tight <= epsilon_from_rho_simple(rho, delta=delta) * (1 + 1e-12)
    if tight > 0:  # the two directions agree (ε is clamped at 0 when even ε = 0 needs less than δ)
        assert delta_from_rho(rho, epsilon=tight) == pytest.approx(delta, rel=1e-6)
    else:
        assert delta_from_rho(rho, epsilon=0.0) <= delta


@given(st.floats(min_value=1e-3, max_value=20), st.floats(min_value=1e-10, max_value=0.1),
       st.floats(min_value=1.0 + 1e-6, max_value=1e4))
def test_every_alpha_gives_a_valid_but_no_smaller_epsilon(rho: float, delta: float, alpha: float) -> None:
    """ε(α) = αρ + (ln(1/δ) + (α−1)ln(1−1/α) − ln α)/(α−1) bounds ε for every α > 1; ours is the infimum."""
    at_alpha = alpha * rho + (math.log(1 / delta) + (alpha - 1) * math.log(1 - 1 / alpha)
                              - math.log(alpha)) / (alpha - 1)
    assert epsilon_from_rho(rho, delta=delta) <= at_alpha + 1e-9 * abs(at_alpha)


def test_the_gaussian_curve_at_epsilon_zero_is_the_total_variation_distance() -> None:
    # δ(0) = Φ(μ/2) − Φ(−μ/2) = erf(μ/(2√2)); with ρ = 1/2, μ = 1: erf(1/(2√2)) = 0.3829249225480262
    assert gaussian_delta(0.5, epsilon=0.0) == pytest.approx(0.3829249225480262, rel=1e-12)


def test_conversions_of_zero_and_bad_parameters() -> None:
    assert epsilon_from_rho(0.0, delta=1e-6) == 0.0 and rho_from_epsilon(2.0) == 2.0
    for call in (lambda: epsilon_from_rho(-1.0, delta=1e-6), lambda: epsilon_from_rho(1.0, delta=0.0),
                 lambda: epsilon_from_rho(1.0, delta=1.5), lambda: delta_from_rho(float("nan"), epsilon=1.0),
                 lambda: gaussian_epsilon(0.0, delta=1e-6), lambda: rho_from_epsilon(float("inf"))):
        with pytest.raises(PrivacyParameterError):
            call()
