"""The marginal algebra and its residual eigenbasis (HDMM's OPT_M, ResidualPlanner's basis).

McKenna, Miklau, Hay and Machanavajjhala, "Optimizing error of high-dimensional statistical
queries under differential privacy" (PVLDB 2018) for OPT_M and the projection below; the residual
subspaces V_r are those of Xiao, He, Zhang and Kifer, "An Optimal and Scalable Matrix Mechanism for
Noisy Marginals under Convex Loss Functions" (NeurIPS 2023). Used by the structured linear algebra
(dpsql.matrix.linalg), the mechanism and OPT_M (dpsql.strategies.marginals); public quantities only.

Notation: d attributes of sizes n₀ … n_{d−1} (Kronecker factor order), N = Π nᵢ, J = 11ᵀ.
An attribute subset a is an integer key with bit i set iff attribute i is kept; key 0 is the
empty set (the grand total) and key 2^d − 1 the full table.

Math:
    The marginal on a is Q_a = ⊗ᵢ (I_{nᵢ} if i ∈ a else 1ᵀ_{nᵢ}), with Gram G_a = ⊗ᵢ (I if i ∈ a
    else J) and G_a G_b = μ(a∪b) G_{a∩b}, μ(a) = Π_{i∉a} nᵢ.
    ℝ^N = ⊕_r V_r with V_r = ⊗ᵢ (1⊥ if i ∈ r else span 1), of dimension m_r = Π_{i∈r}(nᵢ − 1),
    and orthogonal projector P_r = ⊗ᵢ (I − J/nᵢ if i ∈ r else J/nᵢ). On V_r, I acts as 1 and J
    as nᵢ on span 1 and 0 on 1⊥, so G_a acts as μ(a)·[r ⊆ a] and G(u) = Σ_a u_a G_a as
        λ_r(u) = Σ_{a ⊇ r} u_a μ(a)                  (a superset-sum "zeta transform", O(d·2^d)).
    Hence G(u)⁺ = Σ_r [λ_r > 0] λ_r⁻¹ P_r, its row-space projector is Σ_{r: λ_r > 0} P_r, and
    trace(G(w) G(u)⁺) = Σ_r m_r λ_r(w) / λ_r(u).
    Projection (McKenna et al. 2018, OPT_M): against any element M of span{⊗ᵢ{I, J}},
    trace(Xᵢ Mᵢ) depends on a factor Gram Xᵢ only through trace Xᵢ and 1ᵀXᵢ1, so Xᵢ may be
    replaced by bᵢJ + aᵢI with bᵢ = (1ᵀXᵢ1 − trace Xᵢ)/(nᵢ(nᵢ − 1)), aᵢ = trace Xᵢ/nᵢ − bᵢ
    (nᵢ = 1: b = Xᵢ, a = 0). Expanding Π(bᵢJ + aᵢI) gives marginal weights
    w_a = Π_{i∉a} bᵢ Π_{i∈a} aᵢ; the result is exact for errors against marginal strategies only.

Only per-attribute (nᵢ × nᵢ) matrices are ever dense; vectors over keys have 2^d entries.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dpsql.errors import ShapeError
from dpsql.matrix.workloads import (
    FloatArray,
    Identity,
    Kron,
    Ranges,
    Sum,
    Total,
    VStack,
    Weighted,
    Workload,
)

Sizes = tuple[int, ...]
BoolArray = npt.NDArray[np.bool_]
#: Structures with more attributes than this are not treated as marginals (2^d keys).
MAX_ATTRIBUTES = 24


# =================================================================================== the lattice
def complement_sizes(sizes: Sequence[int]) -> FloatArray:
    """μ(a) = Π_{i∉a} nᵢ for every key a (length 2^d)."""
    return _key_products([(float(n), 1.0) for n in sizes])


def residual_dimensions(sizes: Sequence[int]) -> FloatArray:
    """m_r = Π_{i∈r} (nᵢ − 1) = dim V_r for every key r (length 2^d)."""
    return _key_products([(1.0, float(n - 1)) for n in sizes])


def _bit_view(f: FloatArray, bit: int) -> FloatArray:
    """f as (high, bit i, low) so that [:, 0, :] are the keys without bit i, [:, 1, :] with it."""
    return f.reshape(-1, 2, 1 << bit)


def superset_sum(f: npt.ArrayLike) -> FloatArray:
    """g_r = Σ_{a ⊇ r} f_a for every key r, in O(d·2^d)."""
    g = np.array(f, dtype=np.float64)
    for bit in range(_attributes(g)):
        view = _bit_view(g, bit)
        view[:, 0, :] += view[:, 1, :]
    return g


def subset_sum(f: npt.ArrayLike) -> FloatArray:
    """g_a = Σ_{r ⊆ a} f_r for every key a, in O(d·2^d)."""
    g = np.array(f, dtype=np.float64)
    for bit in range(_attributes(g)):
        view = _bit_view(g, bit)
        view[:, 1, :] += view[:, 0, :]
    return g


def _attributes(f: FloatArray) -> int:
    """d for a vector of length 2^d."""
    d = int(f.size).bit_length() - 1
    if f.ndim != 1 or f.size != 1 << d:
        raise ShapeError(f"a vector over attribute subsets needs 2^d entries; got shape {f.shape}.")
    return d


def eigenvalues(sizes: Sequence[int], u: npt.ArrayLike) -> FloatArray:
    """λ_r(u) = Σ_{a ⊇ r} u_a μ(a): the eigenvalue of Σ_a u_a G_a on V_r, for every key r."""
    u = np.asarray(u, dtype=np.float64)
    if u.shape != (1 << len(sizes),):
        raise ShapeError(f"weights over {len(sizes)} attributes need {1 << len(sizes)} entries; got shape {u.shape}.")
    return superset_sum(u * complement_sizes(sizes))


def kept(key: int, d: int) -> list[bool]:
    """Which of the d attributes the subset ``key`` keeps."""
    return [bool(key >> i & 1) for i in range(d)]


# =================================================================================== workload weights
def kron_terms(W: Workload, weight: float = 1.0) -> list[tuple[float, tuple[Workload, ...]]]:
    """W as a union Σₖ cₖ ⊗ᵢ Wₖᵢ: (cₖ = squared weight, factors) pairs.

    Weighted, VStack and Kron nest freely (nested Krons are flattened); anything else is a
    one-factor term.
    """
    if isinstance(W, Weighted):
        return kron_terms(W.base, weight * W.weight * W.weight)  # overflows to inf, never raises
    if isinstance(W, VStack):
        return [term for block in W.blocks for term in kron_terms(block, weight)]
    return [(weight, _flat_factors(W))]


def _flat_factors(W: Workload) -> tuple[Workload, ...]:
    """W's Kronecker factors, nested Krons flattened (a non-Kron W is its own single factor)."""
    if isinstance(W, Kron):
        if not any(isinstance(factor, Kron) for factor in W.factors):
            return W.factors  # already flat (the usual block of a statement)
        return tuple(f for factor in W.factors for f in _flat_factors(factor))
    return (W,)


def _splittable(factors: tuple[Workload, ...]) -> bool:
    """A one-factor Identity or Total term: it splits into the same block over any factorisation."""
    return len(factors) == 1 and _block_kind(factors[0]) is not None


def _fit(factors: tuple[Workload, ...], sizes: Sizes) -> tuple[Workload, ...]:
    """A one-factor Identity(N) / Total(N) term split over ``sizes`` (Π sizes = N); others unchanged."""
    if not _splittable(factors) or factors[0].shape[1] != int(np.prod(sizes)):
        return factors
    block: type[Workload] = Identity if _block_kind(factors[0]) else Total
    return tuple(block(n) for n in sizes)  # type: ignore[call-arg]


def _layout(terms: list[tuple[float, tuple[Workload, ...]]]) -> Sizes | None:
    """The attribute sizes shared by all terms (one-factor Identity/Total terms fit any), else None."""
    layouts = {tuple(f.shape[1] for f in factors) for _, factors in terms if not _splittable(factors)}
    if len(layouts) > 1:
        return None
    return layouts.pop() if layouts else (terms[0][1][0].shape[1],)


def workload_sizes(W: Workload, caller: str = "marginal_weights") -> Sizes:
    """The attribute sizes shared by all of W's Kronecker terms (see kron_terms), or ShapeError.

    One-factor Identity(N) and Total(N) terms fit any factorisation of N.
    """
    terms = kron_terms(W)
    sizes = _layout(terms)
    if sizes is None:
        layouts = sorted({tuple(f.shape[1] for f in factors) for _, factors in terms})
        raise ShapeError(f"{caller} needs every Kronecker term over the same attribute sizes; got {layouts}.")
    return sizes


#: factor_projection's results by factor object (workloads are immutable once built): a statement's
#: compiled factors recur in every candidate group that holds it, each computed once.
_projections: weakref.WeakKeyDictionary[Workload, tuple[float, float]] = weakref.WeakKeyDictionary()


def factor_projection(F: Workload) -> tuple[float, float]:
    """(b, a) with FᵀF ↦ bJ + aI of the same trace and entry sum (module doc); memoised per object."""
    known = _projections.get(F)
    if known is None:
        known = _projections[F] = _computed_projection(F)
    return known


def _computed_projection(F: Workload) -> tuple[float, float]:
    """:func:`factor_projection` computed: b = (1ᵀFᵀF1 − tr FᵀF)/(n(n−1)), a = tr FᵀF/n − b."""
    n = F.shape[1]
    with np.errstate(over="ignore", invalid="ignore"):
        trace = float(sum(np.prod([v.sum() for v in term]) for term in F._column_terms(2)))
        total = float(np.sum(np.asarray(F @ np.ones(n)) ** 2))
    if not (np.isfinite(trace) and np.isfinite(total)):
        raise ShapeError("the workload has non-finite entries (NaN or ±inf); every query coefficient must be finite.")
    if n == 1:
        return trace, 0.0
    b = (total - trace) / (n * (n - 1))
    return b, trace / n - b


def marginal_weights(W: Workload, sizes: Sequence[int]) -> FloatArray:
    """w (length 2^d) with WᵀW ↦ Σ_a w_a G_a by the per-factor projection (module doc).

    Exact for W's expected error against marginal strategies over ``sizes``; w_a may be negative
    for signed queries, but every λ_r(w) is ≥ 0. Raises ShapeError if a term's factors are not
    over ``sizes`` or W holds non-finite entries.
    """
    sizes = tuple(int(n) for n in sizes)
    weights, projections = [], []
    for weight, factors in kron_terms(W):
        if not np.isfinite(weight):
            raise ShapeError(f"the workload has a non-finite squared weight ({weight}); every weight must be finite.")
        factors = _fit(factors, sizes)
        if tuple(f.shape[1] for f in factors) != sizes:
            raise ShapeError(
                f"a workload term over attribute sizes {[f.shape[1] for f in factors]} does not match "
                f"the marginal domain {list(sizes)}."
            )
        weights.append(weight)
        projections.append([factor_projection(factor) for factor in factors])
    w = np.zeros(1 << len(sizes))
    step = max(1, TERMS_ENTRIES >> len(sizes))
    for start in range(0, len(weights), step):  # w += c_k v_k term by term, a block of terms per numpy call
        parts = np.array(projections[start:start + step], dtype=np.float64).reshape(-1, len(sizes), 2)
        terms = np.asarray(weights[start:start + step], dtype=np.float64)[:, None] * _key_products_of(parts)
        w = np.add.accumulate(np.concatenate([w[None, :], terms]), axis=0)[-1]
    if not np.all(np.isfinite(w)):
        raise ShapeError("the workload has non-finite entries (NaN or ±inf); every query coefficient must be finite.")
    return w


# =================================================================================== strategies
def marginal_query(sizes: Sequence[int], key: int) -> Workload:
    """Q_a = ⊗ᵢ (Identity(nᵢ) if i ∈ a else Total(nᵢ)); a one-attribute product is its factor."""
    factors: list[Workload] = [Identity(n) if keep else Total(n) for n, keep in zip(sizes, kept(key, len(sizes)))]
    return factors[0] if len(factors) == 1 else Kron(factors)


def marginals_strategy(sizes: Sequence[int], weights: npt.ArrayLike) -> Workload:
    """[weights_a · Q_a] over the keys a with weights_a > 0: the Gram is Σ_a weights_a² G_a.

    Row order: blocks by increasing key; within a block, the cells of the marginal table in
    row-major (np.kron) order over the kept attributes.
    """
    sizes = tuple(int(n) for n in sizes)
    values = np.asarray(weights, dtype=np.float64)
    if values.shape != (1 << len(sizes),) or not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ShapeError(f"marginal weights must be 2^d = {1 << len(sizes)} finite values ≥ 0; got {values!r}.")
    keys = np.flatnonzero(values > 0)
    if keys.size == 0:
        raise ShapeError("a marginals strategy needs at least one positive weight.")
    return VStack([Weighted(float(values[key]), marginal_query(sizes, int(key))) for key in keys])


def _block_kind(F: Workload) -> bool | None:
    """True for an Identity, False for a total (one all-ones row), None for anything else."""
    if isinstance(F, Identity):
        return True
    if isinstance(F, Total) or (isinstance(F, Ranges) and F.shape[0] == 1 and F.lo[0] == 0 and F.hi[0] == F.n - 1):
        return False
    return None


def marginal_form(A: Workload) -> tuple[Sizes, FloatArray] | None:
    """(sizes, u) when A is structurally a stack of weighted marginals, so AᵀA = Σ_a u_a G_a.

    A must be a VStack (or a single block) of optionally Weighted Krons (or single factors) whose
    every factor is an Identity or a Total, with the same factor sizes in every block (a one-factor
    Identity(N) or Total(N) block splits exactly over any sizes); u_a is the sum of the squared
    weights of the blocks on key a. None for any other structure.
    """
    terms = kron_terms(A)
    sizes = _layout(terms)
    if sizes is None or len(sizes) > MAX_ATTRIBUTES:
        return None
    u = np.zeros(1 << len(sizes))
    for weight, factors in terms:
        kinds = [_block_kind(f) for f in _fit(factors, sizes)]
        if any(kind is None for kind in kinds):
            return None
        u[sum(1 << i for i, kind in enumerate(kinds) if kind)] += weight
    return sizes, u


# =================================================================================== pseudo-inverse
class _Projector(Workload):
    """A symmetric n × n projector applied in O(n) per column (subclasses give the formula)."""

    def __init__(self, n: int) -> None:
        self.n = int(n)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return self._matmat(Y)

    @property
    def T(self) -> Workload:
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.n})"


class Averaging(_Projector):
    """J_n / n: the orthogonal projector onto the constant vectors (span 1)."""

    def _matmat(self, X: FloatArray) -> FloatArray:
        return np.repeat(X.mean(axis=0, keepdims=True), self.n, axis=0)

    def dense(self) -> FloatArray:
        return np.full((self.n, self.n), 1.0 / self.n)

    def trace(self) -> float:
        return 1.0


class Centering(_Projector):
    """I_n − J_n / n: the orthogonal projector onto 1⊥ (vectors summing to zero)."""

    def _matmat(self, X: FloatArray) -> FloatArray:
        return np.asarray(X - X.mean(axis=0, keepdims=True), dtype=np.float64)

    def dense(self) -> FloatArray:
        return np.eye(self.n) - 1.0 / self.n

    def trace(self) -> float:
        return float(self.n - 1)


def residual_projector_of(sizes: Sequence[int], key: int) -> Workload:
    """P_r = ⊗ᵢ (I − J/nᵢ if i ∈ r else J/nᵢ); a one-attribute product is its factor."""
    factors: list[Workload] = [Centering(n) if keep else Averaging(n) for n, keep in zip(sizes, kept(key, len(sizes)))]
    return factors[0] if len(factors) == 1 else Kron(factors)


class ResidualSum(Sum):
    """M = Σ_r s_r P_r over the residuals with s_r ≠ 0: a Sum of (Weighted) products P_r that
    also keeps (sizes, s), so traces and diagonals against Kronecker terms cost O(2^d + Σ nᵢ²).

    With per-factor projections of a square X: on span 1, tr(X J/n) = 1ᵀX1/n; on 1⊥,
    tr(X (I − J/n)) = tr X − 1ᵀX1/n. For a query row q: q(J/n)qᵀ = (q1)²/n and
    q(I − J/n)qᵀ = ‖q‖² − (q1)²/n. Products over attributes, weighted by s_r, give the result.
    """

    def __init__(self, sizes: Sequence[int], scales: FloatArray) -> None:
        self.sizes: Sizes = tuple(int(n) for n in sizes)
        self.scales = np.asarray(scales, dtype=np.float64)
        keys = np.flatnonzero(self.scales)
        if keys.size == 0:
            raise ShapeError("the marginal weights are all zero: the strategy measures nothing.")
        projectors = [residual_projector_of(self.sizes, int(r)) for r in keys]
        super().__init__([P if self.scales[r] == 1.0 else Weighted(self.scales[r], P)
                          for r, P in zip(keys, projectors)])

    @property
    def T(self) -> Workload:
        return self

    def _matching(self, X: Workload) -> tuple[Workload, ...] | None:
        """X's Kronecker factors when they are over this operator's attribute sizes, else None."""
        factors = _flat_factors(X)
        return factors if tuple(f.shape[1] for f in factors) == self.sizes else None

    def trace_against(self, G: Workload) -> float | None:
        """trace(G M) for one square Kronecker term G over the same sizes; None otherwise."""
        factors = self._matching(G)
        if factors is None or any(X.shape[0] != X.shape[1] for X in factors):
            return None
        parts = []
        for X, n in zip(factors, self.sizes):
            on_ones = float(np.sum(X @ np.ones(n))) / n
            parts.append((on_ones, X.trace() - on_ones))
        return float(_key_products(parts) @ self.scales)

    def diag_against(self, W: Workload) -> FloatArray | None:
        """diag(W M Wᵀ) for one Kronecker term W over the same sizes; None otherwise.

        The 2^d scales, as a tensor with one axis per attribute, are contracted axis by axis with
        the per-factor rows [(q1)²/n; ‖q‖² − (q1)²/n], giving the rows in Kronecker order.
        """
        factors = self._matching(W)
        if factors is None:
            return None
        tensor = self.scales.reshape([2] * len(self.sizes)).T  # axis i is attribute i
        for F, n in zip(factors, self.sizes):
            on_ones = np.asarray(F @ np.ones(n)) ** 2 / n
            squares = F._quadratic_diag_dense(np.eye(n))
            tensor = np.tensordot(tensor, np.stack([on_ones, squares - on_ones]), axes=([0], [0]))
        return np.asarray(tensor, dtype=np.float64).ravel()


#: marginal_weights forms the key products of at most this many entries (terms × 2^d) at once.
TERMS_ENTRIES = 2**18


def _key_products_of(parts: FloatArray) -> FloatArray:
    """:func:`_key_products` of many terms at once: ``parts`` is (terms, d, 2) of (outᵢ, inᵢ); row k is
    term k's v, its entries the same products in the same order as the one-term form."""
    v = np.ones((parts.shape[0], 1))
    for attribute in range(parts.shape[1]):
        v = np.concatenate([v * parts[:, attribute, :1], v * parts[:, attribute, 1:]], axis=1)
    return v


def _key_products(parts: Sequence[tuple[float, float]]) -> FloatArray:
    """v_a = Π_{i∉a} outᵢ · Π_{i∈a} inᵢ for every key a, from per-attribute (outᵢ, inᵢ)."""
    v = np.ones(1)
    for out, inside in parts:
        v = np.concatenate([v * out, v * inside])
    return v


def supported_residuals(sizes: Sequence[int], u: npt.ArrayLike, tolerance: float = 0.0) -> tuple[FloatArray, BoolArray]:
    """(λ(u), mask): the eigenvalues and the residuals r with m_r > 0 and λ_r > tolerance·max λ."""
    lam = eigenvalues(sizes, u)
    present = residual_dimensions(sizes) > 0
    top = float(lam[present].max(initial=0.0))
    return lam, present & (lam > tolerance * top) & (lam > 0.0)


def residual_pinv(sizes: Sequence[int], u: npt.ArrayLike, tolerance: float = 0.0) -> ResidualSum:
    """(Σ_a u_a G_a)⁺ = Σ_r [λ_r > 0] λ_r⁻¹ P_r (eigenvalues ≤ tolerance·max λ count as zero)."""
    lam, keep = supported_residuals(sizes, u, tolerance)
    return ResidualSum(sizes, np.where(keep, 1.0 / np.where(keep, lam, 1.0), 0.0))


def residual_projector(sizes: Sequence[int], u: npt.ArrayLike, tolerance: float = 0.0) -> Workload:
    """Σ_{r: λ_r > 0} P_r, the projector onto the row space; Identity(N) when every V_r is kept."""
    _, keep = supported_residuals(sizes, u, tolerance)
    if np.array_equal(keep, residual_dimensions(sizes) > 0):
        return Identity(int(np.prod(sizes)))
    return ResidualSum(sizes, keep.astype(np.float64))
