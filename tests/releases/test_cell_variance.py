"""The largest cell variance of a kept measurement (``dpsql.releases.kept.largest_cell_variance``) and
the structural rank bound it starts from (``dpsql.matrix.workloads.rank_bound``): the bound is never
below the numerical rank of the dense matrix, and the structured variance equals the dense
computation max_i [(AᵀA)⁻¹]_ii (None exactly when AᵀA is singular) on random Kronecker products,
weighted stacks and explicit matrices of full and deficient rank.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.matrix.workloads import Explicit, Identity, Kron, Total, VStack, Weighted, Workload, rank_bound
from dpsql.releases.kept import KeptMeasurement, largest_cell_variance


def _explicit(rng: np.random.Generator, rows: int, columns: int, rank: int) -> Explicit:
    """An integer matrix of ``rows`` × ``columns`` of rank min(rank, rows, columns) (almost surely)."""
    rank = min(rank, rows, columns)
    return Explicit((rng.integers(-2, 3, size=(rows, rank)) @ rng.integers(-2, 3, size=(rank, columns))).astype(float)
                    if rank else np.zeros((rows, columns)))


@st.composite
def workloads(draw: st.DrawFn, depth: int = 0) -> Workload:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    nested = ["kron", "weighted", "vstack"] if depth < 2 else []
    kind = draw(st.sampled_from(["explicit", "identity", "total", *nested]))
    if kind == "identity":
        return Identity(draw(st.integers(1, 4)))
    if kind == "total":
        return Total(draw(st.integers(1, 4)))
    if kind == "explicit":
        columns = draw(st.integers(1, 5))
        return _explicit(rng, draw(st.integers(1, 7)), columns, draw(st.integers(0, columns)))
    if kind == "weighted":
        return Weighted(draw(st.sampled_from([0.5, -2.0, 3.0])), draw(workloads(depth + 1)))
    if kind == "kron":
        return Kron([draw(workloads(depth + 1)) for _ in range(draw(st.integers(1, 3)))])
    first = draw(workloads(depth + 1))
    columns = first.shape[1]
    others = [_explicit(rng, draw(st.integers(1, 4)), columns, draw(st.integers(0, columns)))
              for _ in range(draw(st.integers(0, 2)))]
    return VStack([first, *others])


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_rank_bound_is_never_below_the_rank(A: Workload) -> None:
    dense = A.dense()
    assert rank_bound(A) >= np.linalg.matrix_rank(dense)
    assert rank_bound(A) <= min(dense.shape)


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_largest_cell_variance_equals_the_dense_inverse(A: Workload) -> None:
    dense = A.dense()
    gram = dense.T @ dense
    found = largest_cell_variance(A)
    singular = np.linalg.matrix_rank(gram) < gram.shape[0]
    assert (found is None) == singular
    if found is not None:
        expected = float(np.max(np.diag(np.linalg.inv(gram))))
        # relative error of an inverse's entries: a few units of roundoff times the condition number
        tolerance = 1e-12 * np.linalg.cond(gram)
        assert abs(found - expected) <= tolerance * expected + 1e-300


def test_cell_stddev_scales_by_the_noise_and_the_unit() -> None:
    strategy = Kron([Explicit(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])), Identity(3)])
    measurement = KeptMeasurement(table="t", vector="count", axes=(("a", np.arange(6, dtype=np.int64)),),
                                  strategy=strategy, y=np.zeros(9), noise_variance=4.0, unit=10.0)
    # (AᵀA)⁻¹ of the first factor: [[2, 1], [1, 2]]⁻¹ = [[2, -1], [-1, 2]] / 3, largest diagonal 2/3
    found, expected = measurement.cell_stddev(), np.sqrt(2 / 3 * 4.0) * 10.0
    assert found is not None and abs(found - expected) <= 1e-12 * expected
    residual = KeptMeasurement(table="t", vector="count", axes=(("a", np.arange(6, dtype=np.int64)),),
                               strategy=Kron([Total(2), Identity(3)]), y=np.zeros(3), noise_variance=1.0)
    assert residual.cell_stddev() is None
