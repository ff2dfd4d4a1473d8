"""Structured linear algebra on implicit operators.

With M = (AᵀA)⁺ (the strategy's *error profile*) and G = WᵀW, the matrix mechanism's errors are
trace(G M) and diag(W M Wᵀ). These are computed factor by factor whenever W and A share a
Kronecker factorisation: (⊗Aᵢ)⁺ = ⊗Aᵢ⁺, trace(⊗Gᵢ ⊗Mᵢ) = Π trace(GᵢMᵢ) and
diag((⊗Wᵢ)(⊗Mᵢ)(⊗Wᵢ)ᵀ) = ⊗ diag(WᵢMᵢWᵢᵀ). A stack of weighted marginals (dpsql.residual.basis) has
(AᵀA)⁺ = Σ_r λ_r⁻¹ P_r, a sum of Kronecker products (dpsql.residual.basis.ResidualSum, with closed
forms against Kronecker terms); other sums are handled term by term.
Only per-factor matrices are ever dense, except (AᵀA)⁺ of a strategy with none of these forms (a
stack of Kronecker products: HDMM's OPT₊); against such a dense M, a Gram Σ_k c_k ⊗ᵢ G_ki is
traced in one pass over M (:func:`kron_sum_trace`), never densified term by term. Of a definite
AᵀA over many cells only the Cholesky factor is kept (:class:`CholeskyInverse`): a workload of few
rows is scored and answered by triangular solves, without the n × n inverse.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from dpsql.matrix.kronvec import align_terms, group_by_cuts, kron_vectors, shared_cuts
from dpsql.matrix.partitions import Averaging, Parts
from dpsql.matrix.workloads import (
    Explicit,
    FloatArray,
    Identity,
    Kron,
    Sum,
    VStack,
    Weighted,
    Workload,
    check_dense_size,
    kron_factors,
)
from dpsql.residual.basis import ResidualSum, marginal_form, residual_pinv, residual_projector

#: Eigenvalues below this fraction of the largest are treated as exact zeros.
RANK_TOLERANCE = 1e-10

_pinv_cache: weakref.WeakKeyDictionary[Workload, Workload] = weakref.WeakKeyDictionary()
_full_column_rank: weakref.WeakSet[Workload] = weakref.WeakSet()


def pinv_psd(G: FloatArray) -> tuple[FloatArray, bool]:
    """(G⁺, definite) for a symmetric PSD matrix: Cholesky when numerically definite, else eigh."""
    factor, info = sla.lapack.dpotrf(G, lower=False)
    if info == 0:
        inverse = _cholesky_inverse(factor)
        # κ₁(G) = ‖G‖₁‖G⁻¹‖₁ bounds λ_max/λ_min; a Cholesky that "succeeds" on a numerically
        # singular G shows up here as a huge inverse.
        if inverse is not None and \
                np.abs(G).sum(axis=0).max() * np.abs(inverse).sum(axis=0).max() * RANK_TOLERANCE < 1.0:
            return inverse, True
    return _eigh_pinv(G)


def _cholesky_inverse(factor: FloatArray) -> FloatArray | None:
    """G⁻¹ = U⁻¹U⁻ᵀ from G's upper Cholesky factor U (LAPACK dpotri), both triangles filled; None
    when dpotri fails."""
    inverse, info = sla.lapack.dpotri(factor, lower=False)
    if info != 0:
        return None
    upper = np.diag(inverse).copy()
    inverse = np.triu(inverse)
    inverse += inverse.T  # the strict upper triangle mirrored; the diagonal, doubled, is reset below
    np.fill_diagonal(inverse, upper)
    return np.asarray(inverse)


def _eigh_pinv(G: FloatArray) -> tuple[FloatArray, bool]:
    """(G⁺, definite) from G's eigendecomposition, eigenvalues below RANK_TOLERANCE of the largest set to zero."""
    values, vectors = np.linalg.eigh(G)
    keep = values > RANK_TOLERANCE * max(values.max(), 0.0)
    return (vectors[:, keep] / values[keep]) @ vectors[:, keep].T, bool(keep.all())


#: (AᵀA)⁺ of a strategy over at least this many cells, with no structured form, is kept as AᵀA's
#: Cholesky factor when AᵀA is definite (:func:`factored_pinv`); smaller ones as a dense inverse.
FACTORED_CELLS = 1024

#: :func:`factored_pinv` trusts LAPACK's condition estimate when it is this far below 1/RANK_TOLERANCE.
#: The estimate ‖G⁻¹x‖₁ for one x with ‖x‖₁ = 1 (W. W. Hager, "Condition estimates", SIAM J. Sci.
#: Stat. Comput., 1984; N. J. Higham, "FORTRAN codes for estimating the one-norm of a real or complex
#: matrix, with applications to condition estimation", ACM TOMS, 1988: LAPACK's dlacn2) is a lower
#: bound of ‖G⁻¹‖₁, in practice equal to it (to rounding on 400 random Grams of Kronecker stacks with
#: κ₁ from 10 to 10¹¹): a decision could differ from the exact test's only if the estimate fell short
#: of ‖G⁻¹‖₁ by more than this factor.
ESTIMATE_MARGIN = 2.0


def factored_pinv(G: Workload) -> tuple[Workload, bool]:
    """(G⁺, definite) for a PSD operator G, as :func:`pinv_psd` decides it: a :class:`CholeskyInverse`
    when G's Cholesky factor U exists and κ₁(G) · RANK_TOLERANCE < 1, else G's eigendecomposition.

    κ₁(G) = ‖G‖₁‖G⁻¹‖₁ is estimated from U in O(n²) (LAPACK dpocon, a lower bound): an estimate
    of at least 1/RANK_TOLERANCE decides against the Cholesky inverse exactly as the exact test
    would; one below 1/(ESTIMATE_MARGIN · RANK_TOLERANCE) decides for it; between the two, the
    exact test is run on the inverse (dpotri, which the result then keeps). So the decisions are
    :func:`pinv_psd`'s unless the estimate falls short of ‖G⁻¹‖₁ by more than ESTIMATE_MARGIN.
    """
    matrix = G.dense().T  # symmetric: the Fortran-ordered view of dense()'s fresh array, factored in place
    norm = float(sla.lapack.dlange("1", matrix))
    factor, info = sla.lapack.dpotrf(matrix, lower=False, overwrite_a=True)
    if info == 0:
        rcond, info = sla.lapack.dpocon(factor, norm)
        if info == 0 and rcond > ESTIMATE_MARGIN * RANK_TOLERANCE:
            return CholeskyInverse(factor), True
        if info == 0 and rcond > RANK_TOLERANCE:
            inverse = _cholesky_inverse(factor)
            if inverse is not None and norm * np.abs(inverse).sum(axis=0).max() * RANK_TOLERANCE < 1.0:
                return CholeskyInverse(factor, inverse), True
    pinv, definite = _eigh_pinv(G.dense())
    return Explicit(pinv), definite


class CholeskyInverse(Workload):
    """M = G⁻¹ of a definite G = UᵀU, held as its upper Cholesky factor U (LAPACK dpotrf).

    M X = U⁻¹(U⁻ᵀX) by two triangular solves (dpotrs), O(n²) per column. Against a workload W
    of m rows: with S = U⁻ᵀWᵀ (one triangular solve, O(n²m)), W M Wᵀ = SᵀS, so
    diag(W M Wᵀ) is S's squared column norms and trace(WᵀW M) = ‖S‖²_F. The dense inverse
    (dpotri, O(n³)) is formed only when asked for, once; a workload of more than n/2 rows is
    scored against it (two solves per row would cost more than the inverse).
    """

    def __init__(self, factor: FloatArray, inverse: FloatArray | None = None) -> None:
        """``factor``: U in the upper triangle (the strict lower triangle is ignored); ``inverse``: G⁻¹
        when already formed."""
        self.factor = factor
        self._inverse = None if inverse is None else Explicit(inverse)

    @property
    def shape(self) -> tuple[int, int]:
        n = self.factor.shape[0]
        return (n, n)

    def _matmat(self, X: FloatArray) -> FloatArray:
        solved, info = sla.lapack.dpotrs(self.factor, X, lower=False)
        if info != 0:
            raise ValueError(f"dpotrs failed (info {info}).")
        return np.asarray(solved)

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return self._matmat(Y)  # M is symmetric

    @property
    def T(self) -> Workload:
        return self

    def explicit(self) -> Explicit:
        """M as a dense Explicit (dpotri, formed on the first call and kept)."""
        if self._inverse is None:
            inverse = _cholesky_inverse(self.factor)
            if inverse is None:
                raise ValueError("dpotri failed on a Cholesky factor.")
            self._inverse = Explicit(inverse)
        return self._inverse

    def dense(self) -> FloatArray:
        return self.explicit().dense()

    def trace(self) -> float:
        return self.explicit().trace()

    def factored(self, W: Workload) -> bool:
        """Whether W (m × n) is scored by triangular solves: m ≤ n/2."""
        return 2 * W.shape[0] <= self.shape[0]

    def whitened(self, W: Workload) -> FloatArray:
        """S = U⁻ᵀWᵀ (n × m), so that W M Wᵀ = SᵀS."""
        m, n = W.shape
        check_dense_size(n, m, "a whitened workload U⁻ᵀWᵀ")
        rows = W.dense().T  # Fortran-ordered n × m, as LAPACK takes it
        return np.asarray(sla.solve_triangular(self.factor, rows, trans="T", lower=False, check_finite=False))

    def gram_trace(self, W: Workload) -> float:
        """trace(WᵀW M) = ‖U⁻ᵀWᵀ‖²_F, or against the dense M for a workload of many rows."""
        if not self.factored(W):
            return trace_of_product(W.gram(), self.explicit())
        return float(np.sum(self.whitened(W) ** 2))

    def quadratic_diag(self, W: Workload) -> FloatArray:
        """diag(W M Wᵀ): the squared column norms of U⁻ᵀWᵀ."""
        if not self.factored(W):
            return W._quadratic_diag_dense(self.explicit().matrix)
        return np.asarray(np.sum(self.whitened(W) ** 2, axis=0))

    def bilinear_diag(self, U: Workload, V: Workload) -> FloatArray:
        """diag(U M Vᵀ) = the column-wise inner products of U⁻ᵀUᵀ and U⁻ᵀVᵀ."""
        if not self.factored(U):
            return bilinear_diag(U, self.explicit(), V)
        return np.einsum("ij,ij->j", self.whitened(U), self.whitened(V))

    def __repr__(self) -> str:
        return f"CholeskyInverse{self.shape}"


def diagonal_entries(A: Workload) -> FloatArray | None:
    """The diagonal of a square sparse explicit A with no other entries (a column-scaled identity,
    as per-cell bounds make of it), else None."""
    if not isinstance(A, Explicit) or not sp.issparse(A.matrix) or A.shape[0] != A.shape[1]:
        return None
    matrix = sp.coo_array(A.matrix)
    if np.any(matrix.row != matrix.col):
        return None
    return np.asarray(A.matrix.diagonal(), dtype=np.float64)


def pinv_gram(A: Workload) -> Workload:
    """M = (AᵀA)⁺, kept in structure (Identity, Kronecker, weighted, marginals); cached per strategy."""
    if A in _pinv_cache:
        return _pinv_cache[A]
    if isinstance(A, Identity):
        result: Workload = A
    elif isinstance(A, Kron):
        result = Kron([pinv_gram(f) for f in A.factors])
    elif isinstance(A, Weighted):
        result = Weighted(1.0 / A.weight**2, pinv_gram(A.base))
    elif isinstance(A, Parts):
        result = A.profile()
    elif (diagonal := diagonal_entries(A)) is not None:  # (D²)⁺, sparse
        squares = diagonal**2
        result = Explicit(sp.diags_array(np.divide(1.0, squares, out=np.zeros_like(squares), where=squares > 0),
                                         format="csr"))
        if np.all(squares > 0):
            _full_column_rank.add(A)
    elif (form := marginal_form(A)) is not None:
        result = residual_pinv(*form, tolerance=RANK_TOLERANCE)
    else:
        n = A.shape[1]
        check_dense_size(n, n, "the strategy's error profile (AᵀA)⁺")
        if n >= FACTORED_CELLS:
            result, definite = factored_pinv(A.gram())
        else:
            inverse, definite = pinv_psd(A.gram().dense())
            result = Explicit(inverse)
        if definite:
            _full_column_rank.add(A)
    _pinv_cache[A] = result
    return result


def projector(A: Workload) -> Workload:
    """P = A⁺A, the orthogonal projector onto A's row space, in structure."""
    if isinstance(A, Identity):
        return A
    if isinstance(A, Kron):
        factors = [projector(f) for f in A.factors]
        return Identity(A.shape[1]) if all(isinstance(f, Identity) for f in factors) else Kron(factors)
    if isinstance(A, Weighted):
        return projector(A.base)
    if isinstance(A, Parts):
        return A.projector()
    if (diagonal := diagonal_entries(A)) is not None:
        return Identity(A.shape[1]) if np.all(diagonal != 0) else Explicit(sp.diags_array(
            (diagonal != 0).astype(np.float64), format="csr"))
    if (form := marginal_form(A)) is not None:
        return residual_projector(*form, tolerance=RANK_TOLERANCE)
    M = pinv_gram(A)
    if A in _full_column_rank:
        return Identity(A.shape[1])
    return Explicit(M.dense() @ A.gram().dense())


def paired_factors(X: Workload, Y: Workload) -> list[tuple[Workload, Workload]]:
    """Split X and Y into matching Kronecker groups over the finest factorisation they share.

    Both are viewed through their column sizes; an Identity is split to fit the other side.
    """
    xs, ys = _expand_identity(X, Y), _expand_identity(Y, X)
    cuts = shared_cuts([[f.shape[1] for f in xs], [f.shape[1] for f in ys]])
    return list(zip(group_factors(xs, cuts), group_factors(ys, cuts), strict=True))


def _expand_identity(X: Workload, other: Workload) -> Sequence[Workload]:
    if isinstance(X, Identity) and isinstance(other, Kron):
        return [Identity(f.shape[1]) for f in other.factors]
    return kron_factors(X)


def group_factors(factors: Sequence[Workload], cuts: set[int]) -> list[Workload]:
    """Consecutive Kronecker factors merged into one operator per cut (see kronvec.group_by_cuts)."""
    groups = group_by_cuts([f.shape[1] for f in factors], cuts)
    return [factors[g.start] if len(g) == 1 else Kron([factors[i] for i in g]) for g in groups]


def gram_trace(W: Workload, M: Workload, gram: Callable[[Workload], Workload] | None = None) -> float:
    """trace(WᵀW M): by triangular solves against a :class:`CholeskyInverse` (weighted or not), else
    :func:`trace_of_product` of W's Gram (``gram(W)`` when given: the same operator in another form)."""
    if isinstance(M, Weighted) and isinstance(M.base, CholeskyInverse):
        return M.weight * M.base.gram_trace(W)
    if isinstance(M, CholeskyInverse):
        return M.gram_trace(W)
    return trace_of_product(W.gram() if gram is None else gram(W), M)


def trace_of_product(G: Workload, M: Workload) -> float:
    """trace(G M) for square operators of one size, exploiting sums, weights and Kronecker form."""
    if isinstance(M, CholeskyInverse):
        M = M.explicit()
    if isinstance(G, (Sum, Weighted)) and (matrix := dense_matrix(M)) is not None \
            and (terms := square_terms(G)) is not None:
        return kron_sum_trace(terms, matrix)
    if isinstance(G, Sum):
        return float(sum(trace_of_product(term, M) for term in G.terms))
    if isinstance(G, Weighted):
        return G.weight * trace_of_product(G.base, M)
    if isinstance(M, Weighted):
        return M.weight * trace_of_product(G, M.base)
    if isinstance(M, ResidualSum) and (value := M.trace_against(G)) is not None:
        return value
    if isinstance(M, Averaging):
        return M.trace_against(G)
    if isinstance(M, Sum):
        return float(sum(trace_of_product(G, term) for term in M.terms))
    if isinstance(M, Identity):
        return G.trace()
    if isinstance(G, Identity):
        return M.trace()
    pairs = paired_factors(G, M)
    if len(pairs) > 1:
        return float(np.prod([trace_of_product(g, m) for g, m in pairs]))
    (G, M), n = pairs[0], G.shape[0]  # a one-factor Kronecker product is its factor
    if isinstance(M, Identity):
        return G.trace()
    if isinstance(G, Kron) and all(f.shape[0] == f.shape[1] for f in G.factors) \
            and (matrix := dense_matrix(M)) is not None:
        return kron_trace(G.factors, matrix)
    check_dense_size(n, n, "trace(G M)")
    return float(np.sum(G.dense() * _dense_view(M).T))


def dense_matrix(M: Workload) -> FloatArray | None:
    """M's own dense array when M is an Explicit held densely (no copy), else None."""
    return M.matrix if isinstance(M, Explicit) and isinstance(M.matrix, np.ndarray) else None


def _dense_view(M: Workload) -> FloatArray:
    """M as a dense array, without copying one already held densely."""
    matrix = dense_matrix(M)
    return M.dense() if matrix is None else matrix


def kron_trace(factors: Sequence[Workload], M: FloatArray) -> float:
    """trace((⊗ᵢ Gᵢ) M) for square factors and a dense M, without forming ⊗Gᵢ (see kron_sum_trace)."""
    return kron_sum_trace([(1.0, tuple(factors))], M)


def square_terms(G: Workload) -> list[tuple[float, tuple[Workload, ...]]] | None:
    """G as Σ_k c_k ⊗ᵢ G_ki over one factorisation shared by every term, all factors square
    (:func:`gram_terms`, regrouped on the finest common cuts), or None."""
    terms = gram_terms(G)
    cuts = shared_cuts([[f.shape[1] for f in factors] for _, factors in terms])
    grouped = [(c, tuple(group_factors(factors, cuts))) for c, factors in terms]
    if any(f.shape[0] != f.shape[1] for _, factors in grouped for f in factors):
        return None
    return grouped


def kron_sum_trace(terms: Sequence[tuple[float, Sequence[Workload]]], M: FloatArray) -> float:
    """trace((Σ_k c_k ⊗ᵢ G_ki) M) for a dense n × n M and square factors over one factorisation
    n = Π nᵢ, without forming any n × n term.

    Math: view M as a tensor T[y₁…y_d, x₁…x_d] (row index y, column x, row-major) and regroup it
    once as P[(x₁,y₁), …, (x_d,y_d)]. Then trace(⊗Gᵢ M) = Σ_{x,y} Πᵢ Gᵢ[xᵢ,yᵢ] T[y,x] is the
    multilinear form of P against the vectors vec(Gᵢ) (length nᵢ²), contracted attribute by
    attribute from the last: one pass over the n² entries of P serves every term at once (a
    matrix product with the k terms' vec(G_k,d) as columns), the later contractions are smaller.
    """
    sizes = [f.shape[0] for f in terms[0][1]]
    d = len(sizes)
    paired = M.reshape(sizes + sizes).transpose([a for i in range(d) for a in (d + i, i)])
    def vectors(axis: int) -> FloatArray:  # n_i² × k: each term's vec(G_ki) as a column
        return np.stack([_factor_dense(factors[axis]).ravel() for _, factors in terms], axis=1)

    result = np.ascontiguousarray(paired).reshape(-1, sizes[-1] ** 2) @ vectors(d - 1)
    for axis in reversed(range(d - 1)):
        result = np.einsum("pqk,qk->pk", result.reshape(-1, sizes[axis] ** 2, len(terms)), vectors(axis))
    return float(np.asarray([c for c, _ in terms]) @ result[0])


def _factor_dense(F: Workload) -> FloatArray:
    """One Kronecker factor as a dense array (within the dense-size limit)."""
    check_dense_size(*F.shape, "a Kronecker factor")
    return _dense_view(F)


def quadratic_diag(W: Workload, M: Workload) -> FloatArray:
    """diag(W M Wᵀ): each query's variance under error profile M, without forming W."""
    if isinstance(W, VStack):
        return np.concatenate([quadratic_diag(block, M) for block in W.blocks])
    if isinstance(W, Weighted):
        return W.weight**2 * quadratic_diag(W.base, M)
    if isinstance(M, Weighted):
        return M.weight * quadratic_diag(W, M.base)
    if isinstance(M, CholeskyInverse):
        return M.quadratic_diag(W)
    if isinstance(M, ResidualSum) and (diag := M.diag_against(W)) is not None:
        return diag
    if isinstance(M, Averaging):
        return M.bilinear_diag(W, W)
    if isinstance(M, Sum):
        return np.sum([quadratic_diag(W, term) for term in M.terms], axis=0)
    if isinstance(W, Sum):
        return np.sum([bilinear_diag(left, M, right) for left in W.terms for right in W.terms], axis=0)
    pairs = paired_factors(W, M)
    if len(pairs) > 1:
        return kron_vectors([quadratic_diag(w, m) for w, m in pairs])
    (W, M), n = pairs[0], W.shape[1]  # a one-factor Kronecker product is its factor
    if isinstance(M, Identity):  # diag(W Wᵀ): the rows' squared norms, W's transpose's column power sums
        return np.asarray(np.sum([kron_vectors(term) for term in align_terms(W.T._column_terms(2))], axis=0))
    if isinstance(M, Explicit) and sp.issparse(M.matrix) and isinstance(W, Explicit):  # row by row, sparse
        rows = sp.csr_array(W.matrix)
        return np.asarray((rows @ M.matrix).multiply(rows).sum(axis=1), dtype=np.float64).ravel()
    check_dense_size(n, n, "diag(W M Wᵀ)")
    return W._quadratic_diag_dense(_dense_view(M))


def bilinear_diag(U: Workload, M: Workload, V: Workload) -> FloatArray:
    """diag(U M Vᵀ) for U, V of one shape: factor by factor when U, V and M share a Kronecker form."""
    if isinstance(M, Weighted):
        return M.weight * bilinear_diag(U, M.base, V)
    if isinstance(M, Sum):
        return np.sum([bilinear_diag(U, term, V) for term in M.terms], axis=0)
    if isinstance(M, Averaging):
        return M.bilinear_diag(U, V)
    if isinstance(M, CholeskyInverse):
        return M.bilinear_diag(U, V)
    if isinstance(U, Kron) and isinstance(V, Kron) and [f.shape for f in U.factors] == [f.shape for f in V.factors]:
        pairs = paired_factors(U, M)
        if len(pairs) == len(U.factors):
            return kron_vectors([bilinear_diag(u, m, v) for u, (_, m), v in zip(U.factors, pairs, V.factors)])
    if isinstance(M, Identity) and isinstance(U, Explicit) and isinstance(V, Explicit):  # diag(U Vᵀ), entrywise
        return np.asarray(sp.csr_array(U.matrix).multiply(V.matrix).sum(axis=1), dtype=np.float64).ravel()
    m, n = U.shape
    check_dense_size(m, n, "diag(U M Vᵀ)")
    dense_m = np.eye(n) if isinstance(M, Identity) else M.dense()
    return np.einsum("ij,ij->i", U.dense() @ dense_m, V.dense())


#: Most entries of one dense factor W_g (A_gᵀA_g)⁺A_gᵀ of :func:`kron_answers` (and of W_g densified for it).
ANSWER_FACTOR_ENTRIES = 2**22


def kron_answers(W: Workload, A: Kron, y: FloatArray) -> FloatArray | None:
    """W A⁺ y for a Kronecker strategy A without the cell estimate A⁺y, or None when a factor of
    the answer operator would exceed ANSWER_FACTOR_ENTRIES.

    Math: over the finest factorisation W and A share (:func:`paired_factors`),
    W A⁺ = ⊗_g R_g with R_g = W_g (A_gᵀA_g)⁺A_gᵀ, each formed densely (q_g × p_g) and applied to y axis
    by axis. Numerics: an answer summing many cells (a total) is mostly read off A's heavy rows,
    while each cell estimate carries the noise of its light rows, up to ~10¹³ times the answer's
    for a Kronecker strategy with several such factors; W x̂ cancels those noises, and x̂'s
    float64 rounding (relative to its own size) survives the cancellation. R_g's entries are the
    answer's own coefficients, so R y is as accurate as the answer's scale allows.
    """
    factors = []
    for w, a in paired_factors(W, A):
        (q, n), p = w.shape, a.shape[0]
        if max(q * n, q * p) > ANSWER_FACTOR_ENTRIES:
            return None
        factors.append(Explicit(np.asarray(a @ (pinv_gram(a) @ w.dense().T)).T))
    return np.asarray(Kron(factors) @ y)


def gram_terms(G: Workload, weight: float = 1.0) -> list[tuple[float, tuple[Workload, ...]]]:
    """G as Σ_k c_k ⊗ᵢ G_ki: (c_k, factors) pairs, flattening sums and weights."""
    if isinstance(G, Sum):
        return [term for t in G.terms for term in gram_terms(t, weight)]
    if isinstance(G, Weighted):
        return gram_terms(G.base, weight * G.weight)
    return [(weight, kron_factors(G))]


def nuclear_norm_of_root(G: Workload) -> float:
    """trace(G^{1/2}) of a PSD operator, with eigenvalues below the rank tolerance set to zero."""
    if isinstance(G, Identity):
        return float(G.n)
    known = getattr(G, "known_eigenvalues", None)
    if known is not None:
        values = np.array(known, dtype=np.float64)
    else:
        check_dense_size(G.shape[0], G.shape[1], "the spectrum of a Gram matrix")
        values = np.asarray(np.linalg.eigvalsh(G.dense()), dtype=np.float64)
    values[values < RANK_TOLERANCE * max(values.max(), 0.0)] = 0.0
    return float(np.sqrt(values).sum())


#: A leaf with at most this many cells gets its top-eigenvalue bound from its dense Gram (a standard
#: strategy's factor: hierarchical, wavelet, totals).
GERSHGORIN_GRAM_CELLS = 1024

_top_bounds: weakref.WeakKeyDictionary[Workload, float | None] = weakref.WeakKeyDictionary()


def top_eigenvalue_bound(A: Workload) -> float | None:
    """λ̄ ≥ λ_max(AᵀA) = ‖A‖₂², by structure; None where no cheap bound is known. Memoised per object.

    Identity: 1. Weighted: w²·λ̄(base). Kronecker: Π λ̄(Aᵢ) (the spectrum of ⊗AᵢᵀAᵢ is the products of
    the factors'). Stack: Σ λ̄(A_b) (AᵀA = Σ A_bᵀA_b, and λ_max is subadditive on PSD matrices). A dense or
    sparse matrix: Gershgorin's theorem on |A|ᵀ|A|, whose row sums |A|ᵀ(|A|·1) bound those of |AᵀA|, in
    O(entries). Another leaf of at most GERSHGORIN_GRAM_CELLS cells: Gershgorin on its dense Gram."""
    if A in _top_bounds:
        return _top_bounds[A]
    bound: float | None
    if isinstance(A, Identity):
        bound = 1.0
    elif isinstance(A, Weighted):
        base = top_eigenvalue_bound(A.base)
        bound = None if base is None else A.weight**2 * base
    elif isinstance(A, (Kron, VStack)):
        found = [top_eigenvalue_bound(part) for part in (A.factors if isinstance(A, Kron) else A.blocks)]
        parts = [p for p in found if p is not None]
        bound = None if len(parts) < len(found) else float(np.prod(parts) if isinstance(A, Kron) else sum(parts))
    elif isinstance(A, Explicit):
        magnitude = abs(A.matrix)
        bound = float(np.max(magnitude.T @ np.asarray(magnitude.sum(axis=1)).ravel(), initial=0.0))
    elif A.shape[1] <= GERSHGORIN_GRAM_CELLS:
        bound = float(np.abs(A.gram().dense()).sum(axis=1).max(initial=0.0))
    else:
        bound = None
    _top_bounds[A] = bound
    return bound
