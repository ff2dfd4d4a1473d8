"""A data vector's measurement: its plan, its budget share, and the noise calibration that follows.

Privacy: measurement j of a batch runs at ε_j/(k·B_j) (Laplace) or ρ_j/(k·B_j)² (Gaussian) of its
strategy's own sensitivity, where one privacy unit (k rows) moves a count vector by at most k and
a sum vector by at most k·B_j in the sum's integer units (B_j = max(|lower|, |upper|)/quantum), or
— cell-bounded — cell i's sum by at most k·b_i (``mechanism.calibrate(cell_bounds=...)``). A sum of
squares (VARIANCE, STDDEV: ``sumsq``) is a sum of the derived value clamp(x, lower, upper)², which
lies in [0, max(lower², upper²)] (from lower² when lower ≥ 0): one row adds at most that much to one
cell, so B_j = ⌈max(lower², upper²)/quantum⌉ in its own quanta (:func:`dpsql.schema.square_quantum`),
k·B_j per unit, and it is measured like any other vector, with independent noise. A vector of
distinct units per cell (``units``, COUNT(DISTINCT unit) with max_rows = k > 1) moves by 1 in each
of at most k cells: a count vector's calibration with contribution k (:mod:`dpsql.sql.units`). The
shares add up to the batch's ε (sequential composition) or ρ (zCDP composition): :func:`split`.
Each measurement j is then ε_j-DP (ρ_j-zCDP) for one privacy unit, and the batch ε-DP (ρ-zCDP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from dpsql.budget.accounting import PrivacyCost, price, sequential
from dpsql.errors import InternalError
from dpsql.matrix.workloads import Workload
from dpsql.noise import Noise
from dpsql.planning import mechanism, planner
from dpsql.sql.vectors import DataVector

#: Per cell of each axis, k·b_j: the most one privacy unit moves that cell's sum (all ones off the summed axis).
CellBounds = tuple[tuple[int, ...], ...]


def weighted_unit_error(plan: planner.Plan, weights: Sequence[float], totals: Sequence[float]) -> float:
    """Σ_b c_b·t_b over a data vector's blocks (the plan's own score when no block totals are known)."""
    if not totals:
        return plan.expected_error
    return float(sum(c * t for c, t in zip(weights, totals)))


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftVector:
    """A data vector of one statement group to measure, planned, before the budget split."""

    group: int
    vector: DataVector
    plan: planner.Plan
    row_scale: int    # k·B: the most one privacy unit moves one cell of this vector
    quantum: float    # value of one integer unit (1 for counts)
    block_totals: tuple[float, ...] = ()   # t_b: the chosen strategy's unit error summed over each block of this vector
    block_weights: tuple[float, ...] = ()  # c_b: each block's weight in the batch objective (dpsql.planning.weights)
    cell_bounds: CellBounds | None = None  # k·b_j per cell (Kronecker vectors): the plan is on y = x/b

    @property
    def objective(self) -> float:
        """Σ_b c_b·t_b: this vector's unit error in the batch objective (what the split weighs)."""
        return weighted_unit_error(self.plan, self.block_weights, self.block_totals)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedVector(DraftVector):
    """A draft with its budget share: how one data vector of one statement group is measured."""

    share: float      # this measurement's ε or ρ

    @property
    def weighted(self) -> bool:
        """Whether the plan was scored on a workload with unequal block weights (its candidates'
        scores are then the weighted objective, not the answers' total error)."""
        return len(set(self.block_weights)) > 1

    @property
    def noise_scale(self) -> float:
        """Variance of one unit error at this share: (k·B/ε)² (Laplace) or (k·B)²/(2ρ) (Gaussian)."""
        if self.share == 0:
            return 0.0
        if self.plan.noise == "laplace":
            return (self.row_scale / self.share) ** 2
        return self.row_scale**2 / (2 * self.share)

    @property
    def name(self) -> str:
        """'group 1: count', 'group 2: sum(income)': how EXPLAIN and the metadata name it."""
        return f"group {self.group + 1}: {self.vector.label}"

    def expected_rmse(self, candidate: str) -> float:
        """RMSE per query of a candidate strategy at this measurement's budget, in data units."""
        return math.sqrt(self.expected_total(candidate) / self.plan.queries)

    def expected_total(self, candidate: str) -> float:
        """Expected total squared error of a candidate strategy's answers, in data units squared.

        Exact for the chosen strategy; for another candidate of a weighted plan, its weighted
        score scaled by the chosen strategy's ratio of total error to score."""
        unit_error = self.plan.candidates[candidate]  # at ε = 1 or ρ = 1/2, one unit moving one count
        if self.block_totals and self.plan.expected_error > 0:
            unit_error *= sum(self.block_totals) / self.plan.expected_error
        if self.share == 0:  # an identically zero workload: answered exactly, nothing measured
            return 0.0 if unit_error == 0 else math.inf
        return unit_error * self.noise_scale * self.quantum**2

    def draft(self, block_weights: tuple[float, ...] | None = None) -> DraftVector:
        """The same plan before a split (with other block weights, when given)."""
        return DraftVector(group=self.group, vector=self.vector, plan=self.plan, row_scale=self.row_scale,
                           quantum=self.quantum, block_totals=self.block_totals,
                           block_weights=self.block_weights if block_weights is None else block_weights,
                           cell_bounds=self.cell_bounds)

    def measured(self) -> MeasuredStrategy:
        """What ``mechanism.calibrate``/``measure`` receive: the plan's strategy with max_contribution
        k·B, or — cell-bounded — its substitution onto x = diag(b) y with the per-cell bounds k·b_j;
        and the share, exactly, as ``epsilon`` (Laplace) or ``rho`` (Gaussian)."""
        share = Fraction(self.share)
        epsilon, rho = (share, None) if self.plan.noise == "laplace" else (None, share)
        if self.cell_bounds is None:
            return MeasuredStrategy(strategy=self.plan.strategy, max_contribution=self.row_scale, cell_bounds=None,
                                    epsilon=epsilon, rho=rho)
        return MeasuredStrategy(strategy=mechanism.cell_bounded_strategy(self.plan.strategy, self.cell_bounds),
                                max_contribution=1, cell_bounds=self.cell_bounds, epsilon=epsilon, rho=rho)

    def calibration(self) -> mechanism.Calibration:
        """The noise of this measurement, from public parameters only (PrivacyParameterError when a
        noise scale is not representable: a share far too small)."""
        m = self.measured()
        return mechanism.calibrate(m.strategy, epsilon=m.epsilon, rho=m.rho, max_contribution=m.max_contribution,
                                   cell_bounds=m.cell_bounds)


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredStrategy:
    """The arguments of ``mechanism.measure`` for one data vector (all but the data and the source)."""

    strategy: Workload
    max_contribution: int
    cell_bounds: CellBounds | None
    epsilon: Fraction | None
    rho: Fraction | None


def split(drafts: Sequence[DraftVector], total: float, noise: Noise) -> tuple[PlannedVector, ...]:
    """The budget split over the drafts (``planner.split_budget``). A data vector whose workload
    is identically zero (every statement reading it is never TRUE; expected error exactly 0) gets
    share 0: its answers are exact zeros and it is never measured."""
    shares = planner.split_budget([d.objective for d in drafts], total, noise=noise)
    return tuple(PlannedVector(group=d.group, vector=d.vector, plan=d.plan, share=share, row_scale=d.row_scale,
                               quantum=d.quantum, block_totals=d.block_totals, block_weights=d.block_weights,
                               cell_bounds=d.cell_bounds)
                 for d, share in zip(drafts, shares))


def at_fractions(drafts: Sequence[DraftVector], fractions: Sequence[float], total: float) -> tuple[PlannedVector, ...]:
    """The drafts measured at the given fractions of ``total`` (``planner.proportional_shares``:
    rounded down, so the shares never add up to more than ``total``)."""
    shares = planner.proportional_shares(fractions, total)
    return tuple(PlannedVector(group=d.group, vector=d.vector, plan=d.plan, share=share, row_scale=d.row_scale,
                               quantum=d.quantum, block_totals=d.block_totals, block_weights=d.block_weights,
                               cell_bounds=d.cell_bounds)
                 for d, share in zip(drafts, shares))


def check_calibrations(measurements: Sequence[PlannedVector]) -> None:
    """Every measured share has a representable noise scale (PrivacyParameterError otherwise):
    checked before anything is charged."""
    for m in measurements:
        if m.share != 0:
            m.calibration()


def check_plan_cost(parts: Sequence[PrivacyCost], cost: PrivacyCost) -> None:
    """A plan's own cost, composed from its parts, must not exceed the cost that is charged.

    Math: sequential composition of every measurement's share and every threshold selection's
    ε_sel (ε_sel²/2 in ρ). Shares are floats from the budget split, so the comparison allows 1e-9
    relative rounding. Raises InternalError (a defect: nothing was run or charged).
    """
    planned = price(sequential(parts), cost.family) if parts else 0
    if planned > cost.exact * (1 + 1e-9):
        raise InternalError(f"the plan spends {cost.family}={float(planned):.9g}, "
                            f"more than the batch's {cost.describe()}; "
                            "nothing was run or charged. Please report this.")
