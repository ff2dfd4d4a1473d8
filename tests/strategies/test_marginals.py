"""Marginal algebra (dpsql.residual.basis), its structured linear algebra, and HDMM's OPT_M
(dpsql.strategies.marginals) against dense numpy references and the HDMM digest's oracles.

References are built here from np.kron of I / J / 1ᵀ blocks and np.linalg (pinv with eigenvalues
below 1e-10 of the largest treated as zero, as the library does). The losses use the digest's
normalisation (noise variance 1 per unit sensitivity): accuracy.expected_error reports twice that for
Laplace at ε = 1. Oracles: /work/shared/research/hdmm.md §7 (O6, O10, the OPT_M invariants).
"""

from __future__ import annotations

import itertools
import math
from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.errors import ShapeError
from dpsql.matrix import workloads as wl
from dpsql.matrix.linalg import pinv_gram, projector
from dpsql.planning import accuracy
from dpsql.residual import basis
from dpsql.residual.basis import (
    ResidualSum,
    complement_sizes,
    eigenvalues,
    factor_projection,
    kron_terms,
    marginal_form,
    marginal_weights,
    marginals_strategy,
    residual_dimensions,
    residual_pinv,
    residual_projector,
    subset_sum,
    superset_sum,
)
from dpsql.strategies import opt_marginals
from dpsql.strategies.marginals import marginals_loss

NOISES = ("gaussian", "laplace")
RANK_TOL = 1e-10


# =================================================================================== dense references
def keys(d: int) -> range:
    return range(1 << d)


def subset(key: int, d: int) -> set[int]:
    return {i for i in range(d) if key >> i & 1}


def dense_query(sizes: tuple[int, ...], key: int) -> np.ndarray:
    """Q_a = ⊗ (I if kept else 1ᵀ), attribute i ↔ bit i, factors in order."""
    return reduce(np.kron, [np.eye(n) if key >> i & 1 else np.ones((1, n)) for i, n in enumerate(sizes)],
                  np.ones((1, 1)))


def dense_gram(sizes: tuple[int, ...], key: int) -> np.ndarray:
    return reduce(np.kron, [np.eye(n) if key >> i & 1 else np.ones((n, n)) for i, n in enumerate(sizes)],
                  np.ones((1, 1)))


def dense_strategy(sizes: tuple[int, ...], weights: np.ndarray) -> np.ndarray:
    return np.vstack([weights[a] * dense_query(sizes, a) for a in keys(len(sizes)) if weights[a] > 0])


def ref_pinv(G: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eigh(G)
    keep = values > RANK_TOL * values.max()
    return (vectors[:, keep] / values[keep]) @ vectors[:, keep].T


def ref_loss(W: np.ndarray, A: np.ndarray, noise: str) -> float:
    """Δ²·trace(WᵀW (AᵀA)⁺), asserting that A supports W."""
    M = ref_pinv(A.T @ A)
    np.testing.assert_allclose(W @ M @ (A.T @ A), W, atol=1e-8 * max(1.0, np.abs(W).max()))
    delta2 = np.abs(A).sum(axis=0).max() ** 2 if noise == "laplace" else (A * A).sum(axis=0).max()
    return float(delta2 * np.trace(W.T @ W @ M))


def rmse(W: wl.Workload, A: wl.Workload, noise: str) -> float:
    """RMSE in the digest's normalisation (noise variance 1 per unit sensitivity)."""
    e = accuracy.expected_error(W, A, noise=noise)  # type: ignore[arg-type]
    return float(np.sqrt(e / (2.0 if noise == "laplace" else 1.0) / W.shape[0]))


def strategy_weights(theta: np.ndarray, noise: str) -> np.ndarray:
    """Row weights of the strategy θ parameterises: θ (Laplace) or √θ (Gaussian)."""
    return theta if noise == "laplace" else np.sqrt(theta)


def width(n: int, k: int) -> wl.Ranges:
    return wl.Ranges(n, [(i, i + k - 1) for i in range(n - k + 1)])


def marginals_workload(sizes: tuple[int, ...], order: int) -> wl.Workload:
    """All `order`-way marginals, weight 1."""
    return wl.VStack([wl.Kron([wl.Identity(n) if i in kept else wl.Total(n) for i, n in enumerate(sizes)])
                      for kept in itertools.combinations(range(len(sizes)), order)])


SMALL = (2, 3, 4)
size_lists = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


@st.composite
def marginal_weight_vectors(draw: st.DrawFn, d: int) -> np.ndarray:
    """Non-negative weights over 2^d keys with random exact zeros (never all zero)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    u = rng.random(1 << d) * (rng.random(1 << d) < draw(st.floats(0.2, 1.0)))
    if not u.any():
        u[rng.integers(1 << d)] = 1.0
    return u


# =================================================================================== O10: the algebra
def test_o10_product_rule_on_234() -> None:
    """G_a G_b = μ(a∪b) G_{a∩b} with μ(c) = Π_{i∉c} nᵢ."""
    d, mu = len(SMALL), complement_sizes(SMALL)
    for a, b in itertools.product(keys(d), repeat=2):
        expected_mu = math.prod(n for i, n in enumerate(SMALL) if i not in subset(a | b, d))
        assert mu[a | b] == expected_mu
        np.testing.assert_array_equal(dense_gram(SMALL, a) @ dense_gram(SMALL, b),
                                      expected_mu * dense_gram(SMALL, a & b))


def test_o10_spectrum_on_234() -> None:
    """spec(Σ u_a G_a) = {λ_r(u)} with multiplicities m_r = Π_{i∈r}(nᵢ − 1)."""
    rng = np.random.default_rng(11)
    dims = residual_dimensions(SMALL)
    assert [dims[r] for r in keys(3)] == [math.prod(n - 1 for i, n in enumerate(SMALL) if i in subset(r, 3))
                                          for r in keys(3)]
    assert dims.sum() == math.prod(SMALL)
    for u in (rng.random(8), np.array([0, 1, 0, 2, 0, 0, 3, 0.0]), np.eye(8)[7]):
        G = sum(u[a] * dense_gram(SMALL, a) for a in keys(3))
        spectrum = np.repeat(eigenvalues(SMALL, u), dims.astype(int))
        np.testing.assert_allclose(np.sort(spectrum), np.linalg.eigvalsh(G), atol=1e-9 * np.abs(G).max())


def test_zeta_transforms_match_brute_force() -> None:
    rng = np.random.default_rng(2)
    for d in range(5):
        f = rng.standard_normal(1 << d)
        sup = [sum(f[a] for a in keys(d) if a & r == r) for r in keys(d)]
        sub = [sum(f[r] for r in keys(d) if a & r == r) for a in keys(d)]
        np.testing.assert_allclose(superset_sum(f), sup, atol=1e-12)
        np.testing.assert_allclose(subset_sum(f), sub, atol=1e-12)


# =================================================================================== strategies and their form
def test_marginals_strategy_rows_and_form() -> None:
    weights = np.array([0.5, 0, 2.0, 0, 0, 1.5, 0, 0.25])
    A = marginals_strategy(SMALL, weights)
    np.testing.assert_array_equal(A.dense(), dense_strategy(SMALL, weights))  # blocks by key, Kronecker rows
    sizes, u = marginal_form(A)  # type: ignore[misc]
    assert sizes == SMALL
    np.testing.assert_allclose(u, weights**2)
    assert A.sensitivity("l1") == pytest.approx(weights.sum(), rel=1e-15)
    assert A.sensitivity("l2") ** 2 == pytest.approx((weights**2).sum(), rel=1e-15)
    one = marginals_strategy((5,), np.array([1.0, 3.0]))  # one attribute: the factors themselves
    np.testing.assert_array_equal(one.dense(), np.vstack([np.ones((1, 5)), 3 * np.eye(5)]))


def test_marginal_form_recognises_rebuilt_structures_only() -> None:
    """Rounded/cached strategies come back as plain VStack / Weighted / Kron / Identity / Total."""
    I2, T3, I3 = wl.Identity(2), wl.Total(3), wl.Identity(3)
    rebuilt = wl.VStack([wl.Kron([I2, T3]), wl.Weighted(3.0, wl.Kron([wl.Total(2), I3])), wl.Identity(6),
                         wl.Kron([wl.Ranges(2, [(0, 1)]), wl.Kron([T3])])])
    sizes, u = marginal_form(rebuilt)  # type: ignore[misc]
    assert sizes == (2, 3)
    np.testing.assert_allclose(u, [1.0, 1.0, 9.0, 1.0])
    assert marginal_form(wl.Weighted(2.0, wl.Kron([I2, T3]))) is not None
    assert marginal_form(wl.VStack([wl.Kron([I2, T3]), wl.Kron([wl.Prefix(2), I3])])) is None
    assert marginal_form(wl.VStack([wl.Kron([I2, T3]), wl.Kron([wl.Explicit(np.eye(2)), I3])])) is None
    assert marginal_form(wl.VStack([wl.Kron([I2, I3]), wl.Kron([wl.Identity(3), wl.Identity(2)])])) is None
    assert marginal_form(wl.VStack([wl.Kron([I2, T3]), wl.Kron([wl.Identity(6), wl.Total(1)])])) is None
    assert marginal_form(wl.Explicit(np.eye(4))) is None


@settings(deadline=None, max_examples=40)
@given(data=st.data(), sizes=size_lists)
def test_residual_pinv_and_projector_match_numpy(data: st.DataObject, sizes: tuple[int, ...]) -> None:
    """(Σ u_a G_a)⁺ = Σ_r λ_r⁻¹ P_r and its row-space projector, zeros in u (θ_full = 0) included."""
    u = data.draw(marginal_weight_vectors(len(sizes)))
    G = sum(u[a] * dense_gram(sizes, a) for a in keys(len(sizes)))
    M = residual_pinv(sizes, u, RANK_TOL)
    np.testing.assert_allclose(M.dense(), ref_pinv(G), atol=1e-10 * np.abs(ref_pinv(G)).max())
    np.testing.assert_allclose(residual_projector(sizes, u, RANK_TOL).dense(), ref_pinv(G) @ G, atol=1e-9)
    A = marginals_strategy(sizes, np.sqrt(u))
    np.testing.assert_allclose(pinv_gram(A).dense(), np.linalg.pinv(A.dense().T @ A.dense(), rcond=1e-10), atol=1e-9)
    np.testing.assert_allclose(projector(A).dense(), np.linalg.pinv(A.dense(), rcond=1e-8) @ A.dense(), atol=1e-9)


def test_pinv_gram_uses_the_residual_form_without_full_table() -> None:
    weights = np.array([1.0, 0.5, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0])  # θ_full = 0: AᵀA is singular
    A = marginals_strategy(SMALL, weights)
    M = pinv_gram(A)
    assert isinstance(M, ResidualSum)
    R = A.dense()
    np.testing.assert_allclose(M.dense(), np.linalg.pinv(R.T @ R), atol=1e-12)
    # x̂ = (AᵀA)⁺Aᵀy is the minimum-norm least-squares estimate (what mechanism.reconstruct returns)
    y = np.random.default_rng(5).standard_normal(R.shape[0])
    np.testing.assert_allclose(wl.Product(M, A.T) @ y, np.linalg.lstsq(R, y, rcond=None)[0], atol=1e-12)


# =================================================================================== loss and gradient
def range_marginal_workloads() -> list[wl.Workload]:
    """Prefix / AllRange / Width-k and signed explicit factors: not marginals, projected exactly (§2.4.4)."""
    signed = wl.Explicit(np.array([[1.0, -1.0, 0.5, 0.0], [0.0, 2.0, 0.0, -3.0]]))
    return [
        wl.Kron([wl.Prefix(2), wl.AllRange(3), width(4, 2)]),
        wl.VStack([wl.Kron([wl.AllRange(2), wl.Identity(3), wl.Total(4)]),
                   wl.Weighted(1.5, wl.Kron([wl.Total(2), wl.Prefix(3), wl.AllRange(4)])),
                   wl.Kron([wl.Identity(2), width(3, 2), signed])]),
        wl.Weighted(0.5, wl.Kron([wl.VStack([wl.Identity(2), wl.Total(2)]), wl.Prefix(3), wl.Prefix(4)])),
    ]


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("index", range(3))
def test_loss_equals_dense_error_for_range_marginal_workloads(noise: str, index: int) -> None:
    """Projection invariance: the eigen-form loss on w equals the dense error of the original W."""
    W = range_marginal_workloads()[index]
    w = marginal_weights(W, SMALL)
    rng = np.random.default_rng(index)
    for _ in range(3):
        theta = rng.random(8) * (rng.random(8) < 0.6)
        theta[-1] = rng.random() + 0.1  # these workloads need the full table
        loss, _ = marginals_loss(theta, w, SMALL, noise)  # type: ignore[arg-type]
        A = marginals_strategy(SMALL, strategy_weights(theta, noise))
        assert loss == pytest.approx(ref_loss(W.dense(), A.dense(), noise), rel=1e-9)
        assert loss == pytest.approx(accuracy.expected_error(W, A, noise=noise)  # type: ignore[arg-type]
                                     / (2.0 if noise == "laplace" else 1.0), rel=1e-9)


@settings(deadline=None, max_examples=40)
@given(data=st.data(), sizes=size_lists, noise=st.sampled_from(NOISES))
def test_loss_equals_dense_error_for_marginal_workloads(data: st.DataObject, sizes: tuple[int, ...],
                                                        noise: str) -> None:
    """Random weighted marginal workloads and random (often singular) marginal strategies."""
    omega = np.sqrt(data.draw(marginal_weight_vectors(len(sizes))))
    theta = data.draw(marginal_weight_vectors(len(sizes)))
    W = marginals_strategy(sizes, omega)
    w = marginal_weights(W, sizes)
    present = residual_dimensions(sizes) > 0  # exact for marginal workloads (w itself when all nᵢ > 1)
    np.testing.assert_allclose(eigenvalues(sizes, w)[present], eigenvalues(sizes, omega**2)[present], rtol=1e-12)
    if min(sizes) > 1:
        np.testing.assert_allclose(w, omega**2, rtol=1e-12, atol=1e-15)
    loss, _ = marginals_loss(theta, w, sizes, noise)  # type: ignore[arg-type]
    Wd, Ad = W.dense(), dense_strategy(sizes, strategy_weights(theta, noise))
    if not np.allclose(Wd @ np.linalg.pinv(Ad, rcond=1e-8) @ Ad, Wd, atol=1e-8):
        assert loss == np.inf  # the support condition fails
        return
    assert loss == pytest.approx(ref_loss(Wd, Ad, noise), rel=1e-8)


@pytest.mark.parametrize("noise", NOISES)
def test_gradient_matches_central_differences(noise: str) -> None:
    rng = np.random.default_rng(9)
    cases: list[tuple[tuple[int, ...], np.ndarray]] = [
        ((2, 3, 4, 2), rng.random(16)), (SMALL, marginal_weights(range_marginal_workloads()[1], SMALL))]
    for sizes, w in cases:
        theta = rng.uniform(0.2, 1.0, len(w))
        _, grad = marginals_loss(theta, w, sizes, noise)  # type: ignore[arg-type]
        h, numeric = 1e-6, np.zeros_like(theta)
        for a in range(len(theta)):
            step = np.eye(len(theta))[a] * h
            numeric[a] = (marginals_loss(theta + step, w, sizes, noise)[0]  # type: ignore[arg-type]
                          - marginals_loss(theta - step, w, sizes, noise)[0]) / (2 * h)  # type: ignore[arg-type]
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7 * np.abs(grad).max())


@pytest.mark.parametrize("noise", NOISES)
def test_per_query_variance_matches_dense(noise: str) -> None:
    W = wl.VStack([wl.Kron([wl.AllRange(2), wl.Identity(3), wl.Total(4)]),
                   wl.Weighted(2.0, wl.Kron([wl.Identity(2), wl.Prefix(3), width(4, 3)])), wl.Total(24)])
    weights = np.array([0.3, 0.0, 0.0, 0.5, 0.0, 0.2, 0.7, 0.4])
    A = marginals_strategy(SMALL, weights)
    Wd, Ad = W.dense(), A.dense()
    v = 2 * np.abs(Ad).sum(axis=0).max() ** 2 if noise == "laplace" else (Ad * Ad).sum(axis=0).max()
    expected = v * np.einsum("ij,jk,ik->i", Wd, ref_pinv(Ad.T @ Ad), Wd)
    np.testing.assert_allclose(accuracy.per_query_variance(W, A, noise=noise), expected, rtol=1e-9)  # type: ignore[arg-type]
    assert accuracy.expected_error(W, A, noise=noise) == pytest.approx(  # type: ignore[arg-type]
        expected.sum(), rel=1e-9)


# =================================================================================== O6: cps-1
CPS = (50, 100, 7, 4, 2)


def cps1() -> wl.Workload:
    return wl.Kron([wl.VStack([wl.Identity(n), wl.Total(n)]) for n in CPS])


@pytest.mark.parametrize(("noise", "low", "high"), [("laplace", 3.40, 3.4214 * (1 + 1e-4)), ("gaussian", 1.85, 1.8595)])
@pytest.mark.slow
def test_o6_cps1(noise: str, low: float, high: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Digest §7 O6: cps-1 (N = 280,000, m = 618,120), OPT_M RMSE: Laplace 3.4214, Gaussian ≤ 1.8595.

    Nothing larger than a per-attribute matrix may be densified (limit 10⁵ entries, N² ≈ 7.8·10¹⁰).
    """
    monkeypatch.setattr(wl, "MAX_DENSE_ENTRIES", 10**5)
    W = cps1()
    assert W.shape == (51 * 101 * 8 * 5 * 3, 280_000)
    A = opt_marginals(W, noise=noise, seed=0, restarts=3)  # type: ignore[arg-type]
    value = rmse(W, A, noise)
    variances = accuracy.per_query_variance(W, A, noise=noise)  # type: ignore[arg-type]
    assert low <= value <= high
    assert value < rmse(W, wl.Identity(280_000), noise)
    assert variances.sum() == pytest.approx(accuracy.expected_error(W, A, noise=noise),  # type: ignore[arg-type]
                                            rel=1e-9)


# =================================================================================== opt_marginals
TWO_WAY = (3, 4, 5, 2, 3)


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.slow
def test_opt_marginals_two_way_beats_identity_and_workload(noise: str) -> None:
    W = marginals_workload(TWO_WAY, 2)
    A = opt_marginals(W, noise=noise)  # type: ignore[arg-type]
    assert A.sensitivity("l1" if noise == "laplace" else "l2") == pytest.approx(1.0, abs=1e-12)
    ours = accuracy.expected_error(W, A, noise=noise)  # type: ignore[arg-type]
    assert ours < accuracy.expected_error(W, wl.Identity(math.prod(TWO_WAY)), noise=noise)  # type: ignore[arg-type]
    assert ours <= accuracy.expected_error(W, W, noise=noise) * (1 + 1e-6)  # type: ignore[arg-type]
    again = opt_marginals(W, noise=noise)  # type: ignore[arg-type]
    np.testing.assert_array_equal(marginal_form(again)[1], marginal_form(A)[1])  # type: ignore[index]
    print(f"2-way marginals {noise}: OPT_M / workload = {ours / accuracy.expected_error(W, W, noise=noise):.4f}")  # type: ignore[arg-type]


@pytest.mark.parametrize("noise", NOISES)
def test_opt_marginals_on_range_workload_matches_its_loss(noise: str) -> None:
    """The returned strategy's exact error is the optimiser's loss, and no worse than the identity's."""
    W = range_marginal_workloads()[1]
    A = opt_marginals(W, noise=noise, restarts=2)  # type: ignore[arg-type]
    sizes, u = marginal_form(A)  # type: ignore[misc]
    theta = np.sqrt(u) if noise == "laplace" else u
    loss, _ = marginals_loss(theta, marginal_weights(W, sizes), sizes, noise)  # type: ignore[arg-type]
    factor = 2.0 if noise == "laplace" else 1.0
    assert accuracy.expected_error(W, A, noise=noise) == pytest.approx(  # type: ignore[arg-type]
        factor * loss, rel=1e-9)
    assert (accuracy.expected_error(W, A, noise=noise)  # type: ignore[arg-type]
            <= accuracy.expected_error(W, wl.Identity(24), noise=noise) * (1 + 1e-9))  # type: ignore[arg-type]


def test_opt_marginals_budget_of_one_evaluation_returns_a_valid_strategy() -> None:
    W = marginals_workload(TWO_WAY, 3)
    for noise in NOISES:
        A = opt_marginals(W, noise=noise, max_evaluations=1)  # type: ignore[arg-type]
        assert A.sensitivity("l1" if noise == "laplace" else "l2") == pytest.approx(1.0, abs=1e-12)
        accuracy.check_support(W, A)
        assert (accuracy.expected_error(W, A, noise=noise)  # type: ignore[arg-type]
                <= accuracy.expected_error(W, wl.Identity(360), noise=noise) * (1 + 1e-9))  # type: ignore[arg-type]


def test_opt_marginals_bad_input() -> None:
    with pytest.raises(ShapeError, match="empty"):
        opt_marginals(wl.Explicit(np.zeros((0, 4))))
    with pytest.raises(ShapeError, match="empty"):
        opt_marginals(wl.Explicit(np.zeros((3, 0))))
    with pytest.raises(ShapeError, match="non-finite"):
        opt_marginals(wl.Kron([wl.Explicit(np.array([[1e200, 1.0]])), wl.Identity(3)]))
    with pytest.raises(ShapeError, match="non-finite"):
        opt_marginals(wl.Weighted(1e200, wl.Weighted(1e200, wl.Kron([wl.Identity(2), wl.Identity(3)]))))
    with pytest.raises(ShapeError, match="same attribute sizes"):
        opt_marginals(wl.VStack([wl.Kron([wl.Prefix(2), wl.Prefix(3)]), wl.Prefix(6)]))
    with pytest.raises(ValueError, match="noise must be"):
        opt_marginals(wl.Prefix(4), noise="cauchy")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="entries"):
        marginals_loss(np.ones(4), np.ones(8), SMALL)
    with pytest.raises(ShapeError, match="positive weight"):
        marginals_strategy(SMALL, np.zeros(8))


def test_opt_marginals_all_zero_workload_is_identity() -> None:
    A = opt_marginals(wl.Explicit(np.zeros((2, 6))))
    np.testing.assert_array_equal(A.dense(), np.eye(6))



@settings(max_examples=40, deadline=None)
@given(data=st.data(), sizes=size_lists)
def test_factor_projections_are_memoised_per_object_exactly(data: st.DataObject, sizes: tuple[int, ...]) -> None:
    """The memo returns (b, a) bit for bit as a fresh copy of the factor gets it, and marginal_weights is
    unchanged by it; it does not keep a factor alive."""
    import gc
    import weakref

    from dpsql.residual.basis import factor_projection

    rows = [data.draw(st.lists(st.lists(st.integers(-3, 3), min_size=n, max_size=n), min_size=1, max_size=4))
            for n in sizes]

    def build() -> tuple[list[wl.Workload], wl.Workload]:
        factors: list[wl.Workload] = [wl.Explicit(np.array(r, dtype=float)) for r in rows]
        totals = [wl.Identity(n) for n in sizes]
        return factors, wl.VStack([wl.Kron(factors) if len(factors) > 1 else factors[0],
                                   wl.Weighted(2.0, wl.Kron(totals) if len(totals) > 1 else totals[0])])

    factors, W = build()
    first = [factor_projection(F) for F in factors]
    assert all(factor_projection(F) is known for F, known in zip(factors, first))  # from the memo
    fresh, again = build()
    assert [factor_projection(F) for F in fresh] == first
    weights = marginal_weights(W, sizes)
    np.testing.assert_array_equal(marginal_weights(W, sizes), weights)
    np.testing.assert_array_equal(marginal_weights(again, sizes), weights)
    held = weakref.ref(factors[0])
    del factors, W, first
    gc.collect()
    assert held() is None  # the memo does not keep factors alive


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data(), block=st.sampled_from([4, 2**18]))
def test_marginal_weights_are_the_terms_summed_one_by_one(sizes: list[int], data: st.DataObject, block: int) -> None:
    """w = Σ_k c_k v_k with v_k,a = Π_{i∉a} bᵢ Π_{i∈a} aᵢ (each factor's projection), added term by term in
    order: the same floats whether the key products are formed a block of terms at a time or not."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    blocks: list[wl.Workload] = []
    for _ in range(data.draw(st.integers(1, 12))):
        product = wl.Kron([wl.Explicit(rng.normal(size=(int(rng.integers(1, 4)), n)) * 10.0 ** rng.integers(-3, 4))
                           for n in sizes])
        blocks.append(wl.Weighted(float(rng.normal() * 3), product) if rng.random() < 0.5 else product)
    W = wl.VStack(blocks)
    expected = np.zeros(1 << len(sizes))
    for weight, factors in kron_terms(W):
        parts = [factor_projection(f) for f in factors]
        products = np.array([math.prod([parts[i][1] if key >> i & 1 else parts[i][0] for i in range(len(sizes))],
                                       start=1.0) for key in range(1 << len(sizes))])
        expected += weight * products
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(basis, "TERMS_ENTRIES", block)
        found = marginal_weights(W, sizes)
    np.testing.assert_array_equal(found, expected)
