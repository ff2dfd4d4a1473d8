"""Tests for the Gaussian Eigen-Design strategy (dpsql.strategies.eigen)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.errors import DomainTooLargeError, ShapeError
from dpsql.matrix.workloads import AllRange, Explicit, Identity, Kron, Prefix, Total, VStack, Workload
from dpsql.planning import accuracy
from dpsql.strategies import eigen
from dpsql.strategies.eigen import eigen_design


def ratio(W: Workload, A: Workload) -> float:
    return accuracy.expected_error(W, A, noise="gaussian") / accuracy.svd_bound(W)


@pytest.mark.parametrize(("n", "expected"), [(32, 1.04200), (64, 1.04052)])
def test_allrange_ratio_matches_reconstruction(n: int, expected: float) -> None:
    assert ratio(AllRange(n), eigen_design(AllRange(n))) == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize(("n", "expected"), [(32, 1.09225), (64, 1.08950)])
def test_allrange_restricted_optimum_without_completion(n: int, expected: float) -> None:
    W = AllRange(n)
    A, info = eigen.eigen_design_with_info(W, completion=False)
    assert ratio(W, A) == pytest.approx(expected, rel=1e-4)
    assert info.converged and abs(info.gap) < 1e-6


def test_allrange2_is_optimal() -> None:
    assert ratio(AllRange(2), eigen_design(AllRange(2))) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("W", [VStack([Identity(6), Total(6)]), Kron([Identity(3), Identity(4)]),
                               Explicit(np.vstack([np.eye(5), np.ones((1, 5))]))])
def test_tight_workloads_reach_the_svd_bound(W: Workload) -> None:
    assert ratio(W, eigen_design(W)) == pytest.approx(1.0, abs=1e-6)


def test_kron_on_two_dimensional_gram() -> None:
    W = Kron([AllRange(8), AllRange(4)])
    A = eigen_design(W)
    r = ratio(W, A)
    assert 1.0 - 1e-9 <= r < 1.15
    # Kron of 1-D AllRange Grams: well below identity's error
    assert r < ratio(W, Identity(32))


@pytest.mark.parametrize("W", [AllRange(5), Prefix(16), Kron([AllRange(4), Prefix(3)]),
                               Explicit(np.random.default_rng(0).normal(size=(7, 10)))])
def test_never_below_bound_and_completion_helps(W: Workload) -> None:
    completed, plain = ratio(W, eigen_design(W)), ratio(W, eigen_design(W, completion=False))
    assert completed >= 1.0 - 1e-9
    assert completed <= plain * (1 + 1e-9)


@pytest.mark.parametrize("W", [AllRange(16), Explicit(np.random.default_rng(1).normal(size=(3, 8))),
                               Explicit(np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]))])
def test_strategy_supports_workload_and_has_unit_sensitivity(W: Workload) -> None:
    A = eigen_design(W)
    assert isinstance(A, Explicit)
    assert accuracy.support_residual(W, A) < 1e-10
    assert A.sensitivity("l2") == pytest.approx(1.0)
    norms = A.column_norms("l2")
    touched = W.column_norms("l2") > 0
    assert np.allclose(norms[touched], 1.0)


def test_rank_deficient_workload_is_supported_and_bounded() -> None:
    W = Explicit(np.random.default_rng(2).normal(size=(3, 12)))
    A = eigen_design(W)
    assert accuracy.support_residual(W, A) < 1e-10
    assert ratio(W, A) >= 1.0 - 1e-9


@pytest.mark.parametrize("k", [1, 5, 31, 40])
def test_principal_vectors(k: int) -> None:
    W = AllRange(32)
    A = eigen_design(W, principal=k)
    r, full = ratio(W, A), ratio(W, eigen_design(W))
    assert accuracy.support_residual(W, A) < 1e-10
    assert r >= full * (1 - 1e-6)
    assert r >= 1.0 - 1e-9
    if k >= 31:
        assert r == pytest.approx(full, rel=1e-6)


def test_principal_improves_with_more_vectors() -> None:
    W = AllRange(32)
    assert ratio(W, eigen_design(W, principal=8)) <= ratio(W, eigen_design(W, principal=1)) * (1 + 1e-9)


def test_budget_returns_valid_strategy() -> None:
    W = AllRange(48)
    A, info = eigen.eigen_design_with_info(W, max_evaluations=1)
    assert not info.converged and info.evaluations == 1
    assert accuracy.support_residual(W, A) < 1e-10
    assert A.sensitivity("l2") == pytest.approx(1.0)
    assert ratio(W, A) >= 1.0 - 1e-9


def test_empty_workload_raises() -> None:
    with pytest.raises(ShapeError, match="non-empty"):
        eigen_design(Explicit(np.zeros((0, 4))))


def test_zero_workload_raises() -> None:
    with pytest.raises(ShapeError, match="no non-zero query"):
        eigen_design(Explicit(np.zeros((3, 4))))


def test_too_large_domain_raises() -> None:
    with pytest.raises(DomainTooLargeError, match="Kronecker"):
        eigen_design(Kron([Identity(100), Identity(100)]))


@pytest.mark.parametrize("kwargs", [{"principal": 0}, {"max_evaluations": 0}, {"max_evaluations": 2.5},
                                    {"max_evaluations": True}])
def test_bad_arguments_raise(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        eigen_design(AllRange(4), **kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- eigen-query separation
@pytest.mark.parametrize("W", [AllRange(256), Kron([AllRange(8), Prefix(6)]),
                               Explicit(np.random.default_rng(1).normal(size=(5, 12)))])
@pytest.mark.slow
def test_separation_is_valid_and_near_full_design(W: Workload) -> None:
    """Thesis §5.2.2.1: AllRange(256), groups of 8 → 1.0384 × svdb against the full design's 1.0353 (+0.3 %)."""
    A, info = eigen.eigen_design_with_info(W, group_size=8)
    assert info.converged and 0 < info.evaluations < eigen.MAX_EVALUATIONS
    assert accuracy.support_residual(W, A) < 1e-10
    assert A.sensitivity("l2") == pytest.approx(1.0)
    r, full = ratio(W, A), ratio(W, eigen_design(W))
    assert r >= 1.0 - 1e-9
    assert r <= 1.02 * full


@pytest.mark.parametrize("group_size", [1, 32, 100])
def test_separation_extremes_reproduce_full_design(group_size: int) -> None:
    """One group is the full program; singleton groups make the outer solve the full program again."""
    W = AllRange(32)
    assert ratio(W, eigen_design(W, group_size=group_size)) == pytest.approx(ratio(W, eigen_design(W)), rel=1e-6)


def test_separation_budget_returns_valid_strategy() -> None:
    W = AllRange(48)
    A, info = eigen.eigen_design_with_info(W, group_size=4, max_evaluations=1)
    assert not info.converged and info.evaluations == 48 // 4 + 1  # one evaluation per solve
    assert accuracy.support_residual(W, A) < 1e-10
    assert A.sensitivity("l2") == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs", [{"group_size": 0}, {"group_size": -3}, {"group_size": 2.5}, {"group_size": True},
                                    {"group_size": 4, "principal": 4}])
def test_bad_group_size_raises(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        eigen_design(AllRange(8), **kwargs)  # type: ignore[arg-type]
