"""(AᵀA)⁻¹ kept as a Cholesky factor (dpsql.matrix.linalg.CholeskyInverse, factored_pinv) against dense numpy.

Every product, trace and diagonal the library takes against the factored inverse must equal the dense
pseudo-inverse's (np.linalg.pinv), the definiteness decision must be :func:`pinv_psd`'s (the exact κ₁ test)
on definite, singular and ill-conditioned matrices, and scoring a stacked strategy with few workload rows
must never form the n × n inverse (no dpotri).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.matrix import linalg
from dpsql.matrix.linalg import (
    CholeskyInverse,
    bilinear_diag,
    factored_pinv,
    gram_trace,
    pinv_gram,
    pinv_psd,
    quadratic_diag,
    trace_of_product,
)
from dpsql.matrix.workloads import Explicit, Kron, Total, VStack, Weighted, Workload
from dpsql.planning import accuracy, mechanism

RELATIVE = 1e-9  # float rounding of solves against well-conditioned Grams (κ ≤ 10⁴ here)


def _definite(rng: np.random.Generator, n: int, conditioning: float) -> tuple[np.ndarray, np.ndarray]:
    """(R, RᵀR) for a random R (n + 3 rows) whose singular values span `conditioning` decades."""
    left, _ = np.linalg.qr(rng.standard_normal((n + 3, n)))
    right, _ = np.linalg.qr(rng.standard_normal((n, n)))
    R = left @ np.diag(np.logspace(0, -conditioning / 2, n)) @ right.T
    return R, R.T @ R


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), rows=st.integers(1, 40), conditioning=st.floats(0, 4), seed=st.integers(0, 2**32 - 1))
def test_factored_inverse_matches_dense_pinv(n: int, rows: int, conditioning: float, seed: int) -> None:
    """M X, dense(), trace(WᵀW M), diag(W M Wᵀ) and diag(U M Vᵀ) of the factored inverse equal
    numpy's pinv, whether W is solved against (m ≤ n/2) or traced against the dense inverse."""
    rng = np.random.default_rng(seed)
    _, G = _definite(rng, n, conditioning)
    M, definite = factored_pinv(Explicit(G))
    assert definite and isinstance(M, CholeskyInverse)
    reference = np.linalg.pinv(G, rcond=1e-10, hermitian=True)
    scale = np.abs(reference).max()
    X = rng.standard_normal((n, 3))
    np.testing.assert_allclose(M @ X, reference @ X, rtol=RELATIVE, atol=RELATIVE * scale * np.abs(X).sum())
    np.testing.assert_allclose(M.dense(), reference, rtol=RELATIVE, atol=RELATIVE * scale)
    W, V = (Explicit(rng.integers(-2, 3, size=(rows, n)).astype(np.float64)) for _ in range(2))
    Wd, Vd = W.dense(), V.dense()
    exact = Wd @ reference @ Wd.T
    assert gram_trace(W, M) == pytest.approx(np.trace(exact), rel=RELATIVE, abs=RELATIVE * scale * Wd.size)
    assert gram_trace(W, Weighted(3.0, M)) == pytest.approx(3.0 * np.trace(exact), rel=RELATIVE,
                                                            abs=RELATIVE * scale * Wd.size)
    np.testing.assert_allclose(quadratic_diag(W, M), np.diag(exact), rtol=RELATIVE, atol=RELATIVE * scale * n)
    np.testing.assert_allclose(bilinear_diag(W, M, V), np.diag(Wd @ reference @ Vd.T), rtol=RELATIVE,
                               atol=RELATIVE * scale * n)
    assert trace_of_product(W.gram(), M) == pytest.approx(np.trace(exact), rel=RELATIVE,
                                                          abs=RELATIVE * scale * Wd.size)


@pytest.mark.parametrize("conditioning", [0, 3, 6, 8, 9, 9.5, 9.7, 10, 10.3, 11, 13])
def test_definiteness_is_decided_as_the_exact_test(conditioning: float) -> None:
    """Across the threshold κ₁ = 1/RANK_TOLERANCE, factored_pinv decides definiteness as pinv_psd and
    returns its pseudo-inverse: the factor kept where pinv_psd inverts by Cholesky, eigh's otherwise."""
    rng = np.random.default_rng(int(conditioning * 10))
    _, G = _definite(rng, 30, conditioning)
    expected, expected_definite = pinv_psd(G.copy())
    M, definite = factored_pinv(Explicit(G))
    assert definite == expected_definite
    _, info = sla.lapack.dpotrf(G, lower=False)
    by_cholesky = info == 0 and np.abs(G).sum(axis=0).max() * np.abs(expected).sum(axis=0).max() * 1e-10 < 1
    assert isinstance(M, CholeskyInverse) == by_cholesky
    if not by_cholesky:  # the very eigendecomposition pinv_psd takes
        assert isinstance(M, Explicit) and np.array_equal(M.dense(), expected)
    elif conditioning <= 6:
        np.testing.assert_allclose(M.dense(), expected, rtol=1e-8, atol=1e-8 * np.abs(expected).max())


def test_near_the_threshold_the_exact_test_runs_and_its_inverse_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """An estimate within ESTIMATE_MARGIN of the threshold is checked exactly (one dpotri), and the
    inverse so formed is the one later dense uses read (no second dpotri)."""
    def estimate(G: np.ndarray) -> float:  # LAPACK's reciprocal condition estimate 1/κ₁
        factor, _ = sla.lapack.dpotrf(G, lower=False)
        return float(sla.lapack.dpocon(factor, float(np.abs(G).sum(axis=0).max()))[0])

    band = (linalg.RANK_TOLERANCE, linalg.ESTIMATE_MARGIN * linalg.RANK_TOLERANCE)
    G = next(G for c in np.arange(8.5, 10.0, 0.02) for G in [_definite(np.random.default_rng(5), 30, c)[1]]
             if band[0] < estimate(G) <= band[1])
    calls = _count_dpotri(monkeypatch)
    M, definite = factored_pinv(Explicit(G))
    assert definite and isinstance(M, CholeskyInverse) and len(calls) == 1
    M.dense()
    assert len(calls) == 1


def test_singular_gram_falls_back_to_eigh() -> None:
    """A rank-deficient Gram (exactly singular, or Cholesky failing) gets pinv_psd's truncated pseudo-inverse."""
    rng = np.random.default_rng(2)
    R = rng.standard_normal((5, 12))
    G = R.T @ R
    M, definite = factored_pinv(Explicit(G))
    expected, expected_definite = pinv_psd(G.copy())
    assert not definite and not expected_definite
    assert isinstance(M, Explicit) and np.array_equal(M.dense(), expected)
    np.testing.assert_allclose(M.dense(), np.linalg.pinv(G, rcond=1e-10, hermitian=True), atol=1e-9)
    zero, definite = factored_pinv(Explicit(np.zeros((4, 4))))
    assert not definite and np.array_equal(zero.dense(), np.zeros((4, 4)))


def _count_dpotri(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    dpotri = sla.lapack.dpotri

    def counted(factor: np.ndarray, **kwargs: object) -> object:
        calls.append(factor.shape[0])
        return dpotri(factor, **kwargs)

    monkeypatch.setattr(sla.lapack, "dpotri", counted)
    return calls


def _union(rng: np.random.Generator, sizes: list[int], blocks: int) -> VStack:
    """A stack of weighted Kronecker blocks of p-Identity-like factors (as HDMM's OPT₊ makes)."""
    out: list[Workload] = []
    for _ in range(blocks):
        factors: list[Workload] = [Explicit(np.vstack([int(rng.integers(1, 5)) * np.eye(n),
                                                       rng.integers(0, 3, size=(2, n)).astype(np.float64)]))
                                   for n in sizes]
        out.append(Weighted(float(rng.integers(1, 50)), Kron(factors)))
    return VStack(out)


def test_scoring_a_stacked_strategy_with_few_rows_forms_no_inverse(monkeypatch: pytest.MonkeyPatch) -> None:
    """An OPT₊-like strategy over ≥ FACTORED_CELLS cells against a workload of few rows: its expected
    error, per-query variances, block totals and answers (reconstruction, variances, covariances)
    come from the Cholesky factor by solves; the n × n inverse is never formed (no dpotri), and
    every figure equals dense numpy's."""
    rng = np.random.default_rng(7)
    sizes = [16, 4, 17]
    n = int(np.prod(sizes))
    assert n >= linalg.FACTORED_CELLS
    A = _union(rng, sizes, 3)
    blocks = [Kron([Total(16), Explicit(np.eye(4)), Total(17)]),
              Kron([Explicit(rng.integers(0, 2, size=(5, 16)).astype(np.float64)), Total(4), Total(17)])]
    W = VStack(blocks)
    calls = _count_dpotri(monkeypatch)
    v = accuracy.unit_noise_variance(A, "gaussian")
    error = accuracy.expected_error(W, A)
    variances = accuracy.per_query_variance(W, A)
    M = pinv_gram(A)
    assert isinstance(M, CholeskyInverse)
    x = rng.integers(0, 20, size=n).astype(np.float64)
    release = mechanism.Measurement(strategy=A, y=A @ x, noise="gaussian", noise_scale=Fraction(1), noise_variance=v)
    answers = mechanism.answer_blocks(blocks, release)
    covariance = mechanism.answer_covariance(blocks[0], blocks[0], release)
    assert calls == []
    Ad, Wd = A.dense(), W.dense()
    reference = np.linalg.inv(Ad.T @ Ad)
    exact = v * Wd @ reference @ Wd.T
    assert error == pytest.approx(np.trace(exact), rel=RELATIVE)
    np.testing.assert_allclose(variances, np.diag(exact), rtol=RELATIVE)
    np.testing.assert_allclose(np.concatenate([a.variances for a in answers]), np.diag(exact), rtol=RELATIVE)
    np.testing.assert_allclose(np.concatenate([a.values for a in answers]), Wd @ x, rtol=RELATIVE)
    np.testing.assert_allclose(covariance, np.diag(exact)[:4], rtol=RELATIVE)
    totals = [v * gram_trace(block, M) for block in blocks]
    np.testing.assert_allclose(totals, [np.trace(exact[:4, :4]), np.trace(exact[4:, 4:])], rtol=RELATIVE)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(2, 6), min_size=2, max_size=3), blocks=st.integers(1, 4),
       spread=st.floats(0, 12), seed=st.integers(0, 2**32 - 1))
def test_decisions_on_kronecker_stacks_are_the_exact_tests(sizes: list[int], blocks: int, spread: float,
                                                            seed: int) -> None:
    """On Grams of weighted Kronecker stacks (block weights spread over `spread` decades, factors of
    any rank), the condition estimate decides as pinv_psd's exact κ₁ test: same definiteness, the
    Cholesky factor kept exactly where pinv_psd inverts by Cholesky, and the same pseudo-inverse."""
    rng = np.random.default_rng(seed)
    stack: list[Workload] = []
    for _ in range(blocks):
        factors: list[Workload] = [
            Explicit(rng.integers(0, 3, size=(int(rng.integers(1, n + 2)), n)).astype(np.float64)) for n in sizes]
        stack.append(Weighted(10.0 ** rng.uniform(0, spread / 2), Kron(factors)))
    G = VStack(stack).gram()
    dense = G.dense()
    expected, expected_definite = pinv_psd(dense.copy())
    M, definite = factored_pinv(G)
    assert definite == expected_definite
    # pinv_psd's own test, on its Cholesky inverse (not on the pseudo-inverse it returns after falling back to eigh)
    factor, info = sla.lapack.dpotrf(dense, lower=False)
    inverse, info = sla.lapack.dpotri(factor, lower=False) if info == 0 else (factor, info)
    inverse = np.triu(inverse) + np.triu(inverse, 1).T
    by_cholesky = info == 0 and np.abs(dense).sum(axis=0).max() * np.abs(inverse).sum(axis=0).max() * 1e-10 < 1
    assert isinstance(M, CholeskyInverse) == by_cholesky
    if not by_cholesky:
        assert np.array_equal(M.dense(), expected)
