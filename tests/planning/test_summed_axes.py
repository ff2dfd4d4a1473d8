"""Planning on the attributes a workload reads beyond their totals (dpsql.planning.summed_axes): the lift is A″P,
its error and sensitivity are the reduced plan's, and no candidate gets worse."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql import Budget
from dpsql.matrix import workloads as wl
from dpsql.matrix.partitions import partition_form
from dpsql.noise import SeededRandomSource
from dpsql.planning import accuracy, planner, summed_axes
from dpsql.planning.summed_axes import Reduction, reduction

NOISES = ("gaussian", "laplace")


def marginal_map(full: tuple[int, ...], summed: set[int]) -> np.ndarray:
    """P = ⊗ᵢ (1ᵀ on summed attributes, I elsewhere), written out."""
    P = np.ones((1, 1))
    for i, n in enumerate(full):
        P = np.kron(P, np.ones((1, n)) if i in summed else np.eye(n))
    return P


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], set[int]]:
    """Attribute sizes (2–3 attributes, 1–4 cells, at least two above 1) and a non-empty set of summed ones
    (cells > 1), not all of those."""
    full = tuple(draw(st.lists(st.integers(1, 4), min_size=2, max_size=3)))
    wide = [i for i, n in enumerate(full) if n > 1]
    assume(len(wide) >= 2)
    summed = set(draw(st.lists(st.sampled_from(wide), min_size=1, max_size=len(wide) - 1, unique=True)))
    return full, summed


def _factor(rng: np.random.Generator, rows: int, n: int) -> wl.Explicit:
    return wl.Explicit(rng.integers(0, 4, size=(rows, n)).astype(np.float64) + np.eye(rows, n))


@given(layouts(), st.integers(0, 2**16), st.sampled_from(["kron", "dense", "identity", "stack"]))
@settings(max_examples=60, deadline=None)
def test_the_lift_is_the_reduced_strategy_times_the_marginal_map(layout: tuple[tuple[int, ...], set[int]], seed: int,
                                                                  kind: str) -> None:
    full, summed = layout
    sizes = tuple(1 if i in summed else n for i, n in enumerate(full))
    reduced = Reduction(workload=wl.Identity(int(np.prod(sizes))), sizes=sizes, full=full)
    rng = np.random.default_rng(seed)
    cells = int(np.prod(sizes))
    if kind == "kron":
        A: wl.Workload = wl.Kron([_factor(rng, n + 1, n) if n > 1 else wl.Identity(1) for n in sizes])
    elif kind == "dense":
        A = _factor(rng, cells + 2, cells)
    elif kind == "identity":
        A = wl.Identity(cells)
    else:
        A = wl.VStack([wl.Weighted(3.0, wl.Kron([_factor(rng, n, n) for n in sizes])), _factor(rng, 2, cells)])
    lifted = reduced.lift(A)
    assert lifted is not None
    np.testing.assert_array_equal(lifted.dense(), A.dense() @ marginal_map(full, summed))


def test_a_factor_spanning_a_summed_attribute_between_others_is_written_out_within_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    full, summed = (3, 5, 2), {1}
    reduced = Reduction(workload=wl.Identity(6), sizes=(3, 1, 2), full=full)
    A = wl.Explicit(np.arange(24, dtype=np.float64).reshape(4, 6))
    lifted = reduced.lift(A)
    assert isinstance(lifted, wl.Explicit)
    np.testing.assert_array_equal(lifted.dense(), A.dense() @ marginal_map(full, summed))
    monkeypatch.setattr(summed_axes, "DENSE_LIFT_ENTRIES", 4 * 30 - 1)
    assert reduced.lift(A) is None  # then the workload is planned over all its cells


def union(rng: np.random.Generator, full: tuple[int, ...], summed: set[int], terms: int) -> wl.Workload:
    """A weighted union of Kronecker products reading the summed attributes only through (scaled) totals."""
    blocks: list[wl.Workload] = []
    for _ in range(terms):
        factors: list[wl.Workload] = []
        for i, n in enumerate(full):
            rows = int(rng.integers(1, 3))
            if i in summed:
                factors.append(wl.Explicit(rng.integers(1, 3, size=(rows, 1)).astype(np.float64) @ np.ones((1, n))))
            else:  # a first row reading one cell: not constant
                factors.append(wl.Explicit(np.vstack([np.eye(1, n), rng.integers(0, 3, size=(rows - 1, n))])))
        blocks.append(wl.Weighted(float(rng.integers(1, 4)), wl.Kron(factors)))
    return wl.VStack(blocks)


@given(layouts(), st.integers(0, 2**16), st.sampled_from(NOISES), st.booleans())
@settings(max_examples=25, deadline=None)
def test_the_reduced_plan_scores_the_lifted_strategy_exactly(layout: tuple[tuple[int, ...], set[int]], seed: int,
                                                             noise: str, optimize: bool) -> None:
    """The plan's score of its lifted strategy is that strategy's exact expected error on the whole workload,
    which it supports; and planning over all cells (no reduction) finds no standard candidate better."""
    full, summed = layout
    W = union(np.random.default_rng(seed), full, summed, 3)
    assert reduction(W, full) is not None
    assume(partition_form(W) is None)  # a partition is planned in closed form first
    found = planner.plan(W, noise=noise, sizes=full, optimize=optimize)  # type: ignore[arg-type]
    assert any("only through totals" in note for note in found.notes)
    accuracy.check_support(W, found.strategy)
    assert accuracy.expected_error(W, found.strategy, noise=noise) == pytest.approx(  # type: ignore[arg-type]
        found.expected_error, rel=1e-9, abs=1e-12)


@given(layouts(), st.integers(0, 2**16), st.sampled_from(NOISES))
@settings(max_examples=25, deadline=None)
def test_no_standard_candidate_is_worse_than_over_all_cells(layout: tuple[tuple[int, ...], set[int]], seed: int,
                                                            noise: str) -> None:
    """Each standard candidate of the reduced workload, lifted, errs no more than the same candidate over all
    cells (a summed attribute's factor there is at best its total)."""
    full, summed = layout
    W = union(np.random.default_rng(seed), full, summed, 2)
    found = reduction(W, full)
    assert found is not None
    ordered = [True] * len(full)
    every = planner.candidates(full, ordered)
    for name, reduced in planner.candidates(found.sizes, ordered).items():
        A = every[name]  # the reduced candidates are named among the full ones (fewer ordered attributes)
        lifted = found.lift(reduced)
        assert lifted is not None
        assert accuracy.expected_error(W, lifted, noise=noise) <= \
            accuracy.expected_error(W, A, noise=noise) * (1 + 1e-9) + 1e-12  # type: ignore[arg-type]


def test_workloads_without_a_summed_attribute_are_planned_as_they_are() -> None:
    rng = np.random.default_rng(3)
    W = union(rng, (3, 4), set(), 2)
    assert reduction(W, (3, 4)) is None
    assert reduction(wl.Explicit(np.ones((2, 12))), (3, 4)) is None  # not written as Kronecker products
    every = union(rng, (3, 4), {0, 1}, 1)
    assert reduction(every, (3, 4)) is None  # every attribute summed: a partition, planned in closed form
    found = planner.plan(W, noise="laplace", sizes=(3, 4), optimize=False)
    assert not any("only through totals" in note for note in found.notes)


# ====================================================================== end to end
SCHEMA = {"tables": {"people": {"columns": {
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "region": {"type": "categorical", "values": [f"r{i}" for i in range(12)]},
    "income": {"type": "numeric", "lower": 0, "upper": 1000},
}}}}
BATCH = ("SELECT sex, COUNT(*) AS n, SUM(income) AS s FROM people GROUP BY sex; SELECT SUM(income) AS s FROM people; "
         "SELECT region, COUNT(*) AS n FROM people WHERE sex = 'F' GROUP BY region")


@pytest.fixture(scope="module")
def data() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.execute("SELECT setseed(0.5)")
    connection.execute("""CREATE TABLE people AS SELECT CASE WHEN random() < 0.4 THEN 'F' ELSE 'M' END AS sex,
        'r' || CAST(CAST(floor(12 * random()) AS INTEGER) AS VARCHAR) AS region,
        CAST(floor(1000 * random()) AS DOUBLE) AS income FROM range(3000)""")
    return connection


def _exact(data: duckdb.DuckDBPyConnection) -> list[dict[object, float]]:
    """DuckDB's answers to BATCH's statements, keyed by group (None: the one row of an ungrouped statement)."""
    return [dict(data.execute("SELECT sex, SUM(income) FROM people GROUP BY sex").fetchall()),
            {None: data.execute("SELECT SUM(income) FROM people").fetchone()[0]},  # type: ignore[index]
            dict(data.execute("SELECT region, COUNT(*) FROM people WHERE sex = 'F' GROUP BY region").fetchall())]


def _scores(tables: list[dict[str, list[object]]], exact: list[dict[object, float]]) -> list[float]:
    """(answer − exact) / stddev of the sums by sex, the total sum and the counts by region."""
    keys = [tables[0]["sex"], [None], tables[2]["region"]]
    columns = [("s", 0), ("s", 1), ("n", 2)]
    return [(float(v) - exact[t][k]) / float(e)  # type: ignore[arg-type]
            for (name, t) in columns for k, v, e in zip(keys[t], tables[t][name], tables[t][f"{name}_stddev"])
            if k in exact[t]]


def test_a_sum_read_by_sex_in_a_group_over_sex_and_region_is_planned_on_sex(data: duckdb.DuckDBPyConnection) -> None:
    with dpsql.connect(data, schema=SCHEMA, budget=Budget(epsilon=1e4), rng=SeededRandomSource(1)) as connection:
        cursor = connection.cursor()
        plan = cursor.explain(BATCH, epsilon=1e3)
        tables = [t.to_pydict() for t in cursor.execute(BATCH, epsilon=1e3).fetch_arrow_tables()]
    assert "region(13)" in plan and "the queries read region (13 cells) only through totals" in plan
    scores = _scores(tables, _exact(data))
    assert len(scores) == 2 + 1 + 12 and max(map(abs, scores)) < 6


@pytest.mark.slow
def test_sums_planned_on_the_unsummed_attributes_are_calibrated_at_epsilon_1(data: duckdb.DuckDBPyConnection) -> None:
    """z = (answer − exact) / reported stddev of the sums and counts over 200 seeded releases: mean 0, variance 1
    (4 standard errors of each; Laplace-like noise: Var(z²) ≤ 5)."""
    exact, scores = _exact(data), []
    for seed in range(200):
        with dpsql.connect(data, schema=SCHEMA, budget=Budget(epsilon=1.0), rng=SeededRandomSource(seed)) as con:
            scores += _scores([t.to_pydict() for t in con.cursor().execute(BATCH, epsilon=1.0).fetch_arrow_tables()],
                              exact)
    z = np.array(scores)
    assert abs(z.mean()) < 4 / math.sqrt(z.size)
    assert abs(z.var() - 1) < 4 * math.sqrt(5 / z.size)


@given(st.integers(0, 2**16), st.integers(2, 5))
@settings(max_examples=40, deadline=None)
def test_sparse_factors_are_read_as_their_dense_entries(seed: int, n: int) -> None:
    """A factor is read as constant-row from its stored entries alone: sparse and dense forms of one workload
    reduce alike (empty rows, full rows of one value, and rows that differ in one entry)."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 3, size=(3, 1)) * np.ones((3, n))
    if rng.random() < 0.5:
        rows[int(rng.integers(3)), int(rng.integers(n))] += 1
    other = np.vstack([np.eye(1, 3), rng.integers(0, 2, size=(1, 3))])
    dense = wl.Kron([wl.Explicit(other), wl.Explicit(rows)])
    sparse = wl.Kron([wl.Explicit(other), wl.Explicit(sp.csr_array(rows))])
    found, again = reduction(dense, (3, n)), reduction(sparse, (3, n))
    assert (found is None) == (again is None) == (not np.all(rows == rows[:, :1]))
    if found is not None and again is not None:
        np.testing.assert_array_equal(found.workload.dense(), again.workload.dense())
