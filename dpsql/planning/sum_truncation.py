"""Truncated sums: bias, the batch mechanisms' variances, private thresholds and isotonic
post-processing.

Sources: Wu, Pujol, Kotsogiannis and Machanavajjhala, "Answering Summation Queries for Numerical
Attributes under Differential Privacy" (Duke University; the batch mechanisms and SVT selection,
called Wu et al. below); Dong, Fang, Yi, Tao and Machanavajjhala, "R2T: Instance-optimal Truncation
for Differentially Private Query Evaluation with Foreign Key Constraints", SIGMOD 2022 (race to the
top, adapted here to one threshold for a batch of SUMs).

Notation: cells j hold counts xⱼ of rows whose measure lies in a bucket with value vⱼ (its upper
bound, or any public representative); W (m × k) holds the 0/1 predicates of the SUM queries, so
the exact answers are W D x with D = diag(v). Truncation at θ replaces each value by
clip(v, −θ, θ) (min(v, θ) for non-negative data): T = diag(clip(v, −θ, θ)), one row then moves a
sum by at most θ, and the answers W T x carry the bias W (T − D) x ≤ 0 (non-negative data; zero
on every query whose values are all ≤ θ).

Batch mechanisms (Wu et al., Table 1), all measuring once:
    Identity  W T (x + noise)               noise on the counts (strategy I, Δ = 1);
    Workload  W T x + ‖W T‖·noise           strategy W T;
    TaMM(A)   W T x̂, x̂ = A⁺(A x + noise)   A optimized for W T, measured on the counts;
    TiMM(A)   W ŝ,  ŝ = A⁺(A T x + noise)  A optimized for W, measured on the truncated sums
              s = T x, whose sensitivity is ‖A T‖ = maxⱼ |tⱼ|·‖A_{:,j}‖.
Identity and Workload are TaMM with A = I and A = W T. When T has no zero, TiMM(A) is the matrix
mechanism with strategy A T on x, so every variance below is ``accuracy.per_query_variance``.

Threshold selection (each pure ε_sel-DP; a zCDP batch charges ρ_sel = ε_sel²/2):
    svt_threshold      AboveThreshold over a geometric grid uₖ (``geometric_grid``): the first uₖ with
                       more than a fraction r of rows at or below it.
    r2t_threshold      race to the top over τⱼ (``halving_grid``): noisy truncated totals minus a
                       penalty; the argmax τ is released (Dong et al.'s R2T selection, one
                       threshold for the whole batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql import noise
from dpsql.errors import PrivacyParameterError, ShapeError
from dpsql.matrix.workloads import Explicit, Identity, Norm, Product, Workload
from dpsql.planning import accuracy

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Mechanism = Literal["identity", "workload", "tamm", "timm"]


# ============================================================================ truncation
def clipped(values: npt.ArrayLike, theta: float) -> FloatArray:
    """clip(v, −θ, θ): each value's contribution after truncation at θ > 0."""
    if not theta > 0:
        raise ShapeError(f"the truncation threshold must be > 0; got {theta}.")
    return np.clip(np.asarray(values, dtype=np.float64), -theta, theta)


def weighted(W: Workload, weights: npt.ArrayLike) -> Workload:
    """W · diag(weights): the weighted workload (W D, or W T after truncation)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (W.shape[1],):
        raise ShapeError(f"need one weight per cell ({W.shape[1]}); got shape {w.shape}.")
    return Product(W, Explicit(sp.diags_array(w, format="csr")))


def bias(W: Workload, values: npt.ArrayLike, counts: npt.ArrayLike, theta: float) -> FloatArray:
    """W (T − D) x: each answer's truncation bias (data-dependent: for tests and benchmarks only)."""
    v = np.asarray(values, dtype=np.float64)
    return np.asarray(W @ ((clipped(v, theta) - v) * np.asarray(counts, dtype=np.float64)), dtype=np.float64)


def variances(mechanism: Mechanism, W: Workload, values: npt.ArrayLike, theta: float | None,
              A: Workload | None = None, *, noise_kind: noise.Noise = "laplace") -> FloatArray:
    """Each answer's variance at unit privacy (Laplace ε = 1: 2Δ₁²·…; Gaussian ρ = 1/2: Δ₂²·…).

    ``theta`` None means no truncation (T = D); ``A`` is the strategy of TaMM and TiMM.
    """
    t = np.asarray(values, dtype=np.float64) if theta is None else clipped(values, theta)
    WT = weighted(W, t)
    if mechanism == "identity":
        return accuracy.per_query_variance(WT, Identity(W.shape[1]), noise=noise_kind)
    if mechanism == "workload":
        return accuracy.per_query_variance(WT, Explicit(WT.dense()), noise=noise_kind)
    if A is None:
        raise ShapeError(f"{mechanism} needs a strategy A over the {W.shape[1]} cells.")
    if mechanism == "tamm":
        return accuracy.per_query_variance(WT, A, noise=noise_kind)
    if mechanism == "timm":
        norm: Norm = "l1" if noise_kind == "laplace" else "l2"
        scale = float(np.max(np.abs(t) * A.column_norms(norm))) / A.sensitivity(norm)  # ‖A T‖ / ‖A‖
        return accuracy.per_query_variance(W, A, noise=noise_kind) * scale**2
    raise ValueError(f"mechanism must be identity, workload, tamm or timm; got {mechanism!r}.")


# ============================================================================ candidate grids
#: Largest outer bound, in whole units, that a float grid point represents exactly (2^53).
MAX_EXACT_UNITS = 2**53


def geometric_grid(top: float, ratio: float, points: int) -> FloatArray:
    """uₖ = U·c^(k−K+1), k = 0…K−1: K public candidates rising by the factor c to the bound U = uₖ₋₁.

    The one grid convention of the threshold selectors: anchored at the public outer bound U (the
    last candidate, so a selector that never fires returns U) and computed from public
    constants only. Each point is the float U·c^(k−K+1), evaluated as written.
    """
    if not (top > 0 and ratio > 1) or isinstance(points, bool) or not isinstance(points, int) or points < 1:
        raise ShapeError(f"a geometric grid needs top > 0, ratio > 1 and points ≥ 1; got {top}, {ratio}, {points}.")
    return np.array([top * ratio ** (k - points + 1) for k in range(points)], dtype=np.float64)


def halving_grid(units: int, points: int) -> list[int]:
    """τⱼ = ⌊U/2^(J−1−j)⌋ ≥ 1, j = 0…J−1, J = min(points, bit length of U): the geometric grid of
    ratio 2 ending at the integer bound U, floored to whole units (race to the top's thresholds).

    U·2^(−s) is exact in floating point for U ≤ 2^53, so the floor is U >> s exactly.
    """
    if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= MAX_EXACT_UNITS:
        raise ShapeError(f"the halving grid needs an integer bound 1 ≤ U ≤ 2^53; got {units!r}.")
    levels = min(points, units.bit_length())
    return [max(1, math.floor(u)) for u in geometric_grid(float(units), 2.0, levels).tolist()]


# ============================================================================ SVT
@dataclass(frozen=True, slots=True)
class Threshold:
    """A released threshold: its value, its grid index (None: the fallback) and its ε cost."""

    theta: float
    index: int | None
    epsilon: float


def svt_threshold(below: npt.ArrayLike, total: int, grid: npt.ArrayLike, *, fraction: Fraction | float,
                  epsilon: float, max_rows: int = 1, rng: noise.RandomSource | None = None) -> Threshold:
    """AboveThreshold: the first grid value uₖ with #{rows ≤ uₖ} > r·N, ε-DP (add/remove one row).

    ``below[k]`` = #{rows with value ≤ grid[k]} and ``total`` = N are the data; r = p/q.

    Privacy: N is private, so the queries are gₖ = q·belowₖ − p·N against the threshold 0 (integers;
    one row moves every gₖ by q − p or −p, so Δ = max(p, q − p)); gₖ is not monotone across
    neighbours. AboveThreshold (Dwork–Roth Alg. 1) draws the threshold noise once,
    Lap_Z(2Δ/ε), and Lap_Z(4Δ/ε) per query, and halts at the first gₖ + νₖ > 0 + noise; its proof
    shifts the threshold noise by Δ and the halting query's noise by 2Δ, integer shifts under
    which the discrete Laplace density ratio is at most e^{ε/2} each, so the output index is ε-DP
    however many queries answered ⊥. If none fires the last grid value (≥ the public cap) is
    returned, which is also post-processing. A privacy unit of up to ``max_rows`` rows moves each
    gₖ by at most ``max_rows`` times as much, and Δ scales with it.
    """
    r = Fraction(fraction).limit_denominator(10**6)
    if not 0 < r < 1:
        raise PrivacyParameterError(f"the SVT fraction r must be in (0, 1); got {fraction}.")
    _check_epsilon(epsilon)
    counts = np.array([int(c) for c in np.ravel(below).tolist()], dtype=object)  # exact, any size
    points = np.asarray(grid, dtype=np.float64)
    if points.ndim != 1 or counts.shape != points.shape or total < 0:
        raise ShapeError(f"need one count per grid value ({points.size}) and N ≥ 0.")
    p, q = r.numerator, r.denominator
    delta = max(p, q - p) * _positive_rows(max_rows)
    source = noise.resolve_rng(rng)
    threshold = int(noise.discrete_laplace_wide(noise.fraction_at_least(2 * delta / epsilon), 1, rng=source)[0])
    draws = noise.discrete_laplace_wide(noise.fraction_at_least(4 * delta / epsilon), points.size,
                                        rng=source).astype(object)
    fired = np.flatnonzero(np.array([q * c - p * int(total) + int(d) > threshold for c, d in zip(counts, draws)],
                                    dtype=bool))
    if fired.size == 0:
        return Threshold(theta=float(points[-1]), index=None, epsilon=epsilon)
    return Threshold(theta=float(points[int(fired[0])]), index=int(fired[0]), epsilon=epsilon)


# ============================================================================ race to the top
def r2t_penalties(taus: npt.ArrayLike, *, epsilon: float, beta: float = 0.1,
                  kappa: float = 0.0) -> tuple[FloatArray, FloatArray]:
    """(noise scales J·τⱼ/ε, penalties J·ln(J/β)·τⱼ/ε + κ·τⱼ): public constants of the selection."""
    _check_epsilon(epsilon)
    if not 0 < beta < 1 or kappa < 0:
        raise PrivacyParameterError(f"R2T needs 0 < beta < 1 and kappa ≥ 0; got {beta}, {kappa}.")
    tau = np.asarray(taus, dtype=np.float64)
    J = tau.size
    return J * tau / epsilon, J * math.log(J / beta) * tau / epsilon + kappa * tau


def r2t_threshold(truncated_sums: npt.ArrayLike, taus: npt.ArrayLike, *, epsilon: float, beta: float = 0.1,
                  kappa: float = 0.0, max_rows: int = 1, rng: noise.RandomSource | None = None) -> Threshold:
    """Race to the top: θ = τ_ĵ, ĵ = argmax (sⱼ + Lap_Z(J·τⱼ/ε) − penalty_j); τ₀ if every score ≤ 0.

    ``truncated_sums[j]`` = Σ_rows min(|v|, τⱼ) in integer units of the value grid, ``taus`` the
    integer thresholds in the same units.

    Privacy: each sⱼ moves by at most τⱼ when one row (or unit total) is added or removed, so
    each noisy sⱼ is (ε/J)-DP and the J of them ε-DP by sequential composition; the penalties
    are public and the argmax (ties to the smaller τ) is post-processing. With privacy units of
    up to ``max_rows`` rows (each clipped on its own) sⱼ moves by ``max_rows``·τⱼ: the noise
    scales with it.
    """
    sums = np.array([int(v) for v in np.ravel(truncated_sums)], dtype=object)  # exact
    tau = np.asarray(taus, dtype=np.int64)
    if sums.shape != tau.shape or tau.size == 0 or np.any(tau <= 0):
        raise ShapeError("need one truncated sum per threshold, thresholds > 0.")
    scales, penalties = r2t_penalties(tau.tolist(), epsilon=epsilon / _positive_rows(max_rows), beta=beta, kappa=kappa)
    source = noise.resolve_rng(rng)
    draws = [int(noise.discrete_laplace_wide(noise.fraction_at_least(scale), 1, rng=source)[0])
             for scale in scales.tolist()]
    scores = np.array([float(s + d) - c for s, d, c in zip(sums, draws, penalties.tolist())])  # exact sum, then a float
    if np.max(scores) <= 0:
        return Threshold(theta=float(tau[0]), index=0, epsilon=epsilon)
    best = int(np.argmax(scores))  # first maximum: ties go to the smaller τ
    return Threshold(theta=float(tau[best]), index=best, epsilon=epsilon)


# ============================================================================ post-processing
def isotonic_increasing(y: npt.ArrayLike, weights: npt.ArrayLike | None = None) -> FloatArray:
    """The weighted L2 projection of y onto non-decreasing sequences (pool adjacent violators).

    Post-processing (no privacy cost); for prefix sums of non-negative values, whose true
    answers are non-decreasing. Each pooled block takes its weighted mean, so the weighted sum
    of y is preserved.
    """
    values = np.asarray(y, dtype=np.float64)
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    if values.ndim != 1 or w.shape != values.shape or np.any(w <= 0):
        raise ShapeError("isotonic regression needs a 1-D sequence and positive weights of the same length.")
    means: list[float] = []
    masses: list[float] = []
    lengths: list[int] = []
    for value, weight in zip(values.tolist(), w.tolist()):
        means.append(value)
        masses.append(weight)
        lengths.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            mass = masses[-2] + masses[-1]
            mean = (means[-2] * masses[-2] + means[-1] * masses[-1]) / mass
            length = lengths[-2] + lengths[-1]
            del means[-1], masses[-1], lengths[-1]
            means[-1], masses[-1], lengths[-1] = mean, mass, length
    return np.repeat(np.array(means), lengths)


def _positive_rows(max_rows: int) -> int:
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise PrivacyParameterError(f"max_rows must be an integer ≥ 1; got {max_rows!r}.")
    return max_rows


def _check_epsilon(epsilon: float) -> None:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) or epsilon <= 0:
        raise PrivacyParameterError(f"epsilon must be a finite number > 0; got {epsilon!r}.")
