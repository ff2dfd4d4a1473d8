"""ResidualPlanner: the optimal Gaussian matrix mechanism for batches of marginals.

Xiao, He, Zhang and Kifer, "An Optimal and Scalable Matrix Mechanism for Noisy Marginals under
Convex Loss Functions" (NeurIPS 2023), with the secure discrete-Gaussian measurement of its journal
extension, He, Xiao, Toksoz, Ding, Zhang and Kifer, "ResidualPlanner+: a scalable matrix mechanism
for marginals and beyond" (arXiv:2305.08175, 2023). A marginal is a COUNT … GROUP BY over an
attribute set; this module selects, measures and reconstructs any batch of them without ever
forming the product domain Π nᵢ.

Notation (dpsql.residual.lattice): d attributes of public sizes nᵢ ≥ 2, marginals A as strictly
    increasing attribute tuples with cells(A) = Π_{i∈A} nᵢ, closure(W) every subset of every
    requested marginal.
    Sub_n = [1 | −I_{n−1}] ((n−1) × n, Sub_n 1 = 0, Sub_n Sub_nᵀ = I + J) and
    B_n = [1/n · 1 | Sub_n⁺] = F_n⁻¹ with F_n = [1ᵀ; Sub_n]. Applied along one axis of a tensor,
    Sub is t[0] − t[1:] and B is (Σ t)/n − (0, t[1], …, t[n−1]), both O(n).

Residual basis (Thm 4.1): R_S = ⊗_{i∈S} Sub_{nᵢ} ⊗_{i∉S} 1ᵀ. The rows of R_S for S ⊆ A are a
    basis of the row space of the marginal Q_A, and R_S R_Tᵀ = 0 for S ≠ T.
Base mechanisms (Thm 4.3): M_S(x) = R_S x + N(0, σ_S² ⊗_{i∈S} Sub Subᵀ) has privacy cost
    p_S/σ_S² with p_S = Π_{i∈S}(nᵢ − 1)/nᵢ. Every diagonal entry of R_Sᵀ Σ_S⁻¹ R_S equals p_S, so
    releasing M_S for every S in the closure costs exactly pcost = Σ_S p_S/σ_S² and is
    ρ = pcost/2 zero-concentrated DP (add/remove one record).
Reconstruction (Alg. 2 / Thm 4.4): q_A = (⊗_{i∈A} B_{nᵢ}) Ω_A, where the tensor Ω_A holds ω_S
    (the noisy R_S x, S ⊆ A) in its block "index 0 on the axes A∖S, 1…n−1 on the axes S". It is
    the unique linear unbiased estimate from the releases, hence the BLUE; marginals agree on
    shared sub-marginals because each uses exactly the releases of its own subsets. Every cell of A
    has the variance
        V_A = Σ_{S⊆A} C_{A,S} σ_S²,   C_{A,S} = p_S Π_{j∈A∖S} nⱼ⁻²,
    and for cells c of A and c′ of B, with I = A ∩ B,
        Cov(q_A[c], q_B[c′]) = Π_{i∈A△B} nᵢ⁻¹ Σ_{S⊆I} σ_S² Π_{i∈S}([cᵢ = c′ᵢ] − 1/nᵢ) Π_{i∈I∖S} nᵢ⁻².
Selection, with weights w_A > 0 (default 1) and budget c = pcost = 2ρ:
    sum_variance  minimises Σ_A w_A · (sum of the cell variances of A): with
        v_S = Σ_{A⊇S} w_A cells(A) C_{A,S}, Cauchy–Schwarz gives the optimum
        T = (Σ_S √(v_S p_S))²/c at σ_S² = √(p_S/v_S) Σ_T √(v_T p_T)/c (Lemma 2); with unit
        weights T equals the SVD lower bound, so no matrix mechanism does better.
    max_variance  minimises max_A w_A V_A. In u_S = σ_S² it is min Σ_S p_S/u_S subject to
        w_A V_A(u) ≤ 1 (V is linear in u), then rescaled to cost c; the optimum max is that
        minimum over c, solved with a certified duality gap by dpsql.residual.solver.
    Both run on the coarsest equitable partition of the bipartite graph (marginals, closure
    sets; edge weights C_{A,S}) of dpsql.residual.symmetry: the optimum is constant on its
    classes, so the problem shrinks from one variable per closure set to one per class. Reduced
    problems with more than solver.DENSE_KKT_LIMIT classes solve the Newton systems by conjugate
    gradients (e.g. 14,680 classes for ≤3-way on 100 random sizes: about 10 s). The reported
    variances are always recomputed on the full problem, so a (vanishingly unlikely) hash
    collision in the refinement could only cost optimality, never correctness or privacy.
Secure measurement (Alg. 3, discrete Gaussian): for each S, with σ̄_S² ≥ σ_S² rational and
    γ_S² = σ̄_S² Π_{i∈S} nᵢ², release ω_S = Y⁺(Ξ_S x + z), z iid N_Z(0, γ_S²) per cell of S,
    Ξ_S = ⊗_{i∈S}(nᵢ I − J) (an integer matrix, applied to the integer marginal table) and
    Y⁺ = ⊗_{i∈S} Sub/nᵢ. Each column of Ξ_S has squared norm Π nᵢ(nᵢ − 1), so by Canonne–
    Kamath–Steinke the integer release is ρ_S = Π nᵢ(nᵢ − 1)/(2γ_S²) = p_S/(2σ̄_S²)-zCDP,
    exactly the continuous cost, and Y⁺ is post-processing: Y⁺Ξ_S = R_S, and Y⁺z has covariance
    Var(z) · Π nᵢ⁻² ⊗ Sub Subᵀ, so the continuous formulas hold with σ_S² = Var(z)/Π nᵢ²
    (Var(z) < γ_S², computed exactly). Composition over the closure adds the ρ_S; the rational
    γ_S² and the exact sum are those of dpsql.residual.rational.

Costs (E = Σ_{A∈W} 2^|A| marginal–subset pairs, K = classes, cells summed over the named sets):
    select       O(E log E) for the closure and the refinement; O(E) for sum_variance; about a
                 dozen interior-point steps of O(K³ + E) for max_variance (dense K ≤ solver.DENSE_KKT_LIMIT).
    measure      Σ_{S∈closure} cells(S) exact discrete-Gaussian draws (the dominant cost) and
                 O(|S| cells(S)) integer and float work per set, batched by table shape.
    reconstruct  O((2^|A| + |A|) cells(A)) per marginal, batched by table shape; memory is the
                 output itself plus one batch of BATCH_CELLS.
    variance     O(2^|A|) per marginal; covariance O(2^|I| cells(I)² + cells(A) cells(B)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql import noise
from dpsql.errors import DomainTooLargeError
from dpsql.residual import base, rational, solver
from dpsql.residual.lattice import (
    BATCH_CELLS,
    FloatArray,
    IntArray,
    Lattice,
    Marginal,
    Objective,
    build_lattice,
    check_domains,
    check_marginals,
    check_request,
    closure_tables,
)
from dpsql.residual.symmetry import equitable_classes

__all__ = ["Measurements", "Selection", "basis_axis", "gaussian_parameters", "measure", "reconstruct", "select",
           "sub_axis"]

_Number = TypeVar("_Number", bound=np.number)

#: Most entries of a dense covariance matrix built by ``covariance``.
MAX_COVARIANCE_ENTRIES = 2**24
_INT64_SAFE = 2**62


# ============================================================================ axis transforms
def sub_axis(t: npt.NDArray[_Number], axis: int) -> npt.NDArray[_Number]:
    """Sub_n applied along ``axis`` (length n → n − 1): t[0] − t[1:], exact for integer t."""
    head = np.take(t, [0], axis=axis)
    return head - np.take(t, np.arange(1, t.shape[axis]), axis=axis)


def basis_axis(t: FloatArray, axis: int) -> FloatArray:
    """B_n = [1/n · 1 | Sub_n⁺] applied along ``axis`` in place (length n): (Σ t)/n − (0, t[1:])."""
    n = t.shape[axis]
    mean = t.sum(axis=axis, keepdims=True) / n
    head = [slice(None)] * t.ndim
    head[axis] = slice(0, 1)
    t[tuple(head)] = 0.0
    np.negative(t, out=t)
    t += mean
    return t


def _xi_axis(t: IntArray, axis: int) -> IntArray:
    """(n I − J) applied along ``axis`` of an integer tensor: n t − Σ t."""
    return t * t.shape[axis] - t.sum(axis=axis, keepdims=True)


# ============================================================================ selection
@dataclass(frozen=True, eq=False, kw_only=True)
class Selection(base.Selection):
    """ResidualPlanner's selection: one noise scale σ_S² per closure set, shared by equitable classes.

    Fields (besides those of dpsql.residual.base.Selection, whose ``bound`` here holds for every
    Gaussian matrix mechanism):
        classes      the equitable class of each closure set (sets of a class share σ²).
        class_sigma2 σ̄² per class: the exact rational noise scale the measurement uses.
    """

    classes: IntArray = field(repr=False)
    class_sigma2: tuple[Fraction, ...] = field(repr=False)

    @cached_property
    def variances(self) -> FloatArray:
        """The per-cell variance of every requested marginal, in ``marginals`` order."""
        return _marginal_variances(self.lattice, self.sigma2)

    def variance(self, marginal: Sequence[int]) -> float:
        """Per-cell variance of any closure marginal (every cell of a marginal has the same)."""
        return _variance(self.lattice, self.sigma2, marginal)

    def covariance(self, a: Sequence[int], b: Sequence[int]) -> FloatArray:
        """Dense cells(a) × cells(b) covariance of the reconstructed tables a and b (raveled)."""
        return _covariance(self.lattice, self.sigma2, a, b)

    def rmse(self) -> float:
        """√(total cell variance / total cells) over the requested marginals (the paper's RMSE)."""
        cells = _cells(self.lattice)
        return math.sqrt(float(cells @ self.variances) / float(cells.sum()))

    def max_variance(self) -> float:
        """The largest cell variance over the requested marginals."""
        return float(self.variances.max())

    def objective_value(self) -> float:
        """Σ_A w_A cells(A) V_A (sum_variance) or max_A w_A V_A (max_variance)."""
        w = np.asarray(self.weights)
        if self.objective == "sum_variance":
            return float(np.sum(w * _cells(self.lattice) * self.variances))
        return float(np.max(w * self.variances))


def _cells(lattice: Lattice) -> FloatArray:
    """cells(A) of every requested marginal."""
    group_cells = np.array([math.prod(shape) for shape in lattice.group_shapes], dtype=np.float64)
    return group_cells[lattice.group[lattice.marginal_set]]


def _marginal_variances(lattice: Lattice, sigma2: FloatArray) -> FloatArray:
    weights = lattice.coefficient * sigma2[lattice.pair_set]
    return np.bincount(lattice.pair_marginal, weights=weights, minlength=len(lattice.marginals)).astype(np.float64)


def _variance(lattice: Lattice, sigma2: FloatArray, marginal: Sequence[int]) -> float:
    """V_A = Σ_{S⊆A} p_S Π_{A∖S} n⁻² σ_S² (Thm 4.4)."""
    position = lattice.locate(marginal)
    subsets = lattice.subset_ids(np.array([position]))[0]
    shape = lattice.shape(position)
    total = 0.0
    for mask, s in enumerate(subsets.tolist()):
        dropped = math.prod(n for b, n in enumerate(shape) if not mask >> b & 1)
        total += lattice.p[s] * sigma2[s] / dropped**2
    return total


def _covariance(lattice: Lattice, sigma2: FloatArray, a: Sequence[int], b: Sequence[int]) -> FloatArray:
    """Cov(q_a, q_b) (module doc): a Kronecker sum over S ⊆ a ∩ b, broadcast to the cells of a and b."""
    pa, pb = lattice.locate(a), lattice.locate(b)
    A, B = lattice.closure[pa], lattice.closure[pb]
    cells_a, cells_b = math.prod(lattice.shape(pa)), math.prod(lattice.shape(pb))
    if cells_a * cells_b > MAX_COVARIANCE_ENTRIES:
        raise DomainTooLargeError(
            f"the covariance of {A} and {B} has {cells_a * cells_b:,} entries, above "
            f"MAX_COVARIANCE_ENTRIES = {MAX_COVARIANCE_ENTRIES:,}; use variance() for per-cell variances."
        )
    common = tuple(i for i in A if i in B)
    n = [int(lattice.sizes[i]) for i in common]
    kernel = np.zeros((math.prod(n), math.prod(n)))
    for mask in range(1 << len(common)):
        s = lattice.index[tuple(i for bit, i in enumerate(common) if mask >> bit & 1)]
        term = np.ones((1, 1))
        for bit, m in enumerate(n):
            factor = np.eye(m) - 1.0 / m if mask >> bit & 1 else np.full((m, m), 1.0 / m**2)
            term = np.kron(term, factor)
        kernel += sigma2[s] * term
    scale = 1.0 / math.prod(int(lattice.sizes[i]) for i in set(A) ^ set(B))
    return scale * kernel[np.ix_(_project_cells(lattice, A, common), _project_cells(lattice, B, common))]


def _project_cells(lattice: Lattice, marginal: Marginal, common: Marginal) -> IntArray:
    """For each cell of ``marginal`` (raveled), the raveled index of its restriction to ``common``."""
    shape = [int(lattice.sizes[i]) for i in marginal]
    keep = [marginal.index(i) for i in common]
    if not keep:
        return np.zeros(math.prod(shape), dtype=np.int64)
    index = np.indices(shape).reshape(len(shape), -1)
    return np.ravel_multi_index(tuple(index[keep]), [shape[k] for k in keep]).astype(np.int64)


def select(
    domains: Sequence[int],
    marginals: Sequence[Sequence[int]],
    *,
    objective: Objective = "sum_variance",
    rho: float | Fraction = 0.5,
    weights: Sequence[float] | None = None,
) -> Selection:
    """Choose the optimal noise scale of every residual base mechanism for ``marginals``.

    Args:
        domains: the public size nᵢ ≥ 2 of every attribute.
        marginals: the requested marginals, each a strictly increasing tuple of attribute
            indices (() is the grand total); each appears once.
        objective: "sum_variance" minimises Σ_A w_A · (sum of the cell variances of A), the
            paper's RMSE objective when all w_A = 1; "max_variance" minimises max_A w_A V_A.
        rho: the zCDP budget ρ > 0 of the measurement (pcost = 2ρ; ρ = 1/2 is pcost 1).
        weights: one weight w_A > 0 per marginal (default 1): larger means more accurate.

    Privacy: selection reads only the public sizes and the workload, never data. The returned
    ``rho`` (≤ the requested ρ) is exactly what :func:`measure` will spend.

    Raises:
        ShapeError: empty or malformed marginals, a repeated marginal, sizes < 2, or bad weights.
        ValueError: an unknown objective.
        PrivacyParameterError: rho is not a finite number > 0.
        DomainTooLargeError: a marginal above MAX_MARGINAL_CELLS cells or more than
            MAX_SUBSET_PAIRS marginal–subset pairs.
    """
    sizes = check_domains(domains)
    batch, orders = check_marginals(marginals, sizes)
    budget, w = check_request(orders, len(batch), objective, rho, weights, sets="marginals", pair="marginal")
    lattice = build_lattice(sizes, batch, orders)
    set_class, marginal_class = equitable_classes(lattice, w)
    c = 2.0 * float(budget)
    if objective == "sum_variance":
        sigma2, bound = _sum_variance_scales(lattice, w, set_class, c)
    else:
        sigma2, bound = _max_variance_scales(lattice, w, set_class, marginal_class, c)
    class_sigma2, spent = _rational_scales(lattice, set_class, sigma2, budget)
    exact = np.array([float(s) for s in class_sigma2])[set_class]
    return Selection(
        domains=tuple(int(n) for n in sizes), marginals=batch, objective=objective,
        weights=tuple(float(x) for x in w), classes=set_class, class_sigma2=class_sigma2,
        sigma2=exact, rho=spent, bound=bound, lattice=lattice,
    )


def _class_representatives(classes: IntArray) -> tuple[IntArray, IntArray]:
    """(first member, size) of every class."""
    _, first, count = np.unique(classes, return_index=True, return_counts=True)
    return first.astype(np.int64), count.astype(np.int64)



def _sum_variance_scales(lattice: Lattice, w: FloatArray, set_class: IntArray, c: float) -> tuple[FloatArray, float]:
    """Lemma 2 on classes: σ_k² = √(p_k/v_k) Σ_l n_l √(v_l p_l)/c; returns (σ² per class, T)."""
    importance = w * _cells(lattice)
    v = np.bincount(lattice.pair_set, weights=importance[lattice.pair_marginal] * lattice.coefficient,
                    minlength=len(lattice.sets))
    first, count = _class_representatives(set_class)
    p, v = lattice.p[first], v[first]
    root = math.fsum((count * np.sqrt(v * p)).tolist())
    return solver.normalise(p, count, np.sqrt(p / v) * root / c, c), root**2 / c


def _max_variance_scales(
    lattice: Lattice, w: FloatArray, set_class: IntArray, marginal_class: IntArray, c: float,
) -> tuple[FloatArray, float]:
    """min max_A w_A V_A at cost c, on the classes: returns (σ² per class, dual lower bound)."""
    set_first, count = _class_representatives(set_class)
    marginal_first, _ = _class_representatives(marginal_class)
    representative = np.zeros(len(lattice.marginals), dtype=bool)
    representative[marginal_first] = True
    keep = representative[lattice.pair_marginal]
    constraints = sp.csr_array(
        (w[lattice.pair_marginal[keep]] * lattice.coefficient[keep],
         (marginal_class[lattice.pair_marginal[keep]], set_class[lattice.pair_set[keep]])),
        shape=(len(marginal_first), len(set_first)),
    )
    P = count * lattice.p[set_first]
    u, lower = solver.minimise_cost(P, constraints)
    value = math.fsum((P / u).tolist())
    return solver.normalise(lattice.p[set_first], count, u * value / c, c), lower / c


# ---------------------------------------------------------------------------- noise scales
def gaussian_parameters(sizes: Sequence[int], sigma2: Fraction) -> tuple[Fraction, Fraction]:
    """(γ², ρ) of Algorithm 3 for one residual over attribute sizes ``sizes`` at noise scale σ².

    γ² = σ² Π nᵢ² is the discrete-Gaussian parameter per cell; ρ = Π nᵢ(nᵢ − 1)/(2γ²) = p/(2σ²)
    is the exact zCDP cost (the squared L2 norm of each column of Ξ = ⊗(nᵢ I − J) over 2γ²).

    >>> gaussian_parameters([4], Fraction(4, 9))
    (Fraction(64, 9), Fraction(27, 32))
    """
    gamma2 = Fraction(sigma2) * math.prod(n * n for n in sizes)
    return gamma2, Fraction(math.prod(n * (n - 1) for n in sizes)) / (2 * gamma2)



def _rational_scales(
    lattice: Lattice, set_class: IntArray, sigma2: FloatArray, budget: Fraction,
) -> tuple[tuple[Fraction, ...], Fraction]:
    """σ̄² per class with γ² = σ̄² Π n² rounded up, and ρ = Σ_k count_k p_k/(2σ̄_k²) rounded up.

    The sensitivity of a release over S is Π nᵢ(nᵢ − 1) (module doc); rounding and the exact sum
    are dpsql.residual.rational's, so ρ never exceeds the budget.
    """
    first, count = _class_representatives(set_class)
    scales: list[Fraction] = []
    total = 0
    for k, (s, members) in enumerate(zip(first.tolist(), count.tolist())):
        shape = [int(n) for n in lattice.sizes[lattice.sets[s][: lattice.set_size[s]]]]
        square = math.prod(n * n for n in shape)
        gamma2 = rational.noise_parameter(float(sigma2[k]), square)
        scales.append(gamma2 / square)
        total += rational.rho_units(members, math.prod(n * (n - 1) for n in shape), gamma2)
    return tuple(scales), rational.spent_rho(total, budget)


# ============================================================================ measurement
@dataclass(frozen=True, eq=False, kw_only=True)
class Measurements(base.Measurements[Selection]):
    """ResidualPlanner's releases ω_S of every closure set, batched by table shape.

    Fields (besides those of dpsql.residual.base.Measurements, whose ``sigma2`` here is
    Var[N_Z(0, γ_S²)]/Π nᵢ²):
        blocks     ω per table shape: blocks[g][row] is ω_S raveled, of length Π (nᵢ − 1).
    """

    blocks: tuple[FloatArray, ...] = field(repr=False)

    def residual(self, marginal: Sequence[int]) -> FloatArray:
        """ω_S for one closure set S, shaped (nᵢ − 1)_{i∈S}: an unbiased estimate of R_S x."""
        lattice = self.selection.lattice
        s = lattice.locate(marginal)
        return self.blocks[int(lattice.group[s])][lattice.row[s]].reshape([n - 1 for n in lattice.shape(s)])

    def variance(self, marginal: Sequence[int]) -> float:
        """Exact per-cell variance of the reconstruction of ``marginal`` from these releases."""
        return _variance(self.selection.lattice, self.sigma2, marginal)

    def covariance(self, a: Sequence[int], b: Sequence[int]) -> FloatArray:
        """Exact cells(a) × cells(b) covariance of the reconstructed tables a and b (raveled)."""
        return _covariance(self.selection.lattice, self.sigma2, a, b)


def measure(
    selection: Selection,
    marginal_tables: Mapping[Sequence[int], npt.ArrayLike],
    rng: noise.RandomSource | None = None,
    integer_releases: dict[int, npt.NDArray[Any]] | None = None,
) -> Measurements:
    """Release ω_S = Y⁺(Ξ_S x + z_S) for every closure set S (Algorithm 3, discrete Gaussian).

    Args:
        selection: from :func:`select`.
        marginal_tables: exact integer count tables, marginal → array of shape (nᵢ)_{i∈A}, from
            one data set. Every closure set must be one of them or a subset of one (the requested
            maximal marginals suffice); smaller tables are computed by summing a superset's.
        rng: the randomness (default: a fresh SystemRandomSource; tests pass SeededRandomSource).
        integer_releases: if given, receives each closure set's integer release Ξ_S x + z_S (by its
            index in the closure, shaped (nᵢ)_{i∈S}), whose noise is iid N_ℤ(0, γ_S²): public, and
            what a later batch reuses (``dpsql.engine.reuse.reuse``).

    Privacy: ``selection.rho``-zCDP under adding or removing one record, when each record adds 1
    to exactly one cell of each table (module doc: ρ_S = Π nᵢ(nᵢ − 1)/(2γ_S²) per set, the
    continuous cost exactly, composed additively). Noise is exact integer sampling; all float
    work is post-processing of the integer releases Ξ_S x + z_S.

    Raises:
        ShapeError: a table for a set outside the closure, of the wrong shape, or a closure set
            no table covers.
        DataError: a table that is not integer counts (counts of any size are measured exactly).
    """
    lattice = selection.lattice
    tables = closure_tables(lattice, marginal_tables)
    _, count = _class_representatives(selection.classes)
    shapes, _, gamma2 = _class_noise(selection)
    source = noise.resolve_rng(rng)
    streams = [_NoiseStream(g, int(n) * math.prod(shape), source)
               for g, n, shape in zip(gamma2, count.tolist(), shapes)]
    blocks = tuple(
        _measure_group(tables, members, shape, selection.classes, streams, integer_releases)
        for shape, members in zip(lattice.group_shapes, lattice.group_members)
    )
    return Measurements(selection=selection, blocks=blocks, sigma2=effective_sigma2(selection), rho=selection.rho)


def _class_noise(selection: Selection) -> tuple[list[tuple[int, ...]], list[int], list[Fraction]]:
    """Per class: its sets' shape, Π nᵢ², and the discrete Gaussian's parameter γ² = σ²·Π nᵢ²."""
    first, _ = _class_representatives(selection.classes)
    shapes = [selection.lattice.shape(int(f)) for f in first.tolist()]
    squares = [math.prod(n * n for n in shape) for shape in shapes]
    return shapes, squares, [sigma2 * square for sigma2, square in zip(selection.class_sigma2, squares)]


def release_noise(selection: Selection) -> list[tuple[Fraction, float]]:
    """Per closure set, the noise of its integer release: (γ_S², Var N_ℤ(0, γ_S²)) of each draw."""
    _, _, gamma2 = _class_noise(selection)
    per_class = [(g, float(noise.discrete_gaussian_variance(g))) for g in gamma2]
    return [per_class[int(k)] for k in selection.classes.tolist()]


def effective_sigma2(selection: Selection) -> FloatArray:
    """Per closure set, the exact σ² :func:`measure` releases with: Var N_ℤ(0, γ²)/Π nᵢ² (< the
    selected σ²). Public: computed from the selection alone, so answers' variances are known
    before any data is read."""
    _, squares, gamma2 = _class_noise(selection)
    effective = np.array([noise.discrete_gaussian_variance(g) / float(square) for g, square in zip(gamma2, squares)])
    return np.asarray(effective[selection.classes], dtype=np.float64)



class _NoiseStream:
    """The ``total`` iid N_Z(0, γ²) samples one class needs, drawn about BATCH_CELLS at a time.

    The exact sampler costs milliseconds per call, so the sets of a class share one buffered
    stream instead of calling it once per set; it never draws more than ``total`` samples.
    """

    def __init__(self, gamma2: Fraction, total: int, rng: noise.RandomSource) -> None:
        self.gamma2, self.remaining, self.rng = gamma2, total, rng
        self.buffer = np.empty(0, dtype=np.int64)

    def take(self, count: int) -> IntArray:
        if count > self.buffer.size:
            size = min(max(count - self.buffer.size, BATCH_CELLS), self.remaining)
            fresh = noise.discrete_gaussian_wide(self.gamma2, size, rng=self.rng)
            self.buffer = np.concatenate([self.buffer.astype(fresh.dtype), fresh])
            self.remaining -= size
        out, self.buffer = self.buffer[:count], self.buffer[count:]
        return out


def _measure_group(
    tables: list[npt.NDArray[np.integer]], members: IntArray, shape: tuple[int, ...], classes: IntArray,
    streams: list[_NoiseStream], integer_releases: dict[int, npt.NDArray[Any]] | None = None,
) -> FloatArray:
    """ω rows for the closure sets of one table shape, in batches of about BATCH_CELLS cells (and
    each set's integer release into ``integer_releases``, when given)."""
    cells = math.prod(shape)
    out = np.empty((len(members), math.prod(n - 1 for n in shape)))
    batch = max(1, BATCH_CELLS // cells)
    for start in range(0, len(members), batch):
        chunk = members[start:start + batch]
        counts = np.stack([tables[s] for s in chunk.tolist()]).astype(np.int64, copy=False)
        counts = counts.reshape((len(chunk), *shape))
        y = _integer_release(counts, classes[chunk], streams)
        if integer_releases is not None:
            integer_releases.update(zip(chunk.tolist(), y))
        released = y.astype(np.float64)
        for axis in range(1, len(shape) + 1):
            released = sub_axis(released, axis)
        out[start:start + len(chunk)] = released.reshape(len(chunk), -1) / cells
    return out


def _integer_release(counts: IntArray, classes: IntArray, streams: list[_NoiseStream]) -> IntArray:
    """Ξ v + z exactly, z iid N_Z(0, γ²) with each set's class γ²: in int64 while every value
    provably fits, else in Python integers (so no count and no noise draw can make it fail)."""
    shape = counts.shape[1:]
    largest = int(np.abs(counts).max(initial=0)) * math.prod(2 * n for n in shape)
    y = counts if largest < _INT64_SAFE else counts.astype(object)
    for axis in range(1, len(shape) + 1):
        y = _xi_axis(y, axis)
    draws = [(rows, streams[k].take(rows.size * math.prod(shape)))
             for k in np.unique(classes).tolist() for rows in [np.flatnonzero(classes == k)]]
    wide = y.dtype == object or any(d.dtype == object for _, d in draws) \
        or largest + max((int(np.abs(d).max(initial=0)) for _, d in draws), default=0) >= 2**63
    z = np.empty(y.shape, dtype=object if wide else np.int64)
    for rows, d in draws:
        z[rows] = d.reshape((rows.size, *shape))
    return (y.astype(object) + z if wide else y + z)


# ============================================================================ reconstruction
def reconstruct(
    selection: Selection,
    measurements: Measurements,
    marginals: Sequence[Sequence[int]] | None = None,
) -> dict[Marginal, FloatArray]:
    """Unbiased, mutually consistent estimates of the requested (or given closure) marginals.

    Each table q_A = (⊗ B) Ω_A has shape (nᵢ)_{i∈A}; all its cells have the variance
    ``measurements.variance(A)`` and the cross-table covariances are ``measurements.covariance``.
    Pure post-processing of the releases: no privacy cost.

    Raises:
        ShapeError: measurements of another selection, or a marginal outside the closure.
    """
    measurements.require(selection)
    lattice = selection.lattice
    wanted = selection.marginals if marginals is None else tuple(marginals)
    positions = np.array([lattice.locate(a) for a in wanted], dtype=np.int64)
    out: dict[Marginal, FloatArray] = {}
    for g in np.unique(lattice.group[positions]).tolist():
        targets = positions[lattice.group[positions] == g]
        shape = lattice.group_shapes[g]
        batch = max(1, BATCH_CELLS // math.prod(shape))
        for start in range(0, len(targets), batch):
            chunk = targets[start:start + batch]
            tables = _reconstruct_chunk(lattice, measurements.blocks, chunk, shape)
            for i, s in enumerate(chunk.tolist()):
                out[lattice.closure[s]] = tables[i, ...]
    return out


def _reconstruct_chunk(
    lattice: Lattice, blocks: tuple[FloatArray, ...], chunk: IntArray, shape: tuple[int, ...],
) -> FloatArray:
    """Fill Ω for a batch of same-shape marginals from their subsets' ω, then apply B per axis."""
    k = len(shape)
    omega = np.zeros((len(chunk), *shape))
    subsets = lattice.subset_ids(chunk)
    for mask in range(1 << k):
        ids = subsets[:, mask]
        kept = [shape[b] - 1 for b in range(k) if mask >> b & 1]
        values = blocks[int(lattice.group[ids[0]])][lattice.row[ids]].reshape((len(chunk), *kept))
        omega[(slice(None), *(slice(1, None) if mask >> b & 1 else 0 for b in range(k)))] = values
    for axis in range(1, k + 1):
        basis_axis(omega, axis)
    return omega
