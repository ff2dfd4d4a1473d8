"""Privacy costs and the in-memory budget: exact composition and refusals that charge nothing."""

from __future__ import annotations

import pytest

from dpsql.accounting import Budget, PrivacyCost
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
