"""The math of reuse pools (``dpsql.releases.reduce`` and ``dpsql.releases.gls``) against the test's
own dense computations on the base cells:

- measurements over the group's columns (any partitions of them, crossing ones included) give
  exactly the generalized least-squares answer and variance of the full model;
- measurements over more columns than the group are reduced with the extra columns a nuisance:
  the answer is still an unbiased linear function of the noisy values, its reported variance is
  that function's exact variance, never below the full model's GLS variance, and equal to it when
  the measurements share their cells;
- adding a measurement never increases a reported variance.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _helpers import assert_pools_agree
from dpsql.matrix.workloads import Explicit
from dpsql.releases.gls import Pool, information_of, pool
from dpsql.releases.kept import KeptMeasurement
from dpsql.releases.reduce import (
    cell_map,
    contrasts,
    lifted,
    meet,
    on_classes,
    on_classes_of_root,
    reduce,
    refinement,
)

BASE = {"a": 6, "b": 3}  # base cells per column (the last one the outside cell)


def _lift(axes: tuple[tuple[str, np.ndarray], ...]) -> np.ndarray:
    """cell × base cell of (a, b), cells row-major over the axes in their order (the test's own lifting)."""
    shape = [int(cells.max()) + 1 for _, cells in axes]
    matrix = np.zeros((int(np.prod(shape)), BASE["a"] * BASE["b"]))
    for base_a in range(BASE["a"]):
        for base_b in range(BASE["b"]):
            base = {"a": base_a, "b": base_b}
            cell = 0
            for (key, cells), size in zip(axes, shape):
                cell = cell * size + int(cells[base[key]])
            matrix[cell, base_a * BASE["b"] + base_b] = 1.0
    return matrix


def _partition(rng: np.random.Generator, key: str) -> np.ndarray:
    return np.unique(rng.integers(0, 3, BASE[key]), return_inverse=True)[1].astype(np.int64)


def _member(rng: np.random.Generator, axes: tuple[tuple[str, np.ndarray], ...], release: int) -> KeptMeasurement:
    cells = int(np.prod([c.max() + 1 for _, c in axes]))
    rows = cells + int(rng.integers(0, 3))
    return KeptMeasurement(table="t", vector="count", axes=axes, strategy=Explicit(rng.normal(size=(rows, cells))),
                           y=rng.normal(size=rows), noise_variance=float(rng.uniform(0.5, 2.0)), release=release)


def _pool(members: list[list[KeptMeasurement]], group: tuple[tuple[str, np.ndarray], ...]) -> Pool:
    """The pool as ``dpsql.engine.reuse.reuse`` builds it: each list of members (over the same cells)
    summed, reduced onto the target refining the group's columns."""
    target = refinement(group, [ms[0].axes for ms in members], 10**6)
    lift = cell_map(target, group)
    parts = []
    for ms in members:
        found = meet(ms[0].axes, target)
        parts.append(reduce(sum(m.information()[0] for m in ms), sum(m.information()[1] for m in ms), found))
        lift = np.where(found.of_group < 0, -1, lift)
    made = pool([m for ms in members for m in ms], parts, lift)
    assert made is not None
    return made


def _dense(members: list[KeptMeasurement]) -> tuple[np.ndarray, np.ndarray]:
    """(M, b) of the full model on the base cells of (a, b)."""
    information = sum(_lift(m.axes).T @ m.strategy.dense().T @ m.strategy.dense() @ _lift(m.axes) / m.noise_variance
                      for m in members)
    rhs = sum(_lift(m.axes).T @ m.strategy.dense().T @ m.y / m.noise_variance for m in members)
    return np.asarray(information), np.asarray(rhs)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 4))
def test_measurements_over_the_groups_columns_give_the_full_models_gls(seed: int, count: int) -> None:
    """Random partitions of a and b (crossing each other), random column subsets and strategies:
    answers and variances equal q M⁺ b and q M⁺ qᵀ on the base cells."""
    rng = np.random.default_rng(seed)
    group = (("a", _partition(rng, "a")), ("b", _partition(rng, "b")))
    members = []
    for number in range(count):
        keys = [k for k in ("a", "b") if rng.random() < 0.7]
        members.append(_member(rng, tuple((k, _partition(rng, k)) for k in keys), number + 1))
    found = _pool([[m] for m in members], group)
    information, rhs = _dense(members)
    inverse = np.linalg.pinv(information)
    query = rng.normal(size=(3, int(np.prod([c.max() + 1 for _, c in group]))))
    on_base = query @ _lift(group)
    in_span = np.linalg.norm(on_base - on_base @ inverse @ information, axis=1) < 1e-6 * np.linalg.norm(on_base, axis=1)
    np.testing.assert_array_equal(found.projected(query).answerable, in_span)
    answerable = query[in_span]
    read = found.projected(answerable)
    np.testing.assert_allclose(read.values, on_base[in_span] @ inverse @ rhs, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(read.covariances(read),
                               np.einsum("ij,jk,ik->i", on_base[in_span], inverse, on_base[in_span]),
                               rtol=1e-6, atol=1e-8)


def _weights(found_of: Callable[[list[KeptMeasurement]], Pool], members: list[KeptMeasurement],
             query: np.ndarray) -> list[np.ndarray]:
    """The answer as a linear function of each member's noisy values (by unit perturbations)."""
    base = found_of(members).projected(query).values
    weights = []
    for index, member in enumerate(members):
        columns = []
        for row in range(member.y.size):
            y = member.y.copy()
            y[row] += 1.0
            changed = [*members[:index], KeptMeasurement(table=member.table, vector=member.vector, axes=member.axes,
                                                         strategy=member.strategy, y=y,
                                                         noise_variance=member.noise_variance,
                                                         release=member.release), *members[index + 1:]]
            columns.append(found_of(changed).projected(query).values - base)
        weights.append(np.stack(columns, axis=1))
    return weights


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 3), shared=st.booleans())
def test_measurements_over_more_columns_are_unbiased_with_exact_variances(seed: int, count: int,
                                                                            shared: bool) -> None:
    """The group is over a alone; members over (a, b) or b have b as a nuisance. The answer is
    Σ c_i y_i with Σ c_i A_i L_i = q on the base cells (unbiased for every x), its reported
    variance is Σ σ_i² |c_i|² exactly, at least the full model's GLS variance, and equal to it when
    all members share their cells (``shared``: one class, summed before the reduction)."""
    rng = np.random.default_rng(seed)
    group = (("a", _partition(rng, "a")),)
    cells = (("a", _partition(rng, "a")), ("b", _partition(rng, "b")))
    members = [_member(rng, cells if shared or rng.random() < 0.6 else (("b", _partition(rng, "b")),), n + 1)
               for n in range(count)]
    if shared:
        def found_of(ms: list[KeptMeasurement]) -> Pool:
            return _pool([ms], group)
    else:
        def found_of(ms: list[KeptMeasurement]) -> Pool:
            return _pool([[m] for m in ms], group)
    found = found_of(members)
    query = rng.normal(size=(2, int(group[0][1].max()) + 1))
    answerable = query[found.projected(query).answerable]
    if answerable.shape[0] == 0:
        return
    weights = _weights(found_of, members, answerable)
    on_base = answerable @ _lift(group)
    unbiased = sum(c @ m.strategy.dense() @ _lift(m.axes) for c, m in zip(weights, members))
    np.testing.assert_allclose(unbiased, on_base, atol=1e-6 * max(1.0, np.abs(on_base).max()))
    exact = sum(m.noise_variance * np.sum(c**2, axis=1) for c, m in zip(weights, members))
    reported = found.projected(answerable).covariances(found.projected(answerable))
    np.testing.assert_allclose(reported, exact, rtol=1e-6, atol=1e-9)
    information, _ = _dense(members)
    best = np.einsum("ij,jk,ik->i", on_base, np.linalg.pinv(information), on_base)
    assert np.all(reported >= best * (1 - 1e-6) - 1e-9)
    if shared:
        np.testing.assert_allclose(reported, best, rtol=1e-6, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 5))
def test_adding_a_measurement_never_increases_a_variance(seed: int, count: int) -> None:
    """Pools of the first k of a sequence of releases (the target refined oldest first): a query's
    variance never grows with k, and what was answerable stays answerable."""
    rng = np.random.default_rng(seed)
    group = (("a", _partition(rng, "a")),)
    releases = []
    for number in range(count + 1):
        keys = [k for k in ("a", "b") if rng.random() < 0.7] or ["a"]
        releases.append(_member(rng, tuple((k, _partition(rng, k)) for k in keys), number + 1))
    query = rng.normal(size=(3, int(group[0][1].max()) + 1))
    before = None
    for k in range(1, count + 2):
        found = _pool([[m] for m in releases[:k]], group)
        answerable = found.projected(query).answerable
        variances = np.where(answerable, found.projected(query).covariances(found.projected(query)), np.inf)
        if before is not None:
            assert np.all(answerable[before[0]])
            assert np.all(variances <= before[1] * (1 + 1e-6) + 1e-9)
        before = (answerable, variances)


def test_a_measurement_over_the_groups_cells_is_the_matrix_mechanisms_own_answer() -> None:
    """One measurement over exactly the group's cells: x̂ = A⁺ y and Var = σ² w (AᵀA)⁻¹ wᵀ."""
    rng = np.random.default_rng(3)
    group = (("a", np.array([0, 0, 1, 1, 2, 2])),)
    member = KeptMeasurement(table="t", vector="count", axes=group, strategy=Explicit(rng.normal(size=(5, 3))),
                             y=rng.normal(size=5), noise_variance=2.0, release=1)
    found = _pool([[member]], group)
    A = member.strategy.dense()
    w = np.array([[1.0, -1.0, 0.5]])
    assert found.projected(w).values[0] == pytest.approx(float((w @ np.linalg.pinv(A) @ member.y)[0]), rel=1e-9)
    read = found.projected(w)
    assert read.covariances(read)[0] == pytest.approx(float((2.0 * w @ np.linalg.inv(A.T @ A) @ w.T)[0, 0]), rel=1e-9)


@settings(max_examples=80, deadline=None)
@given(classes=st.lists(st.integers(-1, 6), min_size=0, max_size=40))
def test_within_class_contrasts_are_an_orthonormal_basis_of_the_nuisance(classes: list[int]) -> None:
    """``reduce.contrasts``: orthonormal columns, each summing to zero within every class, as many as
    there are cells beyond one per class (free cells: unit vectors), the Helmert pattern column by column."""
    labels = np.asarray(classes, dtype=np.int64)
    N = contrasts(labels).toarray()
    kinds = {c for c in classes if c >= 0}
    assert N.shape == (labels.size, labels.size - len(kinds))
    np.testing.assert_allclose(N.T @ N, np.eye(N.shape[1]), atol=1e-12)
    for c in kinds:
        np.testing.assert_allclose(N[labels == c].sum(axis=0), 0.0, atol=1e-12)
    members = np.flatnonzero(labels == min(kinds)) if kinds else np.zeros(0, dtype=np.int64)
    for j in range(1, members.size):  # the first class's columns: (1, …, 1, −j)/√(j(j+1)) over its first j + 1 cells
        column = N[:, int(np.sum(labels < 0)) + j - 1]
        norm, expected = 1.0 / np.sqrt(j * (j + 1.0)), np.zeros(labels.size)
        expected[members[:j]], expected[members[j]] = norm, -j * norm
        np.testing.assert_array_equal(column, expected)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 20), rank=st.integers(1, 20),
       measured_axes=st.sampled_from([("a",), ("a", "b"), ("b", "a")]), group_axes=st.sampled_from([("a",), ("b",)]))
def test_the_schur_complement_from_a_root_equals_the_dense_one(seed: int, rows: int, rank: int,
                                                             measured_axes: tuple[str, ...],
                                                             group_axes: tuple[str, ...]) -> None:
    """on_classes_of_root(X, Xᵀz) (a thin SVD of X N) is on_classes(XᵀX, Xᵀz) (an eigendecomposition of
    Nᵀ XᵀX N), rank-deficient X included: both keep the directions above the same cutoff."""
    rng = np.random.default_rng(seed)
    measured = tuple((key, _partition(rng, key)) for key in measured_axes)
    group = tuple((key, _partition(rng, key)) for key in group_axes)
    found = meet(measured, group)
    cells = found.of_measured.size
    rank = min(rank, rows, cells)
    X = rng.normal(size=(rows, rank)) @ rng.normal(size=(rank, cells))
    z = rng.normal(size=rows)
    expected_S, expected_r = on_classes(X.T @ X, X.T @ z, found)
    S, r, root = on_classes_of_root(X, X.T @ z, found)
    assert root is not None
    np.testing.assert_allclose(root.T @ root, S, rtol=0, atol=1e-7 * max(1.0, float(np.abs(S).max())))
    # both are exact up to rounding; the dense side decomposes the squared matrix Nᵀ XᵀX N, whose kept
    # spectrum spans κ(X N)², and subtracts from Uᵀ M U: measured over 3,000 seeds at most 1.5·10⁻⁹ of
    # the largest entry (κ(X) ≤ 10² here), so 10⁻⁷ fails only on a real difference
    scale = max(1.0, float(np.abs(expected_S).max()), float(np.abs(expected_r).max()))
    np.testing.assert_allclose(S, expected_S, rtol=0, atol=1e-7 * scale)
    np.testing.assert_allclose(r, expected_r, rtol=0, atol=1e-7 * scale)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 4), rows=st.integers(1, 6))
def test_a_pool_factored_from_its_parts_roots_answers_as_its_eigendecomposition(seed: int, count: int,
                                                                                rows: int) -> None:
    """Parts with roots of few rows (measurements of fewer rows than cells) are factored by the SVD of
    the stacked roots; the pool's answers and variances equal those of the eigendecomposition of the
    summed information (the same parts, roots dropped), for rows in its span."""
    rng = np.random.default_rng(seed)
    group = (("a", _partition(rng, "a")), ("b", _partition(rng, "b")))
    members = []
    for release in range(count):
        axes = tuple((key, _partition(rng, key)) for key in ("a", "b"))
        cells = int(np.prod([c.max() + 1 for _, c in axes]))
        members.append(KeptMeasurement(table="t", vector="count", axes=axes,
                                       strategy=Explicit(rng.normal(size=(min(rows, cells), cells))),
                                       y=rng.normal(size=min(rows, cells)), noise_variance=1.0, release=release))
    target = refinement(group, [m.axes for m in members], 10**6)
    lift = cell_map(target, group)
    parts = []
    for m in members:
        found = meet(m.axes, target)
        X, z = m.root()
        parts.append(lifted(on_classes_of_root(X, X.T @ z, found), found))
        lift = np.where(found.of_group < 0, -1, lift)
    by_roots = pool(members, parts, lift)
    by_eigen = pool(members, [(information_of(part), part[1], None) for part in parts], lift)
    assert by_roots is not None and by_eigen is not None
    assert_pools_agree(by_roots, by_eigen, rng.normal(size=(8, int(lift.max()) + 1)))
