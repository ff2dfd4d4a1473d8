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
- MIN and MAX: a confidence interval that holds for any data, and its midpoint (below).
- Confidence interval (normal approximation, z = 1.96 for 95 %): with D_j = F̂(c_j) − p·N̂ and
  Var D_j = Var F̂(c_j) + p²·Var N̂ − 2p·Cov(F̂(c_j), N̂), the low end is the largest boundary
  c_j ≤ estimate with D_j < −z·sd(D_j) (then F(c_j) < p·N: the quantile is above c_j), the high
  end the smallest c_j ≥ estimate with D_j > z·sd(D_j); the domain's bounds when there is none.
  The ends are cell boundaries, which covers the estimate's within-cell ambiguity.
- Reported standard error: (high − low) / (2z), the CI's half-width in standard-normal units
  (the estimate's sampling distribution is not normal; the CI is the primary figure).
- The 0 and 1 quantiles (PERCENTILE_CONT(0), ...) are MIN and MAX.
- NULL: when N̂ < max(1, MIN_TOTAL_STDDEVS·sd(N̂)) — decided from noisy values only.

MIN, simultaneously over the boundaries. F(c_j), the rows in cells 0..j−1, is a whole number and
F̂(c_j) = F(c_j) + e_j, e_j = a_j·z a public linear combination of the measurement's iid
noise z (discrete Laplace or discrete Gaussian), symmetric, of standard deviation s_j. With K′ the
boundaries where s_j > 0, α = 1 − (the CI's level) = 0.05 and κ = ``tail_multiplier(law, α/K′)``
(``dpsql.answers.tail_bounds``: P(e_j ≥ κ·s_j) ≤ α/K′ whatever a_j is), q_j = κ·s_j + r and
  high = the first c_j with F̂(c_j) > q_j       ("surely occupied": then F(c_j) ≥ 1, unless e_j ≥ q_j),
  low  = the last c_j ≤ high with F̂(c_j) + q_j < 1  ("surely empty": then F(c_j) = 0, unless e_j ≤ −q_j),
(c_K and c_0 when there is none; c_0 always qualifies: F̂(c_0) = 0 exactly). If the minimum lies in
cell k*, F(c_j) = 0 for j ≤ k* and ≥ 1 for j > k*, so [low, high] misses that cell only if
e_j ≥ q_j for some j ≤ k* or e_j ≤ −q_j for some j > k*: each boundary can fail one way only, and
by the union bound P(miss) ≤ K′·α/K′ = α — for every data set with at least one row and every
strategy, whatever the cells scanned and however sparse the tail (Bonferroni over the boundaries;
a boundary without noise cannot fail). The value is the interval's midpoint and the stddev its
half-width / z (after clamping the three to the domain; whole values v stand for [v − ½, v + ½], so
the clamped half-width still reaches the true MIN), so the number returned is within z·stddev of
the true MIN with probability ≥ 1 − α. Where no noisy count can show an empty tail (moderate ε:
q_j ≫ 1), low is the domain's bound and the midpoint lies halfway to it. MAX is MIN of the counts above each boundary,
N̂ − F̂(c_j) (again a combination of the noise, with variance Var N̂ + Var F̂ − 2 Cov), on the
mirrored axis. The thresholds are post-processing of the same release: no privacy cost.

Float rounding: F̂(c_j) is computed in float64 (least squares over the strategy), so it carries a
rounding error besides e_j. Where the noise is negligible (a huge ε: s_j ~ 1e-40) a whole count of
1 comes out as 0.9999999999998 or 1.0000000000002 depending on the BLAS kernels, and a rule on
F̂ + κ·s_j < 1 alone would decide "surely empty" by that last bit. So q_j adds r =
min(¼, ROUNDING_MARGIN·max(1, |N̂|)), a bound on that rounding (observed: about one unit in the last
place of N̂; r allows 2¹⁷ times more), and the proof above holds with F̂ − r ≤ F + e_j ≤ F̂ + r. r ≤ ¼
keeps c_0 (F̂ = 0) surely empty; at N̂ beyond 2³⁴ rows the cap is still ≫ the rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from dpsql.answers.tail_bounds import NoiseLaw, tail_multiplier

FloatArray = npt.NDArray[np.float64]
QuantileKind = Literal["cont", "disc", "min", "max"]

#: The two-sided 95 % standard normal quantile.
Z95 = 1.959963984540054
#: A group's quantile is NULL where its noisy count N̂ is below max(1, this many standard errors of N̂).
MIN_TOTAL_STDDEVS = 2.0
#: Bound on the float rounding of a prefix count, relative to max(1, |N̂|) (module docstring: Float rounding).
ROUNDING_MARGIN = 2.0**-36


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
                      z: float = Z95, law: NoiseLaw | None = None) -> QuantileEstimate:
    """The quantile of one group (see the module docstring).

    Args:
        prefix: the group's noisy prefix counts (K of them).
        boundaries: c_0..c_K, increasing.
        fraction: p in [0, 1] (ignored by MIN and MAX).
        kind: "cont" (interpolated), "disc" (the representative value of the estimate's cell),
            "min" or "max".
        clamp: the domain's value range the estimate and CI are clamped to (default [c_0, c_K]).
        representatives: each cell's representative value for "disc" (default: its midpoint).
        z: the CI's standard-normal quantile (its level is 1 − erfc(z/√2): 95 % at 1.96).
        law: the noise the prefix counts are linear in; MIN and MAX need it unless every
            variance is 0.
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
        extreme = estimate_quantile(prefix, c, fraction, "min" if fraction == 0.0 else "max", clamp=clamp, z=z,
                                    law=law)
        return extreme if kind == "cont" else replace(extreme, value=_representative(c, extreme.value, representatives))
    f = np.concatenate([[0.0], values])
    var_f = np.concatenate([[0.0], np.maximum(variances, 0.0)])
    cov_f = np.concatenate([[0.0], covariances])
    if kind == "max":  # MAX is MIN of the counts above each boundary, on the mirrored axis
        f, var_f, cov_f = total - f[::-1], np.maximum(total_var + var_f[::-1] - 2 * cov_f[::-1], 0.0), \
            total_var - cov_f[::-1]
        mirrored = estimate_quantile(PrefixCounts(values=f[1:], variances=var_f[1:], total_covariances=cov_f[1:]),
                                     -c[::-1], 0.0, "min", clamp=(-hi, -lo), z=z, law=law)
        return QuantileEstimate(value=-mirrored.value, low=-mirrored.high, high=-mirrored.low,
                                stddev=mirrored.stddev)
    if kind == "min":
        return _minimum(c, f, np.sqrt(var_f), (lo, hi), z, law, min(0.25, ROUNDING_MARGIN * max(1.0, abs(total))))
    p = float(fraction)
    value = _crossing(c, f, np.full(f.shape, p * total))
    if kind == "disc":
        value = _representative(c, value, representatives)
    spread = np.sqrt(np.maximum(var_f + p * p * total_var - 2 * p * cov_f, 0.0))
    low, high = _interval(c, f - p * total, spread, value, z)
    value, low, high = (float(np.clip(v, lo, hi)) for v in (value, low, high))
    return QuantileEstimate(value=value, low=low, high=high, stddev=(high - low) / (2 * z))


def _minimum(c: FloatArray, f: FloatArray, sd: FloatArray, clamp: tuple[float, float], z: float,
             law: NoiseLaw | None, rounding: float) -> QuantileEstimate:
    """MIN from the counts f_j = F̂(c_j) at or below each boundary (f_0 = 0 exactly) and their
    standard errors: the simultaneous interval [low, high] and its midpoint (module docstring;
    ``rounding`` is r, the bound on the counts' float rounding)."""
    noisy = int(np.count_nonzero(sd > 0))
    if not noisy:
        q = sd + rounding
    elif law is None:
        raise ValueError("MIN and MAX of noisy counts need the noise law of their measurement")
    else:
        q = tail_multiplier(law, math.erfc(z / math.sqrt(2.0)) / noisy) * sd + rounding
    occupied = np.flatnonzero(f > q)
    high = float(c[occupied[0]]) if occupied.size else float(c[-1])
    low = float(c[np.flatnonzero((f + q < 1.0) & (c <= high))[-1]])  # c_0 qualifies: f_0 = 0, sd 0
    value, low, high = (float(np.clip(v, *clamp)) for v in ((low + high) / 2, low, high))
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


def _interval(c: FloatArray, d: FloatArray, sd: FloatArray, value: float, z: float) -> tuple[float, float]:
    """[largest c_j ≤ value with d_j < −z·sd_j, smallest c_j ≥ value with d_j > z·sd_j] (else c_0, c_K)."""
    below = np.flatnonzero((d < -z * sd) & (c <= value))
    above = np.flatnonzero((d > z * sd) & (c >= value))
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
