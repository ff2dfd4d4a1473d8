"""One-sided tail bounds for the noise of a released linear answer, whatever its coefficients.

An answer of the matrix mechanism (``dpsql.planning.mechanism``) is u·x̂ = u·x + a·z: a public linear
combination of one measurement's iid noise z_i, with standard deviation s = √V·‖a‖₂ (V = Var z_i);
only s is reported, not the coefficients a, which the strategy decides. A statement that must
hold with a stated probability for any data, such as the intervals of MIN and MAX
(``dpsql.answers.quantiles``), needs a κ with P(a·z ≥ κ·s) ≤ level for every a. Floating point,
computed from public parameters only; draws nothing (the samplers are in ``dpsql.noise``).

Math (a Chernoff bound from a moment generating function that dominates every combination):
    laplace   z ~ Lap_ℤ(t), p = e^{−1/t}: E e^{λz} = (1 − p)²/((1 − p e^λ)(1 − p e^{−λ}))
              = 1/(1 − V(cosh λ − 1)) for |λ| < 1/t, V = 2p/(1 − p)². Its log Λ(λ) = H(λ²), where
              H(y) = −log(1 − V(cosh √y − 1)) is a power series in y with coefficients ≥ 0 and
              H(0) = 0, so H is convex, hence superadditive, and for every a
                  log E e^{λ a·z} = Σ_i H(λ² a_i²) ≤ H(λ² ‖a‖²) = Λ(λ‖a‖):
              a·z is dominated by ‖a‖·z₁, one draw scaled to the same variance. By Chernoff,
              P(a·z ≥ q) ≤ e^{−λq + Λ(λ‖a‖)} for every λ > 0, which is ≤ level when
              q/‖a‖ ≥ (L + Λ(w))/w (w = λ‖a‖, L = ln(1/level)); so
                  κ = min_{0 < w < 1/t} (L + Λ(w)) / (w√V).
              (Any w gives a valid κ: an imprecise minimum is only conservative.)
    gaussian  z ~ N_ℤ(0, σ²) is σ²-sub-Gaussian, E e^{λz} ≤ e^{λ²σ²/2} (Canonne, Kamath and
              Steinke, "The Discrete Gaussian for Differential Privacy", 2020, Corollary 9), so a·z
              is σ²‖a‖²-sub-Gaussian and P(a·z ≥ q) ≤ e^{−q²/(2σ²‖a‖²)}: κ = (σ/√V)·√(2L)
              (σ/√V ≥ 1: the discrete Gaussian's variance is below σ²).
Both noises are symmetric, so the same κ bounds P(a·z ≤ −κ·s). Against a normal approximation
the price at level 0.05/100 is κ ≈ 7.3 (Laplace; a single draw's exact tail needs 4.9) and
3.9 (Gaussian; normal 3.3) standard deviations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.optimize import minimize_scalar

from dpsql.noise import Noise


@dataclass(frozen=True, slots=True, kw_only=True)
class NoiseLaw:
    """The iid noise of one measurement: its kind, its parameter (Laplace t, Gaussian σ²) and Var z_i."""

    kind: Noise
    scale: float
    variance: float


def tail_multiplier(law: NoiseLaw, level: float) -> float:
    """κ with P(a·z ≥ κ·sd(a·z)) ≤ level for every real vector a (module docstring); 0 when the
    noise's variance is 0 in floating point (every standard deviation is then 0 too).

    >>> laplace = NoiseLaw(kind="laplace", scale=1e6, variance=2e12)
    >>> round(tail_multiplier(laplace, 0.05 / 100), 2)
    7.27
    >>> round(tail_multiplier(NoiseLaw(kind="gaussian", scale=4.0, variance=4.0), 0.05 / 100), 2)
    3.9
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    if law.variance <= 0.0:
        return 0.0
    strength = -math.log(level)
    if law.kind == "gaussian":
        return math.sqrt(law.scale / law.variance) * math.sqrt(2.0 * strength)
    t, root_v = law.scale, math.sqrt(law.variance)

    def multiplier(x: float) -> float:  # at w = x/t, x in (0, 1)
        w = x / t
        log_mgf = (2.0 * math.log(-math.expm1(-1.0 / t)) - math.log(-math.expm1(w - 1.0 / t))
                   - math.log(-math.expm1(-w - 1.0 / t)))
        return (strength + log_mgf) / (w * root_v)

    found = minimize_scalar(multiplier, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-12})
    return multiplier(float(found.x))
