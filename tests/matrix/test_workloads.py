"""Implicit operators against dense numpy (ektelo's dense-equivalence loop, generalised).

Every generated operator comes with a reference dense matrix built *independently* of dpsql
(np.kron of the factors' references, np.vstack of the blocks, interval indicators written out by
hand, ...), so ``dense()`` is checked as well as used. Closed forms come from Li's thesis digest
(/work/shared/research/seed-000-li-thesis.md, cited as "thesis §x").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from unittest import mock

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from _helpers import groupings
from dpsql import strategies as strat
from dpsql.errors import DomainTooLargeError, ShapeError
from dpsql.matrix import kronvec
from dpsql.matrix.kronvec import align_terms, max_of_kron_sum, pareto_front
from dpsql.matrix.workloads import (
    AllRange,
    Explicit,
    Identity,
    Kron,
    Prefix,
    Product,
    Ranges,
    Total,
    Transpose,
    VStack,
    Weighted,
    Workload,
)

FloatArray = np.ndarray
RTOL = 1e-10  # structured vs dense arithmetic on small matrices

relaxed = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# =================================================================================== references
def ranges_ref(n: int, intervals: list[tuple[int, int]]) -> FloatArray:
    """Row r = indicator of cells lo_r..hi_r (inclusive)."""
    R = np.zeros((len(intervals), n))
    for r, (lo, hi) in enumerate(intervals):
        R[r, lo : hi + 1] = 1.0
    return R


def allrange_ref(n: int) -> FloatArray:
    """All intervals [i, j], i <= j, ordered by i then j (thesis §4.5 W_R)."""
    return ranges_ref(n, [(i, j) for i in range(n) for j in range(i, n)])


def prefix_ref(n: int) -> FloatArray:
    """Lower-triangular ones (thesis §4.5 Prefix / CDF)."""
    return np.tril(np.ones((n, n)))


def _split(lo: int, size: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous (lo, size) pieces whose sizes differ by at most one, larger ones first."""
    q, r = divmod(size, parts)
    pieces, start = [], lo
    for k in range(parts):
        width = q + (1 if k < r else 0)
        pieces.append((start, width))
        start += width
    return pieces


def hierarchical_ref(n: int, b: int) -> FloatArray:
    """Every node of a balanced b-ary interval tree, level by level (thesis §4.2)."""
    rows, level = [], [(0, n)]
    while level:
        nxt = []
        for lo, size in level:
            row = np.zeros(n)
            row[lo : lo + size] = 1.0
            rows.append(row)
            if size > 1:
                nxt.extend(_split(lo, size, min(b, size)))
        level = nxt
    return np.array(rows)


def wavelet_ref(n: int) -> FloatArray:
    """Total, then (left half) − (right half) for every internal node, level by level (thesis §4.3)."""
    rows, level = [np.ones(n)], [(0, n)]
    while level:
        nxt = []
        for lo, size in level:
            if size == 1:
                continue
            (llo, lsize), (rlo, rsize) = _split(lo, size, 2)
            row = np.zeros(n)
            row[llo : llo + lsize] = 1.0
            row[rlo : rlo + rsize] = -1.0
            rows.append(row)
            nxt.extend([(llo, lsize), (rlo, rsize)])
        level = nxt
    return np.array(rows)


# =================================================================================== strategies
@dataclass(frozen=True)
class Case:
    """An operator, its independent dense reference, and whether it is integral by construction."""

    op: Workload
    ref: FloatArray
    integral: bool

    def __repr__(self) -> str:
        return f"Case({self.op!r})"


def ordered_factorisations(n: int, max_parts: int = 3) -> list[tuple[int, ...]]:
    """Ordered factorisations of n into 1..max_parts factors, each >= 2 (or (n,) for n = 1 / primes)."""
    out: list[tuple[int, ...]] = [(n,)]
    if max_parts > 1:
        for d in range(2, n):
            if n % d == 0:
                out.extend((d, *rest) for rest in ordered_factorisations(n // d, max_parts - 1))
    return out


seeds = st.integers(0, 2**32 - 1)
weights = st.one_of(
    st.sampled_from([2.0, -1.0, 3.0, -2.0, 0.5, -0.25, 4.0, 0.25, 1.5, -4.0]),
    st.tuples(st.sampled_from([1.0, -1.0]), st.floats(0.25, 4.0)).map(lambda t: t[0] * t[1]),
)


@st.composite
def explicit_case(draw: st.DrawFn, n: int, rows: int | None = None) -> Case:
    """Explicit over n columns: dense small integers, dense floats, or scipy.sparse."""
    rng = np.random.default_rng(draw(seeds))
    m = rows if rows is not None else draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["int", "float", "sparse-int", "sparse-float", "spmatrix"]))
    if kind.endswith("float"):
        R = np.round(rng.uniform(-3, 3, (m, n)), 3)
    else:
        R = rng.integers(-3, 4, (m, n)).astype(np.float64)
    if kind.startswith("sparse") or kind == "spmatrix":
        R[rng.random((m, n)) < 0.5] = 0.0
        matrix = sp.csr_array(R) if kind != "spmatrix" else sp.coo_matrix(R)
        return Case(Explicit(matrix), R, kind != "sparse-float")
    return Case(Explicit(R.copy()), R, kind == "int")


@st.composite
def leaf_case(draw: st.DrawFn, n: int) -> Case:
    kind = draw(st.sampled_from(["identity", "total", "prefix", "allrange", "ranges", "explicit", "hierarchical",
                                 "wavelet"]))
    if kind == "identity":
        return Case(Identity(n), np.eye(n), True)
    if kind == "total":
        return Case(Total(n), np.ones((1, n)), True)
    if kind == "prefix":
        return Case(Prefix(n), prefix_ref(n), True)
    if kind == "allrange":
        return Case(AllRange(n), allrange_ref(n), True)
    if kind == "ranges":
        pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=5))
        intervals = [(min(a, b), max(a, b)) for a, b in pairs]
        return Case(Ranges(n, intervals), ranges_ref(n, intervals), True)
    if kind == "hierarchical":
        b = draw(st.integers(2, 3))
        return Case(strat.hierarchical(n, b), hierarchical_ref(n, b), True)
    if kind == "wavelet":
        return Case(strat.wavelet(n), wavelet_ref(n), True)
    return draw(explicit_case(n))


@st.composite
def rows_case(draw: st.DrawFn, n: int, depth: int) -> Case:
    """An operator with exactly n rows (so that its transpose has n columns)."""
    kind = draw(st.sampled_from(["square", "explicit", "transposed"] if depth > 0 else ["square", "explicit"]))
    if kind == "square":
        return draw(st.sampled_from([
            Case(Identity(n), np.eye(n), True),
            Case(Prefix(n), prefix_ref(n), True),
            Case(strat.wavelet(n), wavelet_ref(n), True),
        ]))
    if kind == "explicit":
        k = draw(st.integers(1, 5))
        return draw(explicit_case(k, rows=n))
    inner = draw(case(n, depth - 1))
    return Case(Transpose(inner.op), inner.ref.T, inner.integral)


@st.composite
def case(draw: st.DrawFn, n: int, depth: int) -> Case:
    """A random operator over n columns built from leaves and combinators, with its reference."""
    kinds = ["leaf"] + (["kron", "vstack", "weighted", "transpose", "product"] if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "leaf":
        return draw(leaf_case(n))
    if kind == "kron":
        sizes = draw(st.sampled_from(ordered_factorisations(n)))
        parts = [draw(case(k, depth - 1)) for k in sizes]
        return Case(Kron([p.op for p in parts]), reduce(np.kron, [p.ref for p in parts]),
                    all(p.integral for p in parts))
    if kind == "vstack":
        parts = [draw(case(n, depth - 1)) for _ in range(draw(st.integers(1, 3)))]
        return Case(VStack([p.op for p in parts]), np.vstack([p.ref for p in parts]), all(p.integral for p in parts))
    if kind == "weighted":
        w = draw(weights)
        inner = draw(case(n, depth - 1))
        return Case(Weighted(w, inner.op), w * inner.ref, inner.integral and float(w).is_integer())
    if kind == "transpose":
        inner = draw(rows_case(n, depth - 1))
        return Case(Transpose(inner.op), inner.ref.T, inner.integral)
    right = draw(case(n, depth - 1))
    m = right.ref.shape[0]
    if m > 24:
        return right
    left = draw(case(m, depth - 1))
    product = left.op @ right.op
    assert isinstance(product, Product)
    return Case(product, left.ref @ right.ref, left.integral and right.integral)


operators = st.sampled_from([1, 2, 3, 4, 5, 6, 8, 9, 12]).flatmap(lambda n: case(n, 2))


def assert_close(actual: object, expected: object, rtol: float = RTOL) -> None:
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=rtol, atol=rtol * scale)


# =================================================================================== dense equivalence
@relaxed
@given(c=operators, data=st.data())
def test_operator_matches_dense_reference(c: Case, data: st.DataObject) -> None:
    A, R = c.op, c.ref
    m, n = R.shape
    note(f"{A!r} reference shape {R.shape}")
    rng = np.random.default_rng(data.draw(seeds))
    assert A.shape == (m, n)
    assert_close(A.dense(), R)

    # A @ v, A @ X (n × k), Aᵀ y for vectors and matrices; list input is accepted too
    v, X = rng.standard_normal(n), rng.standard_normal((n, 3))
    y, Y = rng.standard_normal(m), rng.standard_normal((m, 2))
    assert_close(A @ v, R @ v)
    assert (A @ v).shape == (m,)
    assert_close(A @ X, R @ X)
    assert_close(A @ v.tolist(), R @ v)
    assert_close(A.rmatvec(y), R.T @ y)
    assert_close(A.rmatvec(Y), R.T @ Y)
    counts = rng.integers(0, 5, n)
    assert_close(A @ counts, R @ counts)

    # the transpose, its products, and the double transpose
    At = A.T
    assert At.shape == (n, m)
    assert_close(At.dense(), R.T)
    assert_close(At @ y, R.T @ y)
    assert_close(At.rmatvec(v), R @ v)
    assert_close(At.T.dense(), R)

    # Gram
    G = A.gram()
    assert G.shape == (n, n)
    assert_close(G.dense(), R.T @ R)
    assert_close(G @ v, R.T @ (R @ v))
    assert G.trace() == pytest.approx(np.trace(R.T @ R), rel=RTOL, abs=RTOL)

    # trace of square operators (including Kron products of non-square factors)
    if m == n:
        assert A.trace() == pytest.approx(np.trace(R), rel=RTOL, abs=RTOL * max(1.0, np.abs(R).max()))

    # column norms, sensitivities, max |entry|
    l1, l2sq = np.abs(R).sum(axis=0), (R**2).sum(axis=0)
    assert A.max_column_power_sum(1) == pytest.approx(l1.max(), rel=RTOL)
    assert A.max_column_power_sum(2) == pytest.approx(l2sq.max(), rel=RTOL)
    assert A.sensitivity("l1") == pytest.approx(l1.max(), rel=RTOL)
    assert A.sensitivity("l2") == pytest.approx(np.sqrt(l2sq.max()), rel=RTOL)
    assert A.sensitivity() == pytest.approx(np.sqrt(l2sq.max()), rel=RTOL)
    assert_close(A.column_norms("l1"), l1)
    assert_close(A.column_norms("l2"), np.sqrt(l2sq))
    assert A.max_abs_entry() == pytest.approx(np.abs(R).max(), rel=RTOL)

    # integral: sound (never claims integer entries wrongly) and complete on integer constructions
    if A.integral:
        assert np.all(np.mod(R, 1.0) == 0.0)
    if c.integral:
        assert A.integral


@pytest.mark.parametrize("norm", ["l3", "L1", "linf"])
def test_unknown_norm_is_rejected(norm: str) -> None:
    with pytest.raises(ValueError):
        Identity(3).sensitivity(norm)  # type: ignore[arg-type]


# =================================================================================== Kronecker stacks
DOMAINS = [(2, 3, 2), (3, 2, 2), (2, 2, 3), (2, 2, 2), (3, 4), (4, 3), (2, 3, 4), (2, 2, 2, 2)]


@st.composite
def kron_stack(draw: st.DrawFn) -> Case:
    """VStack([Kron(g1), Kron(g2), Weighted(w, Kron(g3)), ...]) over different groupings of one domain."""
    dims = draw(st.sampled_from(DOMAINS))
    blocks = []
    for k in range(draw(st.integers(1, 4))):
        sizes = draw(groupings(dims))
        parts = [draw(leaf_case(s)) for s in sizes]
        block = Case(Kron([p.op for p in parts]), reduce(np.kron, [p.ref for p in parts]), True)
        if k == 2 or (k == 3 and draw(st.booleans())):
            w = draw(weights)
            block = Case(Weighted(w, block.op), w * block.ref, True)
        blocks.append(block)
    return Case(VStack([b.op for b in blocks]), np.vstack([b.ref for b in blocks]), True)


@relaxed
@given(c=kron_stack(), dense_combination=st.booleans())
def test_kron_stack_sensitivity(c: Case, dense_combination: bool) -> None:
    """Δ₁, Δ₂ and column norms of unions of Kronecker products with different factorisations."""
    A, R = c.op, c.ref
    note(repr(A))
    l1, l2sq = np.abs(R).sum(axis=0), (R**2).sum(axis=0)
    # dense_combination forces max_of_kron_sum's dense fallback instead of Pareto pruning
    with mock.patch.object(kronvec, "PARETO_WORK_LIMIT", 0 if dense_combination else kronvec.PARETO_WORK_LIMIT):
        assert A.sensitivity("l1") == pytest.approx(l1.max(), rel=RTOL)
        assert A.sensitivity("l2") == pytest.approx(np.sqrt(l2sq.max()), rel=RTOL)
        assert A.max_column_power_sum(2) == pytest.approx(l2sq.max(), rel=RTOL)
    assert_close(A.column_norms("l1"), l1)
    assert_close(A.column_norms("l2"), np.sqrt(l2sq))
    assert_close(A.dense(), R)


def test_kron_stack_fixed_example() -> None:
    """The brief's example: (2,3,2) vs (6,2) vs (12,) groupings of one 12-cell domain."""
    rng = np.random.default_rng(7)
    E = rng.integers(-2, 3, (4, 6)).astype(float)
    A = VStack([
        Kron([AllRange(2), Prefix(3), Identity(2)]),
        Kron([Explicit(E), Total(2)]),
        Weighted(-1.5, Kron([AllRange(12)])),
        Identity(12),
    ])
    R = np.vstack([
        np.kron(np.kron(allrange_ref(2), prefix_ref(3)), np.eye(2)),
        np.kron(E, np.ones((1, 2))),
        -1.5 * allrange_ref(12),
        np.eye(12),
    ])
    assert A.sensitivity("l1") == pytest.approx(np.abs(R).sum(axis=0).max(), rel=RTOL)
    assert A.sensitivity("l2") == pytest.approx(np.sqrt((R**2).sum(axis=0).max()), rel=RTOL)


@pytest.mark.parametrize("factors", [
    [AllRange(3), Prefix(4)],
    [Prefix(2), Weighted(-3, Total(3)), AllRange(2)],
    [Identity(2), Kron([AllRange(2), Prefix(3)])],
])
def test_kron_sensitivity_is_product_of_factor_sensitivities(factors: list[Workload]) -> None:
    K = Kron(factors)
    for norm in ("l1", "l2"):
        expected = math.prod(f.sensitivity(norm) for f in factors)
        assert K.sensitivity(norm) == pytest.approx(expected, rel=RTOL)
        assert K.sensitivity(norm) == pytest.approx(np.linalg.norm(K.dense(), ord=1 if norm == "l1" else 2,
                                                                   axis=0).max(), rel=RTOL)


# =================================================================================== shape errors
@pytest.mark.parametrize("A", [Identity(5), AllRange(5), VStack([Kron([Prefix(5)]), Weighted(2, Total(5))]),
                               Explicit(np.ones((2, 5)))])
@pytest.mark.parametrize("length", [4, 6])
def test_matmul_wrong_length_names_expected_size(A: Workload, length: int) -> None:
    n = A.shape[1]
    with pytest.raises(ShapeError) as info:
        A @ np.ones(length)
    assert str(n) in str(info.value) and str(length) in str(info.value)
    with pytest.raises(ShapeError, match=str(n)):
        A @ np.ones((length, 2))
    with pytest.raises(ShapeError):
        A @ np.ones((n, 2, 2))  # 3-D input


def test_rmatvec_wrong_length_names_expected_size() -> None:
    A = AllRange(4)  # 10 rows
    with pytest.raises(ShapeError, match="10"):
        A.rmatvec(np.ones(4))


def test_product_of_workloads_with_mismatched_shapes() -> None:
    with pytest.raises(ShapeError):
        Identity(3) @ Identity(4)
    with pytest.raises(ShapeError):
        Product(Identity(3), AllRange(3))  # 3 × 3 times 6 × 3


def test_constructor_errors() -> None:
    with pytest.raises(ShapeError):
        VStack([Identity(3), Identity(4)])
    with pytest.raises(ShapeError):
        VStack([])
    with pytest.raises(ShapeError):
        Kron([])
    for bad in ([(0, 3)], [(-1, 1)], [(2, 1)], [(0, 1), (1, 5)]):
        with pytest.raises(ShapeError):
            Ranges(3, bad)
    for w in (0, 0.0, -0.0, float("nan"), float("inf")):
        with pytest.raises(ShapeError):
            Weighted(w, Identity(2))
    for n in (0, -1, 2.0, True, "3"):
        with pytest.raises(ShapeError):
            Identity(n)  # type: ignore[arg-type]
        with pytest.raises(ShapeError):
            AllRange(n)  # type: ignore[arg-type]
    with pytest.raises(ShapeError):
        Explicit(np.ones(3))
    with pytest.raises(ShapeError):
        strat.hierarchical(4, 1)


def test_shape_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        Identity(2) @ np.ones(3)


# =================================================================================== closed forms
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13])
def test_allrange_closed_forms(n: int) -> None:
    """Thesis §4.5: Gram_ij = (min(i,j)+1)(n−max(i,j)) (0-based), trace = n(n+1)(n+2)/6."""
    i, j = np.indices((n, n))
    expected = (np.minimum(i, j) + 1) * (n - np.maximum(i, j))
    np.testing.assert_allclose(AllRange(n).gram().dense(), expected, rtol=1e-8)
    np.testing.assert_allclose(AllRange(n).gram().dense(), allrange_ref(n).T @ allrange_ref(n), rtol=1e-8)
    assert AllRange(n).gram().trace() == pytest.approx(n * (n + 1) * (n + 2) / 6, rel=1e-8)
    assert AllRange(n).shape == (n * (n + 1) // 2, n)


def test_allrange_gram_is_scaled_inverse_tridiagonal() -> None:
    """seed-002 Test oracles item 2: allrange_gram(5) == 6·tridiag(−1,2,−1)⁻¹."""
    T = 2 * np.eye(5) - np.eye(5, k=1) - np.eye(5, k=-1)
    np.testing.assert_allclose(AllRange(5).gram().dense(), 6 * np.linalg.inv(T), rtol=1e-8)


@pytest.mark.parametrize("n", [1, 2, 4, 7])
def test_prefix_closed_forms(n: int) -> None:
    """Thesis §4.5: Gram_ij = n − max(i,j) (0-based); column-j L1 norm n − j."""
    i, j = np.indices((n, n))
    np.testing.assert_allclose(Prefix(n).gram().dense(), n - np.maximum(i, j), rtol=1e-8)
    np.testing.assert_allclose(Prefix(n).column_norms("l1"), n - np.arange(n), rtol=1e-8)
    assert Prefix(n).sensitivity("l1") == n


# thesis §1.2 running example
THESIS_W = np.array([
    [1, 1, 1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 0, 0, 0, 0],
    [0, 1, 0, 1, 0, 0, 0, 0],
    [1, 0, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 1, 1, -1, -1],
], dtype=float)
THESIS_X = np.array([2, 0, 0, 1, 0, 1, 2, 0], dtype=float)


@pytest.mark.parametrize("make", [lambda M: Explicit(M), lambda M: Explicit(sp.csr_array(M)),
                                  lambda M: Transpose(Explicit(M.T))])
def test_thesis_running_example(make) -> None:  # type: ignore[no-untyped-def]
    """Thesis §1.2 [VERIFIED]: W x = (6,3,1,2,−1), Δ1 = 3, Δ2 = √3."""
    W = make(THESIS_W)
    np.testing.assert_allclose(W @ THESIS_X, [6, 3, 1, 2, -1], rtol=1e-8)
    assert W.sensitivity("l1") == pytest.approx(3.0, rel=1e-8)
    assert W.sensitivity("l2") == pytest.approx(math.sqrt(3.0), rel=1e-8)
    assert W.integral


def test_h4_and_y4_grams() -> None:
    """Thesis §4.2/§4.3: H_4ᵀH_4 and Y_4ᵀY_4, and the matrices themselves."""
    H4 = strat.hierarchical(4, 2)
    np.testing.assert_array_equal(H4.dense(), [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 0, 0], [0, 1, 0, 0],
                                               [0, 0, 1, 0], [0, 0, 0, 1]])
    np.testing.assert_array_equal(H4.gram().dense(), [[3, 2, 1, 1], [2, 3, 1, 1], [1, 1, 3, 2], [1, 1, 2, 3]])
    Y4 = strat.wavelet(4)
    np.testing.assert_array_equal(Y4.dense(), [[1, 1, 1, 1], [1, 1, -1, -1], [1, -1, 0, 0], [0, 0, 1, -1]])
    np.testing.assert_array_equal(Y4.gram().dense(), [[3, 1, 0, 0], [1, 3, 0, 0], [0, 0, 3, 1], [0, 0, 1, 3]])


@pytest.mark.parametrize("n", [4, 8, 16])
def test_hierarchical_wavelet_relation(n: int) -> None:
    """Thesis §4.4 [VERIFIED n = 4, 8, 16]: H_nᵀH_n = Y_nᵀY_n + 11ᵀ − I; Δ1 = 1 + log2 n, Δ2 = √(1 + log2 n)."""
    H, Y = strat.hierarchical(n, 2), strat.wavelet(n)
    np.testing.assert_allclose(H.gram().dense(), Y.gram().dense() + np.ones((n, n)) - np.eye(n), rtol=1e-8)
    depth = 1 + math.log2(n)
    for A in (H, Y):
        assert A.sensitivity("l1") == pytest.approx(depth, rel=1e-8)
        assert A.sensitivity("l2") == pytest.approx(math.sqrt(depth), rel=1e-8)
    # Y_n rows are orthogonal (thesis §4.3): squared norms n, then n/2^l for the 2^l rows of level l
    norms = [n] + [n / 2**level for level in range(int(math.log2(n))) for _ in range(2**level)]
    np.testing.assert_allclose(Y.dense() @ Y.dense().T, np.diag(norms), rtol=1e-8)


@pytest.mark.parametrize("b,k", [(2, 1), (2, 2), (2, 3), (2, 4), (3, 1), (3, 2), (3, 3)])
def test_hierarchical_recursion(b: int, k: int) -> None:
    """Thesis §4.2 [NOTE, VERIFIED]: H_1 = [1], H_{bk} = [H_k ⊗ 1_{1×b}; I_{bk}]."""
    H = np.ones((1, 1))
    for _ in range(k):
        H = np.vstack([np.kron(H, np.ones((1, b))), np.eye(H.shape[1] * b)])
    n = b**k
    np.testing.assert_array_equal(strat.hierarchical(n, b).dense(), H)
    assert strat.hierarchical(n, b).sensitivity("l1") == k + 1


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_wavelet_recursion(k: int) -> None:
    """Thesis §4.3 [NOTE, VERIFIED]: Y_1 = [1], Y_{2k} = [Y_k ⊗ [1 1]; I_k ⊗ [1 −1]]."""
    Y = np.ones((1, 1))
    for _ in range(k):
        Y = np.vstack([np.kron(Y, [[1, 1]]), np.kron(np.eye(Y.shape[1]), [[1, -1]])])
    np.testing.assert_array_equal(strat.wavelet(2**k).dense(), Y)


@pytest.mark.parametrize("n,b", [(5, 2), (7, 2), (10, 2), (5, 3), (7, 3), (10, 3), (2, 3), (1, 2), (11, 4)])
def test_hierarchical_non_powers(n: int, b: int) -> None:
    """Each level's nodes are disjoint and partition their parents; the root is all cells, the leaves
    are exactly the n singletons, and Δ₁ = depth = 1 + ⌈log_b n⌉."""
    H = strat.hierarchical(n, b)
    lo, hi = H.lo, H.hi
    assert (lo[0], hi[0]) == (0, n - 1)
    np.testing.assert_array_equal(H.dense(), hierarchical_ref(n, b))
    intervals = list(zip(lo.tolist(), hi.tolist()))
    assert len(set(intervals)) == len(intervals)
    # level of a node = number of other nodes containing it
    level = [sum(1 for (a, c) in intervals if (a, c) != (lo, h) and a <= lo and h <= c) for lo, h in intervals]
    assert level == sorted(level), "root first, level by level"
    for d in range(max(level) + 1):
        cover = np.zeros(n, dtype=int)
        for (lo, h), lev in zip(intervals, level):
            if lev == d:
                cover[lo : h + 1] += 1
        assert cover.max() == 1, f"level {d} covers a cell twice"
    for (lo, h), lev in zip(intervals, level):
        children = [(a, c) for (a, c), lc in zip(intervals, level) if lc == lev + 1 and lo <= a and c <= h]
        if lo == h:
            assert children == []
        else:
            sizes = [c - a + 1 for a, c in children]
            assert sum(sizes) == h - lo + 1 and len(children) == min(b, h - lo + 1)
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    leaves = sorted((lo, h) for (lo, h) in intervals
                    if not any((a, c) != (lo, h) and lo <= a and c <= h for a, c in intervals))
    assert leaves == [(i, i) for i in range(n)]
    depth = 1 + (math.ceil(math.log(n, b) - 1e-12) if n > 1 else 0)
    assert H.sensitivity("l1") == depth
    assert H.sensitivity("l2") == pytest.approx(math.sqrt(depth), rel=1e-12)
    np.testing.assert_array_equal(H.dense().sum(axis=0), [1 + level[intervals.index((i, i))] for i in range(n)])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7, 12])
def test_wavelet_non_powers_is_invertible(n: int) -> None:
    Y = strat.wavelet(n)
    np.testing.assert_array_equal(Y.dense(), wavelet_ref(n))
    assert np.linalg.matrix_rank(Y.dense()) == n


# =================================================================================== never dense
@pytest.mark.slow
def test_allrange_4096_applies_without_materialising() -> None:
    """8,390,656 × 4,096 would be 3.4e10 entries (dense() refuses above 2**26): applied by cumsums."""
    n = 4096
    A = AllRange(n)
    with pytest.raises(DomainTooLargeError):
        A.dense()
    rng = np.random.default_rng(0)
    x = rng.integers(0, 10, n).astype(np.float64)
    y = A @ x
    assert y.shape == (n * (n + 1) // 2,)
    # 1ᵀ(A x) = Σ_j x_j (j+1)(n−j): every cell j lies in (j+1)(n−j) ranges
    j = np.arange(n)
    assert y.sum() == pytest.approx(float(x @ ((j + 1.0) * (n - j))), rel=1e-12)
    prefix = np.concatenate([[0.0], np.cumsum(x)])
    for row in rng.integers(0, len(y), 50):
        i = int(np.searchsorted(np.cumsum(n - j), row, side="right"))  # ranges starting at i
        start = int((n - j)[:i].sum())
        hi = i + (row - start)
        assert y[row] == prefix[hi + 1] - prefix[i]
    assert A.sensitivity("l1") == (n // 2) * (n // 2 + 1)  # max_j (j+1)(n−j)


def test_big_kron_sensitivity_without_materialising() -> None:
    """Δ of a 6.7e10 × 1.7e7 Kronecker product from factor column norms alone."""
    K = Kron([AllRange(512), Prefix(512), Identity(64)])
    with pytest.raises(DomainTooLargeError):
        K.dense()
    # Δ2(AllRange(512)) = √(256·257) (column j is in (j+1)(512−j) ranges), Δ2(Prefix(512)) = √512, Δ2(I) = 1
    expected_l2 = AllRange(512).sensitivity("l2") * Prefix(512).sensitivity("l2") * Identity(64).sensitivity("l2")
    assert expected_l2 == pytest.approx(math.sqrt(256 * 257) * math.sqrt(512), rel=1e-12)
    assert K.sensitivity("l2") == pytest.approx(expected_l2, rel=1e-12)
    assert K.sensitivity("l1") == pytest.approx(256 * 257 * 512, rel=1e-12)
    assert K.max_abs_entry() == 1.0
    assert K.integral


def test_big_union_of_krons_sensitivity_without_materialising() -> None:
    """A union over a 2**24-cell domain with two groupings: Pareto fronts, not the product domain."""
    A = VStack([Kron([AllRange(256), Prefix(256), Identity(256)]), Kron([Identity(65536), Total(256)])])
    # column (i, j, k): (i+1)(256−i)·(256−j) + 1 for L1; the maximum sits at i = 127, j = 0
    assert A.sensitivity("l1") == pytest.approx(128 * 129 * 256 + 1, rel=1e-12)


# =================================================================================== kronvec
@st.composite
def kron_terms(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[FloatArray, ...]]]:
    dims = draw(st.sampled_from(DOMAINS + [(5,), (2, 2), (6,), (2, 5)]))
    rng = np.random.default_rng(draw(seeds))
    integer = draw(st.booleans())
    terms = []
    for _ in range(draw(st.integers(1, 4))):
        sizes = draw(groupings(dims))
        if integer:  # small integers: ties and duplicate Pareto points
            terms.append(tuple(rng.integers(0, 4, s).astype(np.float64) for s in sizes))
        else:
            terms.append(tuple(rng.exponential(1.0, s) for s in sizes))
    return dims, terms


@relaxed
@given(dt=kron_terms(), dense_combination=st.booleans())
def test_max_of_kron_sum_matches_brute_force(dt, dense_combination: bool) -> None:  # type: ignore[no-untyped-def]
    dims, terms = dt
    brute = sum(reduce(np.kron, t) for t in terms)
    assert len(brute) == math.prod(dims)
    with mock.patch.object(kronvec, "PARETO_WORK_LIMIT", 0 if dense_combination else kronvec.PARETO_WORK_LIMIT):
        assert max_of_kron_sum(list(terms)) == pytest.approx(brute.max(), rel=1e-12)
    aligned = align_terms(list(terms))
    assert len({tuple(len(v) for v in t) for t in aligned}) == 1, "one shared factorisation"
    for original, t in zip(terms, aligned):
        np.testing.assert_allclose(reduce(np.kron, t), reduce(np.kron, original), rtol=1e-12)


def pareto_brute(points: FloatArray) -> set[tuple[float, ...]]:
    unique = {tuple(p) for p in points.tolist()}
    return {p for p in unique if not any(q != p and all(a >= b for a, b in zip(q, p)) for q in unique)}


@given(
    k=st.integers(1, 4),
    rows=st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=25),
    scale=st.sampled_from([1.0, 0.1, 1e3]),
)
def test_pareto_front_matches_brute_force(k: int, rows: list[list[int]], scale: float) -> None:
    points = np.array(rows, dtype=np.float64)[:, :k] * scale
    front = pareto_front(points)
    assert front.shape[1] == k
    listed = [tuple(p) for p in front.tolist()]
    assert len(listed) == len(set(listed)), "duplicates dropped"
    assert set(listed) == pareto_brute(points)


# =================================================================================== regressions (bugs found by these
# tests)
def test_kron_trace_with_non_square_factors() -> None:
    # (2×3) ⊗ (3×2) is a square 6 × 6 matrix, but trace(A ⊗ B) ≠ trace(A)·trace(B) unless both are square
    A = np.arange(6.0).reshape(2, 3)
    B = np.arange(6.0).reshape(3, 2) + 1
    assert Kron([Explicit(A), Explicit(B)]).trace() == pytest.approx(np.trace(np.kron(A, B)))  # got 20, want 58


def test_union_sensitivity_with_one_column_kron_factor() -> None:
    A = VStack([Kron([Identity(2), Identity(1), Identity(3)]), Kron([Identity(2), Identity(3)])])
    assert A.sensitivity("l1") == pytest.approx(2.0)  # ValueError: all input arrays must have the same shape


def test_union_sensitivity_with_trailing_one_column_kron_factor() -> None:
    A = VStack([Kron([Identity(2), Identity(3), Total(1)]), Identity(6)])
    assert A.sensitivity("l1") == pytest.approx(2.0)  # IndexError: tuple index out of range


def test_max_of_kron_sum_with_length_one_vector() -> None:
    terms = [(np.array([1.0, 2.0]), np.array([3.0]), np.array([1.0, 0.0, 1.0])),
             (np.array([0.0, 1.0]), np.array([1.0, 1.0, 5.0]))]
    brute = sum(reduce(np.kron, t) for t in terms)
    assert max_of_kron_sum(terms) == pytest.approx(brute.max())  # raises ValueError


_ENTRIES = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -2.25, 1e-300, 1e150, 7.0 / 3.0])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_kron_is_np_kron_bit_for_bit(data: st.DataObject) -> None:
    """kronvec.kron forms np.kron's very products, for vectors, matrices and mixed shapes alike,
    and Kron.dense and kron_vectors (which use it) give np.kron's bytes."""
    ndim = data.draw(st.sampled_from([(1, 1), (2, 2), (1, 2), (2, 1)]))
    shapes = [tuple(data.draw(st.integers(1, 4)) for _ in range(d)) for d in ndim]
    a, b = (np.array(data.draw(st.lists(_ENTRIES, min_size=math.prod(s), max_size=math.prod(s)))).reshape(s)
            for s in shapes)
    expected = np.kron(a, b)
    found = kronvec.kron(a, b)
    assert found.shape == expected.shape and found.tobytes() == expected.tobytes()
    if ndim == (2, 2):
        assert Kron([Explicit(a), Explicit(b)]).dense().tobytes() == expected.tobytes()
    if ndim == (1, 1):
        assert kronvec.kron_vectors([a, b]).tobytes() == np.kron(np.kron(np.ones(1), a), b).tobytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(1, 6), min_size=0, max_size=4), min_size=1, max_size=8))
def test_shared_cuts_are_the_cuts_every_factorisation_allows(factorisations: list[list[int]]) -> None:
    """kronvec.shared_cuts, which reads each distinct factorisation once, is the intersection over all of
    them of their cumulative products."""
    expected = set.intersection(*[set(np.cumprod(sizes, dtype=np.int64).tolist()) for sizes in factorisations])
    assert kronvec.shared_cuts(factorisations + factorisations[:1]) == expected
