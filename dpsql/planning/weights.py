"""Per-statement weights of the planning objective, and each statement's per-query baseline.

Objective: every statement s counts in its own scale. With N statements, statement s
of n_s aggregate parts (an AVG has two: SUM and COUNT; each part is a block of m_b answers,
m_s = Σ_b m_b) is compared with answering it alone: each part with the Laplace mechanism at
ε/(N·n_s), variance 2(k·β_b·N·n_s/ε)², or the Gaussian mechanism at ρ/(N·n_s), variance
(k·β_b)²·N·n_s/(2ρ), where k is the privacy unit's rows and β_b the most one row moves one
answer of the part (1 for counts, the clamp bound for sums). The batch minimises

    J = Σ_s w_s/m_s · Σ_{b ∈ s} Σ_{i ∈ b} Var_i / baseline_b,

the weighted mean over each statement's answers of its variance relative to its own baseline
(default w_s = 1: every statement counts equally, a GROUP BY of 100 cells as much as a single
total). A data vector measured with share ε_K has Var_i = v_i·(k·β·ρ_b/ε_K)² in the units
where the planner scores (v_i the unit variance at ε = 1 with one unit's bound moving one
count; ρ_b the ratio of the bound the measurement uses to the baseline's, 1 up to rounding),
so up to a constant J = Σ_K (Σ_{b ∈ K} c_b·t_b) / ε_K² with t_b = Σ_{i ∈ b} v_i and

    c_b = w_s·ρ_b² / (m_s·n_s²)   (Laplace),      c_b = w_s·ρ_b² / (m_s·n_s)   (Gaussian, / ρ_K).

The planner scores trace(WᵀW M) over the workload whose block b rows are scaled by √c_b, which
is exactly Σ_b c_b·t_b; the budget split and the value-cell choice use the same weighted
errors. Only planning sees the weights: answers use the unweighted workload.

Two promises: no statement worse than answering it alone (its mean Var/baseline at most 1), and J
at its least subject to that. The closed-form split (ε_K ∝ (Σ_b c_b·t_b)^{1/3}) keeps the second;
where it breaks the first, ``dpsql.planning.constrained_split`` finds the least J over the shares
with every ratio at most 1, which is the closed form under the raised weights w_s + λ_s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpsql.errors import ShapeError
from dpsql.matrix.workloads import DisjointSum, Explicit, Kron, Sum, VStack, Weighted, Workload
from dpsql.noise import Noise


def parts_power(noise: Noise) -> int:
    """The power of n_s in c_b: 2 for Laplace (variance ∝ 1/ε²), 1 for Gaussian (∝ 1/ρ)."""
    return 2 if noise == "laplace" else 1


def block_weight(weight: float, answers: int, parts: int, noise: Noise, ratio: float = 1.0) -> float:
    """c_b = w_s·ρ_b² / (m_s·n_s^p) (module doc): ``answers`` = m_s, ``parts`` = n_s, ``ratio`` = ρ_b.

    >>> block_weight(1.0, 100, 1, "laplace"), block_weight(2.0, 1, 2, "laplace"), block_weight(1.0, 4, 2, "gaussian")
    (0.01, 0.5, 0.125)
    """
    return weight * ratio**2 / (answers * parts ** parts_power(noise))


def baseline_variance(noise: Noise, total: float, statements: int, parts: int, bound: float) -> float:
    """Variance of one answer of a statement part answered alone: Laplace at ε = total/(N·n_s),
    2·(bound/ε)²; Gaussian at ρ = total/(N·n_s), bound²/(2ρ). ``bound`` = k·β, the most one
    privacy unit moves the part's answers (L1 = L2 for a GROUP BY: one unit's rows may all land
    in one group).

    >>> baseline_variance("laplace", 1.0, 30, 1, 1.0), baseline_variance("gaussian", 0.5, 2, 2, 3.0)
    (1800.0, 36.0)
    """
    share = total / (statements * parts)
    return 2 * (bound / share) ** 2 if noise == "laplace" else bound**2 / (2 * share)


def scaled_stack(W: Workload, rows: Sequence[int], scales: Sequence[float]) -> Workload:
    """W (a VStack of blocks, or their dense one-axis stack) with block b's rows times scales[b].

    Structure is kept: a Kronecker block gets its first factor scaled, a sum each term, a dense
    matrix its rows; W itself when every scale is 1.
    """
    if all(s == 1.0 for s in scales):
        return W
    if isinstance(W, VStack):
        return VStack([_scaled(block, s) for block, s in zip(W.blocks, scales)])
    if isinstance(W, Explicit):
        return Explicit(W.dense() * np.repeat(np.asarray(scales, dtype=np.float64), rows)[:, None])
    if len(scales) == 1:
        return _scaled(W, scales[0])
    raise ShapeError(f"cannot scale the blocks of {W!r}: expected a VStack of blocks or a dense stack.")


def _scaled(W: Workload, scale: float) -> Workload:
    """scale·W in W's own structure."""
    if scale == 1.0:
        return W
    if isinstance(W, Kron) and W.factors and isinstance(W.factors[0], Explicit):
        return Kron([Explicit(W.factors[0].matrix * scale), *W.factors[1:]])
    if isinstance(W, DisjointSum):
        return DisjointSum([_scaled(term, scale) for term in W.terms])
    if isinstance(W, Sum):
        return Sum([_scaled(term, scale) for term in W.terms])
    if isinstance(W, Explicit):
        return Explicit(W.matrix * scale)
    return Weighted(scale, W)


def normalized(weights: Sequence[float]) -> tuple[float, list[float]]:
    """(c_max, [√(c_b/c_max)]): the row scales of a planning workload and the factor that turns
    its error back into Σ_b c_b·t_b. Uniform weights give scales of exactly 1 (the unweighted
    workload, so cached strategies and plans are unchanged)."""
    top = max(weights)
    return top, [1.0 if c == top else math.sqrt(c / top) for c in weights]


#: A statement is worse than alone when its mean squared error ratio exceeds 1 by more than this
#: (0.1 %, 0.05 % in RMSE): ties, e.g. an even split that equals answering alone, are not losses.
TOLERANCE = 1e-3


def worse_than_alone(ratios: Sequence[float], tolerance: float = TOLERANCE) -> list[int]:
    """Indices of statements whose mean Var/baseline exceeds 1 + tolerance."""
    return [s for s, r in enumerate(ratios) if r > 1 + tolerance]
