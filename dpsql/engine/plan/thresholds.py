"""Private truncation thresholds for measure columns declared with ``truncate`` (threshold selection
as in Wu, Pujol, Kotsogiannis and Machanavajjhala, "Answering Summation Queries for Numerical
Attributes under Differential Privacy", §3.1). The statement-group route decides its sums again once
θ is released (:mod:`dpsql.engine.plan.group_route`).

A column with ``truncate = "svt" | "recursive" | "auto"`` has a public outer bound U (its
measure bounds); its SUMs clip every value at a threshold θ ≤ U chosen from the data with a share
of the batch's budget. θ is released (result metadata ``truncation_threshold``) and the
measurement then clamps at [max(lo, −θ), min(hi, θ)], so its sensitivity is k·θ instead of k·U
(the truncated-sums mechanism, TiMM, of Wu et al.).

Grids (public, from the schema only; ``sum_truncation.geometric_grid`` and ``halving_grid``):
    svt        uₖ = U·c^(k−K), k = 1…K, K = SVT_POINTS, c = SVT_RATIO: the first uₖ with more than
               a fraction SVT_FRACTION of the non-NULL rows at or below it (|value|, clamped to
               the outer bounds);
    recursive  τⱼ = U/2^(J−1−j) in whole quanta, J ≤ R2T_POINTS: race to the top (β = 0.1).
``auto`` runs SVT. ``benchmarks/sum_queries.py`` (40,000 heavy-tailed incomes, 1,000 prefix sums,
10 % of the budget for θ) found it the more accurate selector at every total ε measured
(0.01, 0.1, 1, 10). At ε = 0.01 race to the top picked θ = 1 in the median, because its penalty
J·ln(J/β)·τ/ε_sel exceeds any truncated total. At ε = 0.1 it clipped too much: its best median
relative error was 0.24, against 0.018 with SVT.

Privacy: both selectors are pure ε_sel-DP (``dpsql.planning.sum_truncation``); a zCDP batch gives each
selection ρ_sel and runs it at ε_sel = √(2ρ_sel) (ε-DP implies ε²/2-zCDP).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from dpsql.backends import Backend
from dpsql.engine.vocabulary import Report, unit_rows
from dpsql.noise import RandomSource
from dpsql.planning import sum_truncation
from dpsql.schema import Column, Table, measure_quantum

#: SVT grid: points, ratio c and the fraction r of rows to keep un-truncated (Wu et al.'s c and r).
SVT_POINTS = 64
SVT_RATIO = 1.2
SVT_FRACTION = 0.998
#: Most thresholds of the race-to-the-top grid (powers of two below the outer bound).
R2T_POINTS = 24
R2T_BETA = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdPlan:
    """How one column's threshold will be chosen: method and its pure-DP ε."""

    column: Column
    method: Literal["svt", "recursive"]
    epsilon: float

    @property
    def bound(self) -> float:
        """The public outer bound U = max(|lower|, |upper|) of the column's values."""
        low, high = self.column.bounds
        return max(abs(low), abs(high))

    def describe(self) -> str:
        name = "SVT (AboveThreshold)" if self.method == "svt" else "race to the top"
        return f"{self.column.name}: threshold θ ≤ {self.bound:g} chosen by {name} at ε = {self.epsilon:.6g}"


def threshold_plans(columns: list[Column], *, family: str, total: float) -> tuple[list[ThresholdPlan], float]:
    """Threshold plans for the truncated measure columns and the budget share they take.

    The share is the largest ``truncation_share`` among them, split evenly across the columns.
    """
    truncated = [(c, c.truncation) for c in columns if c.truncation is not None]
    if not truncated:
        return [], 0.0
    share = max(truncation.share for _, truncation in truncated)
    each = share * total / len(truncated)
    epsilon = each if family == "epsilon" else math.sqrt(2 * each)
    return [ThresholdPlan(column=c, method="recursive" if truncation.method == "recursive" else "svt", epsilon=epsilon)
            for c, truncation in truncated], share


def choose(plan: ThresholdPlan, *, backend: Backend, table: Table, rng: RandomSource | None) -> float:
    """Read the column's profile (one scan) and release θ."""
    column, bound = plan.column, plan.bound
    quantum = measure_quantum(column)
    units = max(1, int(bound / quantum))
    rows = unit_rows(table)
    if plan.method == "svt":
        grid = sum_truncation.geometric_grid(bound, SVT_RATIO, SVT_POINTS).tolist()
        profile = backend.measure_profile(table, column, quantum, grid, [])
        found = sum_truncation.svt_threshold(profile.below, profile.rows, grid, fraction=SVT_FRACTION,
                                             epsilon=plan.epsilon, max_rows=rows, rng=rng)
        return found.theta
    taus = sum_truncation.halving_grid(units, R2T_POINTS)
    profile = backend.measure_profile(table, column, quantum, [], taus)
    found = sum_truncation.r2t_threshold(profile.clipped_sums, taus, epsilon=plan.epsilon, beta=R2T_BETA,
                                         max_rows=rows, rng=rng)
    return found.theta * quantum


def truncated(column: Column, theta: float) -> Column:
    """The column with measure bounds [lo, hi] ∩ [−θ, θ] (the nearest point of [−θ, θ] if empty)."""
    low, high = column.bounds
    return replace(column, measure_bounds=(min(max(low, -theta), theta), max(min(high, theta), -theta)))


def choose_thresholds(plans: Sequence[ThresholdPlan], table: Table, *, backend: Backend,
                      rng: RandomSource | None, report: Report) -> dict[str, float]:
    """θ for every truncated measure column (the batch is already charged for these selections)."""
    chosen = {}
    for threshold in plans:
        report(f"choosing the truncation threshold of {threshold.column.name} ({threshold.method}, "
               f"ε = {threshold.epsilon:.4g})")
        chosen[threshold.column.name] = choose(threshold, backend=backend, table=table, rng=rng)
    return chosen


def measured_columns(table: Table, chosen: Mapping[str, float]) -> dict[str, Column]:
    """The table's columns with each truncated measure narrowed to its released θ."""
    return {name: truncated(c, chosen[name]) if name in chosen else c for name, c in table.columns.items()}
