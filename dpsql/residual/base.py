"""What the selections and measurements of ResidualPlanner and ResidualPlanner+ have in common.

Both planners (Xiao, He, Zhang and Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy
Marginals under Convex Loss Functions", NeurIPS 2023; He, Xiao, Toksoz, Ding, Zhang and Kifer,
"ResidualPlanner+: a scalable matrix mechanism for marginals and beyond", arXiv:2305.08175, 2023)
select one noise scale σ_S² per closure set S of the requested marginals (data-independent), then
measure one noisy residual release ω_S per closure set (the only step that reads data, at the
selection's exact zCDP cost ρ = pcost/2), then reconstruct by post-processing. ``Selection`` and
``Measurements`` hold the fields and checks these steps share; each planner adds its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Generic, TypeVar

from dpsql.errors import ShapeError
from dpsql.residual.lattice import FloatArray, Lattice, Marginal

__all__ = ["Measurements", "Selection"]


@dataclass(frozen=True, eq=False, kw_only=True)
class Selection:
    """The selected base mechanisms: one noise scale σ_S² per closure set, and what they cost.

    Fields:
        domains    the attribute sizes nᵢ.
        marginals  the requested marginals (strictly increasing attribute tuples).
        objective  "sum_variance" or "max_variance".
        weights    one positive weight per marginal.
        sigma2     σ̄_S² per closure set (float), in the order of ``closure``: the exact rational
                   noise scale the measurement uses.
        rho        the ρ-zCDP cost of measuring: an exact dyadic rational ≤ the requested ρ and at
                   most (#noise classes)·2^-96 above the exact Σ_S p_S/(2σ̄_S²).
        bound      a lower bound on the objective at the requested ρ (the optimum for
                   sum_variance, the dual bound for max_variance), so objective_value()/bound − 1
                   certifies optimality.
        lattice    the closure lattice of ``marginals``.
    """

    domains: tuple[int, ...]
    marginals: tuple[Marginal, ...]
    objective: str
    weights: tuple[float, ...]
    sigma2: FloatArray = field(repr=False)
    rho: Fraction
    bound: float
    lattice: Lattice = field(repr=False)

    @property
    def closure(self) -> tuple[Marginal, ...]:
        """Every subset of every requested marginal, () first, in lexicographic order."""
        return self.lattice.closure

    @property
    def pcost(self) -> Fraction:
        """The paper's privacy cost Σ_S p_S/σ̄_S² = 2ρ."""
        return 2 * self.rho


SelectionT = TypeVar("SelectionT", bound=Selection)


@dataclass(frozen=True, eq=False, kw_only=True)
class Measurements(Generic[SelectionT]):
    """The noisy residual releases ω_S of every closure set of one selection, and their exact noise.

    Fields:
        selection  the selection measured.
        sigma2     the effective σ_S² per closure set: the exact variance of the discrete noise
                   drawn, scaled as the continuous formulas expect.
        rho        the zCDP cost spent (``selection.rho``).
    """

    selection: SelectionT
    sigma2: FloatArray = field(repr=False)
    rho: Fraction

    def require(self, selection: Selection) -> None:
        """ShapeError unless these measurements were taken for ``selection`` (checked before reconstructing)."""
        if self.selection is not selection:
            raise ShapeError("these measurements were taken for a different selection; pass the one measured.")
