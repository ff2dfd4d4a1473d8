"""Distribution facts: pmfs, the discrete Gaussian normaliser and exact variances.

Floating point; never used to decide a sample. The variances are those of the discrete noise
actually added, so reported error bars describe the numbers returned.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpsql.errors import PrivacyParameterError


def _positive_float(value: Fraction | float, name: str) -> float:
    x = float(value)
    if not (math.isfinite(x) and x > 0):
        raise PrivacyParameterError(f"{name} must be positive and finite; got {value}.")
    return x


def discrete_laplace_variance(scale: Fraction | float) -> float:
    """Variance of Lap_Z(t): 2 e^{-1/t} / (1 - e^{-1/t})².

    Raises:
        PrivacyParameterError: scale is not positive and finite.

    >>> round(discrete_laplace_variance(1), 6)
    1.841347
    >>> round(discrete_laplace_variance(Fraction(10)), 6)
    199.833417
    """
    x = 1.0 / _positive_float(scale, "scale")
    return 2.0 * math.exp(-x) / math.expm1(-x) ** 2


def discrete_laplace_pmf(y: npt.ArrayLike, scale: Fraction | float) -> npt.NDArray[np.float64]:
    """P[Y = y] for Y ~ Lap_Z(t): tanh(1/(2t)) e^{-|y|/t}, elementwise.

    Raises:
        PrivacyParameterError: scale is not positive and finite.

    >>> discrete_laplace_pmf([0, 1], 1).round(6)
    array([0.462117, 0.170003])
    """
    t = _positive_float(scale, "scale")
    return math.tanh(0.5 / t) * np.exp(-np.abs(np.asarray(y, dtype=np.float64)) / t)


def _gauss_terms(sigma2: float) -> npt.NDArray[np.float64]:
    """x = 0, 1, 2, ... far enough that e^{-x²/(2σ²)} is below 1e-300 of the x = 0 term."""
    return np.arange(math.ceil(math.sqrt(1400.0 * sigma2)) + 2, dtype=np.float64)


def direct_moments(sigma2: float) -> tuple[float, float]:
    """(Σ_x e^{-x²/(2σ²)}, Σ_x x² e^{-x²/(2σ²)}) summed directly (accurate for small σ²)."""
    x = _gauss_terms(sigma2)
    w = np.exp(-(x**2) / (2.0 * sigma2))
    return float(w[0] + 2.0 * w[1:].sum()), float(2.0 * (x[1:] ** 2 * w[1:]).sum())


def discrete_gaussian_normalizer(sigma2: Fraction | float) -> float:
    """Σ_{x in Z} e^{-x²/(2σ²)}, summed directly for σ² < 1/(2π), else by Poisson summation.

    Poisson summation: Σ_x e^{-x²/(2σ²)} = √(2πσ²) Σ_y e^{-2π²σ²y²}.

    Raises:
        PrivacyParameterError: sigma2 is not positive and finite.

    >>> round(discrete_gaussian_normalizer(Fraction(1, 4)), 12)
    1.271341522189
    """
    s2 = _positive_float(sigma2, "sigma2")
    if s2 < 1.0 / (2.0 * math.pi):
        return direct_moments(s2)[0]
    dual = 1.0 / (4.0 * math.pi**2 * s2)
    return math.sqrt(2.0 * math.pi * s2) * direct_moments(dual)[0]


def discrete_gaussian_variance(sigma2: Fraction | float) -> float:
    """Var of N_Z(0, σ²), exactly (up to float rounding); always < σ².

    Direct sums for σ² < 1/(2π); otherwise CKS Lemma 20:
    Var(σ²) = σ² (1 - 4π²σ² Var(1/(4π²σ²))).

    Raises:
        PrivacyParameterError: sigma2 is not positive and finite.

    >>> round(discrete_gaussian_variance(Fraction(1, 2)), 10)
    0.4989791308
    """
    s2 = _positive_float(sigma2, "sigma2")
    if s2 < 1.0 / (2.0 * math.pi):
        z, m2 = direct_moments(s2)
        return m2 / z
    dual = 1.0 / (4.0 * math.pi**2 * s2)
    z, m2 = direct_moments(dual)
    return s2 * (1.0 - 4.0 * math.pi**2 * s2 * (m2 / z))


def discrete_gaussian_pmf(y: npt.ArrayLike, sigma2: Fraction | float) -> npt.NDArray[np.float64]:
    """P[Y = y] for Y ~ N_Z(0, σ²), elementwise.

    Raises:
        PrivacyParameterError: sigma2 is not positive and finite.

    >>> discrete_gaussian_pmf([0, 1], 1).round(6)
    array([0.398942, 0.241971])
    """
    s2 = _positive_float(sigma2, "sigma2")
    y2 = np.asarray(y, dtype=np.float64) ** 2
    return np.exp(-y2 / (2.0 * s2)) / discrete_gaussian_normalizer(s2)
