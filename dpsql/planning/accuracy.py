"""Exact expected error of the matrix mechanism, and the SVD lower bound.

Notation: W (m × n) the workload, A (p × n) the strategy, G = WᵀW, M = (AᵀA)⁺.

Math:
    Answers W A⁺(A x + z) are unbiased when W A⁺ A = W (the support condition); with i.i.d. noise
    of variance v, query i has variance v · (W M Wᵀ)_ii and the total squared error is
    v · trace(G M). At unit privacy the noise variance is
        gaussian: σ² = Δ₂(A)²         (σ = Δ₂, i.e. ρ = Δ₂²/(2σ²) = 1/2),
        laplace:  2 b² = 2 Δ₁(A)²      (scale b = Δ₁/ε at ε = 1).
    SVD bound (Li & Miklau): no strategy has Gaussian total error below
        svdb(W) = (Σᵢ λᵢ)² / n = trace(G^{1/2})² / n,
    λᵢ the singular values of W and n its number of non-zero columns (all-zero columns removed
    first); for a Kronecker product svdb(⊗Wᵢ) = Π svdb(Wᵢ).
"""

from __future__ import annotations

import weakref

import numpy as np

from dpsql.errors import ShapeError, UnsupportedStrategyError
from dpsql.matrix.grams import collected
from dpsql.matrix.kronvec import align_terms, kron_vectors, shared_cuts
from dpsql.matrix.linalg import (
    RANK_TOLERANCE,
    gram_terms,
    gram_trace,
    group_factors,
    nuclear_norm_of_root,
    pinv_gram,
    projector,
    quadratic_diag,
    top_eigenvalue_bound,
    trace_of_product,
)
from dpsql.matrix.partitions import partition_form
from dpsql.matrix.workloads import (
    Explicit,
    FloatArray,
    Identity,
    Kron,
    VStack,
    Weighted,
    Workload,
    check_dense_size,
)
from dpsql.noise import Noise

#: Relative residual trace(G (I − A⁺A)) / trace(G) above which A does not support W.
SUPPORT_TOLERANCE = 1e-8


_grams: weakref.WeakKeyDictionary[Workload, Workload] = weakref.WeakKeyDictionary()


def workload_gram(W: Workload) -> Workload:
    """G = WᵀW with its Kronecker terms that differ in one factor summed (``dpsql.matrix.grams.collected``):
    the same operator, traced against each strategy's M in a few terms instead of one per block. Kept
    per workload object while it lives (a planner scores several strategies and support checks on one W)."""
    known = _grams.get(W)
    if known is None:
        known = _grams[W] = collected(W.gram())
    return known


_variances: weakref.WeakKeyDictionary[Workload, dict[str, float]] = weakref.WeakKeyDictionary()


def unit_noise_variance(A: Workload, noise: Noise) -> float:
    """Per-measurement noise variance at unit privacy: Δ₂² (Gaussian, ρ = 1/2) or 2Δ₁² (Laplace, ε = 1).
    Kept per strategy object while it lives (a candidate's floor and its exact error both read it)."""
    known = _variances.setdefault(A, {})
    if noise not in known:
        if noise == "gaussian":
            known[noise] = A.sensitivity("l2") ** 2
        elif noise == "laplace":
            known[noise] = 2.0 * A.sensitivity("l1") ** 2
        else:
            raise ValueError(f"noise must be 'gaussian' or 'laplace'; got {noise!r}.")
    return known[noise]


def support_residual(W: Workload, A: Workload) -> float:
    """trace(G (I − A⁺A)) / trace(G): zero exactly when A supports W (W A⁺ A = W); for a short
    dense strategy from its thin SVD, as :func:`expected_error` computes it."""
    _check_columns(W, A)
    short = _short_strategy_error(W, A)
    if short is not None:
        return short[1]
    P = projector(A)
    if isinstance(P, Identity):
        return 0.0  # A has full column rank: it supports every workload
    G = workload_gram(W)
    total = G.trace()
    if total == 0.0:
        return 0.0
    return max(0.0, (total - trace_of_product(G, P)) / total)


def check_support(W: Workload, A: Workload) -> None:
    """Raise UnsupportedStrategyError unless W A⁺ A = W (to SUPPORT_TOLERANCE)."""
    _refuse_unsupported(W, A, support_residual(W, A))


def _refuse_unsupported(W: Workload, A: Workload, residual: float) -> None:
    """UnsupportedStrategyError when the relative support residual exceeds SUPPORT_TOLERANCE."""
    if residual > SUPPORT_TOLERANCE:
        raise UnsupportedStrategyError(
            f"strategy {A!r} does not support workload {W!r}: W A⁺ A ≠ W (relative residual "
            f"{residual:.3g}); some queries lie outside the strategy's row space and cannot be answered "
            "without bias. Use a full-rank strategy such as strategies.identity(n) or add the missing queries."
        )


def expected_error(W: Workload, A: Workload, *, noise: Noise = "gaussian") -> float:
    """Total squared error Σᵢ Var(answerᵢ) = v · trace(G (AᵀA)⁺) at unit privacy (see module doc)."""
    short = _short_strategy_error(W, A)
    if short is not None:
        trace, residual = short
        _refuse_unsupported(W, A, residual)
        return unit_noise_variance(A, noise) * trace
    check_support(W, A)
    return unit_noise_variance(A, noise) * gram_trace(W, pinv_gram(A), workload_gram)


def error_floor(W: Workload, A: Workload, *, noise: Noise = "gaussian") -> float:
    """A lower bound on :func:`expected_error` (W, A) wherever it returns, from O(entries) work:
    v · trace(G) · (1 − SUPPORT_TOLERANCE) / λ̄, with λ̄ ≥ λ_max(AᵀA) (``linalg.top_eigenvalue_bound``);
    0 where no λ̄ is known.

    Why: (AᵀA)⁺ is computed as Σ_{k∈K} v_k v_kᵀ / λ_k over the eigenpairs it keeps (those above the rank
    tolerance; all of them for a Cholesky inverse), and A⁺A as P_K = Σ_{k∈K} v_k v_kᵀ, so
    trace(G (AᵀA)⁺) = Σ_{k∈K} v_kᵀGv_k / λ_k ≥ trace(G P_K) / λ_max, while the support check passes only
    where trace(G P_K) ≥ (1 − SUPPORT_TOLERANCE)·trace(G). The same holds for a short strategy's thin SVD
    (λ_k = s_k²). The bound is the SVD bound's argument for one fixed strategy: a candidate whose floor is
    above another's exact error cannot be the least (Li and Miklau, "An adaptive mechanism for accurate
    query answering under differential privacy", 2012)."""
    top = top_eigenvalue_bound(A)
    if not top:
        return 0.0
    return unit_noise_variance(A, noise) * workload_gram(W).trace() * (1.0 - SUPPORT_TOLERANCE) / top


#: A dense strategy of p < n rows is scored through its row space while m·p is at most this.
SHORT_STRATEGY_ENTRIES = 2**24


def _short_strategy_error(W: Workload, A: Workload) -> tuple[float, float] | None:
    """(trace(G (AᵀA)⁺), support residual) of a dense strategy with fewer rows than cells, from
    its thin SVD A = U S Vᵀ (rank r): (AᵀA)⁺ = V S⁻² Vᵀ, so trace(G (AᵀA)⁺) = ‖W V S⁻¹‖²_F, and
    A⁺A = V Vᵀ, so the residual is (trace G − ‖W V‖²_F) / trace G. O(p²n + cost of W·V) instead
    of dense n × n algebra. None when A is not such a matrix."""
    if not isinstance(A, Explicit) or not isinstance(A.matrix, np.ndarray):
        return None
    p, n = A.shape
    if p >= n or W.shape[0] * p > SHORT_STRATEGY_ENTRIES:
        return None
    _check_columns(W, A)
    _, values, rows = np.linalg.svd(A.matrix, full_matrices=False)
    keep = values > np.sqrt(RANK_TOLERANCE) * values.max(initial=0.0)
    basis = rows[keep].T  # n × r, orthonormal columns spanning A's row space
    projected = W @ basis if basis.shape[1] else np.zeros((W.shape[0], 0))
    trace = float(np.sum((projected / values[keep]) ** 2))
    total = W.gram().trace()
    residual = 0.0 if total == 0.0 else max(0.0, (total - float(np.sum(projected**2))) / total)
    return trace, residual


def per_query_variance(W: Workload, A: Workload, *, noise: Noise = "gaussian") -> FloatArray:
    """Each answer's variance v · (W (AᵀA)⁺ Wᵀ)ᵢᵢ at unit privacy, in W's row order."""
    check_support(W, A)
    return unit_noise_variance(A, noise) * quadratic_diag(W, pinv_gram(A))


def rmse(W: Workload, A: Workload, *, noise: Noise = "gaussian") -> float:
    """Root mean squared error per query, sqrt(expected_error / m), at unit privacy."""
    return float(np.sqrt(expected_error(W, A, noise=noise) / W.shape[0]))


def svd_bound(W: Workload) -> float:
    """svdb(W) = trace(G^{1/2})² / n over W's non-zero columns (Li and Miklau, ICDT 2013, Thm 4.2).

    Exact for Kronecker products (product rule), for unions of Kronecker products whose factor
    Grams commute attribute by attribute (marginals, range marginals), and densely up to
    DENSE_SPECTRUM_CELLS cells. Otherwise a union (VStack) uses its best block: a block's Gram is
    ⪯ G and trace(·^{1/2}) is monotone, so trace(G_b^{1/2})²/n is still a lower bound, only weaker.
    """
    return svd_bound_detail(W)[0]


def svd_bound_detail(W: Workload) -> tuple[float, bool]:
    """(bound, exact): the SVD bound and whether it is the exact svdb or a weaker lower bound."""
    if W.gram().trace() == 0.0:
        return 0.0, True  # no query touches any cell
    root, exact = _root_trace(W)
    return root**2 / _nonzero_columns(W), exact


def _nonzero_columns(W: Workload) -> int:
    """How many columns of W are not all zero (per factor for a single Kronecker term)."""
    terms = align_terms(W._column_terms(2))
    if len(terms) == 1:
        return int(np.prod([np.count_nonzero(v > 0) for v in terms[0]]))
    return int(np.count_nonzero(np.sum([kron_vectors(term) for term in terms], axis=0) > 0))


#: Largest number of cells for which the SVD bound falls back to one dense eigendecomposition.
DENSE_SPECTRUM_CELLS = 2048


def _root_trace(W: Workload) -> tuple[float, bool]:
    """(trace((WᵀW)^{1/2}), exact): exact where the structure allows, else a lower bound (see svd_bound)."""
    if (form := partition_form(W)) is not None:  # orthogonal rows: singular values |c_r|·√s_r
        return form.root_trace(), True
    if isinstance(W, Weighted):
        root, exact = _root_trace(W.base)
        return abs(W.weight) * root, exact
    if isinstance(W, Kron):  # trace((⊗Gᵢ)^{1/2}) = Π trace(Gᵢ^{1/2})
        return float(np.prod([_factor_root_trace(f) for f in W.factors])), True
    terms = gram_terms(W.gram())
    if len(terms) == 1:
        weight, factors = terms[0]
        return float(np.sqrt(weight) * np.prod([nuclear_norm_of_root(f) for f in factors])), True
    spectrum = _union_spectrum(terms)
    if spectrum is not None:
        values = spectrum
    elif W.shape[1] <= DENSE_SPECTRUM_CELLS:
        dense = [c * Kron(list(factors)).dense() for c, factors in gram_terms(workload_gram(W))]
        values = np.linalg.eigvalsh(np.sum(dense, axis=0))
    elif isinstance(W, VStack):
        return max(_root_trace(block)[0] for block in W.blocks), False
    else:
        return 0.0, False  # the trivial bound: nothing cheaper is known for this structure
    values = np.where(values < RANK_TOLERANCE * values.max(), 0.0, values)
    return float(np.sqrt(values).sum()), True


def _check_columns(W: Workload, A: Workload) -> None:
    if W.shape[1] != A.shape[1]:
        raise ShapeError(
            f"workload has {W.shape[1]} columns (cells) but the strategy has {A.shape[1]}; both must "
            "be over the same cells."
        )


def _dense(G: Workload) -> FloatArray:
    n = G.shape[0]
    check_dense_size(n, n, "an attribute's Gram matrix")
    return G.dense()


def _factor_root_trace(W: Workload) -> float:
    """Σ singular values of one factor: from a short, wide factor directly, else from its Gram."""
    m, n = W.shape
    if m < n and m * n <= 2**22:
        return float(np.linalg.svd(W.dense(), compute_uv=False).sum())
    return _root_trace(W)[0]


#: Unions with more distinct Grams than this on one attribute are not tested for commuting.
MAX_COMMUTING_GRAMS = 64


def _union_spectrum(terms: list[tuple[float, tuple[Workload, ...]]]) -> FloatArray | None:
    """Eigenvalues of Σ_k c_k ⊗ᵢ G_ki as an n-vector, diagonalising attribute by attribute;
    None when some attribute's Grams do not commute."""
    cuts = shared_cuts([[f.shape[1] for f in factors] for _, factors in terms])
    grouped = [(c, group_factors(factors, cuts)) for c, factors in terms]
    per_axis = []
    for axis in range(len(grouped[0][1])):
        grams = [_dense(factors[axis]) for _, factors in grouped]
        if len({g.tobytes() for g in grams}) > MAX_COMMUTING_GRAMS:
            return None
        joint = _joint_eigenvalues(grams)
        if joint is None:
            return None
        per_axis.append(joint)
    return np.sum([c * kron_vectors([axis[k] for axis in per_axis]) for k, (c, _) in enumerate(grouped)], axis=0)


def _joint_eigenvalues(grams: list[FloatArray]) -> list[FloatArray] | None:
    """Each Gram's eigenvalues in one shared eigenbasis, or None if they do not commute."""
    mix = sum(g / (k + 1.6180339887) for k, g in enumerate(grams))
    _, basis = np.linalg.eigh(mix)
    result = []
    for g in grams:
        rotated = basis.T @ g @ basis
        off = rotated - np.diag(np.diag(rotated))
        if np.abs(off).max(initial=0.0) > 1e-8 * max(np.abs(g).max(), 1e-300):
            return None
        result.append(np.diag(rotated).copy())
    return result
