"""The accountant: privacy costs, their composition, ρ → (ε, δ) conversion, and budgets.

A cost is pure ε-DP or ρ-zCDP (``PrivacyCost``), under adding or removing one privacy unit. A budget
is anything implementing ``PrivacyBudget``: the in-memory ``Budget`` here, or the ledger's
``dpsql.budget.account.LedgerBudget``.

Math:
    sequential  releases computed from the same data add up: ε = Σ εᵢ (pure DP, Dwork & Roth 2014,
                Thm 3.14); ρ = Σ ρᵢ (zCDP, Bun & Steinke 2016, Lemma 2.3).
    pure → zCDP an ε-DP release is ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4), so ε costs can be charged
                to a ρ budget; a ρ cost has no pure-DP equivalent and is refused by an ε budget.
    parallel    releases each computed from a disjoint set of privacy units cost their maximum
                (McSherry 2009, Thm 4), since one unit's change reaches only one of them.
    ρ → (ε, δ)  ρ-zCDP implies (ε, δ)-DP for every δ ∈ (0, 1) with
                ε = inf_{α>1} αρ + (ln(1/δ) + (α−1)·ln(1−1/α) − ln α)/(α−1)
                (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy",
                Cor. 13). It is never worse than the simple bound ρ + 2√(ρ·ln(1/δ)) (Bun & Steinke
                2016, Prop. 1.3), and never better than the exact curve of the (continuous) Gaussian
                mechanism with the same ρ, δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2), μ = √(2ρ) (Balle &
                Wang 2018, Thm 8): that mechanism is ρ-zCDP, so no conversion valid for all ρ-zCDP
                releases can beat it. dpsql reports the Canonne–Kamath–Steinke ε: its releases mix
                discrete Gaussian, discrete Laplace and selection steps, for which the Gaussian curve
                does not hold.

Exact arithmetic: costs enter the books as the decimal number the caller wrote (``exact``: the
shortest decimal that round-trips the float, so ``0.1`` is 1/10) and are summed as fractions, so
ten charges of ε = 0.1 spend exactly ε = 1 and a budget never drifts by rounding. The binary
float the engine calibrates its noise with differs from that decimal by less than 2⁻⁵³ relatively
(the same idealised numerics as the rest of the engine's floating-point calibration).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, Protocol, runtime_checkable

from dpsql.errors import BudgetExhaustedError, PrivacyParameterError

Family = Literal["epsilon", "rho"]
UNIT = {"epsilon": "ε", "rho": "ρ"}
#: The largest cost of one batch (ε, or ρ): far beyond any protection, and far below the costs at
#: which the planner's noise variances (∝ 1/ε², 1/ρ) underflow a double (ε ≈ 1e160 did).
MAX_BATCH_COST = 1e9


def check_batch_cost(cost: PrivacyCost) -> None:
    """PrivacyParameterError when ``cost`` is above :data:`MAX_BATCH_COST`."""
    if cost.value > MAX_BATCH_COST:
        raise PrivacyParameterError(f"the batch's cost {cost.describe()} is above MAX_BATCH_COST = {MAX_BATCH_COST:g}, "
                                    "the largest a batch may have. Nothing was charged. Give a smaller cost.")


def exact(value: float | Fraction) -> Fraction:
    """The decimal number a float was written as, as an exact fraction.

    >>> exact(0.1), exact(3), sum([exact(0.1)] * 10) == 1
    (Fraction(1, 10), Fraction(3, 1), True)
    """
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    return Fraction(repr(float(value)))


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyCost:
    """What one batch spends: exactly one of epsilon (pure DP) or rho (zCDP), a real number > 0
    (an int, float, Fraction or numpy number, kept as a float)."""

    epsilon: float | None = None
    rho: float | None = None

    def __post_init__(self) -> None:
        if (self.epsilon is None) == (self.rho is None):
            raise PrivacyParameterError("give exactly one of epsilon= (pure ε-DP) or rho= (ρ-zCDP) "
                                        "as the batch's cost.")
        name, value = ("epsilon", self.epsilon) if self.epsilon is not None else ("rho", self.rho)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise PrivacyParameterError(f"{name} must be a real number > 0 (an int, float or Fraction); "
                                        f"got {type(value).__name__} {value!r}.")
        number = float(value)  # a Fraction or a numpy number is kept as the float nearest to it
        if not math.isfinite(number) or number <= 0:
            raise PrivacyParameterError(f"{name} must be a finite number > 0; got {value!r}.")
        object.__setattr__(self, name, number)

    @property
    def family(self) -> Family:
        return "epsilon" if self.epsilon is not None else "rho"

    @property
    def value(self) -> float:
        return float(self.epsilon if self.epsilon is not None else self.rho)  # type: ignore[arg-type]

    @property
    def exact(self) -> Fraction:
        """The cost as an exact fraction (see ``exact``)."""
        return exact(self.value)

    def describe(self) -> str:
        return f"ε={self.epsilon:g}" if self.epsilon is not None else f"ρ={self.rho:g}"

    @classmethod
    def of(cls, family: Family, value: Fraction | float) -> PrivacyCost:
        """``PrivacyCost(epsilon=value)`` or ``PrivacyCost(rho=value)`` by family name."""
        return cls(epsilon=float(value)) if family == "epsilon" else cls(rho=float(value))


def price(cost: PrivacyCost, family: Family) -> Fraction:
    """``cost`` in the unit of ``family``, exactly: itself, or ε²/2 for an ε cost in ρ.

    >>> price(PrivacyCost(epsilon=0.6), "rho")
    Fraction(9, 50)

    Raises:
        PrivacyParameterError: a ρ cost asked for in ε (zCDP has no pure-DP equivalent).
    """
    if cost.family == family:
        return cost.exact
    if family == "rho":
        return cost.exact**2 / 2
    raise PrivacyParameterError(f"a ρ-zCDP cost ({cost.describe()}) has no pure ε-DP equivalent; "
                                "account for it in ρ (zCDP) instead.")


def sequential(costs: Iterable[PrivacyCost]) -> PrivacyCost:
    """Sequential composition: Σ ε if every cost is pure, else Σ ρ with each ε counted as ε²/2.

    >>> sequential([PrivacyCost(epsilon=0.1)] * 10)
    PrivacyCost(epsilon=1.0, rho=None)
    >>> sequential([PrivacyCost(epsilon=1.0), PrivacyCost(rho=0.25)])
    PrivacyCost(epsilon=None, rho=0.75)
    """
    return _compose(costs, lambda prices: sum(prices, Fraction(0)))


def parallel(costs: Iterable[PrivacyCost]) -> PrivacyCost:
    """Parallel composition of releases on disjoint sets of privacy units: the largest cost.

    Only valid when every privacy unit can change at most one of the releases. The engine does
    not use it yet: each statement group's measurement reads every unit. It would apply to
    groups whose WHERE clauses select disjoint units (say ``age < 18`` and ``age >= 18``) if they
    were measured apart, each at the batch's whole cost.

    >>> parallel([PrivacyCost(epsilon=0.5), PrivacyCost(epsilon=1.0)])
    PrivacyCost(epsilon=1.0, rho=None)
    """
    return _compose(costs, max)


def _compose(costs: Iterable[PrivacyCost], combine: Callable[[list[Fraction]], Fraction]) -> PrivacyCost:
    listed = list(costs)
    if not listed:
        raise PrivacyParameterError("nothing to compose: give at least one PrivacyCost.")
    family: Family = "epsilon" if all(c.family == "epsilon" for c in listed) else "rho"
    return PrivacyCost.of(family, combine([price(c, family) for c in listed]))


# ------------------------------------------------------------------------------------- ρ → (ε, δ)
def rho_from_epsilon(epsilon: float) -> float:
    """The zCDP cost of a pure ε-DP release: ρ = ε²/2 (Bun & Steinke 2016, Prop. 1.4)."""
    _check("epsilon", epsilon)
    return epsilon**2 / 2


def epsilon_from_rho(rho: float, *, delta: float) -> float:
    """ε such that ρ-zCDP implies (ε, δ)-DP: Canonne, Kamath & Steinke 2020, Cor. 13.

    Math:
        ε(α) = αρ + (ln(1/δ) + (α−1)·ln(1−1/α) − ln α)/(α−1) is a valid ε for every α > 1; its
        derivative ρ + ln(αδ)/(α−1)² has one root, found by bisection over t = α − 1.
    """
    _check("rho", rho, zero=True)
    _check_delta(delta)
    if rho == 0:
        return 0.0
    t = _root(lambda t: rho + (math.log1p(t) + math.log(delta)) / t**2)
    alpha = 1 + t
    # ln(1−1/α) = −ln(1+1/t)
    return max(0.0, alpha * rho + (math.log(1 / delta) - t * math.log1p(1 / t) - math.log1p(t)) / t)


def delta_from_rho(rho: float, *, epsilon: float) -> float:
    """δ such that ρ-zCDP implies (ε, δ)-DP: Canonne, Kamath & Steinke 2020, Cor. 13.

    Math:
        δ(α) = e^{(α−1)(αρ−ε)}/(α−1) · (1−1/α)^α for every α > 1; ln δ(α) has derivative
        (2α−1)ρ − ε + ln(1−1/α), increasing in α, whose root is found by bisection.
    """
    _check("rho", rho, zero=True)
    _check("epsilon", epsilon, zero=True)
    if rho == 0:
        return 0.0
    t = _root(lambda t: (2 * t + 1) * rho - epsilon - math.log1p(1 / t))
    log_delta = t * ((1 + t) * rho - epsilon) - t * math.log1p(1 / t) - math.log1p(t)
    return min(1.0, math.exp(log_delta))


def rho_for_epsilon_delta(epsilon: float, *, delta: float) -> float:
    """The largest ρ whose ρ-zCDP guarantee implies (ε, δ)-DP by :func:`epsilon_from_rho` (Canonne,
    Kamath & Steinke 2020, Cor. 13): ε(ρ) increases in ρ and ε(ρ) ≥ ρ, so bisection on (0, ε].

    >>> rho = rho_for_epsilon_delta(1.0, delta=1e-6)
    >>> round(rho, 4), epsilon_from_rho(rho, delta=1e-6) <= 1.0
    (0.0244, True)
    """
    _check("epsilon", epsilon)
    _check_delta(delta)
    return _bisect(lambda rho: epsilon_from_rho(rho, delta=delta) <= epsilon, 0.0, float(epsilon))[0]


def epsilon_from_rho_simple(rho: float, *, delta: float) -> float:
    """The simple conversion ε = ρ + 2√(ρ·ln(1/δ)) (Bun & Steinke 2016, Prop. 1.3); looser than CKS."""
    _check("rho", rho, zero=True)
    _check_delta(delta)
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def gaussian_delta(rho: float, *, epsilon: float) -> float:
    """The exact δ(ε) of the continuous Gaussian mechanism with Δ²/(2σ²) = ρ (Balle & Wang 2018, Thm 8).

    Math:
        δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2), μ = Δ/σ = √(2ρ). A lower bound for any
        conversion from ρ-zCDP alone; not a guarantee for dpsql's discrete releases.
    """
    _check("rho", rho)
    _check("epsilon", epsilon, zero=True)
    mu = math.sqrt(2 * rho)
    tail = _normal_cdf(-epsilon / mu - mu / 2)
    return max(0.0, _normal_cdf(-epsilon / mu + mu / 2) - (math.exp(epsilon + math.log(tail)) if tail > 0 else 0.0))


def gaussian_epsilon(rho: float, *, delta: float) -> float:
    """The ε at which the continuous Gaussian mechanism with ρ = Δ²/(2σ²) is (ε, δ)-DP, by bisection."""
    _check("rho", rho)
    _check_delta(delta)
    low, high = 0.0, epsilon_from_rho(rho, delta=delta)  # δ(ε) falls in ε; the CKS ε is an upper end
    if gaussian_delta(rho, epsilon=0.0) <= delta:
        return 0.0
    return _bisect(lambda epsilon: gaussian_delta(rho, epsilon=epsilon) > delta, low, high)[1]


def _bisect(holds: Callable[[float], bool], low: float, high: float) -> tuple[float, float]:
    """(l, h) adjacent in floating point with ``holds`` true at l and false at h, for a ``holds`` that is
    true up to one point of [low, high] and false beyond it."""
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if holds(middle) else (low, middle)
    return low, high


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _root(derivative: Callable[[float], float]) -> float:
    """The t > 0 where an increasing-through-zero ``derivative`` changes sign, by geometric bisection."""
    low, high = 1.0, 1.0
    while derivative(low) >= 0 and low > 1e-300:
        low /= 2
    while derivative(high) < 0 and high < 1e300:
        high *= 2
    for _ in range(2000):
        middle = math.sqrt(low * high)
        if middle <= low or middle >= high:
            break
        low, high = (low, middle) if derivative(middle) >= 0 else (middle, high)
    return high


def _check(name: str, value: float, *, zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not zero):
        relation = ">= 0" if zero else "> 0"
        raise PrivacyParameterError(f"{name} must be a finite number {relation}; got {value!r}.")


def _check_delta(delta: float) -> None:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise PrivacyParameterError(f"delta must be a number in (0, 1), such as 1e-6; got {delta!r}.")


# ------------------------------------------------------------------------------------- budgets
@runtime_checkable
class PrivacyBudget(Protocol):
    """What a batch draws from: everything the engine, ``dpsql.connect`` and the CLI use of a budget.

    Privacy contract: ``check`` charges nothing and reads no data; ``charge`` records the cost
    (durably, for a ledger) before it returns, or raises BudgetExhaustedError and records nothing.
    The engine calls ``check`` then ``charge`` before it reads any data, so nothing is released
    before its cost is on the books. Amounts are in the budget's unit (ε, or ρ with an ε cost
    counted as ε²/2); decisions use the exact ``left``, the floats are for display.
    """

    @property
    def total(self) -> PrivacyCost:
        """The total (of the binding level, for a ledger with analyst sub-budgets)."""
        ...

    @property
    def spent(self) -> float:
        """What is spent, in the budget's unit (display)."""
        ...

    @property
    def left(self) -> Fraction:
        """What is left, exactly, in the budget's unit."""
        ...

    @property
    def remaining(self) -> float:
        """``left`` as a float (display)."""
        ...

    @property
    def durable(self) -> bool:
        """True when the books outlive the process (a ledger): such a budget never pays for a release
        drawn from a chosen random source (``rng=``), whose holder could replay the noise."""
        ...

    def price(self, cost: PrivacyCost) -> Fraction:
        """``cost`` in the budget's unit; PrivacyParameterError for a ρ cost on an ε budget."""
        ...

    def check(self, cost: PrivacyCost) -> Fraction:
        """The price of ``cost``; BudgetExhaustedError if it does not fit. Charges nothing."""
        ...

    def charge(self, cost: PrivacyCost) -> None:
        """Record ``cost``; BudgetExhaustedError, recording nothing, if it does not fit."""
        ...


@dataclass(slots=True, kw_only=True)
class Budget:
    """A total privacy budget that batches draw from; ``Budget(epsilon=3)`` or ``Budget(rho=0.5)``.

    The in-memory ``PrivacyBudget``, kept for one connection: it ends with the process.
    ``dpsql.connect(..., ledger=PATH)`` keeps the books in a durable file instead (``dpsql.budget.ledger``).
    Decisions use the exact sum ``exact_spent`` (a Fraction); ``spent`` is the same amount as a
    float, for display.
    """

    epsilon: float | None = None
    rho: float | None = None
    spent: float = 0.0
    exact_spent: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        PrivacyCost(epsilon=self.epsilon, rho=self.rho)  # validates
        self.exact_spent = exact(self.spent)

    @property
    def total(self) -> PrivacyCost:
        return PrivacyCost(epsilon=self.epsilon, rho=self.rho)

    @property
    def left(self) -> Fraction:
        """What is left, exactly, in the budget's unit."""
        return max(self.total.exact - self.exact_spent, Fraction(0))

    @property
    def remaining(self) -> float:
        """What is left, in the budget's unit (for display; decisions use ``left``)."""
        return float(self.left)

    @property
    def durable(self) -> bool:
        """False: these books end with the process."""
        return False

    def price(self, cost: PrivacyCost) -> Fraction:
        """The cost in this budget's unit: ε on an ε budget; ρ, or ε²/2, on a ρ budget."""
        if self.total.family == "epsilon" and cost.family == "rho":
            raise PrivacyParameterError(
                f"this connection's budget is pure ε-DP (epsilon={self.epsilon:g}); a ρ-zCDP batch has no pure ε-DP "
                "cost. Pass epsilon= for the batch, or open the connection with Budget(rho=...)."
            )
        return price(cost, self.total.family)

    def check(self, cost: PrivacyCost) -> Fraction:
        """The price of ``cost``; BudgetExhaustedError if it does not fit. Charges nothing."""
        amount = self.price(cost)
        if amount > self.left:
            raise BudgetExhaustedError(refusal(amount, self.left, self.total))
        return amount

    def charge(self, cost: PrivacyCost) -> None:
        """Record ``cost`` (after check); raises BudgetExhaustedError without charging if it does not fit."""
        self.exact_spent += self.check(cost)
        self.spent = float(self.exact_spent)


def refusal(amount: Fraction, left: Fraction, total: PrivacyCost, where: str = "the budget") -> str:
    """The BudgetExhaustedError message: what the batch costs, what is left, what to do."""
    unit = UNIT[total.family]
    return (f"Batch costs {unit}={float(amount):.6g}; {where} has {unit}={float(left):.6g} left of {total.value:g}. "
            "Nothing was run or charged. Split the batch or lower its cost.")
