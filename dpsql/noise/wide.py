"""Discrete Laplace and Gaussian samples at any scale: int64 up to the limits, Python ints beyond."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpsql.noise import limits
from dpsql.noise.gaussian import discrete_gaussian, discrete_gaussian_scalar
from dpsql.noise.laplace import discrete_laplace, discrete_laplace_scalar
from dpsql.noise.parameters import check_size, positive_rational
from dpsql.noise.sources import RandomSource, resolve_rng

WideArray = npt.NDArray[np.int64] | npt.NDArray[np.object_]


def discrete_laplace_wide(scale: Fraction, size: int, *, rng: RandomSource | None = None) -> WideArray:
    """``size`` iid Lap_Z(scale) samples for any positive rational scale.

    Math / Privacy: as :func:`discrete_laplace` (ε-DP at scale = Δ₁/ε, exact sampling). Up to
    scale 2^56 it is that sampler (int64 samples); beyond, the samples are drawn one by one with
    the pure-Python reference sampler (CKS Algorithm 2, exact for any rational parameter) and
    returned as Python integers in an object array.

    Raises:
        PrivacyParameterError: scale is a float or not a positive rational; size is not an int >= 0.
    """
    t = positive_rational(scale, "scale")
    if t <= limits.MAX_LAPLACE_SCALE:
        return discrete_laplace(t, size, rng=rng)
    return _one_by_one(discrete_laplace_scalar, t, size, rng)


def discrete_gaussian_wide(sigma2: Fraction, size: int, *, rng: RandomSource | None = None) -> WideArray:
    """``size`` iid N_Z(0, sigma2) samples for any positive rational sigma2.

    Math / Privacy: as :func:`discrete_gaussian` (ρ-zCDP with ρ = Δ₂²/(2σ²), exact sampling). Up
    to σ² = 2^118 it is that sampler (int64 samples); beyond, the samples are drawn one by one
    with the pure-Python reference sampler (CKS Algorithm 3, exact for any rational parameter)
    and returned as Python integers in an object array.

    Raises:
        PrivacyParameterError: sigma2 is a float or not a positive rational; size is not an int >= 0.
    """
    s2 = positive_rational(sigma2, "sigma2")
    if s2 <= limits.MAX_GAUSSIAN_SIGMA2:
        return discrete_gaussian(s2, size, rng=rng)
    return _one_by_one(discrete_gaussian_scalar, s2, size, rng)


def _one_by_one(sampler: Callable[..., int], parameter: Fraction, size: int, rng: RandomSource | None) -> WideArray:
    """``size`` draws of an exact scalar sampler, as Python integers in an object array."""
    n = check_size(size)
    source = resolve_rng(rng)
    return np.array([sampler(parameter, rng=source) for _ in range(n)], dtype=object).reshape(n)
