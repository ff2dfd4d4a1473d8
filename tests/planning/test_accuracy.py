"""Exact error and the SVD bound against the digests' oracles (seed 000 §13, seed 002 test oracles)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql import strategies
from dpsql.errors import PrivacyParameterError, ShapeError, UnsupportedStrategyError
from dpsql.matrix import workloads
from dpsql.planning import accuracy


@pytest.mark.parametrize(
    ("n", "identity", "hierarchical", "wavelet"),
    [  # seed-000 §13 recomputed small-n table: Gaussian error / P, i.e. Δ₂² ‖W A⁺‖_F²
        (2, 4.0, 4.0, 4.0),
        (4, 20.0, 20.857143, 18.0),
        (8, 120.0, 117.333333, 93.5),
        (16, 816.0, 657.609831, 514.0625),
    ],
)
def test_allrange_small_n_gaussian_errors(n: int, identity: float, hierarchical: float, wavelet: float) -> None:
    W = workloads.AllRange(n)
    assert accuracy.expected_error(W, strategies.identity(n)) == pytest.approx(identity, rel=1e-6)
    assert accuracy.expected_error(W, strategies.hierarchical(n)) == pytest.approx(hierarchical, rel=1e-6)
    assert accuracy.expected_error(W, strategies.wavelet(n)) == pytest.approx(wavelet, rel=1e-6)


@pytest.mark.parametrize(
    ("n", "identity", "hierarchical", "wavelet"),
    [  # seed-000 §13: Laplace at ε = 1, i.e. 2 Δ₁² ‖W A⁺‖_F²
        (4, 40.0, 125.142857, 108.0),
        (8, 240.0, 938.666667, 748.0),
        (16, 1632.0, 6576.098310, 5140.625),
    ],
)
def test_allrange_small_n_laplace_errors(n: int, identity: float, hierarchical: float, wavelet: float) -> None:
    W = workloads.AllRange(n)
    assert accuracy.expected_error(W, strategies.identity(n), noise="laplace") == pytest.approx(identity, rel=1e-6)
    assert accuracy.expected_error(W, strategies.hierarchical(n), noise="laplace") == pytest.approx(hierarchical,
                                                                                               rel=1e-6)
    assert accuracy.expected_error(W, strategies.wavelet(n), noise="laplace") == pytest.approx(wavelet, rel=1e-6)


def test_svd_bound_closed_forms() -> None:
    assert accuracy.svd_bound(workloads.AllRange(2)) == pytest.approx(2 + np.sqrt(3), rel=1e-12)  # seed 002 oracle 1
    assert accuracy.svd_bound(workloads.AllRange(4)) == pytest.approx(16.31224283, rel=1e-8)  # issue / oracle 2
    assert accuracy.svd_bound(workloads.AllRange(16)) == pytest.approx(404.4829311472745, rel=1e-8)
    assert accuracy.svd_bound(workloads.Prefix(2)) == pytest.approx(2.5, rel=1e-12)  # oracle 3
    assert accuracy.svd_bound(workloads.Prefix(100)) == pytest.approx(474.2390864646, rel=1e-8)


@pytest.mark.slow
def test_table_4_1_allrange_2048_ratios() -> None:
    """Thesis Table 4.1 (Gaussian ratio to the SVD bound), recomputed values within 0.5 %."""
    W = workloads.AllRange(2048)
    bound = accuracy.svd_bound(W)
    assert bound == pytest.approx(3.03418e7, rel=1e-5)
    ratio = {name: accuracy.expected_error(W, A) / bound for name, A in {
        "identity": strategies.identity(2048),
        "hierarchical": strategies.hierarchical(2048, branching=2),
        "wavelet": strategies.wavelet(2048),
    }.items()}
    assert ratio["identity"] == pytest.approx(47.2534, rel=5e-3)
    assert ratio["hierarchical"] == pytest.approx(1.7727, rel=5e-3)  # printed 1.776 in the thesis (erratum 4)
    assert ratio["wavelet"] == pytest.approx(1.5448, rel=5e-3)


def test_table_4_1_two_dimensional_ranges() -> None:
    """AllRange(64) ⊗ AllRange(32) with Kronecker products of the 1-D strategies: errors multiply."""
    W = workloads.Kron([workloads.AllRange(64), workloads.AllRange(32)])
    bound = accuracy.svd_bound(W)
    assert bound == pytest.approx(2.26052e7, rel=1e-5)
    for make, expected in [(strategies.identity, 12.1135), (strategies.hierarchical, 2.9965),
                           (strategies.wavelet, 1.8992)]:
        A = strategies.kron([make(64), make(32)])
        assert accuracy.expected_error(W, A) / bound == pytest.approx(expected, rel=5e-3)


def test_ten_binary_dimensions() -> None:
    """AllRange(2)^⊗10: SVD bound (2+√3)^10 and identity ratio 2.00043 (seed 002 §9)."""
    W = workloads.Kron([workloads.AllRange(2)] * 10)
    assert accuracy.svd_bound(W) == pytest.approx((2 + np.sqrt(3)) ** 10, rel=1e-9)
    A = strategies.kron([strategies.identity(2)] * 10)
    assert accuracy.expected_error(W, A) / accuracy.svd_bound(W) == pytest.approx(2.00043, rel=1e-4)


def test_prefix_ratios() -> None:
    """seed-000 §13 Prefix/CDF table (Gaussian ratio to SVDB) for n = 4, 8, 16."""
    table = {4: (1.5597, 1.2032, 1.2868), 8: (2.1750, 1.3257, 1.3594), 16: (3.2053, 1.4166, 1.4215)}
    for n, (identity, hierarchical, wavelet) in table.items():
        W = workloads.Prefix(n)
        bound = accuracy.svd_bound(W)
        assert accuracy.expected_error(W, strategies.identity(n)) / bound == pytest.approx(identity, rel=1e-3)
        assert accuracy.expected_error(W, strategies.hierarchical(n)) / bound == pytest.approx(hierarchical, rel=1e-3)
        assert accuracy.expected_error(W, strategies.wavelet(n)) / bound == pytest.approx(wavelet, rel=1e-3)


def test_workload_strategy_error_is_sensitivity_times_rank() -> None:
    """A = W gives ‖W W⁺‖_F² = rank(W), so the error is Δ₂(W)² · rank (thesis §3.2)."""
    W = workloads.Explicit([[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0, 0], [0, 1, 0, 1, 0, 0, 0, 0],
                            [1, 0, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, -1, -1]])
    assert accuracy.expected_error(W, strategies.workload(W)) == pytest.approx(3 * 4, rel=1e-9)  # seed 002 oracle 8
    assert accuracy.svd_bound(W) == pytest.approx((2 * np.sqrt(3) + 2 + 2 * np.sqrt(2)) ** 2 / 8, rel=1e-8)


def test_per_query_variance_matches_dense_and_sums_to_total() -> None:
    W = workloads.VStack([workloads.Kron([workloads.AllRange(6), workloads.Identity(3)]),
                          workloads.Kron([workloads.Prefix(6), workloads.Total(3)])])
    A = strategies.kron([strategies.hierarchical(6, 3), strategies.identity(3)])
    variances = accuracy.per_query_variance(W, A)
    R, S = W.dense(), A.dense()
    dense = S.T @ S
    expected = np.max(np.diag(dense)) * np.einsum("ij,jk,ik->i", R, np.linalg.pinv(dense), R)
    np.testing.assert_allclose(variances, expected, rtol=1e-9)
    assert variances.sum() == pytest.approx(accuracy.expected_error(W, A), rel=1e-9)
    assert accuracy.rmse(W, A) == pytest.approx(np.sqrt(variances.mean()), rel=1e-12)


def test_rank_deficient_strategy_supported_and_unsupported() -> None:
    total = workloads.Total(5)
    assert accuracy.expected_error(total, strategies.workload(total)) == pytest.approx(1.0)  # Δ₂ = 1, rank 1
    with pytest.raises(UnsupportedStrategyError, match="does not support"):
        accuracy.expected_error(workloads.Identity(5), strategies.workload(total))


def test_bad_input_errors() -> None:
    with pytest.raises(ShapeError, match="columns"):
        accuracy.expected_error(workloads.AllRange(4), strategies.identity(5))
    with pytest.raises(ValueError, match="noise must be"):
        accuracy.expected_error(workloads.AllRange(4), strategies.identity(4), noise="cauchy")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="branching"):
        strategies.hierarchical(8, branching=1)
    assert issubclass(PrivacyParameterError, ValueError)


@given(st.integers(0, 2**32 - 1))
def test_short_strategies_are_scored_through_their_row_space(seed: int) -> None:
    """A dense strategy with fewer rows than cells (the workload's own rows) is scored from its thin
    SVD: the same error as the dense pseudo-inverse, and the same support verdict."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 24))
    p, m = int(rng.integers(1, n)), int(rng.integers(1, 10))
    A = rng.integers(-2, 3, size=(p, n)).astype(float)
    if p > 1 and seed % 2:
        A[-1] = A[0]  # rank deficient
    supported = rng.integers(-1, 2, size=(m, p)) @ A
    for noise in ("laplace", "gaussian"):
        reference = accuracy.unit_noise_variance(workloads.Explicit(A), noise) * np.trace(
            supported.T @ supported @ np.linalg.pinv(A.T @ A))
        got = accuracy.expected_error(workloads.Explicit(supported), workloads.Explicit(A), noise=noise)
        assert got == pytest.approx(reference, rel=1e-7, abs=1e-9)
    other = rng.integers(-1, 2, size=(m, n)).astype(float)
    inside = np.allclose(other @ np.linalg.pinv(A) @ A, other, atol=1e-8)
    if inside:
        accuracy.expected_error(workloads.Explicit(other), workloads.Explicit(A))
    else:
        with pytest.raises(UnsupportedStrategyError):
            accuracy.expected_error(workloads.Explicit(other), workloads.Explicit(A))


def test_the_error_module_name_does_not_collide_with_the_exceptions_module() -> None:
    """The strategy-error formulas live in dpsql.planning.accuracy; no dpsql/error.py sits next to dpsql/errors.py."""
    from pathlib import Path

    import dpsql

    package = Path(dpsql.__file__).parent
    assert (package / "planning" / "accuracy.py").is_file()
    assert not list(package.rglob("error.py"))
    assert "accuracy" in dpsql.__all__ and "error" not in dpsql.__all__
    assert all(hasattr(dpsql, name) for name in dpsql.__all__)


def test_unit_noise_variance_is_found_once_per_strategy_and_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate's floor and its exact error both read v: the sensitivity is computed once per noise family."""
    A = workloads.Explicit(np.array([[1.0, 2.0], [0.0, 3.0]]))
    calls: list[str] = []
    original = workloads.Explicit.sensitivity
    monkeypatch.setattr(workloads.Explicit, "sensitivity",
                        lambda self, norm="l2": calls.append(norm) or original(self, norm))
    assert accuracy.unit_noise_variance(A, "laplace") == accuracy.unit_noise_variance(A, "laplace") == 2.0 * 5.0**2
    assert accuracy.unit_noise_variance(A, "gaussian") == pytest.approx(13.0, rel=1e-15)
    assert calls == ["l1", "l2"]
    with pytest.raises(ValueError, match="noise"):
        accuracy.unit_noise_variance(A, "uniform")  # type: ignore[arg-type]
