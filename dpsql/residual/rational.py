"""Exact rational noise parameters and exact ρ accounting for the residual releases.

Both planners (Xiao, He, Zhang and Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy
Marginals under Convex Loss Functions", NeurIPS 2023, Algorithm 3; He, Xiao, Toksoz, Ding, Zhang
and Kifer, "ResidualPlanner+: a scalable matrix mechanism for marginals and beyond",
arXiv:2305.08175, 2023) release y_S = (⊗ Tᵢ) v_S + z with z iid discrete Gaussian N_Z(0, γ_S²)
(Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020), an
integer matrix ⊗ Tᵢ whose columns have squared L2 norm at most Δ_S², so the release is
ρ_S = Δ_S²/(2γ_S²)-zCDP and the releases compose to Σ_S ρ_S. The selection gives float scales;
here they become rationals and the cost is summed exactly:
    γ_S²  the float σ_S²·Πτᵢ², inflated by NOISE_MARGIN (which dominates every float error of the
          selection) and rounded UP to a NOISE_BITS-bit mantissa: less noise is never used;
    ρ     Σ over classes of members·Δ²/(2γ²), each share rounded UP to the grid 2^-RHO_BITS, and
          refused if above the budget: more than the budget is never spent.
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpsql.errors import PrivacyParameterError

__all__ = ["NOISE_BITS", "NOISE_MARGIN", "RHO_BITS", "noise_parameter", "rho_units", "round_up", "spent_rho"]

#: Significant bits of the rational γ² each noise scale is rounded up to.
NOISE_BITS = 40
#: Relative inflation of γ² before rounding; it dominates every float error in the selection.
NOISE_MARGIN = 2.0**-32
#: ρ is summed on the dyadic grid 2^-RHO_BITS, each class's share rounded up.
RHO_BITS = 96


def round_up(x: float) -> Fraction:
    """The smallest rational ≥ x with a NOISE_BITS-bit numerator times a power of two."""
    mantissa, exponent = math.frexp(x)
    return Fraction(math.ceil(math.ldexp(mantissa, NOISE_BITS))) * Fraction(2) ** (exponent - NOISE_BITS)


def noise_parameter(sigma2: float, square: int) -> Fraction:
    """γ² ≥ σ²·square(1 + NOISE_MARGIN), rounded up: the discrete-Gaussian parameter of one release."""
    return round_up(sigma2 * float(square) * (1.0 + NOISE_MARGIN))


def rho_units(members: int, sensitivity: int, gamma2: Fraction) -> int:
    """⌈members · Δ²/(2γ²) · 2^RHO_BITS⌉: the ρ of ``members`` releases with squared sensitivity
    Δ² = ``sensitivity`` at parameter γ², in units of 2^-RHO_BITS, rounded up."""
    share = members * sensitivity * gamma2.denominator << RHO_BITS
    return -(-share // (2 * gamma2.numerator))


def spent_rho(units: int, budget: Fraction) -> Fraction:
    """units · 2^-RHO_BITS as the exact ρ spent, or PrivacyParameterError above ``budget``."""
    spent = Fraction(units, 1 << RHO_BITS)
    if spent > budget:
        raise PrivacyParameterError(
            f"rho = {float(budget)!r} is too small to be accounted exactly at 2^-{RHO_BITS} resolution; "
            "use a larger rho."
        )
    return spent
