"""ResidualPlanner (dpsql.residual.planner): numeric oracles, dense BLUE references, the
paper's Tables 4 and 5, the secure discrete-Gaussian measurement and input errors."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.linalg as sla

from dpsql import noise
from dpsql.errors import DataError, DomainTooLargeError, PrivacyParameterError, ShapeError
from dpsql.noise import wide as wide_sampler
from dpsql.residual import planner as residual
from dpsql.residual import solver

ADULT = [100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2]
CPS = [100, 50, 7, 4, 2]


def up_to(d: int, k: int) -> list[tuple[int, ...]]:
    return [c for order in range(k + 1) for c in itertools.combinations(range(d), order)]


# ----------------------------------------------------------------------------- dense references
def sub(n: int) -> np.ndarray:
    """Sub_n: column 1 all ones, entry (i, i+1) = −1."""
    return np.hstack([np.ones((n - 1, 1)), -np.eye(n - 1)])


def sub_pinv(n: int) -> np.ndarray:
    """Lemma 1: Sub_n⁺ = (1/n)[1ᵀ; J − nI]."""
    return np.vstack([np.ones((1, n - 1)), np.ones((n - 1, n - 1)) - n * np.eye(n - 1)]) / n


def kron_all(factors: list[np.ndarray]) -> np.ndarray:
    out = np.ones((1, 1))
    for f in factors:
        out = np.kron(out, f)
    return out


def residual_matrix(sizes: list[int], s: tuple[int, ...]) -> np.ndarray:
    return kron_all([sub(n) if i in s else np.ones((1, n)) for i, n in enumerate(sizes)])


def marginal_matrix(sizes: list[int], a: tuple[int, ...]) -> np.ndarray:
    return kron_all([np.eye(n) if i in a else np.ones((1, n)) for i, n in enumerate(sizes)])


def dense_mechanism(
    sizes: list[int], closure: tuple[tuple[int, ...], ...], sigma2: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """B (stacked residuals) and Σ⁻¹ (block diagonal σ_S² ⊗ Sub Subᵀ, inverted)."""
    B = np.vstack([residual_matrix(sizes, s) for s in closure])
    blocks = [np.linalg.inv(v * kron_all([sub(sizes[i]) @ sub(sizes[i]).T for i in s]))
              for s, v in zip(closure, sigma2)]
    return B, sla.block_diag(*blocks)


def exact_tables(sizes: list[int], marginals: list[tuple[int, ...]], rows: int, seed: int) -> tuple[np.ndarray, dict]:
    """A random histogram x over the full (small) domain and its marginal tables."""
    data = np.random.default_rng(seed).integers(0, sizes, size=(rows, len(sizes)))
    x = np.zeros(sizes, dtype=np.int64)
    np.add.at(x, tuple(data.T), 1)
    tables = {a: x.sum(axis=tuple(i for i in range(len(sizes)) if i not in a)) for a in marginals}
    return x, tables


# ----------------------------------------------------------------------------- structural oracles
@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_subtraction_matrix_identities(n: int) -> None:
    S, Sp = sub(n), sub_pinv(n)
    assert np.allclose(S @ np.ones(n), 0.0)
    assert np.allclose(S @ S.T, np.eye(n - 1) + np.ones((n - 1, n - 1)))
    assert np.allclose(np.linalg.inv(S @ S.T), np.eye(n - 1) - np.ones((n - 1, n - 1)) / n)
    assert np.allclose(S @ Sp, np.eye(n - 1))
    assert np.allclose(Sp, np.linalg.pinv(S))


def test_subtraction_pinv_of_four_is_the_digest_matrix() -> None:
    assert np.allclose(sub_pinv(4), np.array([[1, 1, 1], [-3, 1, 1], [1, -3, 1], [1, 1, -3]]) / 4)
    assert np.allclose(sub(3), [[1, -1, 0], [1, 0, -1]])


@pytest.mark.parametrize("n", [2, 3, 5])
def test_axis_transforms_are_sub_and_its_basis(n: int) -> None:
    t = np.random.default_rng(n).normal(size=(3, n, 4))
    assert np.allclose(residual.sub_axis(t, 1), np.einsum("ij,ajb->aib", sub(n), t))
    basis = np.hstack([np.ones((n, 1)) / n, sub_pinv(n)])
    assert np.allclose(basis, np.linalg.inv(np.vstack([np.ones((1, n)), sub(n)])))
    assert np.allclose(residual.basis_axis(t.copy(), 1), np.einsum("ij,ajb->aib", basis, t))
    counts = np.arange(2 * n).reshape(2, n)
    assert residual.sub_axis(counts, 1).dtype == counts.dtype


def test_residual_bases_are_orthogonal_and_span_each_marginal() -> None:
    sizes = [2, 3, 4]
    subsets = up_to(3, 3)
    R = {s: residual_matrix(sizes, s) for s in subsets}
    for s, t in itertools.combinations(subsets, 2):
        assert np.allclose(R[s] @ R[t].T, 0.0)
    assert np.linalg.matrix_rank(np.vstack(list(R.values()))) == 24
    for a in subsets:
        rows = np.vstack([R[s] for s in subsets if set(s) <= set(a)])
        cells = math.prod(sizes[i] for i in a)
        assert rows.shape[0] == cells == np.linalg.matrix_rank(rows)
        assert np.linalg.matrix_rank(np.vstack([rows, marginal_matrix(sizes, a)])) == cells


# ----------------------------------------------------------------------------- against the dense BLUE
SMALL = [2, 3, 4]
SMALL_WORKLOAD = [(0, 1), (1, 2), (0,), ()]


@pytest.mark.parametrize("objective", ["sum_variance", "max_variance"])
def test_privacy_cost_matches_the_dense_cost_matrix(objective: str) -> None:
    sel = residual.select(SMALL, SMALL_WORKLOAD, objective=objective, rho=0.7)  # type: ignore[arg-type]
    B, inverse = dense_mechanism(SMALL, sel.closure, sel.sigma2)
    diagonal = np.diag(B.T @ inverse @ B)
    assert np.allclose(diagonal, diagonal[0], rtol=1e-12)
    assert diagonal[0] == pytest.approx(float(sel.pcost), rel=1e-12)
    assert float(sel.pcost) == pytest.approx(1.4, rel=1e-9)


def test_variances_and_covariances_match_the_dense_blue() -> None:
    sel = residual.select(SMALL, SMALL_WORKLOAD, rho=0.5, weights=[1.0, 2.0, 0.5, 3.0])
    B, inverse = dense_mechanism(SMALL, sel.closure, sel.sigma2)
    profile = np.linalg.pinv(B.T @ inverse @ B)
    for a, b in itertools.product(sel.closure, repeat=2):
        dense = marginal_matrix(SMALL, a) @ profile @ marginal_matrix(SMALL, b).T
        assert np.allclose(sel.covariance(a, b), dense, rtol=1e-9, atol=1e-12)
        if a == b:
            assert np.allclose(np.diag(dense), sel.variance(a), rtol=1e-9)
    for a, v in zip(sel.marginals, sel.variances):
        assert v == pytest.approx(sel.variance(a), rel=1e-12)


def test_reconstruction_is_the_dense_blue_and_consistent() -> None:
    sel = residual.select(SMALL, SMALL_WORKLOAD, rho=0.5)
    _x, tables = exact_tables(SMALL, [(0, 1), (1, 2)], rows=500, seed=1)
    m = residual.measure(sel, tables, rng=noise.SeededRandomSource(3))
    B, inverse = dense_mechanism(SMALL, sel.closure, m.sigma2)
    y = np.concatenate([m.residual(s).ravel() for s in sel.closure])
    x_hat = np.linalg.pinv(B.T @ inverse @ B) @ B.T @ inverse @ y
    answers = residual.reconstruct(sel, m, sel.closure)
    for a in sel.closure:
        assert answers[a].shape == tuple(SMALL[i] for i in a)
        assert np.allclose(answers[a].ravel(), marginal_matrix(SMALL, a) @ x_hat, atol=1e-8)
    assert np.allclose(answers[(0, 1)].sum(axis=1), answers[(0,)], atol=1e-9)
    assert np.allclose(answers[(0, 1)].sum(axis=0), answers[(1,)], atol=1e-9)
    assert np.allclose(answers[(1, 2)].sum(axis=1), answers[(1,)], atol=1e-9)
    assert np.allclose(answers[(0,)].sum(), answers[()], atol=1e-9)
    assert answers[()].shape == ()
    assert set(residual.reconstruct(sel, m)) == set(SMALL_WORKLOAD)


def test_variance_of_an_unrequested_subset_matches_the_dense_blue() -> None:
    sel = residual.select([3, 5], [(0, 1)], rho=0.5)
    B, inverse = dense_mechanism([3, 5], sel.closure, sel.sigma2)
    dense = marginal_matrix([3, 5], (1,)) @ np.linalg.pinv(B.T @ inverse @ B) @ marginal_matrix([3, 5], (1,)).T
    assert sel.variance((1,)) == pytest.approx(dense[0, 0], rel=1e-9)


# ----------------------------------------------------------------------------- closed forms of the digest
def scales(sel: residual.Selection) -> dict[tuple[int, ...], float]:
    return dict(zip(sel.closure, sel.sigma2.tolist()))


def test_single_marginal_costs_what_measuring_its_table_costs() -> None:
    sel = residual.select([2, 3], [(0, 1)], rho=0.5)
    expected = {(): 6.0, (0,): 3.0, (1,): 2.0, (0, 1): 1.0}
    for key, value in scales(sel).items():
        assert value == pytest.approx(expected[key], rel=1e-9)
    assert sel.variance((0, 1)) == pytest.approx(1.0, rel=1e-9)
    cps = residual.select(CPS, [(0, 1, 2, 3, 4)], rho=0.5, objective="max_variance")
    assert cps.max_variance() == pytest.approx(1.0, rel=1e-8)


def test_all_one_way_marginals_closed_form() -> None:
    sel = residual.select([2, 3], [(0,), (1,)], rho=0.5)
    assert sel.bound == pytest.approx(7.698839, abs=1e-6)
    assert sel.rmse() == pytest.approx(1.240874, abs=1e-6)
    n = np.array(CPS, dtype=float)
    T = (np.sqrt(np.sum(1 / n)) + np.sum((n - 1) / np.sqrt(n))) ** 2
    cps = residual.select(CPS, [(i,) for i in range(5)], rho=0.5)
    assert cps.bound == pytest.approx(T, rel=1e-9)
    assert cps.rmse() == pytest.approx(1.743945, abs=1e-6)


def test_appendix_a_toy_example() -> None:
    workload = [(0,), (0, 1), (1, 2)]
    sel = residual.select([2, 2, 3], workload, rho=0.5)
    assert sel.bound == pytest.approx(21.177878, abs=1e-6)
    expected = {(): 4.806573, (0,): 2.656933, (1,): 3.564650, (2,): 3.757471, (0, 1): 2.300971, (1, 2): 1.878735}
    assert scales(sel) == pytest.approx(expected, abs=1e-6)
    assert sel.variances == pytest.approx([2.530110, 1.653351, 1.584042], abs=1e-6)
    best = residual.select([2, 2, 3], workload, rho=0.5, objective="max_variance")
    assert best.max_variance() == pytest.approx(1.894212, abs=1e-6)


def test_binary_cube_and_scaling() -> None:
    sel = residual.select([2, 2, 2], up_to(3, 3), rho=0.5)
    assert sel.bound == pytest.approx(51.980762, abs=1e-6)
    assert sel.rmse() == pytest.approx(1.387521, abs=1e-6)
    five = residual.select([2, 2, 2], up_to(3, 3), rho=2.5)
    assert five.variances == pytest.approx(sel.variances / 5, rel=1e-8)


@pytest.mark.parametrize(("sizes", "rmse", "maxvar"), [
    ([10, 10], 1.379084, 3.305785),
    ([10] * 10, 9.348111, 105.031),
    ([2] * 5, 1.890155, 4.148148),
])
def test_synthetic_tables_2_19_20(sizes: list[int], rmse: float, maxvar: float) -> None:
    workload = up_to(len(sizes), 3)
    assert residual.select(sizes, workload).rmse() == pytest.approx(rmse, abs=1e-6)
    assert residual.select(sizes, workload, objective="max_variance").max_variance() == pytest.approx(maxvar, abs=1e-3)


def test_sum_of_variances_equals_the_svd_bound() -> None:
    workload = [(0, 1), (1, 2), (0, 2), (0,), ()]
    W = np.vstack([marginal_matrix(SMALL, a) for a in workload])
    svd_bound = np.linalg.svd(W, compute_uv=False).sum() ** 2 / W.shape[1]
    sel = residual.select(SMALL, workload, rho=0.5)
    assert sel.bound == pytest.approx(svd_bound, rel=1e-10)
    assert sel.objective_value() == pytest.approx(svd_bound, rel=1e-8)


# ----------------------------------------------------------------------------- the paper's tables
ADULT_WORKLOADS = {
    "1-way": list(itertools.combinations(range(14), 1)),
    "2-way": list(itertools.combinations(range(14), 2)),
    "3-way": list(itertools.combinations(range(14), 3)),
    "<=3-way": up_to(14, 3),
}


@pytest.mark.parametrize(("name", "paper"),
                         [("1-way", 3.047), ("2-way", 6.359), ("3-way", 10.515), ("<=3-way", 10.665)])
def test_table_4_adult_rmse(name: str, paper: float) -> None:
    sel = residual.select(ADULT, ADULT_WORKLOADS[name], objective="sum_variance", rho=0.5)
    assert sel.rmse() == pytest.approx(paper, abs=1e-3)


@pytest.mark.parametrize(("name", "paper"),
                         [("1-way", 12.047), ("2-way", 67.802), ("3-way", 236.843), ("<=3-way", 253.605)])
def test_table_5_adult_max_variance(name: str, paper: float) -> None:
    sel = residual.select(ADULT, ADULT_WORKLOADS[name], objective="max_variance", rho=0.5)
    assert sel.max_variance() == pytest.approx(paper, abs=1e-3)
    assert sel.objective_value() / sel.bound - 1 < 1e-8


def test_fifty_attributes_collapse_to_four_classes() -> None:
    """Table 2 at d = 50 (benchmarks/marginals.py runs d = 100: 303.216, 91960.917)."""
    workload = up_to(50, 3)
    sel = residual.select([10] * 50, workload)
    assert len(sel.closure) == 20_876 and int(sel.classes.max()) + 1 == 4
    assert sel.rmse() == pytest.approx(107.258, abs=1e-3)
    best = residual.select([10] * 50, workload, objective="max_variance")
    assert best.max_variance() == pytest.approx(11597.037, abs=1e-3)
    assert int(best.classes.max()) + 1 == 4


# ----------------------------------------------------------------------------- solver paths and weights
def test_conjugate_gradient_path_matches_dense(monkeypatch: pytest.MonkeyPatch) -> None:
    dense = residual.select(ADULT, ADULT_WORKLOADS["2-way"], objective="max_variance")
    monkeypatch.setattr(solver, "DENSE_KKT_LIMIT", 0)
    sparse = residual.select(ADULT, ADULT_WORKLOADS["2-way"], objective="max_variance")
    assert sparse.max_variance() == pytest.approx(dense.max_variance(), rel=1e-8)


def test_singular_newton_system_keeps_a_certified_feasible_point(monkeypatch: pytest.MonkeyPatch) -> None:
    kkt_solver = solver.kkt_solver
    calls = iter(range(100))

    def failing(*args):  # type: ignore[no-untyped-def]
        if next(calls) >= 3:
            raise np.linalg.LinAlgError("singular")
        return kkt_solver(*args)

    monkeypatch.setattr(solver, "kkt_solver", failing)
    sel = residual.select(ADULT, ADULT_WORKLOADS["1-way"], objective="max_variance")
    assert sel.rho <= Fraction(1, 2)
    assert 0 < sel.bound <= sel.objective_value()


@pytest.mark.parametrize("objective", ["sum_variance", "max_variance"])
def test_weights_buy_accuracy_and_stay_optimal(objective: str) -> None:
    workload = [(0, 1), (1, 2), (2, 3)]
    plain = residual.select([3, 4, 5, 6], workload, objective=objective)  # type: ignore[arg-type]
    weighted = residual.select([3, 4, 5, 6], workload, objective=objective, weights=[10.0, 1.0, 1.0])  # type: ignore[arg-type]
    assert weighted.variances[0] < plain.variances[0]
    assert weighted.objective_value() == pytest.approx(weighted.bound, rel=1e-8)
    if objective == "max_variance":
        weighted_values = np.array(weighted.weights) * weighted.variances
        assert weighted_values.max() == pytest.approx(weighted.objective_value(), rel=1e-12)


def test_max_variance_is_no_worse_than_the_rmse_optimum() -> None:
    rmse_optimum = residual.select(ADULT, ADULT_WORKLOADS["2-way"])
    best = residual.select(ADULT, ADULT_WORKLOADS["2-way"], objective="max_variance")
    assert best.max_variance() <= rmse_optimum.max_variance()
    assert rmse_optimum.rmse() <= best.rmse()


# ----------------------------------------------------------------------------- discrete Gaussian
def test_discrete_gaussian_example_3() -> None:
    gamma2, rho = residual.gaussian_parameters([4], Fraction(4, 9))
    assert (gamma2, rho) == (Fraction(64, 9), Fraction(27, 32))
    Y = 4 * sub_pinv(4)
    Xi = Y @ sub(4)
    assert np.allclose(Xi, 4 * np.eye(4) - np.ones((4, 4)))
    assert np.allclose((Xi**2).sum(axis=0), 12)
    assert Fraction(12) / (2 * gamma2) == Fraction(27, 32)
    continuous_pcost = Fraction(3, 4) / Fraction(4, 9)
    assert continuous_pcost / 2 == Fraction(27, 32)


def test_algorithm_3_is_two_way_post_processing() -> None:
    sizes = [3, 5]
    sigma2 = Fraction(7, 3)
    gamma2, rho = residual.gaussian_parameters(sizes, sigma2)
    Xi = kron_all([n * np.eye(n) - np.ones((n, n)) for n in sizes])
    Y_pinv = kron_all([sub(n) / n for n in sizes])
    assert np.allclose(Y_pinv @ Xi, kron_all([sub(n) for n in sizes]))
    assert np.allclose(float(gamma2) * Y_pinv @ Y_pinv.T, float(sigma2) * kron_all([sub(n) @ sub(n).T for n in sizes]))
    assert np.allclose((Xi**2).sum(axis=0), math.prod(n * (n - 1) for n in sizes))
    assert rho == Fraction(math.prod(n * (n - 1) for n in sizes)) / (2 * gamma2)
    assert rho == Fraction(math.prod(n - 1 for n in sizes), math.prod(sizes)) / (2 * sigma2)


def test_selection_rho_is_the_exact_cost_of_its_rational_scales() -> None:
    sel = residual.select(ADULT, ADULT_WORKLOADS["2-way"], rho=Fraction(1, 3))
    classes, first, count = np.unique(sel.classes, return_index=True, return_counts=True)
    exact = Fraction(0)
    for k, s, members in zip(classes.tolist(), first.tolist(), count.tolist()):
        shape = [ADULT[i] for i in sel.closure[s]]
        gamma2, rho = residual.gaussian_parameters(shape, sel.class_sigma2[k])
        assert gamma2.numerator < 2**56  # the vectorised exact sampler handles it
        exact += members * rho
    assert exact <= sel.rho <= Fraction(1, 3)
    assert sel.rho - exact <= Fraction(len(classes), 2**96)
    assert float(sel.rho) == pytest.approx(1 / 3, rel=1e-9)
    assert np.allclose(sel.sigma2, [float(sel.class_sigma2[k]) for k in sel.classes])


def mahalanobis_residuals(sizes: list[int], m: residual.Measurements, x: np.ndarray) -> tuple[float, int]:
    """Σ_S eᵀ(σ_S² ⊗ Sub Subᵀ)⁻¹e over the closure, e = ω_S − R_S x; and its degrees of freedom."""
    total, dof = 0.0, 0
    for s, variance in zip(m.selection.closure, m.sigma2):
        truth = x.sum(axis=tuple(i for i in range(len(sizes)) if i not in s))
        for axis in range(len(s)):
            truth = residual.sub_axis(truth, axis)
        error = m.residual(s) - truth
        whitened = error.copy()
        for axis in range(len(s)):  # (Sub Subᵀ)⁻¹ = I − J/n along each axis
            whitened = whitened - whitened.sum(axis=axis, keepdims=True) / sizes[s[axis]]
        total += float(np.sum(error * whitened)) / variance
        dof += error.size
    return total, dof


@pytest.mark.parametrize(("sizes", "workload", "table"), [
    ([4, 5, 6], [(0, 1, 2)], (0, 1, 2)),
    ([3, 4, 3, 4], list(itertools.combinations(range(4), 2)) + [(0, 1, 2)], (0, 1, 2)),  # classes span (3, 4), (4, 3)
])
def test_measurement_is_unbiased_with_the_predicted_variance(
    sizes: list[int], workload: list[tuple[int, ...]], table: tuple[int, ...], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chi-square checks over 8 seeded releases: all residual errors, and one whole table."""
    sel = residual.select(sizes, workload, rho=2.0)
    x, tables = exact_tables(sizes, workload, rows=3000, seed=5)
    draws = []
    sampler = noise.discrete_gaussian
    monkeypatch.setattr(wide_sampler, "discrete_gaussian", lambda g, n, rng: draws.append(n) or sampler(g, n, rng=rng))
    residual_stat = residual_dof = table_stat = table_dof = 0.0
    errors = []
    for seed in range(8):
        m = residual.measure(sel, tables, rng=noise.SeededRandomSource(seed))
        stat, dof = mahalanobis_residuals(sizes, m, x)
        residual_stat, residual_dof = residual_stat + stat, residual_dof + dof
        error = (residual.reconstruct(sel, m)[table] - tables[table]).ravel()
        table_stat += float(error @ np.linalg.solve(m.covariance(table, table), error))
        table_dof += error.size
        errors.append(error / math.sqrt(m.variance(table)))
    for stat, dof in [(residual_stat, residual_dof), (table_stat, table_dof)]:
        assert abs(stat - dof) <= 5 * math.sqrt(2 * dof), (stat, dof)
    assert abs(np.mean(errors)) <= 5 / math.sqrt(len(errors))  # cells correlate: a loose bound on the bias
    assert sum(draws) == 8 * sum(math.prod(sizes[i] for i in s) for s in sel.closure)  # Π nᵢ per set, no more
    assert m.variance(table) <= sel.variance(table)  # discrete noise has variance below γ²
    assert m.rho == sel.rho


def test_measure_sums_smaller_tables_from_a_superset() -> None:
    sizes = [3, 4, 2]
    workload = [(0, 1), (1, 2), (0,)]
    sel = residual.select(sizes, workload, rho=50.0)
    x, tables = exact_tables(sizes, [(0, 1), (1, 2)], rows=400, seed=2)
    given = {a: t.astype(np.int32) for a, t in tables.items()}
    answers = residual.reconstruct(sel, residual.measure(sel, given, rng=noise.SeededRandomSource(0)))
    truth = x.sum(axis=(1, 2))
    assert np.all(np.abs(answers[(0,)] - truth) < 8 * math.sqrt(sel.variance((0,))))


def test_measure_defaults_to_system_randomness() -> None:
    sel = residual.select([2, 3], [(0, 1)], rho=1.0)
    m = residual.measure(sel, {(0, 1): np.array([[1, 2, 3], [4, 5, 6]])})
    assert residual.reconstruct(sel, m)[(0, 1)].shape == (2, 3)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"marginals": []}, ShapeError, "non-empty"),
    ({"marginals": "01"}, ShapeError, "non-empty"),
    ({"marginals": [3]}, ShapeError, "tuple of attribute indices"),
    ({"marginals": [(0, 5)]}, ShapeError, "names attribute 5"),
    ({"marginals": [(-1,)]}, ShapeError, "names attribute -1"),
    ({"marginals": [(1, 0)]}, ShapeError, "increasing order"),
    ({"marginals": [(0, 0)]}, ShapeError, "distinct attributes"),
    ({"marginals": [(0.5,)]}, ShapeError, "integer attribute indices"),
    ({"marginals": [(0,), (0,)]}, ShapeError, "listed twice"),
    ({"domains": [3, 0, 4]}, ShapeError, "attribute 1 has size 0"),
    ({"domains": [3, -2, 4]}, ShapeError, "attribute 1 has size -2"),
    ({"domains": [3, 1, 4]}, ShapeError, "drop it"),
    ({"domains": [3, 2.5, 4]}, ShapeError, "integer >= 2"),
    ({"rho": 0}, PrivacyParameterError, "rho must be a finite number > 0"),
    ({"rho": -1.0}, PrivacyParameterError, "rho must be"),
    ({"rho": float("nan")}, PrivacyParameterError, "rho must be"),
    ({"rho": float("inf")}, PrivacyParameterError, "rho must be"),
    ({"rho": True}, PrivacyParameterError, "rho must be"),
    ({"objective": "rmse"}, ValueError, "objective must be one of sum_variance, max_variance"),
    ({"weights": [1.0]}, ShapeError, "one value per marginal"),
    ({"weights": [1.0, 0.0]}, ShapeError, "finite number > 0"),
    ({"weights": [1.0, float("nan")]}, ShapeError, "finite number > 0"),
])
def test_select_rejects_bad_input(kwargs: dict, error: type[Exception], message: str) -> None:
    arguments = {"domains": [3, 4, 5], "marginals": [(0, 1), (2,)]} | kwargs
    with pytest.raises(error, match=message):
        residual.select(**arguments)


def test_select_refuses_oversized_closures() -> None:
    with pytest.raises(DomainTooLargeError, match="MAX_SUBSET_PAIRS"):
        residual.select([2] * 26, [tuple(range(26))])
    with pytest.raises(DomainTooLargeError, match="MAX_MARGINAL_CELLS"):
        residual.select([1000] * 7, [tuple(range(7))])


@pytest.fixture(scope="module")
def small() -> tuple[residual.Selection, dict]:
    sel = residual.select([2, 3, 4], [(0, 1), (1, 2)], rho=1.0)
    return sel, exact_tables([2, 3, 4], [(0, 1), (1, 2)], rows=100, seed=0)[1]


@pytest.mark.parametrize(("tables", "error", "message"), [
    ({(0, 1): np.ones((2, 3), dtype=int)}, ShapeError, r"no table covers \(1, 2\)"),
    ({(0, 1): np.ones((3, 2), dtype=int), (1, 2): np.ones((3, 4), dtype=int)}, ShapeError, r"shape \(2, 3\)"),
    ({(0, 1): np.full((2, 3), 0.5), (1, 2): np.ones((3, 4), dtype=int)}, DataError, "integer counts"),
    ({(0, 1): np.full((2, 3), "a"), (1, 2): np.ones((3, 4), dtype=int)}, DataError, "integer counts"),
    ({(0, 2): np.ones((2, 4), dtype=int)}, ShapeError, r"table \(0, 2\) is not one of the selected marginals"),
])
def test_measure_rejects_bad_tables(
    small: tuple[residual.Selection, dict], tables: dict, error: type[Exception], message: str,
) -> None:
    with pytest.raises(error, match=message):
        residual.measure(small[0], tables, rng=noise.SeededRandomSource(0))


def test_measure_accepts_integral_floats(small: tuple[residual.Selection, dict]) -> None:
    sel, tables = small
    floats = {a: t.astype(float) for a, t in tables.items()}
    assert residual.measure(sel, floats, rng=noise.SeededRandomSource(0)).rho == sel.rho


def test_reconstruct_and_covariance_errors(small: tuple[residual.Selection, dict],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    sel, tables = small
    m = residual.measure(sel, tables, rng=noise.SeededRandomSource(0))
    other = residual.select([2, 3, 4], [(0, 1), (1, 2)], rho=1.0)
    with pytest.raises(ShapeError, match="different selection"):
        residual.reconstruct(other, m)
    with pytest.raises(ShapeError, match=r"\(0, 2\) is not one of the selected marginals"):
        residual.reconstruct(sel, m, [(0, 2)])
    with pytest.raises(ShapeError, match="not one of the selected"):
        sel.variance((0, 1, 2))
    monkeypatch.setattr(residual, "MAX_COVARIANCE_ENTRIES", 10)
    with pytest.raises(DomainTooLargeError, match="variance"):
        m.covariance((0, 1), (1, 2))


def test_the_total_alone_is_a_valid_workload() -> None:
    """select(..., [()]) measures only the grand total: one query whose variance is its noise."""
    selection = residual.select([3, 4], [()], rho=0.5)
    assert selection.closure == ((),) or list(selection.closure) == [()]
    assert selection.rmse() ** 2 == pytest.approx(selection.max_variance())
    assert selection.max_variance() == pytest.approx(1.0, rel=1e-6)  # Δ₂ = 1 at ρ = 1/2: σ² = 1
