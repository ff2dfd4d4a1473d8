"""Privacy costs and an in-memory budget (the durable ledger comes on top of this).

Pure ε-DP costs add up (sequential composition); so do ρ-zCDP costs. A pure ε-DP release is also
ε²/2-zCDP (Bun & Steinke), so ε costs can be charged to a ρ budget; the reverse has no pure-DP
equivalent and is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dpsql.errors import BudgetExhaustedError, PrivacyParameterError


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyCost:
    """What one batch spends: exactly one of epsilon (pure DP) or rho (zCDP)."""

    epsilon: float | None = None
    rho: float | None = None

    def __post_init__(self) -> None:
        if (self.epsilon is None) == (self.rho is None):
            raise PrivacyParameterError("give exactly one of epsilon= (pure ε-DP) or rho= (ρ-zCDP) as the batch's cost.")
        name, value = ("epsilon", self.epsilon) if self.epsilon is not None else ("rho", self.rho)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise PrivacyParameterError(f"{name} must be a finite number > 0; got {value!r}.")

    @property
    def family(self) -> str:
        return "epsilon" if self.epsilon is not None else "rho"

    @property
    def value(self) -> float:
        return float(self.epsilon if self.epsilon is not None else self.rho)  # type: ignore[arg-type]

    def describe(self) -> str:
        return f"ε={self.epsilon:g}" if self.epsilon is not None else f"ρ={self.rho:g}"


@dataclass(slots=True, kw_only=True)
class Budget:
    """A total privacy budget that batches draw from; ``Budget(epsilon=3)`` or ``Budget(rho=0.5)``."""

    epsilon: float | None = None
    rho: float | None = None
    spent: float = field(default=0.0)

    def __post_init__(self) -> None:
        PrivacyCost(epsilon=self.epsilon, rho=self.rho)  # validates

    @property
    def total(self) -> PrivacyCost:
        return PrivacyCost(epsilon=self.epsilon, rho=self.rho)

    @property
    def remaining(self) -> float:
        return max(self.total.value - self.spent, 0.0)

    def price(self, cost: PrivacyCost) -> float:
        """The cost in this budget's unit: ε on an ε budget; ρ, or ε²/2, on a ρ budget."""
        if self.total.family == cost.family:
            return cost.value
        if self.total.family == "rho":
            return cost.value**2 / 2
        raise PrivacyParameterError(
            f"this connection's budget is pure ε-DP (epsilon={self.epsilon:g}); a ρ-zCDP batch has no pure ε-DP "
            "cost. Pass epsilon= for the batch, or open the connection with Budget(rho=...)."
        )

    def check(self, cost: PrivacyCost) -> float:
        """The price of ``cost``; BudgetExhaustedError if it does not fit. Charges nothing."""
        price = self.price(cost)
        if price > self.remaining * (1 + 1e-12):
            unit = "ε" if self.total.family == "epsilon" else "ρ"
            raise BudgetExhaustedError(
                f"Batch costs {unit}={price:.6g}; the budget has {unit}={self.remaining:.6g} left of {self.total.value:g}. "
                "Nothing was run or charged. Split the batch or lower its cost."
            )
        return price

    def charge(self, cost: PrivacyCost) -> None:
        """Record ``cost`` (after check); raises BudgetExhaustedError without charging if it does not fit."""
        self.spent += self.check(cost)
