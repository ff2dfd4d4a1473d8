"""Roots of reduced information (``dpsql.releases.reduce``): where one is known without an
eigendecomposition, none is computed, and the root is what the eigendecomposition gives up to rounding:

- a measurement over the meet's classes themselves with fewer rows than cells is its own root (X, its
  columns relabelled), and the pool it joins answers as one factored from the eigendecomposition's root;
- ``psd_root`` of a matrix certainly of full rank on its non-zero diagonal is its Cholesky factor, with as
  many rows as the eigendecomposition keeps; a rank-deficient one keeps its eigendecomposition.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _helpers import assert_pools_agree
from dpsql.matrix.workloads import Explicit
from dpsql.releases.gls import pool
from dpsql.releases.kept import KeptMeasurement
from dpsql.releases.reduce import EIGEN_CUTOFF, cell_map, lifted, meet, on_classes, on_classes_of_root, psd_root
from dpsql.releases.whitening import above_cutoff


def _counting_eigh(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of numpy's symmetric eigendecomposition while the test runs."""
    calls: list[int] = []
    original: Callable[..., object] = np.linalg.eigh

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(np.linalg, "eigh", counted)
    return calls


def _eigen_root(S: np.ndarray) -> np.ndarray:
    """The test's own root of S: its eigenvectors scaled by √λ, those above the cutoff."""
    eigenvalues, vectors = np.linalg.eigh(S)
    keep = above_cutoff(eigenvalues, EIGEN_CUTOFF)
    return (vectors[:, keep] * np.sqrt(eigenvalues[keep])).T


def _partition(rng: np.random.Generator, size: int) -> np.ndarray:
    return np.unique(rng.integers(0, 4, size), return_inverse=True)[1].astype(np.int64)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 12))
def test_a_measurement_over_the_classes_with_fewer_rows_is_its_own_root(seed: int, rows: int) -> None:
    rng = np.random.default_rng(seed)
    measured = (("a", _partition(rng, 6)), ("b", _partition(rng, 5)))
    found = meet(measured, measured)  # every K cell its own class
    assert found.refines
    cells = found.of_measured.size
    X = rng.normal(size=(min(rows, cells - 1), cells)) if cells > 1 else np.zeros((0, 1))
    z = rng.normal(size=X.shape[0])
    with pytest.MonkeyPatch.context() as patch:
        calls = _counting_eigh(patch)
        S, r, root = on_classes_of_root(X, X.T @ z, found)
    assert calls == []
    assert root is not None
    np.testing.assert_array_equal(root[:, found.of_measured], X)
    expected_S, expected_r = on_classes(X.T @ X, X.T @ z, found)
    scale = max(1.0, float(np.abs(expected_S).max()), float(np.abs(expected_r).max()))
    np.testing.assert_allclose(S, expected_S, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(r, expected_r, rtol=0, atol=1e-9 * scale)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 3), rows=st.integers(1, 8))
def test_a_pool_over_roots_that_are_the_measurements_answers_as_over_eigendecomposition_roots(
        seed: int, count: int, rows: int) -> None:
    """Measurements over a group's own cells with fewer rows than cells: the pool factored from the
    measurements as roots answers, with the same variances, as one factored from the roots of their
    information's eigendecompositions (as the roots were found before)."""
    rng = np.random.default_rng(seed)
    group = (("a", _partition(rng, 6)), ("b", _partition(rng, 5)))
    cells = int(np.prod([c.max() + 1 for _, c in group]))
    members = [KeptMeasurement(table="t", vector="count", axes=group,
                               strategy=Explicit(rng.normal(size=(min(rows, cells), cells))),
                               y=rng.normal(size=min(rows, cells)), noise_variance=float(rng.uniform(0.5, 2.0)),
                               release=release) for release in range(count)]
    found = meet(group, group)
    lift = np.where(found.of_group < 0, -1, cell_map(group, group))
    X = np.concatenate([m.root()[0] for m in members])
    b = np.asarray(sum(m.root()[0].T @ m.root()[1] for m in members))
    S, r = on_classes(X.T @ X, b, found)
    mine = pool(members, [lifted(on_classes_of_root(X, b, found), found)], lift)
    theirs = pool(members, [lifted((S, r, _eigen_root(S)), found)], lift)
    assert mine is not None and theirs is not None
    assert_pools_agree(mine, theirs, rng.normal(size=(8, cells)))


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 12), zeros=st.integers(0, 3))
def test_the_root_of_a_certainly_full_rank_matrix_is_its_cholesky_factor(seed: int, size: int, zeros: int) -> None:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(size + 2, size))
    S = np.zeros((size + zeros, size + zeros))
    order = rng.permutation(size + zeros)
    on = order[:size]
    S[np.ix_(on, on)] = A.T @ A + np.eye(size)  # well conditioned; the other cells zero rows
    with pytest.MonkeyPatch.context() as patch:
        calls = _counting_eigh(patch)
        root = psd_root(S)
    assert calls == []
    expected = _eigen_root(S)
    assert root.shape == expected.shape
    np.testing.assert_allclose(root.T @ root, S, rtol=0, atol=1e-10 * float(np.abs(S).max()))


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(2, 12), rank=st.integers(1, 11))
def test_the_root_of_a_rank_deficient_matrix_keeps_its_eigendecomposition(seed: int, size: int, rank: int) -> None:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(min(rank, size - 1), size))
    S = A.T @ A
    root = psd_root(S)
    assert root.shape == _eigen_root(S).shape
    np.testing.assert_allclose(root.T @ root, S, rtol=0, atol=1e-10 * max(1.0, float(np.abs(S).max())))


def test_psd_root_decomposes_only_where_the_rank_is_uncertain(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting_eigh(monkeypatch)
    psd_root(np.diag([2.0, 0.0, 3.0]))
    assert calls == []
    psd_root(np.ones((3, 3)))  # rank 1: the eigendecomposition's cutoff decides
    assert calls == [1]
    assert psd_root(np.zeros((0, 0))).shape == (0, 0)
