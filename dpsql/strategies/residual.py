"""ResidualPlanner: the optimal Gaussian matrix mechanism for batches of marginals.

He, Xiao, Toksoz, Ding, Zhang and Kifer, "ResidualPlanner+" (arXiv 2305.08175; the NeurIPS 2023
ResidualPlanner plus its journal extension). A marginal is a COUNT … GROUP BY over an attribute
set; this module selects, measures and reconstructs any batch of them without ever forming the
product domain Π nᵢ.

Notation:
    d attributes of public sizes nᵢ ≥ 2. A marginal A is a strictly increasing tuple of attribute
    indices; its table has shape (nᵢ)_{i∈A} in row-major (Kronecker) order, cells(A) = Π_{i∈A} nᵢ,
    and () is the grand total. closure(W) is every subset of every requested marginal.
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
        minimum over c. The objective is strictly convex and the constraints linear, so the
        optimum is unique; a primal–dual interior-point method (Mehrotra predictor–corrector,
        about a dozen factorisations on the paper's workloads) finds it and stops at a certified
        relative gap of GAP_TOLERANCE against the dual bound (Σ_S √(p_S (Cᵀλ)_S))²/Σλ, valid for
        every λ ≥ 0. Chosen over SLSQP/trust-constr (dense, slower, no certificate) and over
        first-order dual methods (too slow to reach the 1e-6 the paper's tables need).
    Both run on the coarsest equitable partition of the bipartite graph (marginals, closure
    sets; edge weights C_{A,S}), found by colour refinement. Averaging over it is a fractional
    automorphism (its averaging operators X, Y satisfy CX = YC and preserve p and w), so by
    Jensen the unique optimum is constant on its classes: the problem shrinks from one variable
    per closure set to one per class (4 classes for all ≤3-way marginals on equal sizes at any
    d, instead of 166,751 variables at d = 100). Reduced problems with more than DENSE_KKT_LIMIT
    classes solve the Newton systems by Jacobi-preconditioned conjugate gradients on the sparse
    constraint matrix (e.g. 14,680 classes for ≤3-way on 100 random sizes: about 10 s). The
    reported variances are always recomputed on the full problem, so a (vanishingly unlikely)
    hash collision in the refinement could only cost optimality, never correctness or privacy.
Secure measurement (Alg. 3, discrete Gaussian): for each S, with σ̄_S² ≥ σ_S² rational and
    γ_S² = σ̄_S² Π_{i∈S} nᵢ², release ω_S = Y⁺(Ξ_S x + z), z iid N_Z(0, γ_S²) per cell of S,
    Ξ_S = ⊗_{i∈S}(nᵢ I − J) (an integer matrix, applied to the integer marginal table) and
    Y⁺ = ⊗_{i∈S} Sub/nᵢ. Each column of Ξ_S has squared norm Π nᵢ(nᵢ − 1), so by Canonne–
    Kamath–Steinke the integer release is ρ_S = Π nᵢ(nᵢ − 1)/(2γ_S²) = p_S/(2σ̄_S²)-zCDP,
    exactly the continuous cost, and Y⁺ is post-processing: Y⁺Ξ_S = R_S, and Y⁺z has covariance
    Var(z) · Π nᵢ⁻² ⊗ Sub Subᵀ, so the continuous formulas hold with σ_S² = Var(z)/Π nᵢ²
    (Var(z) < γ_S², computed exactly). Composition over the closure adds the ρ_S.

Costs (E = Σ_{A∈W} 2^|A| marginal–subset pairs, K = classes, cells summed over the named sets):
    select       O(E log E) for the closure and the refinement; O(E) for sum_variance; about a
                 dozen interior-point steps of O(K³ + E) for max_variance (dense K ≤ DENSE_KKT_LIMIT).
    measure      Σ_{S∈closure} cells(S) exact discrete-Gaussian draws (the dominant cost) and
                 O(|S| cells(S)) integer and float work per set, batched by table shape.
    reconstruct  O((2^|A| + |A|) cells(A)) per marginal, batched by table shape; memory is the
                 output itself plus one batch of BATCH_CELLS.
    variance     O(2^|A|) per marginal; covariance O(2^|I| cells(I)² + cells(A) cells(B)).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dpsql import noise
from dpsql.errors import DataError, DomainTooLargeError, PrivacyParameterError, ShapeError

__all__ = ["Measurements", "Selection", "gaussian_parameters", "measure", "reconstruct", "select",
           "sub_axis", "basis_axis"]

Marginal = tuple[int, ...]
Objective = Literal["sum_variance", "max_variance"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_Orders = dict[int, tuple[IntArray, IntArray]]
_Number = TypeVar("_Number", bound=np.number)

OBJECTIVES: tuple[str, ...] = ("sum_variance", "max_variance")
#: Most marginal–subset pairs Σ_A 2^|A| a selection enumerates.
MAX_SUBSET_PAIRS = 2**25
#: Most cells of one marginal (products of sizes must also stay exact in int64).
MAX_MARGINAL_CELLS = 2**62
#: Most entries of a dense covariance matrix built by ``covariance``.
MAX_COVARIANCE_ENTRIES = 2**24
#: Significant bits of the rational γ² each noise scale is rounded up to.
NOISE_BITS = 40
#: Relative inflation of γ² before rounding; it dominates every float error in the selection.
NOISE_MARGIN = 2.0**-32
#: ρ is summed on the dyadic grid 2^-RHO_BITS, each class's share rounded up.
RHO_BITS = 96
#: Relative duality gap at which the max-variance solver stops.
GAP_TOLERANCE = 1e-9
#: Largest reduced max-variance problem (classes) whose Newton systems are solved densely.
DENSE_KKT_LIMIT = 2000
#: Most interior-point iterations (each one factorisation).
IPM_ITERATIONS = 200
#: Cells per batch in measure and reconstruct.
BATCH_CELLS = 2**22
_INT64_SAFE = 2**62


# ============================================================================ axis transforms
def sub_axis(t: npt.NDArray[_Number], axis: int) -> npt.NDArray[_Number]:
    """Sub_n applied along ``axis`` (length n → n − 1): t[0] − t[1:], exact for integer t."""
    head = np.take(t, [0], axis=axis)
    return head - np.take(t, np.arange(1, t.shape[axis]), axis=axis)  # type: ignore[no-any-return]


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
    return t * t.shape[axis] - t.sum(axis=axis, keepdims=True)  # type: ignore[no-any-return]


# ============================================================================ the lattice
@dataclass(frozen=True, eq=False)
class _Lattice:
    """The closure of a batch of marginals, its marginal–subset pairs and its table shapes.

    Closure sets are rows of ``sets`` (attribute indices, padded with −1), sorted
    lexicographically, so () comes first. Pair e joins marginal ``pair_marginal[e]`` to its subset
    ``pair_set[e]``; the pairs of marginal j are ``pair_start[j] + mask`` for mask < 2^|A|, bit b
    of the mask keeping the b-th attribute of A. Sets with equal table shapes form a group; set s
    is row ``row[s]`` of group ``group[s]``.
    """

    sizes: IntArray
    marginals: tuple[Marginal, ...]
    sets: IntArray
    set_size: IntArray
    p: FloatArray
    pair_set: IntArray
    pair_marginal: IntArray
    pair_start: IntArray
    pair_label: IntArray
    coefficient: FloatArray
    marginal_set: IntArray
    group: IntArray
    row: IntArray
    group_shapes: tuple[tuple[int, ...], ...]
    group_members: tuple[IntArray, ...]

    @cached_property
    def closure(self) -> tuple[Marginal, ...]:
        """Every closure set as a tuple, in lattice order."""
        return tuple(tuple(int(a) for a in row[:k]) for row, k in zip(self.sets.tolist(), self.set_size.tolist()))

    @cached_property
    def index(self) -> dict[Marginal, int]:
        """Closure set → its lattice position."""
        return {s: i for i, s in enumerate(self.closure)}

    @cached_property
    def marginal_of_set(self) -> IntArray:
        """For each closure set, its position among the requested marginals, or −1."""
        out = np.full(len(self.sets), -1, dtype=np.int64)
        out[self.marginal_set] = np.arange(len(self.marginal_set))
        return out

    def locate(self, marginal: object, what: str = "marginal") -> int:
        """The lattice position of a closure set given by the caller, or ShapeError."""
        key = _as_marginal(marginal, len(self.sizes), what)
        position = self.index.get(key)
        if position is None:
            raise ShapeError(
                f"{what} {key} is not one of the selected marginals or a subset of one, so nothing "
                "measured determines it; add it to the marginals passed to select()."
            )
        return position

    def subset_ids(self, positions: IntArray) -> IntArray:
        """(len(positions), 2^k) closure positions of every subset, in mask order, of sets of size k."""
        k = int(self.set_size[positions[0]])
        marginal = self.marginal_of_set[positions]
        if np.all(marginal >= 0):
            return self.pair_set[self.pair_start[marginal][:, None] + np.arange(1 << k)]
        out = np.empty((len(positions), 1 << k), dtype=np.int64)
        for r, position in enumerate(positions.tolist()):
            members = self.closure[position]
            for mask in range(1 << k):
                out[r, mask] = self.index[tuple(members[b] for b in range(k) if mask >> b & 1)]
        return out

    def shape(self, position: int) -> tuple[int, ...]:
        return self.group_shapes[int(self.group[position])]


def _as_marginal(value: object, d: int, what: str = "marginal") -> Marginal:
    """``value`` as a strictly increasing tuple of attribute indices in [0, d), else ShapeError."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ShapeError(f"each {what} must be a tuple of attribute indices, e.g. (0, 2); got {value!r}.")
    items = list(value)
    if not all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in items):
        raise ShapeError(f"{what} {value!r} must hold integer attribute indices.")
    key = tuple(int(a) for a in items)
    bad = [a for a in key if not 0 <= a < d]
    if bad:
        raise ShapeError(f"{what} {key} names attribute {bad[0]}, but the domain has attributes 0…{d - 1}.")
    if any(b <= a for a, b in zip(key, key[1:])):
        raise ShapeError(
            f"{what} {key} must list distinct attributes in increasing order, e.g. {tuple(sorted(set(key)))}."
        )
    return key


def _unique_rows(rows: IntArray) -> tuple[IntArray, IntArray]:
    """(distinct rows in lexicographic order, position of each input row among them)."""
    order = np.lexsort(rows.T[::-1]) if rows.shape[1] else np.arange(len(rows))
    ordered = rows[order]
    fresh = np.ones(len(rows), dtype=bool)
    fresh[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = np.cumsum(fresh) - 1
    return ordered[fresh], inverse


def _build_lattice(sizes: IntArray, marginals: tuple[Marginal, ...], orders: _Orders) -> _Lattice:
    """Closure, pairs, coefficients C_{A,S} and shape groups, vectorised per marginal order k."""
    width = max(orders)
    rows, owner, labels = [], [], []
    pair_start = np.empty(len(marginals), dtype=np.int64)
    offset = 0
    for k, (js, attributes) in orders.items():
        block = np.full((len(js), 1 << k, width), -1, dtype=np.int64)
        label = np.ones((len(js), 1 << k), dtype=np.int64)
        for mask in range(1 << k):
            kept = [b for b in range(k) if mask >> b & 1]
            block[:, mask, :len(kept)] = attributes[:, kept]
            for b in range(k):
                if not mask >> b & 1:
                    label[:, mask] *= sizes[attributes[:, b]]
        rows.append(block.reshape(len(js) << k, width))
        labels.append(label.ravel())
        owner.append(np.repeat(js, 1 << k))
        pair_start[js] = offset + np.arange(len(js)) * (1 << k)
        offset += len(js) << k
    sets, pair_set = _unique_rows(np.concatenate(rows))
    set_size = (sets >= 0).sum(axis=1)
    set_sizes = np.where(sets >= 0, sizes[np.maximum(sets, 0)], 0)
    ordered_sizes = np.sort(set_sizes, axis=1)  # equal multisets → identical float products
    p = np.prod(np.where(ordered_sizes > 0, (ordered_sizes - 1) / np.maximum(ordered_sizes, 1), 1.0), axis=1)
    pair_label = np.concatenate(labels)
    coefficient = p[pair_set] / pair_label.astype(np.float64) ** 2
    shapes, group = _unique_rows(set_sizes)
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group, minlength=len(shapes))
    members = tuple(np.split(order, np.cumsum(counts)[:-1]))
    row = np.empty(len(sets), dtype=np.int64)
    for m in members:
        row[m] = np.arange(len(m))
    return _Lattice(
        sizes=sizes, marginals=marginals, sets=sets, set_size=set_size, p=p,
        pair_set=pair_set, pair_marginal=np.concatenate(owner), pair_start=pair_start,
        pair_label=pair_label, coefficient=coefficient,
        marginal_set=pair_set[pair_start + (1 << np.array([len(a) for a in marginals])) - 1],
        group=group, row=row,
        group_shapes=tuple(tuple(int(n) for n in s if n > 0) for s in shapes.tolist()),
        group_members=members,
    )


# ============================================================================ equitable partition
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser: a bijective 64-bit hash (wrapping arithmetic)."""
    x = x + _MIX[0]
    x = (x ^ (x >> np.uint64(30))) * _MIX[1]
    x = (x ^ (x >> np.uint64(27))) * _MIX[2]
    return x ^ (x >> np.uint64(31))  # type: ignore[no-any-return]


def _pair_hash(a: IntArray, b: IntArray) -> npt.NDArray[np.uint64]:
    return _mix((a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64))


def _segment_sums(values: npt.NDArray[np.uint64], order: IntArray, starts: IntArray) -> npt.NDArray[np.uint64]:
    return np.add.reduceat(values[order], starts)  # type: ignore[no-any-return]


def _refine(colour: IntArray, sums: npt.NDArray[np.uint64]) -> IntArray:
    """New classes: old class and neighbourhood hash together."""
    return _unique_rows(np.stack([colour, sums.view(np.int64)], axis=1))[1]


def _equitable_classes(lattice: _Lattice, weights: FloatArray) -> tuple[IntArray, IntArray]:
    """Coarsest equitable partition (colour refinement) of sets and marginals.

    Sets start coloured by their multiset of sizes (so p_S and Π nᵢ are constant on a class),
    marginals by weight; a vertex's colour is then refined by the multiset of (edge label
    Π_{A∖S} n, neighbour colour), hashed as a wrapping sum of 64-bit mixes, until stable.
    """
    set_colour = _unique_rows(np.sort(np.where(lattice.sets >= 0, lattice.sizes[np.maximum(lattice.sets, 0)], 0), axis=1))[1]
    marginal_colour = np.unique(weights, return_inverse=True)[1].astype(np.int64)
    label = np.unique(lattice.pair_label, return_inverse=True)[1].astype(np.int64)
    by_set = np.argsort(lattice.pair_set, kind="stable")
    set_starts = np.flatnonzero(np.r_[True, np.diff(lattice.pair_set[by_set]) != 0])
    by_marginal = np.argsort(lattice.pair_marginal, kind="stable")
    marginal_starts = np.flatnonzero(np.r_[True, np.diff(lattice.pair_marginal[by_marginal]) != 0])
    while True:
        incoming = _pair_hash(label, marginal_colour[lattice.pair_marginal])
        new_set = _refine(set_colour, _segment_sums(incoming, by_set, set_starts))
        outgoing = _pair_hash(label, new_set[lattice.pair_set])
        new_marginal = _refine(marginal_colour, _segment_sums(outgoing, by_marginal, marginal_starts))
        stable = new_set.max() == set_colour.max() and new_marginal.max() == marginal_colour.max()
        set_colour, marginal_colour = new_set, new_marginal
        if stable:
            return set_colour, marginal_colour


# ============================================================================ selection
@dataclass(frozen=True, eq=False)
class Selection:
    """The selected base mechanisms: one noise scale σ_S² per closure set, and what they cost.

    Fields:
        domains      the attribute sizes nᵢ.
        marginals    the requested marginals (strictly increasing attribute tuples).
        objective    "sum_variance" or "max_variance".
        weights      one positive weight per marginal.
        classes      the equitable class of each closure set (sets of a class share σ²).
        class_sigma2 σ̄² per class: the exact rational noise scale the measurement uses.
        sigma2       σ̄_S² per closure set (float), in the order of ``closure``.
        rho          the ρ-zCDP cost of measuring, an exact dyadic rational ≤ the requested ρ
                     and at most (#classes)·2^-96 above the exact Σ_S p_S/(2σ̄_S²).
        bound        a lower bound on the objective at the requested ρ for every Gaussian matrix
                     mechanism (the exact optimum for sum_variance; the dual bound for
                     max_variance), so objective_value()/bound − 1 certifies optimality.
    """

    domains: tuple[int, ...]
    marginals: tuple[Marginal, ...]
    objective: str
    weights: tuple[float, ...]
    classes: IntArray = field(repr=False)
    class_sigma2: tuple[Fraction, ...] = field(repr=False)
    sigma2: FloatArray = field(repr=False)
    rho: Fraction
    bound: float
    _lattice: _Lattice = field(repr=False)

    @property
    def closure(self) -> tuple[Marginal, ...]:
        """Every subset of every requested marginal, () first, in lexicographic order."""
        return self._lattice.closure

    @property
    def pcost(self) -> Fraction:
        """The paper's privacy cost Σ_S p_S/σ̄_S² = 2ρ."""
        return 2 * self.rho

    @cached_property
    def variances(self) -> FloatArray:
        """The per-cell variance of every requested marginal, in ``marginals`` order."""
        return _marginal_variances(self._lattice, self.sigma2)

    def variance(self, marginal: Sequence[int]) -> float:
        """Per-cell variance of any closure marginal (every cell of a marginal has the same)."""
        return _variance(self._lattice, self.sigma2, marginal)

    def covariance(self, a: Sequence[int], b: Sequence[int]) -> FloatArray:
        """Dense cells(a) × cells(b) covariance of the reconstructed tables a and b (raveled)."""
        return _covariance(self._lattice, self.sigma2, a, b)

    def rmse(self) -> float:
        """√(total cell variance / total cells) over the requested marginals (the paper's RMSE)."""
        cells = _cells(self._lattice)
        return math.sqrt(float(cells @ self.variances) / float(cells.sum()))

    def max_variance(self) -> float:
        """The largest cell variance over the requested marginals."""
        return float(self.variances.max())

    def objective_value(self) -> float:
        """Σ_A w_A cells(A) V_A (sum_variance) or max_A w_A V_A (max_variance)."""
        w = np.asarray(self.weights)
        if self.objective == "sum_variance":
            return float(np.sum(w * _cells(self._lattice) * self.variances))
        return float(np.max(w * self.variances))


def _cells(lattice: _Lattice) -> FloatArray:
    """cells(A) of every requested marginal."""
    group_cells = np.array([math.prod(shape) for shape in lattice.group_shapes], dtype=np.float64)
    return group_cells[lattice.group[lattice.marginal_set]]  # type: ignore[no-any-return]


def _marginal_variances(lattice: _Lattice, sigma2: FloatArray) -> FloatArray:
    weights = lattice.coefficient * sigma2[lattice.pair_set]
    return np.bincount(lattice.pair_marginal, weights=weights, minlength=len(lattice.marginals)).astype(np.float64)


def _variance(lattice: _Lattice, sigma2: FloatArray, marginal: Sequence[int]) -> float:
    """V_A = Σ_{S⊆A} p_S Π_{A∖S} n⁻² σ_S² (Thm 4.4)."""
    position = lattice.locate(marginal)
    subsets = lattice.subset_ids(np.array([position]))[0]
    shape = lattice.shape(position)
    total = 0.0
    for mask, s in enumerate(subsets.tolist()):
        dropped = math.prod(n for b, n in enumerate(shape) if not mask >> b & 1)
        total += lattice.p[s] * sigma2[s] / dropped**2
    return total


def _covariance(lattice: _Lattice, sigma2: FloatArray, a: Sequence[int], b: Sequence[int]) -> FloatArray:
    """Cov(q_a, q_b) (He et al., ResidualPlanner+, arXiv:2305.08175, Section 4.3): a Kronecker sum
    over S ⊆ a ∩ b, broadcast to the cells of a and b."""
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


def _project_cells(lattice: _Lattice, marginal: Marginal, common: Marginal) -> IntArray:
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
    sizes = _check_domains(domains)
    batch, orders = _check_marginals(marginals, sizes)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}; got {objective!r}.")
    budget = _check_rho(rho)
    w = _check_weights(weights, len(batch))
    pairs = sum(len(js) << k for k, (js, _) in orders.items())
    if pairs > MAX_SUBSET_PAIRS:
        raise DomainTooLargeError(
            f"the marginals have {pairs:,} (marginal, subset) pairs, above MAX_SUBSET_PAIRS = "
            f"{MAX_SUBSET_PAIRS:,}; request fewer or lower-order marginals."
        )
    lattice = _build_lattice(sizes, batch, orders)
    set_class, marginal_class = _equitable_classes(lattice, w)
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
        sigma2=exact, rho=spent, bound=bound, _lattice=lattice,
    )


def _check_domains(domains: Sequence[int]) -> IntArray:
    if isinstance(domains, (str, bytes)) or not isinstance(domains, Sequence):
        raise ShapeError(f"domains must be a sequence of attribute sizes, e.g. [100, 7, 2]; got {domains!r}.")
    for i, n in enumerate(domains):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 2:
            raise ShapeError(
                f"attribute {i} has size {n!r}; every size must be an integer >= 2 (a constant "
                "attribute adds nothing to a marginal: drop it)."
            )
    return np.array([int(n) for n in domains], dtype=np.int64)


def _check_marginals(marginals: Sequence[Sequence[int]], sizes: IntArray) -> tuple[tuple[Marginal, ...], _Orders]:
    """The marginals as tuples, and per order k the (positions, k-column attribute array).

    Each order is checked at once in numpy; a group that fails is re-checked marginal by
    marginal for a precise message.
    """
    if isinstance(marginals, (str, bytes)) or not isinstance(marginals, Sequence) or len(marginals) == 0:
        raise ShapeError("marginals must be a non-empty list of attribute tuples, e.g. [(0,), (0, 1)].")
    d = len(sizes)
    positions: dict[int, list[int]] = {}
    for j, a in enumerate(marginals):
        if type(a) is not tuple and type(a) is not list and (isinstance(a, (str, bytes)) or not isinstance(a, Sequence)):
            _as_marginal(a, d)
        positions.setdefault(len(a), []).append(j)
    batch: list[Marginal] = [()] * len(marginals)
    orders: _Orders = {}
    for k, js in sorted(positions.items()):
        attributes = np.array([marginals[j] for j in js]) if k else np.zeros((len(js), 0), dtype=np.int64)
        valid = (attributes.dtype.kind in "iu" and attributes.shape == (len(js), k)
                 and bool(np.all((attributes >= 0) & (attributes < d))) and bool(np.all(np.diff(attributes, axis=1) > 0)))
        if not valid:
            for j in js:
                _as_marginal(marginals[j], d)
        attributes = attributes.astype(np.int64)
        for j, key in zip(js, map(tuple, attributes.tolist())):
            batch[j] = key
        cells = np.prod(sizes[attributes].astype(np.float64), axis=1)
        if np.any(cells >= MAX_MARGINAL_CELLS):
            big = batch[js[int(np.argmax(cells))]]
            raise DomainTooLargeError(f"marginal {big} has about {cells.max():.3g} cells, above MAX_MARGINAL_CELLS = 2^62.")
        orders[k] = (np.array(js, dtype=np.int64), attributes)
    if len(set(batch)) < len(batch):
        seen: set[Marginal] = set()
        twice = next(a for a in batch if a in seen or seen.add(a))  # type: ignore[func-returns-value]
        raise ShapeError(f"marginal {twice} is listed twice; list each marginal once (use weights to favour it).")
    return tuple(batch), orders


def _check_rho(rho: float | Fraction) -> Fraction:
    if isinstance(rho, bool) or not isinstance(rho, numbers.Real) or not math.isfinite(rho) or rho <= 0:
        raise PrivacyParameterError(f"rho must be a finite number > 0 (zCDP; pcost = 2ρ); got {rho!r}.")
    return Fraction(rho)


def _check_weights(weights: Sequence[float] | None, m: int) -> FloatArray:
    if weights is None:
        return np.ones(m)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (m,):
        raise ShapeError(f"weights needs one value per marginal ({m}); got shape {w.shape}.")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ShapeError("every weight must be a finite number > 0 (a larger weight buys a smaller variance).")
    return w


def _class_representatives(classes: IntArray) -> tuple[IntArray, IntArray]:
    """(first member, size) of every class."""
    _, first, count = np.unique(classes, return_index=True, return_counts=True)
    return first.astype(np.int64), count.astype(np.int64)


def _normalise(p: FloatArray, count: IntArray, sigma2: FloatArray, c: float) -> FloatArray:
    """σ² rescaled so that Σ count·p/σ² = c to a few ulps (each term positive, summed exactly)."""
    cost = math.fsum((count * p / sigma2).tolist())
    return sigma2 * (cost / c)  # type: ignore[no-any-return]


def _sum_variance_scales(lattice: _Lattice, w: FloatArray, set_class: IntArray, c: float) -> tuple[FloatArray, float]:
    """Lemma 2 on classes: σ_k² = √(p_k/v_k) Σ_l n_l √(v_l p_l)/c; returns (σ² per class, T)."""
    importance = w * _cells(lattice)
    v = np.bincount(lattice.pair_set, weights=importance[lattice.pair_marginal] * lattice.coefficient,
                    minlength=len(lattice.sets))
    first, count = _class_representatives(set_class)
    p, v = lattice.p[first], v[first]
    root = math.fsum((count * np.sqrt(v * p)).tolist())
    return _normalise(p, count, np.sqrt(p / v) * root / c, c), root**2 / c


def _max_variance_scales(
    lattice: _Lattice, w: FloatArray, set_class: IntArray, marginal_class: IntArray, c: float,
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
    u, lower = _minimise_cost(P, constraints)
    value = math.fsum((P / u).tolist())
    return _normalise(lattice.p[set_first], count, u * value / c, c), lower / c


# ---------------------------------------------------------------------------- interior point
def _minimise_cost(P: FloatArray, C: sp.csr_array) -> tuple[FloatArray, float]:
    """u > 0 minimising F(u) = Σ P/u subject to C u ≤ 1, and a lower bound on min F.

    Primal–dual interior point (Mehrotra predictor–corrector) on the KKT system
        −P/u² + Cᵀλ = 0,  Cu + s = 1,  λ∘s = σμ,  with s, λ, u > 0,
    one factorisation of H = diag(2P/u³) + Cᵀ diag(λ/s) C per iteration. Every λ ≥ 0 gives the
    lower bound a²/Σλ, a = Σ √(P·Cᵀλ) (the Lagrange dual function maximised over the scale of λ),
    and u/max(Cu) is feasible: stop once their values are within GAP_TOLERANCE.
    """
    m = C.shape[0]
    u = np.sqrt(P / np.asarray(C.sum(axis=0)).ravel())
    u *= 0.5 / float((C @ u).max())
    s = 1.0 - C @ u
    lam = math.fsum((P / u).tolist()) / m / s
    best, lower = u, 0.0
    for _ in range(IPM_ITERATIONS):
        a = float(np.sum(np.sqrt(P * (C.T @ lam))))
        lower = max(lower, a * a / float(lam.sum()))
        best = u / float((C @ u).max())
        value = math.fsum((P / best).tolist())
        if value - lower <= GAP_TOLERANCE * value:
            break
        mu = float(s @ lam) / m
        try:
            solve = _kkt_solver(C, 2.0 * P / u**3, lam / s)
        except np.linalg.LinAlgError:  # numerically singular this close to the optimum: keep the certified point
            break
        residuals = (-P / u**2 + C.T @ lam, C @ u + s - 1.0)
        du, ds, dl = _direction(C, solve, residuals, s, lam, lam * s)
        alpha = _step_length((u, s, lam), (du, ds, dl))
        affine = float((s + alpha * ds) @ (lam + alpha * dl)) / m
        du, ds, dl = _direction(C, solve, residuals, s, lam, lam * s + ds * dl - (affine / mu) ** 3 * mu)
        # fraction to the boundary, and u may at most halve per step: the objective P/u is
        # nonlinear, and a full Newton step can collapse a scale towards 0
        alpha = min(0.99 * _step_length((u, s, lam), (du, ds, dl)), _step_length((0.5 * u,), (du,)))
        u, s, lam = u + alpha * du, s + alpha * ds, lam + alpha * dl
    return best, lower


def _direction(
    C: sp.csr_array, solve: Callable[[FloatArray], FloatArray], residuals: tuple[FloatArray, FloatArray],
    s: FloatArray, lam: FloatArray, complementarity: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(Δu, Δs, Δλ) of the linearised KKT system with λ∘s − target = ``complementarity`` (r_c).

    With the dual residual r_d = −P/u² + Cᵀλ and the primal r_p = Cu + s − 1, eliminating
    Δs = −r_p − CΔu and Δλ = −(r_c + λ∘Δs)/s leaves H Δu = −r_d + Cᵀ((r_c − λ∘r_p)/s).
    """
    dual, primal = residuals
    du = solve(-dual + C.T @ ((complementarity - lam * primal) / s))
    ds = -primal - C @ du
    return du, ds, -(complementarity + lam * ds) / s


def _step_length(point: tuple[FloatArray, ...], step: tuple[FloatArray, ...]) -> float:
    """The largest α ≤ 1 keeping every component of every point + α·step positive."""
    alpha = 1.0
    for x, dx in zip(point, step):
        shrink = dx < 0
        if shrink.any():
            alpha = min(alpha, float(np.min(-x[shrink] / dx[shrink])))
    return alpha


def _kkt_solver(C: sp.csr_array, curvature: FloatArray, weight: FloatArray) -> Callable[[FloatArray], FloatArray]:
    """x ↦ (diag(curvature) + Cᵀ diag(weight) C)⁻¹ x: Jacobi-scaled Cholesky, or Jacobi-CG when large."""
    scaled = sp.diags_array(np.sqrt(weight)) @ C
    diagonal = curvature + np.asarray(scaled.multiply(scaled).sum(axis=0)).ravel()
    if C.shape[1] <= DENSE_KKT_LIMIT:
        d = 1.0 / np.sqrt(diagonal)
        H = (scaled.T @ scaled).toarray()
        H[np.diag_indices_from(H)] += curvature
        factor = sla.cho_factor(H * d[:, None] * d[None, :])
        return lambda x: d * sla.cho_solve(factor, x * d)  # type: ignore[no-any-return]
    operator = spla.LinearOperator(
        (C.shape[1], C.shape[1]), dtype=np.float64, matvec=lambda x: curvature * x + scaled.T @ (scaled @ x),
    )
    jacobi = spla.LinearOperator(operator.shape, dtype=np.float64, matvec=lambda x: x / diagonal)
    return lambda x: spla.cg(operator, x, rtol=1e-12, maxiter=10 * C.shape[1], M=jacobi)[0]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- rational scales
def gaussian_parameters(sizes: Sequence[int], sigma2: Fraction) -> tuple[Fraction, Fraction]:
    """(γ², ρ) of Algorithm 3 for one residual over attribute sizes ``sizes`` at noise scale σ².

    γ² = σ² Π nᵢ² is the discrete-Gaussian parameter per cell; ρ = Π nᵢ(nᵢ − 1)/(2γ²) = p/(2σ²)
    is the exact zCDP cost (the squared L2 norm of each column of Ξ = ⊗(nᵢ I − J) over 2γ²).

    >>> gaussian_parameters([4], Fraction(4, 9))
    (Fraction(64, 9), Fraction(27, 32))
    """
    gamma2 = Fraction(sigma2) * math.prod(n * n for n in sizes)
    return gamma2, Fraction(math.prod(n * (n - 1) for n in sizes)) / (2 * gamma2)


def _round_up(x: float) -> Fraction:
    """The smallest rational ≥ x with a NOISE_BITS-bit numerator times a power of two."""
    mantissa, exponent = math.frexp(x)
    return Fraction(math.ceil(math.ldexp(mantissa, NOISE_BITS))) * Fraction(2) ** (exponent - NOISE_BITS)


def _rational_scales(
    lattice: _Lattice, set_class: IntArray, sigma2: FloatArray, budget: Fraction,
) -> tuple[tuple[Fraction, ...], Fraction]:
    """σ̄² per class with γ² = σ̄² Π n² rounded up, and ρ = Σ_k count_k p_k/(2σ̄_k²) rounded up.

    γ² is inflated by NOISE_MARGIN before rounding, which dominates the float error of σ², so the
    exact ρ cannot exceed the budget; the check below enforces it regardless.
    """
    first, count = _class_representatives(set_class)
    scales: list[Fraction] = []
    total = 0
    for k, (s, members) in enumerate(zip(first.tolist(), count.tolist())):
        shape = [int(n) for n in lattice.sizes[lattice.sets[s][: lattice.set_size[s]]]]
        square = math.prod(n * n for n in shape)
        gamma2 = _round_up(float(sigma2[k]) * float(square) * (1.0 + NOISE_MARGIN))
        scales.append(gamma2 / square)
        share = members * math.prod(n * (n - 1) for n in shape) * gamma2.denominator << RHO_BITS
        total += -(-share // (2 * gamma2.numerator))
    spent = Fraction(total, 1 << RHO_BITS)
    if spent > budget:
        raise PrivacyParameterError(
            f"rho = {float(budget)!r} is too small to be accounted exactly at 2^-{RHO_BITS} resolution; "
            "use a larger rho."
        )
    return tuple(scales), spent


# ============================================================================ measurement
@dataclass(frozen=True, eq=False)
class Measurements:
    """The noisy residual releases ω_S of every closure set, and their exact noise.

    Fields:
        selection  the selection measured.
        blocks     ω per table shape: blocks[g][row] is ω_S raveled, of length Π (nᵢ − 1).
        sigma2     the effective σ_S² = Var[N_Z(0, γ_S²)]/Π nᵢ² per closure set (exact variance).
        rho        the zCDP cost spent (``selection.rho``).
    """

    selection: Selection
    blocks: tuple[FloatArray, ...] = field(repr=False)
    sigma2: FloatArray = field(repr=False)
    rho: Fraction

    def residual(self, marginal: Sequence[int]) -> FloatArray:
        """ω_S for one closure set S, shaped (nᵢ − 1)_{i∈S}: an unbiased estimate of R_S x."""
        lattice = self.selection._lattice
        s = lattice.locate(marginal)
        return self.blocks[int(lattice.group[s])][lattice.row[s]].reshape([n - 1 for n in lattice.shape(s)])

    def variance(self, marginal: Sequence[int]) -> float:
        """Exact per-cell variance of the reconstruction of ``marginal`` from these releases."""
        return _variance(self.selection._lattice, self.sigma2, marginal)

    def covariance(self, a: Sequence[int], b: Sequence[int]) -> FloatArray:
        """Exact cells(a) × cells(b) covariance of the reconstructed tables a and b (raveled)."""
        return _covariance(self.selection._lattice, self.sigma2, a, b)


def measure(
    selection: Selection,
    marginal_tables: Mapping[Sequence[int], npt.ArrayLike],
    rng: noise.RandomSource | None = None,
) -> Measurements:
    """Release ω_S = Y⁺(Ξ_S x + z_S) for every closure set S (Algorithm 3, discrete Gaussian).

    Args:
        selection: from :func:`select`.
        marginal_tables: exact integer count tables, marginal → array of shape (nᵢ)_{i∈A}, from
            one data set. Every closure set must be one of them or a subset of one (the requested
            maximal marginals suffice); smaller tables are computed by summing a superset's.
        rng: the randomness (default: a fresh SystemRandomSource; tests pass SeededRandomSource).

    Privacy: ``selection.rho``-zCDP under adding or removing one record, when each record adds 1
    to exactly one cell of each table (module doc: ρ_S = Π nᵢ(nᵢ − 1)/(2γ_S²) per set, the
    continuous cost exactly, composed additively). Noise is exact integer sampling; all float
    work is post-processing of the integer releases Ξ_S x + z_S.

    Raises:
        ShapeError: a table for a set outside the closure, of the wrong shape, or a closure set
            no table covers.
        DataError: a table that is not integer counts (counts of any size are measured exactly).
    """
    lattice = selection._lattice
    tables = _closure_tables(lattice, marginal_tables)
    first, count = _class_representatives(selection.classes)
    shapes = [lattice.shape(int(f)) for f in first.tolist()]
    squares = [math.prod(n * n for n in shape) for shape in shapes]
    gamma2 = [sigma2 * square for sigma2, square in zip(selection.class_sigma2, squares)]
    source = noise.resolve_rng(rng)
    streams = [_NoiseStream(g, int(n) * math.prod(shape), source) for g, n, shape in zip(gamma2, count.tolist(), shapes)]
    blocks = tuple(
        _measure_group(tables, members, shape, selection.classes, streams)
        for shape, members in zip(lattice.group_shapes, lattice.group_members)
    )
    effective = np.array([noise.discrete_gaussian_variance(g) / float(square) for g, square in zip(gamma2, squares)])
    return Measurements(selection=selection, blocks=blocks, sigma2=effective[selection.classes], rho=selection.rho)


def _closure_tables(
    lattice: _Lattice, marginal_tables: Mapping[Sequence[int], npt.ArrayLike],
) -> list[npt.NDArray[np.integer]]:
    """The exact integer table of every closure set: given ones, others summed from a superset."""
    given: dict[int, npt.NDArray[np.integer]] = {}
    for key, table in marginal_tables.items():
        s = lattice.locate(key, what="table")
        given[s] = _counts(table, lattice.shape(s), lattice.closure[s])
    owner = _owners(lattice, np.array(sorted(given), dtype=np.int64))
    missing = np.flatnonzero(owner < 0)
    if missing.size:
        raise ShapeError(
            f"no table covers {lattice.closure[int(missing[0])]}; pass the table of every requested "
            "marginal (or of a superset of it)."
        )
    tables: list[npt.NDArray[np.integer]] = []
    for s, o in enumerate(owner.tolist()):
        if s == o:
            tables.append(given[s])
            continue
        big, small = lattice.closure[o], set(lattice.closure[s])
        tables.append(given[o].sum(axis=tuple(b for b, i in enumerate(big) if i not in small)))
    return tables


def _owners(lattice: _Lattice, given: IntArray) -> IntArray:
    """For every closure set, the given superset with the fewest cells (itself if given), or −1."""
    subsets, supersets = [], []
    for k in np.unique(lattice.set_size[given]).tolist():
        batch = given[lattice.set_size[given] == k]
        ids = lattice.subset_ids(batch)
        subsets.append(ids.ravel())
        supersets.append(np.repeat(batch, ids.shape[1]))
    subset, superset = np.concatenate(subsets), np.concatenate(supersets)
    cells = np.array([math.prod(shape) for shape in lattice.group_shapes], dtype=np.float64)[lattice.group[superset]]
    order = np.lexsort((superset, cells, subset))
    first = np.r_[True, np.diff(subset[order]) != 0]
    owner = np.full(len(lattice.sets), -1, dtype=np.int64)
    owner[subset[order][first]] = superset[order][first]
    return owner


def _counts(table: npt.ArrayLike, shape: tuple[int, ...], key: Marginal) -> npt.NDArray[np.integer]:
    """The table as an integer array of the right shape (kept in its own integer dtype)."""
    values = np.asarray(table)
    if values.shape != shape:
        raise ShapeError(f"the table of {key} must have shape {shape} (one axis per attribute); got {values.shape}.")
    if np.issubdtype(values.dtype, np.integer):
        return values
    if not np.issubdtype(values.dtype, np.floating) or not np.all(np.isfinite(values)) or np.any(values % 1 != 0):
        raise DataError(f"the table of {key} must hold integer counts; got dtype {values.dtype}.")
    return values.astype(np.int64)


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
    streams: list[_NoiseStream],
) -> FloatArray:
    """ω rows for the closure sets of one table shape, in batches of about BATCH_CELLS cells."""
    cells = math.prod(shape)
    out = np.empty((len(members), math.prod(n - 1 for n in shape)))
    batch = max(1, BATCH_CELLS // cells)
    for start in range(0, len(members), batch):
        chunk = members[start:start + batch]
        counts = np.stack([tables[s] for s in chunk.tolist()]).astype(np.int64, copy=False).reshape((len(chunk), *shape))
        y = _integer_release(counts, classes[chunk], streams)
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
    return (y.astype(object) + z if wide else y + z)  # type: ignore[no-any-return]


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
    if measurements.selection is not selection:
        raise ShapeError("these measurements were taken for a different selection; pass the one measured.")
    lattice = selection._lattice
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
    lattice: _Lattice, blocks: tuple[FloatArray, ...], chunk: IntArray, shape: tuple[int, ...],
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
