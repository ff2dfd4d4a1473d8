"""One conformance suite for every strategy (after scikit-learn's check_estimator)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql import strategies
from dpsql.matrix import workloads
from dpsql.planning import accuracy
from dpsql.strategies.hierarchical import tree_intervals


def check_strategy(A: workloads.Workload, W: workloads.Workload) -> None:
    """Shape, sensitivity, support and the error formulas of A on W against dense numpy."""
    R, S = W.dense(), A.dense()
    assert S.shape == A.shape and A.shape[1] == W.shape[1]
    assert A.integral == bool(np.all(np.mod(S, 1) == 0))
    assert A.sensitivity("l1") == pytest.approx(np.abs(S).sum(axis=0).max(), rel=1e-12)
    assert A.sensitivity("l2") == pytest.approx(np.sqrt((S**2).sum(axis=0).max()), rel=1e-12)
    pinv = np.linalg.pinv(S)
    assert np.allclose(R @ pinv @ S, R, atol=1e-8), "standard strategies are full rank and support any W"
    profile = R @ pinv
    for noise, variance in (("gaussian", (S**2).sum(axis=0).max()), ("laplace", 2 * np.abs(S).sum(axis=0).max() ** 2)):
        expected = variance * (profile**2).sum(axis=1)
        np.testing.assert_allclose(accuracy.per_query_variance(W, A, noise=noise), expected, rtol=1e-8, atol=1e-10)
        assert accuracy.expected_error(W, A, noise=noise) == pytest.approx(expected.sum(), rel=1e-8)
        assert accuracy.expected_error(W, A, noise="gaussian") >= accuracy.svd_bound(W) * (1 - 1e-9)


STRATEGIES = {
    "identity": strategies.identity,
    "H2": lambda n: strategies.hierarchical(n, 2),
    "H3": lambda n: strategies.hierarchical(n, 3),
    "H4": lambda n: strategies.hierarchical(n, 4),
    "wavelet": strategies.wavelet,
    "workload(Prefix)": lambda n: strategies.workload(workloads.Prefix(n)),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_one_attribute_strategies(name: str, n: int) -> None:
    A = STRATEGIES[name](n)
    for W in (workloads.AllRange(n), workloads.Prefix(n), workloads.Identity(n), workloads.Total(n)):
        check_strategy(A, W)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_kronecker_strategies(name: str) -> None:
    A = strategies.kron([STRATEGIES[name](5), strategies.identity(3), STRATEGIES[name](4)])
    W = workloads.VStack([
        workloads.Kron([workloads.AllRange(5), workloads.Identity(3), workloads.Total(4)]),
        workloads.Weighted(2.0, workloads.Kron([workloads.Prefix(5), workloads.Total(3), workloads.Prefix(4)])),
    ])
    check_strategy(A, W)


@pytest.mark.parametrize(("n", "branching"), [(1, 2), (7, 2), (10, 3), (16, 4), (100, 4), (1000, 16)])
def test_hierarchical_tree_levels_cover_every_cell(n: int, branching: int) -> None:
    nodes = tree_intervals(n, branching)
    assert tuple(nodes[0]) == (0, n - 1)
    leaves = nodes[nodes[:, 0] == nodes[:, 1]]
    assert sorted(leaves[:, 0].tolist()) == list(range(n))
    levels = 1 + int(np.ceil(np.log(n) / np.log(branching) - 1e-9))  # a balanced tree's depth
    assert strategies.hierarchical(n, branching).sensitivity("l1") == levels
    children_split = nodes[1:]
    assert np.all(children_split[:, 1] - children_split[:, 0] + 1 <= np.ceil(n / branching))


def test_powers_of_the_branching_match_the_thesis() -> None:
    """H_4 rows and sensitivities (Li's thesis §4.2); Δ(H_n) = Δ(Y_n) = 1 + log₂ n."""
    assert strategies.hierarchical(4).dense().tolist() == [
        [1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    for n in (4, 8, 16, 1024):
        levels = 1 + np.log2(n)
        for A in (strategies.hierarchical(n), strategies.wavelet(n)):
            assert A.sensitivity("l1") == levels
            assert A.sensitivity("l2") == pytest.approx(np.sqrt(levels))
