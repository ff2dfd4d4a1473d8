"""Accuracy first: the least privacy cost whose plan meets a standard-error target for every answer.

An analyst asks for error bars (``max_stddev=s``) instead of a cost. Every answer's standard error
is known before the data is read (:mod:`dpsql.engine.reuse.predicted`), so the least cost meeting the
target is found without reading anything and is then charged exactly.

Math: for a fixed plan every answer's variance is Var z·(a plan constant), and the calibrated
noise variance Var z scales as 1/ε² (discrete Laplace, t ≥ Δ₁/ε) or 1/ρ (discrete Gaussian,
σ² ≥ Δ₂²/(2ρ)) up to the rounding of the scale up to a rational. So the worst ratio
r(c) = max_i sd_i(c)/target_i of a plan made at cost c is met at c·r^p (p = 1 for ε, 2 for ρ).
The plan itself may change with the cost (the budget split, the guard's re-weighting, the
route), so the search (1) plans at a reference cost and scales, re-planning at each candidate
until the plan's own scaling agrees (a fixed point of c ↦ c·r(c)^p), then (2) brackets the cost
and bisects it (geometrically) on the exact predicted standard errors of the plan made at each
probe, until the bracket's relative width is below :data:`PRECISION`: the returned cost meets
every target and a cost 1/(1 + PRECISION) of it does not. Step (2) only ever calls
``stddevs(plan_at(cost))``, so it holds for any ``stddevs`` that is monotone in the cost (the
hook may, for instance, also count information from earlier releases). The work is a count of
plans (at most :data:`MAX_PLANS`), never time.

Targets: ``max_stddev`` bounds every COUNT/SUM answer's standard error. ``max_relative_stddev``
r bounds it by r times the answer's public scale: the most one row can add to it, which is 1 for a
COUNT (times a conditional aggregate's constant factor) and max(|lower|, |upper|) of the declared
measure bounds for a SUM, so a relative target reads "an error worth r rows at their largest" and
one number serves a batch mixing counts and sums of different columns. It is not relative to the
answer's true size: that is private (no public scale exists for it). Both may be given: each answer
then meets the smaller. Outputs whose error depends on the data (AVG, order statistics, derived
outputs, truncated SUMs) have no error known in advance: a target on their statement is refused.

Privacy: the search reads the public schema and the statements only; nothing is charged or read
until the caller runs the found plan, which is charged its cost like any batch.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql.budget.accounting import MAX_BATCH_COST, UNIT, Family, PrivacyBudget, PrivacyCost
from dpsql.engine.plan.routes import Prepared
from dpsql.engine.reuse.predicted import predicted_stddevs, unguaranteed
from dpsql.errors import BudgetExhaustedError, DpsqlWarning, NotSupportedError, ProgrammingError
from dpsql.planning.planner import Progress
from dpsql.schema import Column, Schema
from dpsql.sql import ir
from dpsql.sql.compile import CompiledStatement
from dpsql.sql.flatten import expand_weights

FloatArray = npt.NDArray[np.float64]
#: One statement's target: one standard error for every answer, per output (by alias), or none.
StatementTarget = float | Mapping[str, float] | None
Stddevs = Callable[[Prepared], list[dict[str, FloatArray]]]

#: The most plans one search makes (each is a full planning pass: a count of work, not time).
MAX_PLANS = 40
#: Relative width of the final bracket: the returned cost meets the targets, cost/(1 + PRECISION) misses one.
PRECISION = 1e-4
#: The cost the search plans at first (ε = 1 or ρ = 1).
REFERENCE = 1.0
#: Re-plans of the scaling step (1) at most, and the agreement that ends it early.
SCALING_STEPS = 6
SCALING_AGREEMENT = 1e-3
#: Costs searched: a target needing more than MAX_COST (or less than MIN_COST) is refused as unattainable.
MIN_COST, MAX_COST = 1e-9, MAX_BATCH_COST


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The least cost found: its plan, the cost, and the worst ratio predicted stddev / target (≤ 1)."""

    prepared: Prepared
    cost: PrivacyCost
    worst: float
    stddevs: list[dict[str, FloatArray]] = field(default_factory=list)
    targets: tuple[StatementTarget, ...] = ()
    plans: int = 0
    miss: float | None = None  # the largest cost found to miss a target (None: nothing is noisy)


def least_cost(plan_at: Callable[[PrivacyCost], Prepared], family: Family, targets: Sequence[StatementTarget], *,
               stddevs: Stddevs = predicted_stddevs, limit: Fraction | None = None) -> Target:
    """The least cost (in ``family``) whose plan meets ``targets`` (one per batch statement).

    See the module docstring for the search. ``limit``: what is left of the budget in ``family``;
    a least cost above it raises BudgetExhaustedError (nothing was read or charged), saying what the
    target would cost. Raises NotSupportedError for a targeted output whose error depends on the
    data, ProgrammingError for a target no cost in [MIN_COST, MAX_COST] meets.
    """
    probe = _Probe(plan_at, family, tuple(targets), stddevs)
    cost, ratio = REFERENCE, probe.ratio(REFERENCE)
    if ratio == 0:  # every targeted answer is exact (its WHERE is never TRUE): any cost meets the targets
        return probe.exact()
    power = 1 if family == "epsilon" else 2
    for _ in range(SCALING_STEPS):
        cost = _bounded(cost * ratio**power, probe)
        ratio = probe.ratio(cost)
        if abs(ratio - 1) <= SCALING_AGREEMENT:
            break
    if limit is not None and Fraction(cost) > limit * 2:  # far over the budget: no need to narrow it down
        raise BudgetExhaustedError(probe.over_limit(cost, limit, about=True))
    low, high = _bracket(cost, probe)
    while high / low - 1 > PRECISION:
        middle = math.sqrt(low * high)
        if probe.ratio(middle) <= 1:
            high = middle
        else:
            low = middle
    high = _rounded(low, high, probe)
    if limit is not None and PrivacyCost.of(family, high).exact > limit:
        last = _at_most(limit)  # all that is left, when it lies inside the bracket and meets the targets
        if not (low < last < high and probe.ratio(last) <= 1):
            raise BudgetExhaustedError(probe.over_limit(high, limit, about=False))
        high = last
    return probe.result(high, low)


def _at_most(limit: Fraction) -> float:
    """The largest float whose decimal form (what a PrivacyCost charges) is at most ``limit``."""
    value = float(limit)
    while Fraction(repr(value)) > limit:
        value = math.nextafter(value, 0.0)
    return value


class _Probe:
    """Plans at a cost (memoized, counted) and the worst ratio of its predicted stddevs to the targets."""

    def __init__(self, plan_at: Callable[[PrivacyCost], Prepared], family: Family,
                 targets: tuple[StatementTarget, ...], stddevs: Stddevs) -> None:
        self.plan_at, self.family, self.targets, self.stddevs = plan_at, family, targets, stddevs
        self.found: dict[float, tuple[Prepared, list[dict[str, FloatArray]], float]] = {}

    def ratio(self, value: float) -> float:
        """max over targeted answers of stddev / target, for the plan at this cost."""
        if value not in self.found:
            if len(self.found) >= MAX_PLANS:
                raise ProgrammingError(f"the accuracy search made {MAX_PLANS} plans without settling on a least cost "
                                       "(the plans change with the cost). Give epsilon= or rho= instead; nothing was "
                                       "run or charged.")
            with warnings.catch_warnings():  # "ε above 5" is said when the found cost is run, not per probe
                warnings.simplefilter("ignore", DpsqlWarning)
                prepared = self.plan_at(PrivacyCost.of(self.family, value))
                refuse_unguaranteed(prepared, self.targets)
                found = self.stddevs(prepared)
            self.found[value] = (prepared, found, worst_ratio(found, self.targets))
        return self.found[value][2]

    def exact(self) -> Target:
        """The reference plan when every targeted answer is exact: it must measure nothing, else the
        targets do not fix a cost for the statements that are measured."""
        prepared = self.found[REFERENCE][0]
        if not prepared.chosen.measures_nothing:
            raise ProgrammingError("every targeted answer is exact (its WHERE clause is never TRUE), so the target "
                                   "fixes no cost for the other statements: give them a target too, or give "
                                   "epsilon= (or rho=). Nothing was run or charged.")
        return self.result(REFERENCE, None)

    def result(self, value: float, miss: float | None) -> Target:
        self.ratio(value)
        prepared, found, worst = self.found[value]
        return Target(prepared=prepared, cost=prepared.cost, worst=worst, stddevs=found, targets=self.targets,
                      plans=len(self.found), miss=miss)

    def over_limit(self, value: float, limit: Fraction, *, about: bool) -> str:
        unit = UNIT[self.family]
        need = f"about {unit}={value:.3g}" if about else f"{unit}={value:.6g}"
        return (f"the accuracy target needs {need} (the least cost whose plan meets every target, found before any "
                f"data was read), but the budget has {unit}={float(limit):.6g} left. Nothing was run or charged. "
                "Loosen the target (a larger max_stddev), ask fewer statements, or ask the data owner for more budget.")


def _bounded(value: float, probe: _Probe) -> float:
    """``value`` if within [MIN_COST, MAX_COST]; else the target is unattainable (ProgrammingError)."""
    if not MIN_COST <= value <= MAX_COST:
        raise ProgrammingError(f"the accuracy target would need {UNIT[probe.family]}={value:.3g}, outside the costs "
                               f"searched ({MIN_COST:g} to {MAX_COST:g}): give a target in the answers' own units "
                               "(rows for a COUNT, the column's units for a SUM). Nothing was run or charged.")
    return value


def _bracket(cost: float, probe: _Probe) -> tuple[float, float]:
    """(low, high) around ``cost``: the plan at low misses a target, the plan at high meets them all.
    The step doubles its logarithm each time, so a bracket far from ``cost`` takes few plans."""
    step = 1 + 10 * PRECISION
    if probe.ratio(cost) <= 1:
        high, low = cost, _bounded(cost / step, probe)
        while probe.ratio(low) <= 1:
            step *= step
            high, low = low, _bounded(low / step, probe)
        return low, high
    low, high = cost, _bounded(cost * step, probe)
    while probe.ratio(high) > 1:
        step *= step
        low, high = high, _bounded(high * step, probe)
    return low, high


def _rounded(low: float, high: float, probe: _Probe) -> float:
    """``high`` rounded up to 6 significant digits (a cost readable in the ledger) when that stays
    below the bracket's top and still meets the targets; else ``high``."""
    digits = 5 - math.floor(math.log10(high))
    rounded = math.ceil(high * 10**digits) / 10**digits
    if rounded < high * (1 + PRECISION) and rounded > low and probe.ratio(rounded) <= 1:
        return rounded
    return high


def worst_ratio(found: Sequence[Mapping[str, FloatArray]], targets: Sequence[StatementTarget]) -> float:
    """max over statements with a target, over their outputs and answers, of stddev / target (0: none)."""
    worst = 0.0
    for answers, target in zip(found, targets):
        if target is None:
            continue
        for alias, stddevs in answers.items():
            bound = target if isinstance(target, (int, float)) else target.get(alias)
            if bound is not None and stddevs.size:
                worst = max(worst, float(np.max(stddevs)) / bound)
    return worst


def refuse_unguaranteed(prepared: Prepared, targets: Sequence[StatementTarget]) -> None:
    """NotSupportedError for a targeted statement's output whose error depends on the data."""
    found = [u for u in unguaranteed(prepared) if targets[u.statement] is not None]
    if found:
        named = "; ".join(u.describe() for u in found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        raise NotSupportedError(f"an accuracy target needs every answer's standard error before the data is read, "
                                f"which these outputs do not have: {named}. Ask for SUM and COUNT (an average is "
                                "their ratio), leave that statement's target None, or give epsilon= (or rho=) "
                                "instead of a target. Nothing was run or charged.")


# ------------------------------------------------------------------------------------------------ targets
def statement_targets(batch: ir.Batch, max_stddev: object, max_relative_stddev: object,
                      compiled: Sequence[CompiledStatement]) -> tuple[StatementTarget, ...]:
    """One target per batch statement, from per-user-statement ``max_stddev`` and/or
    ``max_relative_stddev`` (one number for all, or one number or None per statement; a UNION ALL's
    parts share their statement's) — per output, scaled by its public scale, for a relative one."""
    absolute = _per_statement(batch, max_stddev, "max_stddev")
    relative = _per_statement(batch, max_relative_stddev, "max_relative_stddev")
    if all(a is None for a in absolute) and all(r is None for r in relative):
        raise ProgrammingError("every statement's target is None: give at least one statement a target, or give "
                               "epsilon= instead. Nothing was charged.")
    targets: list[StatementTarget] = []
    for index, (a, r) in enumerate(zip(absolute, relative)):
        if r is None:
            targets.append(a)
            continue
        scaled = {output.aggregate.alias: r * public_scale(output.aggregate, output.column)
                  for output in compiled[index].aggregates}
        targets.append({alias: value if a is None else min(a, value) for alias, value in scaled.items()})
    return tuple(targets)


def public_scale(aggregate: ir.Aggregate, column: Column | None) -> float:
    """The most one row adds to this aggregate's answer: |factor| for a COUNT, |factor|·max(|lower|,
    |upper|) for a SUM (the declared measure bounds); 0 for the others (refused before it matters)."""
    factor = abs(aggregate.scale)
    if aggregate.function == "count":
        return factor
    bounds = None if column is None else column.measure_bounds
    if aggregate.function == "sum" and bounds is not None:
        return factor * max(abs(bounds[0]), abs(bounds[1]))
    return 0.0


def _per_statement(batch: ir.Batch, given: object, name: str) -> list[float | None]:
    """``given`` as one value per batch statement (``expand_weights``' rule), validated."""
    count = len(batch.statements)
    if given is None:
        return [None] * count
    values: list[object] = [given] * count if _is_number(given) else list(given) if _is_list(given) else []  # type: ignore[call-overload]
    if not values:
        raise ProgrammingError(f"{name} must be a positive number, or a list with one positive number or None per "
                               f"statement; got {given!r}. Nothing was charged.")
    statements = sum(s.union is None or s.union.part == 0 for s in batch.statements)
    for position, value in enumerate(values):
        if value is not None and not (_is_number(value) and math.isfinite(float(value)) and float(value) > 0):  # type: ignore[arg-type]
            where = "" if _is_number(given) else f" for statement {position + 1}"
            raise ProgrammingError(f"{name} must be finite and > 0 (or None for no target); got {value!r}{where}. "
                                   "Nothing was charged.")
    expanded: list[object] = list(expand_weights(batch, values) or [])  # type: ignore[arg-type]
    if len(expanded) != count:
        raise ProgrammingError(f"{name} has {len(values)} entries but the batch has {statements} statement(s): give "
                               "one number or None per statement, in order (or one number for all). Nothing was "
                               "charged.")
    return [None if v is None else float(v) for v in expanded]  # type: ignore[arg-type]


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) > 0


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def limit_in(budget: PrivacyBudget, family: Family) -> Fraction:
    """What is left of ``budget`` as a cost in ``family``: ``left``, or for an ε cost on a ρ budget
    the largest ε with ε²/2 ≤ left (PrivacyParameterError for a ρ cost on an ε budget)."""
    budget.price(PrivacyCost.of(family, 1.0))  # refuses a ρ cost on a pure ε budget
    left = budget.left
    if budget.total.family == family or left == 0:
        return left
    epsilon = Fraction(math.sqrt(2 * float(left)))
    while epsilon**2 / 2 > left:
        epsilon *= Fraction(999_999_999, 1_000_000_000)
    return epsilon


# ------------------------------------------------------------------------------------------------ requests
@dataclass(frozen=True, slots=True, kw_only=True)
class TargetRequest:
    """An accuracy target as the analyst gives it (``Cursor.execute``, ``dpsql run --max-stddev``; the
    ``target`` of a :class:`dpsql.engine.request.Request`):
    per statement (one value for all, or a list with one value or None per statement), and the
    family of the cost to find ("epsilon", the default: discrete Laplace; or "rho": discrete Gaussian)."""

    max_stddev: object = None
    max_relative_stddev: object = None
    family: object = None

    @property
    def given(self) -> bool:
        """Whether a target is given."""
        return self.max_stddev is not None or self.max_relative_stddev is not None

    @property
    def asked(self) -> bool:
        """Whether any target option is given (a family alone is refused, ``dpsql.engine.request``)."""
        return self.given or self.family is not None

    def checked_family(self) -> Family:
        """The family of the cost to find; ProgrammingError for anything but "epsilon" or "rho"."""
        if self.family is None or self.family == "epsilon":
            return "epsilon"
        if self.family == "rho":
            return "rho"
        raise ProgrammingError(f"family must be 'epsilon' (pure ε-DP, the default) or 'rho' (ρ-zCDP); got "
                               f"{self.family!r}. Nothing was charged.")

    def describe(self) -> dict[str, object]:
        """The request as the result metadata records it."""
        return {"max_stddev": self.max_stddev, "max_relative_stddev": self.max_relative_stddev,
                "family": self.checked_family()}


def find(request: TargetRequest, batch: str | ir.Batch, schema: Schema, *, parameters: Sequence[object] | None = None,
         weights: Sequence[float] | None = None, budget: PrivacyBudget | None = None,
         progress: Progress | None = None, stddevs: Stddevs = predicted_stddevs,
         statements: Sequence[int] | None = None, targets: Sequence[StatementTarget] | None = None) -> Target:
    """The least cost meeting ``request`` for ``batch`` (the SQL text, or a batch
    ``engine.plan.prepare.read_batch`` read): plans made with ``engine.plan.prepare`` (no data read). With
    ``budget``, a least cost over what is left is refused (BudgetExhaustedError). ``statements``:
    plan only those batch statements (the others are answered from earlier releases), whose
    ``targets`` (one per planned statement) the caller then gives."""
    from dpsql.engine.plan.prepare import prepare  # prepare imports the routes this module's callers also use

    family = request.checked_family()
    for name, value in (("max_stddev", request.max_stddev), ("max_relative_stddev", request.max_relative_stddev)):
        if value is not None and not (_is_number(value) or _is_list(value)):
            raise ProgrammingError(f"{name} must be a positive number, or a list with one positive number or None "
                                   f"per statement; got {value!r}. Nothing was charged.")
    limit = None if budget is None else limit_in(budget, family)
    plans: dict[PrivacyCost, Prepared] = {}

    def plan_at(cost: PrivacyCost) -> Prepared:
        if cost not in plans:
            plans[cost] = prepare(batch, schema, cost, parameters, progress=progress, weights=weights,
                                  statements=statements)
        return plans[cost]

    if targets is None:
        reference = plan_at(PrivacyCost.of(family, REFERENCE))
        compiled = reference.chosen.compiled.statements
        text = batch.text if isinstance(batch, ir.Batch) else batch
        planned = ir.Batch(statements=tuple(s.statement for s in compiled), text=text)
        targets = statement_targets(planned, request.max_stddev, request.max_relative_stddev, compiled)
    return least_cost(plan_at, family, targets, stddevs=stddevs, limit=limit)


def _owners(found: Target) -> list[int]:
    """The user statement (0-based) of each batch statement (a UNION ALL's parts share one)."""
    owners, count = [], -1
    for statement in found.prepared.chosen.compiled.statements:
        count += statement.statement.union is None or statement.statement.union.part == 0
        owners.append(count)
    return owners


def statement_worst(found: Target) -> list[tuple[float, float]]:
    """Per user statement: its worst ratio of predicted stddev to target (0 with no target) and
    the largest predicted stddev of its answers."""
    owners = _owners(found)
    worst = [0.0] * (owners[-1] + 1 if owners else 0)
    largest = [0.0] * len(worst)
    for index, owner in enumerate(owners):
        worst[owner] = max(worst[owner], worst_ratio([found.stddevs[index]], [found.targets[index]]))
        largest[owner] = max([largest[owner]] + [float(np.max(s)) for s in found.stddevs[index].values() if s.size])
    return list(zip(worst, largest))


def explain_lines(found: Target) -> list[str]:
    """What EXPLAIN says about the search: the cost found and each statement's worst predicted stddev."""
    unit = UNIT[found.cost.family]
    lines = [f"Accuracy target: least cost {unit}={found.cost.value:.6g} meets every target "
             + (f"({unit}={found.miss:.6g} misses one; {found.plans} plans made); " if found.miss is not None
                else "(every targeted answer is exact); ")
             + "EXPLAIN spends nothing."]
    for number, (ratio, largest) in enumerate(statement_worst(found), start=1):
        if ratio == 0 and largest > 0:
            lines.append(f"  statement {number}: no target (largest predicted stddev {largest:.4g})")
        else:
            lines.append(f"  statement {number}: largest predicted stddev {largest:.4g}; worst stddev/target "
                         f"{ratio:.4f} (≤ 1)")
    return lines


def statement_ratios(found: Target) -> list[float]:
    """Per planned batch statement, its worst ratio of predicted stddev to target (0: no target)."""
    return [worst_ratio([answers], [target]) for answers, target in zip(found.stddevs, found.targets)]


def annotate(tables: Sequence[pa.Table], found: Target | None, request: TargetRequest,
             ratios: Sequence[float]) -> list[pa.Table]:
    """The result tables with ``accuracy_target`` in their ``dpsql`` metadata: the request, the
    least cost found (None: nothing was measured), the cost found to miss, and each table's worst
    stddev/target ratio (``ratios``)."""
    result = []
    for table, ratio in zip(tables, ratios):
        metadata = json.loads((table.schema.metadata or {}).get(b"dpsql", b"{}"))
        metadata["accuracy_target"] = {**request.describe(),
                                       "least_cost": "nothing: answered by earlier releases" if found is None
                                       else found.cost.describe(),
                                       "misses_at": None if found is None or found.miss is None else
                                       PrivacyCost.of(found.cost.family, found.miss).describe(),
                                       "precision": PRECISION, "worst_stddev_over_target": ratio}
        result.append(table.replace_schema_metadata({b"dpsql": json.dumps(metadata, default=str).encode()}))
    return result
