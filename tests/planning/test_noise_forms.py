"""Covariances of row combinations of answers (``dpsql.planning.noise_forms``) against dense algebra.

For random small workloads U, V over one strategy A and random sparse combinations L, R (with
repeated rows, as windows have), MeasuredForm gives diag(L Σ_UV Rᵀ) with Σ_UV = σ² s_U s_V U (AᵀA)⁺ Vᵀ
computed densely here, from either side; a whitened form gives the same from a root of (AᵀA)⁺;
forms of different measurements and exact zeros give 0.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.matrix.linalg import pinv_gram
from dpsql.matrix.workloads import Explicit, Kron, Prefix
from dpsql.planning.noise_forms import Combination, ExactForm, MeasuredForm, WhitenedForm


def _combination(rng: np.random.Generator, outputs: int, rows: int) -> tuple[Combination, np.ndarray]:
    """Sparse rows, some of them repeated (a window's frames repeat across its rows), and the dense matrix."""
    count = max(1, outputs // 2)
    distinct = (rng.integers(-2, 3, size=(count, rows)) * (rng.random((count, rows)) < 0.5)).astype(float)
    which = rng.integers(0, count, outputs)
    return Combination(distinct=sp.csr_array(distinct), which=which), distinct[which]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(2, 6), st.integers(1, 5), st.integers(1, 9))
def test_measured_and_whitened_forms_give_the_dense_covariances(seed: int, cells: int, rows: int,
                                                                 outputs: int) -> None:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(cells + 2, cells))
    U, V = rng.normal(size=(rows, cells)), rng.normal(size=(rows + 1, cells))
    (L, dense_l), (R, dense_r) = _combination(rng, outputs, rows), _combination(rng, outputs, rows + 1)
    profile = np.linalg.pinv(A.T @ A)
    expected = 0.7 * 2.0 * 3.0 * np.einsum("ij,ij->i", dense_l @ U @ profile, dense_r @ V)
    strategy = Explicit(A)
    source = object()
    u = MeasuredForm(workload=Explicit(U), profile=pinv_gram(strategy), variance=0.7, scale=2.0, source=source)
    v = MeasuredForm(workload=Explicit(V), profile=pinv_gram(strategy), variance=0.7, scale=3.0, source=source)
    np.testing.assert_allclose(u.covariance(L, v, R), expected, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(v.covariance(R, u, L), expected, rtol=1e-7, atol=1e-9)
    root = np.linalg.cholesky(profile)  # profile = root rootᵀ
    pool = object()
    whitened_u = WhitenedForm(whitened=U @ root * np.sqrt(0.7), scale=2.0, source=pool)
    whitened_v = WhitenedForm(whitened=V @ root * np.sqrt(0.7), scale=3.0, source=pool)
    np.testing.assert_allclose(whitened_u.covariance(L, whitened_v, R), expected, rtol=1e-7, atol=1e-9)
    apart = MeasuredForm(workload=Explicit(V), profile=pinv_gram(strategy), variance=0.7, scale=3.0, source=object())
    assert not np.any(u.covariance(L, apart, R)) and not np.any(u.covariance(L, ExactForm(), R))
    assert not np.any(ExactForm().covariance(L, u, L))


def test_a_kronecker_strategy_is_read_as_operators() -> None:
    """Prefixes over a 16 × 12 grid under a Kronecker strategy (its profile kept factor by factor):
    each prefix's covariance with the grand total matches the dense formula."""
    strategy = Kron([Prefix(16), Prefix(12)])
    W = Kron([Prefix(16), Prefix(12)])
    form = MeasuredForm(workload=W, profile=pinv_gram(strategy), variance=1.5, scale=1.0, source=strategy)
    rows = W.shape[0]
    total = Combination(distinct=sp.csr_array(np.ones((1, rows))), which=np.zeros(rows, dtype=np.int64))
    own = Combination(distinct=sp.csr_array(np.eye(rows)), which=np.arange(rows))
    found = form.covariance(own, form, total)
    dense_w, dense_a = W.dense(), strategy.dense()
    expected = 1.5 * (dense_w @ np.linalg.pinv(dense_a.T @ dense_a) @ dense_w.T).sum(axis=1)
    np.testing.assert_allclose(found, expected, rtol=1e-6)
