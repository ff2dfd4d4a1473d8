"""Order statistics from released prefix counts: the quantile estimate and its confidence interval.

Post-processing only (no privacy cost): the inputs are the noisy prefix counts of one group,
P̂_k = #rows with x in base cells 0..k (k = 0..K−1, so P̂_{K−1} = N̂, the group's rows with x inside
the domain), their variances and their covariances with N̂, and the public cell boundaries
c_0 < c_1 < … < c_K (cell k is [c_k, c_{k+1}]). Functions of numpy arrays only.

Within a cell the rows are taken as spread uniformly, so the prefix count at a boundary is
F̂(c_0) = 0, F̂(c_{k+1}) = P̂_k, and linear in between.

- Quantile (fraction p): the first boundary j with F̂(c_j) ≥ t = p·N̂, then the point of
  [c_{j−1}, c_j] where the interpolated F̂ reaches t; clamped to the domain. With exact counts the
  estimate lies in the cell where the true quantile lies, so its error from the quantile (under any
  interpolation convention of the data's values) is at most the cell's width: the bias bound.
- MIN: the point where F̂ first reaches τ_j = max(1, z·sd(F̂(c_j))) (at least one row, and a count
  noise cannot fake at 95 %). CI: low is the largest boundary c_j ≤ estimate with F̂(c_j) + z·sd < 1
  (counts are whole: then F(c_j) = 0 and the minimum is above c_j), else the domain's lower bound
  — at moderate ε differential privacy hides whether a few rows lie lower; high is the smallest
  c_j ≥ estimate with F̂(c_j) > z·sd (then F(c_j) ≥ 1). MAX is MIN of the mirrored counts
  N̂ − F̂(c_j) on the mirrored axis.
- Confidence interval (normal approximation, z = 1.96 for 95 %): with D_j = F̂(c_j) − p·N̂ and
  Var D_j = Var F̂(c_j) + p²·Var N̂ − 2p·Cov(F̂(c_j), N̂), the low end is the largest boundary
  c_j ≤ estimate with D_j < −z·sd(D_j) (then F(c_j) < p·N: the quantile is above c_j), the high
  end the smallest c_j ≥ estimate with D_j > z·sd(D_j); the domain's bounds when there is none.
  The ends are cell boundaries, which covers the estimate's within-cell ambiguity.
- Reported standard error: (high − low) / (2z), the CI's half-width in standard-normal units
  (the estimate's sampling distribution is not normal; the CI is the primary figure).
- The 0 and 1 quantiles (PERCENTILE_CONT(0), ...) are MIN and MAX.
- NULL: when N̂ < max(1, MIN_TOTAL_STDDEVS·sd(N̂)) — decided from noisy values only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
QuantileKind = Literal["cont", "disc", "min", "max"]

#: The two-sided 95 % standard normal quantile.
Z95 = 1.959963984540054
#: A group's quantile is NULL where its noisy count N̂ is below max(1, this many standard errors of N̂).
MIN_TOTAL_STDDEVS = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixCounts:
    """One group's noisy prefix counts P̂_0..P̂_{K−1}, their variances, and Cov(P̂_k, N̂)."""

    values: FloatArray
    variances: FloatArray
    total_covariances: FloatArray


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantileEstimate:
    """The estimate, its 95 % CI [low, high], and (high − low)/(2z); all NaN with ``null`` the reason."""

    value: float
    low: float
    high: float
    stddev: float
    null: str | None = None


def estimate_quantile(prefix: PrefixCounts, boundaries: npt.ArrayLike, fraction: float, kind: QuantileKind = "cont",
                      *, clamp: tuple[float, float] | None = None, representatives: npt.ArrayLike | None = None,
                      z: float = Z95) -> QuantileEstimate:
    """The quantile of one group (see the module docstring).

    Args:
        prefix: the group's noisy prefix counts (K of them).
        boundaries: c_0..c_K, increasing.
        fraction: p in [0, 1] (ignored by MIN and MAX).
        kind: "cont" (interpolated), "disc" (the representative value of the estimate's cell),
            "min" or "max".
        clamp: the domain's value range the estimate and CI are clamped to (default [c_0, c_K]).
        representatives: each cell's representative value for "disc" (default: its midpoint).
    """
    c = np.asarray(boundaries, dtype=np.float64)
    values, variances = np.asarray(prefix.values, np.float64), np.asarray(prefix.variances, np.float64)
    covariances = np.asarray(prefix.total_covariances, np.float64)
    total, total_var = float(values[-1]), float(max(variances[-1], 0.0))
    lo, hi = clamp if clamp is not None else (float(c[0]), float(c[-1]))
    if not total >= max(1.0, MIN_TOTAL_STDDEVS * np.sqrt(total_var)):
        return QuantileEstimate(value=np.nan, low=np.nan, high=np.nan, stddev=np.nan,
                                null=f"the noisy count of rows with a value is below max(1, {MIN_TOTAL_STDDEVS:g} "
                                     "standard errors): too few rows for an order statistic")
    if kind in ("cont", "disc") and fraction in (0.0, 1.0):  # the 0 and 1 quantiles are MIN and MAX
        extreme = estimate_quantile(prefix, c, fraction, "min" if fraction == 0.0 else "max", clamp=clamp, z=z)
        return extreme if kind == "cont" else replace(extreme, value=_representative(c, extreme.value, representatives))
    f = np.concatenate([[0.0], values])
    var_f = np.concatenate([[0.0], np.maximum(variances, 0.0)])
    cov_f = np.concatenate([[0.0], covariances])
    if kind == "max":  # MAX is MIN of the counts above each boundary, on the mirrored axis
        f, var_f, cov_f = total - f[::-1], np.maximum(total_var + var_f[::-1] - 2 * cov_f[::-1], 0.0), \
            total_var - cov_f[::-1]
        mirrored = estimate_quantile(PrefixCounts(values=f[1:], variances=var_f[1:], total_covariances=cov_f[1:]),
                                     -c[::-1], 0.0, "min", clamp=(-hi, -lo), z=z)
        return QuantileEstimate(value=-mirrored.value, low=-mirrored.high, high=-mirrored.low,
                                stddev=mirrored.stddev)
    p = 0.0 if kind == "min" else float(fraction)
    targets = np.maximum(1.0, z * np.sqrt(var_f)) if kind == "min" else np.full(f.shape, p * total)
    value = _crossing(c, f, targets)
    if kind == "disc":
        value = _representative(c, value, representatives)
    spread = np.sqrt(np.maximum(var_f + p * p * total_var - 2 * p * cov_f, 0.0))
    low, high = _interval(c, f - (1.0 if kind == "min" else p * total), f - p * total, spread, value, z)
    value, low, high = (float(np.clip(v, lo, hi)) for v in (value, low, high))
    return QuantileEstimate(value=value, low=low, high=high, stddev=(high - low) / (2 * z))


def _representative(c: FloatArray, value: float, representatives: npt.ArrayLike | None) -> float:
    """The representative value (default: the middle) of the cell [c_k, c_{k+1}] holding ``value``
    (a value on a boundary belongs to the cell below it, where the prefix count reached its target)."""
    reps = np.asarray(representatives, np.float64) if representatives is not None else (c[:-1] + c[1:]) / 2
    cell = int(np.searchsorted(c, value, side="left")) - 1
    return float(reps[min(max(cell, 0), len(reps) - 1)])


def _crossing(c: FloatArray, f: FloatArray, targets: FloatArray) -> float:
    """The first point where the piecewise-linear F̂ (F̂(c_j) = f_j) reaches target t_j: for the
    first j with f_j ≥ t_j, the point of [c_{j−1}, c_j] where the line from f_{j−1} reaches t_j."""
    reached = np.flatnonzero(f >= targets)
    if reached.size == 0:
        return float(c[-1])
    j = int(reached[0])
    if j == 0:
        return float(c[0])
    rise = f[j] - f[j - 1]
    share = 1.0 if rise <= 0 else float(np.clip((targets[j] - f[j - 1]) / rise, 0.0, 1.0))
    return float(c[j - 1] + share * (c[j] - c[j - 1]))


def _interval(c: FloatArray, d_low: FloatArray, d_high: FloatArray, sd: FloatArray, value: float,
              z: float) -> tuple[float, float]:
    """[largest c_j ≤ value with d_low_j < −z·sd_j, smallest c_j ≥ value with d_high_j > z·sd_j]
    (else c_0, c_K)."""
    below = np.flatnonzero((d_low < -z * sd) & (c <= value))
    above = np.flatnonzero((d_high > z * sd) & (c >= value))
    return (float(c[below[-1]]) if below.size else float(c[0]),
            float(c[above[0]]) if above.size else float(c[-1]))


def cell_boundaries(low: npt.ArrayLike, high: npt.ArrayLike, discrete: bool) -> FloatArray:
    """c_0..c_K from each cell's lowest and highest value (``Ordered.value_bounds``): whole values
    (integers, day numbers) v stand for [v − ½, v + ½], so a cell of values a..b spans
    [a − ½, b + ½]; numeric cells are [low, high] as they are.

    >>> cell_boundaries([0, 1, 2], [0, 1, 4], discrete=True).tolist()
    [-0.5, 0.5, 1.5, 4.5]
    """
    lows, highs = np.asarray(low, np.float64), np.asarray(high, np.float64)
    half = 0.5 if discrete else 0.0
    return np.concatenate([lows[:1] - half, highs + half])
