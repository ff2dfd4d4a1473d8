"""SUMs measured with per-cell contribution bounds (issue 15, item 1).

When the summed column is an axis of its statement group, a row in cell j moves that cell's sum
by at most b_j ≤ B; the mechanism's sensitivity is k·max_j b_j‖a_j‖ and the engine plans on
y = x/b (``dpsql.planning.mechanism.cell_bounded_strategy``, ``dpsql.engine.plan.vector_plans.cell_bounds``).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_calibration import assert_calibrated, releases

import dpsql
from dpsql import engine
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.engine.plan import thresholds
from dpsql.engine.plan.group_route import final_answering
from dpsql.engine.plan.vector_plans import cell_bounds
from dpsql.errors import PrivacyParameterError
from dpsql.matrix.workloads import Explicit, Kron, scale_columns
from dpsql.noise import SeededRandomSource
from dpsql.planning import mechanism
from dpsql.sql.compile import compile_batch
from dpsql.sql.parse import parse_batch

# ============================================================================== mechanism: exact sensitivity


def _delta(calibration: mechanism.Calibration) -> Fraction:
    """Δ₁ (Laplace: ε = Δ₁/t) or Δ₂² (Gaussian: ρ = Δ₂²/(2σ²)) recovered exactly from a calibration."""
    return calibration.spent * calibration.scale * (1 if calibration.noise == "laplace" else 2)


@st.composite
def _bounded_problems(draw: st.DrawFn) -> tuple[np.ndarray, list[int], int, int]:
    """(integer strategy p × n, per-cell bounds b, contribution k, norm power p)."""
    n = draw(st.integers(1, 5))
    rows = draw(st.integers(1, 5))
    entries = draw(st.lists(st.integers(-4, 4), min_size=rows * n, max_size=rows * n))
    matrix = np.asarray(entries, dtype=np.float64).reshape(rows, n)
    matrix[0, :] += (matrix == 0).all(axis=0)  # every column measured (a zero column has nothing to protect)
    bounds = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    return matrix, bounds, draw(st.integers(1, 3)), draw(st.sampled_from([1, 2]))


@settings(max_examples=150, deadline=None)
@given(_bounded_problems(), st.data())
def test_cell_bounded_sensitivity_bounds_every_neighbour_and_is_attained(
        problem: tuple[np.ndarray, list[int], int, int], data: st.DataObject) -> None:
    """For a privacy unit of k rows, each in some cell j moving x_j by at most b_j, ‖A(x − x′)‖_p
    never exceeds the calibrated sensitivity, and one row of b_j in the worst cell reaches it."""
    matrix, bounds, k, p = problem
    budget = {"epsilon": 1} if p == 1 else {"rho": Fraction(1, 2)}
    calibration = mechanism.calibrate(Explicit(matrix), max_contribution=k, cell_bounds=[bounds], **budget)
    delta = _delta(calibration)
    n = matrix.shape[1]
    change = np.zeros(n)
    for _ in range(k):  # the unit's rows: a cell each, and a clamped value within that cell's bound
        j = data.draw(st.integers(0, n - 1))
        change[j] += data.draw(st.integers(-bounds[j], bounds[j]))
    moved = np.abs(matrix @ change).sum() if p == 1 else float(np.sum((matrix @ change) ** 2))
    assert moved <= delta + 1e-9
    norms = np.abs(matrix).sum(axis=0) if p == 1 else np.sqrt(np.sum(matrix**2, axis=0))
    worst = k * max(b * v for b, v in zip(bounds, norms))
    assert math.isclose(float(delta), worst if p == 1 else worst**2, rel_tol=1e-12)


def test_kronecker_cell_bounds_match_the_dense_computation() -> None:
    """Bounds depending on one axis of a Kronecker strategy: Δ₁ and Δ₂² equal the dense
    max_j b_j‖a_j‖ over the product domain (which is never formed)."""
    left = Explicit(np.array([[1, 1, 0], [0, 1, 1], [1, 0, 0]], dtype=float))
    right = Explicit(np.array([[2, 0], [1, 1]], dtype=float))
    bounds = [[1, 1, 1], [3, 7]]
    dense = np.kron(left.dense(), right.dense())
    per_cell = np.kron(np.ones(3), [3.0, 7.0])
    laplace = mechanism.calibrate(Kron([left, right]), epsilon=1, cell_bounds=bounds)
    gaussian = mechanism.calibrate(Kron([left, right]), rho=0.5, cell_bounds=bounds)
    assert _delta(laplace) == max(per_cell * np.abs(dense).sum(axis=0))
    assert _delta(gaussian) == max(per_cell**2 * (dense**2).sum(axis=0))


@pytest.mark.parametrize("bounds", [[[0, 1]], [[1, 2, 3]], [[1.5, 2]], [[True, 2]]])
def test_bad_cell_bounds_are_refused(bounds: list[list[object]]) -> None:
    with pytest.raises(PrivacyParameterError, match="cell_bounds"):
        mechanism.calibrate(Explicit(np.eye(2)), epsilon=1, cell_bounds=bounds)  # type: ignore[arg-type]


def test_cell_bounded_strategy_measures_the_y_strategy_on_integer_data() -> None:
    """Ã·diag(m) is integer, keeps the Kronecker structure, and scaled back by diag(b) it is the
    y-space strategy up to the multipliers' rounding (m_j b_j constant to 2^-(bits+1))."""
    A = Kron([Explicit(np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=float)), Explicit(np.eye(2))])
    bounds = [[3, 10, 250, 999], [1, 1]]
    S = mechanism.cell_bounded_strategy(A, bounds)
    assert isinstance(S, Kron) and S.integral
    back = scale_columns(S, (np.asarray(bounds[0], dtype=float), np.ones(2))).dense()
    ratio = back[A.dense() != 0] / A.dense()[A.dense() != 0]
    assert np.all(np.abs(ratio / ratio.max() - 1) <= 2.0 ** -(mechanism.CELL_BOUND_BITS + 1))
    # its sensitivity under the bounds is that constant times A's
    assert math.isclose(float(_delta(mechanism.calibrate(S, epsilon=1, cell_bounds=bounds))), ratio.max() * 3,
                        rel_tol=1e-3)


# ============================================================================== engine: per-cell bounds
TOP = 500_000
CUTS = [31_250 * i for i in range(1, 16)]
PREFIX_SQL = ";\n".join(f"SELECT SUM(income) AS s FROM t WHERE income < {c}" for c in CUTS)
INCOME = {"type": "numeric", "lower": 0, "upper": TOP, "bin_width": 31_250, "resolution": 31_250}


def _incomes(rows: int, seed: int = 0, nulls: int = 0) -> duckdb.DuckDBPyConnection:
    rng = np.random.default_rng(seed)
    values: list[float | None] = np.minimum(rng.lognormal(10.5, 0.8, rows), TOP - 1).round().tolist()
    values += [None] * nulls
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE t (income DOUBLE)")
    con.execute("INSERT INTO t SELECT * FROM unnest(?)", [values])
    return con


def _prepared(sql: str, columns: dict[str, object], cost: dict[str, float]) -> engine.Prepared:
    connection = dpsql.connect(":memory:", schema={"tables": {"t": {"columns": columns}}}, budget=Budget(epsilon=1e6))
    return engine.prepare(sql, connection.schema, PrivacyCost(**cost))


def test_fifteen_prefix_sums_report_a_tenth_of_per_query_laplace_error() -> None:
    """15 prefix SUMs of a [0, 500,000] income at total ε = 1: the plan's expected RMSE per answer
    (also in the result metadata) is at most 0.1× per-query Laplace (ε/15 each, sensitivity B,
    RMSE √2·15·B). With one global bound it was 0.17×: the low cells carry bounds far below B."""
    prepared = _prepared(PREFIX_SQL, {"income": INCOME}, {"epsilon": 1.0})
    (measurement,) = prepared.groups.measurements
    assert measurement.cell_bounds is not None
    baseline = math.sqrt(2) * len(CUTS) * TOP / 1.0
    assert measurement.expected_rmse(measurement.plan.name) <= 0.1 * baseline
    connection = dpsql.connect(_incomes(2000), schema={"tables": {"t": {"columns": {"income": INCOME}}}},
                               budget=Budget(epsilon=10), rng=SeededRandomSource(0))
    tables = connection.cursor().execute(PREFIX_SQL, epsilon=1.0).fetch_arrow_tables()
    reported = json.loads(tables[0].schema.metadata[b"dpsql"])["expected_rmse"]
    assert list(reported.values()) == [measurement.expected_rmse(measurement.plan.name)]
    assert "cell-bounded" in engine.explain(prepared)


def test_per_cell_bounds_follow_the_cells_clamp_truncation_and_outside_rows() -> None:
    """b_j (in quanta) is the most |clamp(v)| of the cell's value range: a signed domain's cells
    near 0 are small; a clamping domain's edge cells reach the measure bounds; the outside cell
    holds only NULLs (bound 1, the floor) when the domain clamps, else out-of-domain values (B);
    a truncated column's bounds are capped by θ."""
    signed = {"type": "integer", "lower": -1000, "upper": 1000, "bin_width": 500, "measure_lower": -800,
              "measure_upper": 1200}
    sql = "SELECT SUM(x) AS s FROM t WHERE x < 0; SELECT SUM(x) AS s FROM t WHERE x >= 500"

    def bounds(column: dict[str, object], theta: float | None = None) -> tuple[int, ...]:
        connection = dpsql.connect(":memory:", schema={"tables": {"t": {"columns": {"x": column}}}},
                                   budget=Budget(epsilon=1))
        compiled = compile_batch(parse_batch(sql), connection.schema)
        table_column = connection.schema.tables["t"].columns["x"]
        if theta is not None:
            table_column = thresholds.truncated(table_column, theta)
        found = cell_bounds(compiled.groups[0], table_column, 1.0)
        assert found is not None
        return found[0]

    # cells [-1000, 0), [0, 500), [500, 1001) (a DOUBLE column may hold 1000.5), outside; values clamp to [-800, 1200]
    assert bounds(signed) == (800, 500, 1001, 1200)
    assert bounds({**signed, "out_of_domain": "clamp"}) == (800, 500, 1200, 1)
    assert bounds(signed, theta=600.0) == (600, 500, 600, 600)


def _z_scores(con: duckdb.DuckDBPyConnection, columns: dict[str, object], sql: str, cost: dict[str, float],
              runs: int, clamp: tuple[int, int] = (0, TOP)) -> np.ndarray:
    """Per release, (answer − DuckDB's exact SUM) / reported stddev for every statement."""
    schema = {"tables": {"t": {"columns": columns}}}
    out = releases(con, schema, sql, cost, runs=runs, seed=5)
    statements = [s.strip() for s in sql.split(";")]
    exact = f"COALESCE(SUM(LEAST(GREATEST(income, {clamp[0]}), {clamp[1]})), 0)"
    truth = [float(con.execute(s.replace("SUM(income)", exact)).fetchone()[0]) for s in statements]  # type: ignore[index]
    assert all(table.schema.metadata is not None for table in out[0])
    return np.array([[(t.column("s")[0].as_py() - truth[i]) / t.column("s_stddev")[0].as_py()
                      for i, t in enumerate(tables)]
                     for tables in out])


@pytest.mark.slow
@pytest.mark.parametrize("cost", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_cell_bounded_prefix_sums_are_calibrated_with_nulls(cost: dict[str, float]) -> None:
    """300 releases of the 15 prefix SUMs over incomes with NULLs (SUM leaves them out): z-scores
    against DuckDB's exact sums are unbiased with E z² = 1, at ε (discrete Laplace) and ρ."""
    prepared = _prepared(PREFIX_SQL, {"income": INCOME}, cost)
    assert all(m.cell_bounds is not None for m in prepared.groups.measurements)
    z = _z_scores(_incomes(3000, seed=2, nulls=300), {"income": INCOME}, PREFIX_SQL, cost, runs=300)
    assert_calibrated(z)


SIGNED = {"type": "numeric", "lower": -200_000, "upper": 300_000, "bin_width": 50_000, "resolution": 50_000}
RANGE_SQL = ";\n".join(f"SELECT SUM(income) AS s FROM t WHERE income >= {a} AND income < {a + 100_000}"
                       for a in range(-200_000, 200_000, 50_000) if a + 100_000 < 300_000)


@pytest.mark.slow
def test_cell_bounded_range_sums_on_a_signed_domain_are_calibrated() -> None:
    """Range SUMs over a domain with lower < 0 < upper (values clamp to [−200,000, 300,000]; the
    cells around 0 have the smallest bounds; out-of-domain rows sit outside every range) — per-cell
    bounds are used, and 300 releases' z-scores are unbiased with E z² = 1."""
    prepared = _prepared(RANGE_SQL, {"income": SIGNED}, {"epsilon": 1.0})
    assert all(m.cell_bounds is not None for m in prepared.groups.measurements)
    rng = np.random.default_rng(4)
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE t (income DOUBLE)")
    con.execute("INSERT INTO t SELECT * FROM unnest(?)", [rng.uniform(-250_000, 350_000, 3000).round().tolist()])
    assert_calibrated(_z_scores(con, {"income": SIGNED}, RANGE_SQL, {"epsilon": 1.0}, runs=300,
                                clamp=(-200_000, 300_000)))


@pytest.mark.parametrize("cost", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_reported_stddevs_match_the_plans_expected_error_over_several_axes_and_a_privacy_unit(
        cost: dict[str, float]) -> None:
    """SUM by sex over income prefixes (a Kronecker group sex × income) with privacy units of up to
    2 rows: the sum is cell-bounded, and the stddevs the release reports (the mechanism's exact
    variances of the strategy it measured, with sensitivity 2·max_j b_j‖a_j‖) agree with the
    plan's expected RMSE (metadata and EXPLAIN) to the rounding of the strategy's column scales."""
    columns = {"sex": {"type": "categorical", "values": ["F", "M"]}, "income": INCOME}
    schema = {"tables": {"t": {"privacy_unit": {"column": "pid", "max_rows": 2}, "columns": columns}}}
    sql = ";\n".join(f"SELECT sex, SUM(income) AS s FROM t WHERE income < {c} GROUP BY sex" for c in CUTS[::3])
    rng = np.random.default_rng(1)
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE t (pid INTEGER, sex VARCHAR, income DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)",
                    [(i // 2, str(rng.choice(["F", "M"])), float(rng.integers(0, TOP)))
                                                        for i in range(400)])
    connection = dpsql.connect(con, schema=schema, budget=Budget(**{k: 10 * v for k, v in cost.items()}),
                               rng=SeededRandomSource(3))
    prepared = engine.prepare(sql, connection.schema, PrivacyCost(**cost))
    (measurement,) = [m for m in prepared.groups.measurements if m.vector == ("sum", "income")]
    assert measurement.cell_bounds is not None and measurement.row_scale == 2 * TOP / measurement.quantum
    tables = connection.cursor().execute(sql, **cost).fetch_arrow_tables()
    stddevs = np.concatenate([t.column("s_stddev").to_numpy() for t in tables])
    reported = json.loads(tables[0].schema.metadata[b"dpsql"])["expected_rmse"]["group 1: sum(income)"]
    assert math.isclose(math.sqrt(np.mean(stddevs**2)), reported, rel_tol=2.0 ** -(mechanism.CELL_BOUND_BITS - 1))


def test_truncated_sums_are_cell_bounded_at_the_released_threshold() -> None:
    """A truncated measure (θ chosen from the data) that statements also filter on: once θ is
    released, the sums are planned again with per-cell bounds capped at θ — cells below θ keep
    their own bound, every cell above (and the outside cell) gets θ."""
    column = {**INCOME, "truncate": "svt"}
    prepared = _prepared(PREFIX_SQL, {"income": column}, {"epsilon": 1.0})
    theta = 200_000.0
    final = final_answering(prepared.groups, {"income": theta}, report=lambda message: None)
    (measurement,) = final.measurements
    assert measurement.cell_bounds is not None
    bounds = np.asarray(measurement.cell_bounds[0]) * measurement.quantum
    assert measurement.row_scale * measurement.quantum == theta
    assert list(bounds) == [min(c, theta) for c in [*CUTS, TOP]] + [theta]


def test_the_guards_re_split_keeps_the_per_cell_bounds() -> None:
    """Fifteen prefix SUMs weighted 10⁻⁶ beside one COUNT: the guard raises a SUM's weight and splits
    the budget again. The re-split measurement keeps its per-cell bounds (its plan was made on
    y = x/b, so measuring it with the global bound would measure a different strategy than the one
    its expected error describes); before the engine was split into passes, the re-split dropped them."""
    sql = PREFIX_SQL + ";\nSELECT COUNT(*) AS n FROM t WHERE income < 125000"
    weights = [1e-6] * len(CUTS) + [1.0]
    connection = dpsql.connect(":memory:", schema={"tables": {"t": {"columns": {"income": INCOME}}}},
                               budget=Budget(epsilon=1e6))
    prepared = engine.prepare(sql, connection.schema, PrivacyCost(epsilon=1.0), weights=weights)
    assert prepared.chosen.weights != tuple(weights)  # the guard raised a weight and split again
    (total,) = [m for m in prepared.groups.measurements if m.vector.is_sum]
    assert total.cell_bounds is not None
