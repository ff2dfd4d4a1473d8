"""``dpsql.releases.whitening``: W Wᵀ = M⁺ when the rank is certain, None when it is not."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.releases.gls import EIGEN_CUTOFF, factor
from dpsql.releases.whitening import whitening


def _information(seed: int, n: int, rank: int, zero: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(rank, n))
    A[:, :zero] = 0.0  # cells no row of the strategy reads: zero rows and columns of M
    return A.T @ A


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 12), st.integers(0, 3))
def test_whitening_is_the_pseudo_inverse_where_it_answers(seed: int, n: int, zero: int) -> None:
    zero = min(zero, n - 1)
    M = _information(seed, n, 2 * n, zero)
    found = whitening(M, EIGEN_CUTOFF)
    assert found is not None  # full rank on the measured cells, well conditioned
    kept, W = found
    assert list(kept) == list(range(zero, n))
    np.testing.assert_allclose(W @ W.T, np.linalg.pinv(M), rtol=1e-8, atol=1e-10)


@given(st.integers(0, 10**6), st.integers(2, 12))
def test_a_rank_deficient_or_ill_conditioned_matrix_is_left_to_the_eigendecomposition(seed: int, n: int) -> None:
    assert whitening(_information(seed, n, n - 1, 0), EIGEN_CUTOFF) is None  # singular, non-zero diagonal
    scale = np.diag(np.logspace(0, 6, n))
    assert whitening(scale @ scale, EIGEN_CUTOFF) is None  # condition 10¹², above 1/cutoff


def test_a_pool_factored_either_way_gives_the_same_variances_and_estimate() -> None:
    M = _information(3, 8, 20, 2)
    b = np.arange(8.0)
    b[:2] = 0.0
    lift = np.arange(8, dtype=np.int64)
    fast = factor([], M, b, lift)
    assert fast is not None and fast.basis is None and list(fast.cells) == [2, 3, 4, 5, 6, 7]
    rows = np.random.default_rng(1).normal(size=(5, 8))
    rows[:, :2] = 0.0
    read = fast.projected(rows)
    np.testing.assert_allclose(read.covariances(read), np.einsum("ij,jk,ik->i", rows, np.linalg.pinv(M), rows),
                               rtol=1e-9)
    np.testing.assert_allclose(fast.estimate, np.linalg.pinv(M) @ b, rtol=1e-8, atol=1e-12)
    assert list(fast.projected(np.eye(8)).answerable) == [False, False, *[True] * 6]
