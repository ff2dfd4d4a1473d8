"""trace(G M) against a dense error profile M without densifying G's Kronecker terms
(dpsql.matrix.linalg.kron_sum_trace), the structured ``dense`` of Kron, Weighted and Sum, and the
expected error of a union-of-Kronecker strategy (HDMM's OPT₊, scored through a dense (AᵀA)⁺) —
each against plain numpy, to 1e-9 relative, plus a structure test: scoring such a strategy
never forms an n × n matrix from the workload's terms.
"""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.matrix.linalg import kron_sum_trace, pinv_gram, trace_of_product
from dpsql.matrix.workloads import KRON_BLOCK_ENTRIES, Explicit, Identity, Kron, Sum, Total, VStack, Weighted, Workload
from dpsql.planning import accuracy

RELATIVE = 1e-9


def _factor(rng: np.random.Generator, n: int, kind: int) -> Workload:
    """A square n × n factor: Identity, a dense PSD Gram, or a sparse one."""
    if kind == 0:
        return Identity(n)
    X = rng.integers(-3, 4, size=(n + 1, n)).astype(np.float64)
    gram = X.T @ X
    return Explicit(sp.csr_array(gram)) if kind == 2 else Explicit(gram)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3), terms=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1))
def test_kron_sum_trace_matches_dense(sizes: list[int], terms: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(np.prod(sizes))
    parts = [(float(rng.uniform(0.1, 10.0)), tuple(_factor(rng, k, int(rng.integers(0, 3))) for k in sizes))
             for _ in range(terms)]
    Y = rng.standard_normal((n, n))
    M = Y @ Y.T + np.eye(n)
    dense_G = sum(c * reduce(np.kron, [f.dense() for f in factors]) for c, factors in parts)
    want = float(np.sum(dense_G * M.T))
    scale = float(np.sum(np.abs(dense_G * M.T)))
    assert abs(kron_sum_trace(parts, M) - want) <= RELATIVE * scale
    G = Sum([Weighted(c, Kron(list(factors))) for c, factors in parts])
    assert abs(trace_of_product(G, Explicit(M)) - want) <= RELATIVE * scale


def test_trace_of_product_regroups_differently_factored_terms() -> None:
    """Terms over (2, 3, 2) and (6, 2) share the cuts {6}: both are regrouped on them."""
    rng = np.random.default_rng(5)
    a, b, c = (_factor(rng, k, 1) for k in (2, 3, 2))
    whole = _factor(rng, 6, 1)
    G = Sum([Kron([a, b, c]), Weighted(2.5, Kron([whole, Identity(2)])), Identity(12)])
    Y = rng.standard_normal((12, 12))
    M = Y @ Y.T
    assert trace_of_product(G, Explicit(M)) == pytest.approx(float(np.sum(G.dense() * M.T)), rel=RELATIVE)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1))
def test_structured_dense_equals_applying_to_identity(sizes: list[int], seed: int) -> None:
    """Kron.dense (np.kron of the factors), Weighted.dense and Sum.dense equal A·I_n exactly."""
    rng = np.random.default_rng(seed)
    factors = [Explicit(rng.integers(-5, 6, size=(int(rng.integers(1, 4)), k)).astype(np.float64)) for k in sizes]
    K = Kron(factors)
    n = K.shape[1]
    assert np.array_equal(K.dense(), K @ np.eye(n))
    W = Weighted(3.0, K)
    assert np.array_equal(W.dense(), W @ np.eye(n))
    S = Sum([K.gram(), W.gram(), Identity(n)])
    assert np.array_equal(S.dense(), S @ np.eye(n))


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(4, 6), min_size=2, max_size=2), last=st.integers(40, 60), terms=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1))
def test_large_sum_dense_adds_kronecker_terms_bitwise(sizes: list[int], last: int, terms: int, seed: int) -> None:
    """A Sum whose Kronecker terms are added row block by row block (blocks of at least
    KRON_BLOCK_ENTRIES) equals adding the terms' own dense forms in order, bit for bit, for real
    (not integer) factors and weights, weighted or not, with other terms between."""
    rng = np.random.default_rng(seed)
    parts: list[Workload] = []
    for k in range(terms):
        kron = Kron([Explicit(rng.standard_normal((n, n))) for n in [*sizes, last]])
        parts.append(Weighted(float(rng.uniform(0.1, 10.0)), kron) if k % 2 else kron)
    n = parts[0].shape[1]
    assert last * n >= KRON_BLOCK_ENTRIES
    parts.insert(1, Explicit(rng.standard_normal((n, n))))
    expected = parts[0].dense()
    for part in parts[1:]:
        expected += part.dense()
    assert np.array_equal(Sum(parts).dense(), expected)


def _union(rng: np.random.Generator, sizes: list[int], blocks: int) -> Workload:
    """A stack of weighted Kronecker blocks of p-Identity-like integer factors (as OPT₊ makes)."""
    out = []
    for _ in range(blocks):
        factors: list[Workload] = []
        for n in sizes:
            extra = rng.integers(0, 3, size=(int(rng.integers(1, 3)), n)).astype(np.float64)
            factors.append(Explicit(np.vstack([int(rng.integers(1, 5)) * np.eye(n), extra])))
        out.append(Weighted(float(rng.integers(1, 50)), Kron(factors)))
    return VStack(out)


def _workload(rng: np.random.Generator, sizes: list[int], terms: int) -> Workload:
    """A union of Kronecker query blocks: single rows, totals and identities per attribute."""
    blocks: list[Workload] = []
    for _ in range(terms):
        factors: list[Workload] = []
        for n in sizes:
            kind = int(rng.integers(0, 3))
            factors.append(Identity(n) if kind == 0 else Total(n) if kind == 1
                           else Explicit(rng.integers(0, 2, size=(1, n)).astype(np.float64) + np.eye(1, n)))
        blocks.append(Kron(factors))
    return VStack(blocks)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(2, 4), min_size=2, max_size=3), blocks=st.integers(2, 4),
       terms=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_union_strategy_error_matches_dense(sizes: list[int], blocks: int, terms: int, seed: int) -> None:
    """v·trace(WᵀW (AᵀA)⁺) and the per-query variances for a union strategy, as numpy computes them."""
    rng = np.random.default_rng(seed)
    A, W = _union(rng, sizes, blocks), _workload(rng, sizes, terms)
    M = np.linalg.pinv(A.dense().T @ A.dense(), rcond=1e-10, hermitian=True)
    Wd = W.dense()
    v = accuracy.unit_noise_variance(A, "gaussian")
    assert accuracy.expected_error(W, A) == pytest.approx(v * float(np.trace(Wd @ M @ Wd.T)), rel=RELATIVE)
    assert np.allclose(accuracy.per_query_variance(W, A), v * np.diag(Wd @ M @ Wd.T), rtol=RELATIVE, atol=0)


def test_union_scoring_forms_no_dense_workload_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring a union strategy over n cells densifies the strategy's Gram (one n × n product per
    block, for (AᵀA)⁺) and no Kronecker term of the workload's Gram."""
    rng = np.random.default_rng(11)
    sizes = [12, 3, 9]
    n = int(np.prod(sizes))
    A, W = _union(rng, sizes, 3), _workload(rng, sizes, 12)
    large: list[tuple[int, int]] = []
    kron_dense = Kron.dense

    def dense(self: Kron) -> np.ndarray:
        if self.shape[0] * self.shape[1] >= n * n:
            large.append(self.shape)
        return kron_dense(self)

    monkeypatch.setattr(Kron, "dense", dense)
    error = accuracy.expected_error(W, A)
    assert large == [(n, n)] * len(A.blocks)  # the strategy's Gram, block by block
    assert error == pytest.approx(trace_of_product(W.gram(), pinv_gram(A))
                                  * accuracy.unit_noise_variance(A, "gaussian"), rel=RELATIVE)


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3), parts=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1))
def test_parts_profile_traces_kron_grams_as_numpy(sizes: list[int], parts: int, seed: int) -> None:
    """trace(G (RᵀR)⁺) and diag(W (RᵀR)⁺ Wᵀ) for a partition strategy R against dense Kronecker
    workloads, applied factor by factor or formed sparsely, whichever is cheaper: as numpy."""
    from dpsql.matrix.partitions import Parts

    rng = np.random.default_rng(seed)
    n = int(np.prod(sizes))
    R = Parts(rng.integers(-1, parts, size=n), parts)
    W = Kron([Explicit(rng.integers(0, 3, size=(int(rng.integers(1, 4)), k)).astype(np.float64)) for k in sizes])
    M = np.linalg.pinv(R.dense().T @ R.dense(), rcond=1e-10, hermitian=True)
    Wd = W.dense()
    profile = pinv_gram(R)
    assert trace_of_product(W.gram(), profile) == pytest.approx(float(np.trace(Wd.T @ Wd @ M)), rel=RELATIVE, abs=1e-12)
    assert np.allclose(profile.bilinear_diag(W, W), np.diag(Wd @ M @ Wd.T), rtol=RELATIVE, atol=1e-12)
