"""VARIANCE, VAR_SAMP, VAR_POP, STDDEV, STDDEV_SAMP and STDDEV_POP (issue 33, item 2): estimated from the
noisy COUNT n, SUM S₁ and a sum of squares S₂ (its own data vector, of row bound max(lower², upper²)).

End to end against DuckDB's exact answer to the same SQL at a very large budget; the estimator's
delta-method gradient against finite differences; the sum of squares' sensitivity in its calibration
and the backend's exact squares; refusals that charge nothing; and a slow calibration test at ε = 1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from fractions import Fraction

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_calibration import assert_calibrated, releases

import dpsql
from _helpers import assert_matches_duckdb, assert_refused_free, duckdb_table
from dpsql import engine
from dpsql.answers.columns import spread_values
from dpsql.backends import Squared
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.engine.plan.vector_plans import cell_bounds
from dpsql.errors import NotSupportedError, SchemaError
from dpsql.noise import SeededRandomSource
from dpsql.planning import mechanism
from dpsql.planning.mechanism import Answers
from dpsql.schema import Schema, square_bound, square_quantum
from dpsql.sql.compile import compile_batch
from dpsql.sql.parse import parse_batch
from dpsql.sql.vectors import DataVector

ROWS = 2_000
COLUMNS = {
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "region": {"type": "categorical", "values": ["N", "S", "E"]},
    "x": {"type": "numeric", "lower": -10, "upper": 30, "bin_width": 40},    # a negative lower bound
    "hours": {"type": "integer", "lower": 0, "upper": 40, "bin_width": 10},  # NULL in ~20 % of rows
    "temp": {"type": "integer", "lower": -20, "upper": -2},                  # every value negative
    "label": {"type": "categorical", "values": ["p", "q"]},
}
SCHEMA_DICT = {"tables": {"people": {"columns": COLUMNS}}}
SCHEMA = Schema.load(SCHEMA_DICT)


#: Squares are rounded to their quanta: answers may differ from DuckDB's by 10⁻⁶ relatively beyond the noise.
SQUARES_ROUNDING = 1e-6


def _rows(seed: int = 11) -> list[tuple[object, ...]]:
    rng = np.random.default_rng(seed)
    return [(str(rng.choice(["F", "M"])), str(rng.choice(["N", "S", "E"], p=[0.5, 0.3, 0.2])),
             round(float(np.clip(rng.normal(8, 9), -10, 30)), 2),
             None if rng.random() < 0.2 else int(rng.integers(0, 41)), int(rng.integers(-20, -1)),
             str(rng.choice(["p", "q"])))
            for _ in range(ROWS)]


def _table(rows: list[tuple[object, ...]]) -> duckdb.DuckDBPyConnection:
    return duckdb_table("people", "sex VARCHAR, region VARCHAR, x DOUBLE, hours INTEGER, temp INTEGER, label VARCHAR",
                        rows)


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = _table(_rows())
    yield con
    con.close()


def connect(con: duckdb.DuckDBPyConnection, seed: int = 0, **budget: float) -> dpsql.Connection:
    return dpsql.connect(con, schema=SCHEMA, budget=Budget(**(budget or {"rho": 1e9})), rng=SeededRandomSource(seed))


# ============================================================================== against DuckDB
CASES = [
    # the six functions, GROUP BY
    "SELECT region, VARIANCE(x) AS v, VAR_SAMP(x) AS vs, VAR_POP(x) AS vp, STDDEV(x) AS s, STDDEV_SAMP(x) AS ss, "
    "STDDEV_POP(x) AS sp FROM people GROUP BY region ORDER BY region",
    # WHERE, with COUNT, SUM and AVG in the same statement; a column with NULLs
    "SELECT sex, COUNT(*) AS c, SUM(hours) AS h, AVG(x) AS a, STDDEV(hours) AS sh, VAR_POP(x) AS vx FROM people "
    "WHERE hours >= 10 AND region <> 'E' GROUP BY sex ORDER BY sex",
    # every value negative (square bounds [lower², upper²] reversed), no GROUP BY
    "SELECT STDDEV_POP(temp) AS s, VARIANCE(temp) AS v, AVG(temp) AS a FROM people",
    # inside arithmetic and output functions, and in HAVING (post-processing by the delta method)
    "SELECT region, ROUND(STDDEV(x), 2) AS s, STDDEV(x) / AVG(x) AS cv, VAR_POP(hours) - 1 AS d FROM people "
    "GROUP BY region HAVING STDDEV(x) > 8.8 ORDER BY region",
    # FILTER, two GROUP BY columns
    "SELECT sex, label, STDDEV(x) FILTER (WHERE region = 'N') AS s, VAR_SAMP(temp) AS v FROM people "
    "GROUP BY sex, label ORDER BY sex, label",
]


@pytest.mark.parametrize("sql", CASES)
def test_variances_and_standard_deviations_match_duckdb_at_a_very_large_budget(data: duckdb.DuckDBPyConnection,
                                                                               sql: str) -> None:
    table = connect(data).cursor().execute(sql, rho=1e8).fetch_arrow_table()
    assert_matches_duckdb(data, sql, table, rounding=SQUARES_ROUNDING)


def test_default_names_metadata_and_explain_state_the_estimator_and_the_clamping(
        data: duckdb.DuckDBPyConnection) -> None:
    sql = "SELECT STDDEV(x), VARIANCE(x), VAR_POP(x), STDDEV_POP(hours) FROM people"
    connection = connect(data)
    table = connection.cursor().execute(sql, rho=1e8).fetch_arrow_table()
    assert table.column_names == ["stddev_x", "stddev_x_stddev", "variance_x", "variance_x_stddev",
                                  "var_pop_x", "var_pop_x_stddev", "stddev_pop_hours", "stddev_pop_hours_stddev"]
    spread = json.loads(table.schema.metadata[b"dpsql"])["spread"]
    assert spread["stddev_x"]["clamped_at_zero"] == 0 and spread["variance_x"]["null_groups"] == 0
    assert "(S₂ − S₁²/n)/(n − 1)" in spread["variance_x"]["estimator"]
    assert "S₂/n − (S₁/n)²" in spread["var_pop_x"]["estimator"]
    assert "√max(variance, 0)" in spread["stddev_x"]["estimator"] and "clamped_at_zero" not in spread["variance_x"]
    plan = connection.cursor().explain(sql, rho=1.0)
    assert "group 1: sumsq(x)" in plan and "stddev_x: (S₂ − S₁²/n)/(n − 1)" in plan and "clamped at 0" in plan
    assert "stddev_x (SUM of squares)" in plan


def test_small_counts_are_null_as_for_avg_and_a_negative_variance_clamps_the_stddev_at_zero() -> None:
    """At a small budget over 3 rows every group is NULL (n − 1 below 2 standard errors of n); over
    rows of one value the variance's noise is often negative: STDDEV is then 0, counted in the metadata,
    with standard error √SE(VAR)."""
    con = _table([("F", "N", 5.0, 1, -3, "p")] * 3)
    few = connect(con, epsilon=1e6).cursor().execute("SELECT region, VARIANCE(x) AS v, STDDEV_POP(x) AS s FROM people "
                                        "GROUP BY region", epsilon=0.5).fetch_arrow_table()
    assert few.column("v").null_count == 3 and few.column("s").null_count == 3
    meta = json.loads(few.schema.metadata[b"dpsql"])["spread"]
    assert meta["v"]["null_groups"] == 3 and meta["s"]["null_groups"] == 3
    same = _table([("F", "N", 5.0, 1, -3, "p")] * 400)
    clamped = 0
    for seed in range(6):
        table = connect(same, seed=seed, epsilon=1e6).cursor().execute(
            "SELECT STDDEV(x) AS s, VARIANCE(x) AS v FROM people", epsilon=200.0).fetch_arrow_table()
        s, v, v_error = (table.column(n)[0].as_py() for n in ("s", "v", "v_stddev"))
        if v <= 0:
            clamped += 1
            assert s == 0.0 and math.isclose(table.column("s_stddev")[0].as_py(), math.sqrt(v_error))
            assert json.loads(table.schema.metadata[b"dpsql"])["spread"]["s"]["clamped_at_zero"] == 1
        else:
            assert math.isclose(s, math.sqrt(v))
    assert 0 < clamped < 6


# ============================================================================== the estimator
def _answers(values: list[float], sigma: np.ndarray, shared: bool) -> list[Answers]:
    """One-row answers of (S₁, n, S₂) with covariance ``sigma`` (off-diagonal only where ``shared``)."""
    found = []
    for j, value in enumerate(values):
        covariances = {k: np.array([sigma[j, k]]) for k in range(3) if k != j and shared}
        found.append(Answers(values=np.array([value]), variances=np.array([sigma[j, j]]), covariances=covariances))
    return found


@settings(max_examples=200, deadline=None)
@given(st.floats(30, 1e4), st.floats(-50, 50), st.floats(0.1, 40), st.booleans(),
       st.sampled_from(["var_samp", "var_pop", "stddev_samp", "stddev_pop"]), st.integers(0, 2**31))
def test_the_standard_error_is_the_delta_method_with_the_measured_covariances(
        n: float, mean: float, spread: float, shared: bool, function: str, seed: int) -> None:
    """The value is the formula of n, S₁, S₂; the standard error is √(∇ᵀΣ∇) with ∇ by central
    differences of the same formula, Σ with its covariances only where the blocks share a measurement."""
    s1, s2 = n * mean, n * (mean**2 + spread**2)
    rng = np.random.default_rng(seed)
    root = np.array([[1.0], [0.1], [10.0]]) * rng.normal(size=(3, 3))  # rows: SE(S₁) ~ 1, SE(n) ~ 0.1, SE(S₂) ~ 10
    sigma = root @ root.T
    sigma = sigma if shared else np.diag(np.diag(sigma))
    value, error, clamped = spread_values(function, _answers([s1, n, s2], sigma, shared), (0, 1, 2),
                                          np.zeros(1, dtype=np.int64))
    d = n - 1 if function.endswith("samp") else n

    def variance(a: np.ndarray) -> float:
        return float((a[2] - a[0] ** 2 / a[1]) / (a[1] - (1 if function.endswith("samp") else 0)))

    point = np.array([s1, n, s2])
    steps = 1e-6 * np.maximum(np.abs(point), 1.0)
    gradient = np.array([(variance(point + h) - variance(point - h)) / (2 * h[j])
                         for j, h in enumerate(np.diag(steps))])
    var_error = math.sqrt(float(gradient @ sigma @ gradient))
    expected = (s2 - s1**2 / n) / d
    if function.startswith("var"):
        assert math.isclose(value[0], expected, rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(error[0], var_error, rel_tol=1e-4, abs_tol=1e-9)
    else:
        assert math.isclose(value[0], math.sqrt(expected), rel_tol=1e-9) and not clamped[0]
        assert math.isclose(error[0], min(var_error / (2 * math.sqrt(expected)), math.sqrt(var_error)),
                            rel_tol=1e-4, abs_tol=1e-9)


def test_a_composed_standard_deviation_keeps_its_standard_error_where_it_is_clamped() -> None:
    """Inside an expression (ROUND, arithmetic) the standard deviation's gradient is scaled to its
    standard error: where it is clamped at 0 the composed output's standard error is still √SE(VAR), and
    where the delta method applies the gradient is ∇VAR/(2·STDDEV)."""
    from dpsql.answers.columns import spread_gradient
    sigma = np.tile(np.diag([4.0, 0.01, 900.0]), (2, 1, 1))
    values = np.array([[100.0, 100.0, 90.0],      # S₂ − S₁²/n < 0: clamped
                       [100.0, 100.0, 500.0]])   # variance 400/99
    value, gradient, clamped = spread_gradient("stddev_samp", values, sigma)
    var, var_gradient, _ = spread_gradient("var_samp", values, sigma)
    var_error = np.sqrt(np.einsum("ni,nij,nj->n", var_gradient, sigma, var_gradient))
    error = np.sqrt(np.einsum("ni,nij,nj->n", gradient, sigma, gradient))
    assert clamped.tolist() == [True, False] and value[0] == 0.0 and math.isclose(value[1], math.sqrt(var[1]))
    assert math.isclose(error[0], math.sqrt(var_error[0]))
    assert np.allclose(gradient[1], var_gradient[1] / (2 * value[1])) and error[1] < math.sqrt(var_error[1])


# ============================================================================== sensitivity
@pytest.mark.parametrize(("column", "max_rows"), [("x", 1), ("temp", 1), ("hours", 3)])
def test_the_sum_of_squares_is_calibrated_for_max_lower_upper_squared_per_row(column: str, max_rows: int) -> None:
    """The sumsq vector's calibration: one unit (max_rows rows) moves a cell of Σ round(clamp(v)²/q) by at
    most k·⌈max(lower², upper²)/q⌉; its noise is that times the strategy's sensitivity, and the
    measurement spends its share exactly."""
    schema = Schema.load({"tables": {"people": {"columns": {**COLUMNS, "person": {"type": "integer", "lower": 0,
                                                                                   "upper": 10**6}},
                                                "privacy_unit": {"column": "person", "max_rows": max_rows}}}})
    declared = schema.table("people").columns[column]
    low, high = declared.bounds
    assert square_bound(declared) == max(low**2, high**2)
    quantum = square_quantum(declared)
    prepared = engine.prepare(f"SELECT region, STDDEV({column}) FROM people GROUP BY region", schema,
                              PrivacyCost(epsilon=1.0))
    (m,) = [m for m in prepared.chosen.measurements if m.vector == DataVector("sumsq", column)]
    assert m.quantum == quantum and m.cell_bounds is None
    assert m.row_scale == max_rows * math.ceil(max(low**2, high**2) / quantum)
    calibration = m.calibration()
    strategy = mechanism.integral_strategy(m.plan.strategy)
    sensitivity = m.row_scale * float(np.abs(strategy.dense()).sum(axis=0).max())
    assert calibration.spent <= Fraction(m.share) and math.isclose(float(calibration.spent), m.share, rel_tol=1e-6)
    assert math.isclose(float(calibration.scale), sensitivity / m.share, rel_tol=1e-6)


def test_the_squares_per_cell_are_exact_and_clamped_before_squaring() -> None:
    """The backend's squares: Σ round(clamp(v, lo, hi)²/q) per cell, out-of-bounds values clamped first
    (−50 counts as lower² = 100, not 2,500), NULL adding nothing; never more than max(lo², hi²) per row."""
    con = _table([("F", "N", v, None if v is None else 3, -3, "p")
                  for v in [-50.0, -10.0, 0.5, 29.99, 30.0, 1e6, None, -0.25]])
    table = SCHEMA.table("people")
    x, region = table.columns["x"], table.columns["region"]
    quantum = square_quantum(x)
    data = DuckDBBackend(con).cell_data(table, [region], sum_columns={Squared(x): quantum, x: 2.0**-10})
    clamped = [min(max(v, -10.0), 30.0) for v in [-50.0, -10.0, 0.5, 29.99, 30.0, 1e6, -0.25]]
    expected = sum(math.floor(c * c / quantum + 0.5) for c in clamped)  # squares are ≥ 0: half away is half up
    plain = sum(math.copysign(math.floor(abs(c) * 2**10 + 0.5), c) for c in clamped)
    assert data.squares["x"].tolist() == [expected] and data.sums["x"].tolist() == [plain]
    assert max(math.floor(c * c / quantum + 0.5) for c in clamped) * quantum <= square_bound(x)


def test_per_cell_bounds_of_the_squares_are_the_squares_of_the_plain_bounds() -> None:
    """Grouped by hours' bins, a row of bin [10, 20) adds at most 19² to its cell's sum of squares."""
    compiled = compile_batch(parse_batch("SELECT hours, VARIANCE(hours) FROM people GROUP BY hours"), SCHEMA)
    group = compiled.groups[0]
    hours = SCHEMA.table("people").columns["hours"]
    plain = cell_bounds(group, hours, 1.0)
    squared = cell_bounds(group, hours, 1.0, squared=True)
    assert plain is not None and squared is not None
    position = next(i for i, axis in enumerate(group.axes) if axis.column.name == "hours")
    assert list(squared[position][:-1]) == [b * b for b in plain[position][:-1]]
    assert squared[position][-1] == 1600  # the outside cell: an out-of-domain value adds up to the global bound


# ============================================================================== refusals
@pytest.mark.parametrize(("sql", "error", "words"), [
    ("SELECT STDDEV(region) FROM people", SchemaError, "STDDEV_SAMP(region) needs a numeric column with declared "
                                                         "bounds (line 1, col 8"),
    ("SELECT VAR_POP(label) AS v FROM people", SchemaError, "VAR_POP(label) needs a numeric column"),
    ("SELECT STDDEV(x + 1) FROM people", NotSupportedError, "arithmetic in STDDEV_SAMP() is not supported (line 1, "
                                                            "col 15"),
    ("SELECT STDDEV(DISTINCT x) FROM people", NotSupportedError, "DISTINCT is not supported (line 1, col 15"),
    ("SELECT VARIANCE(*) FROM people", NotSupportedError, "VARIANCE"),
])
def test_refusals_name_the_construct_and_its_position_and_charge_nothing(data: duckdb.DuckDBPyConnection, sql: str,
                                                                        error: type[Exception], words: str) -> None:
    assert_refused_free(data, SCHEMA_DICT, sql, error, words)


def test_a_truncated_column_is_refused_before_the_charge(data: duckdb.DuckDBPyConnection) -> None:
    schema = {"tables": {"people": {"columns": {**COLUMNS, "x": {**COLUMNS["x"], "truncate": "svt"}}}}}
    assert_refused_free(data, schema, "SELECT region, STDDEV(x) FROM people GROUP BY region", NotSupportedError,
                        "STDDEV_SAMP(x) (line 1, col 16) is not supported")


# ============================================================================== calibration
@pytest.mark.slow
def test_variance_and_stddev_are_calibrated_at_epsilon_1() -> None:
    """300 seeded releases at ε = 1 over 20,000 rows (n ≈ 10⁴ per group, where the delta method holds):
    z = (answer − DuckDB's exact value of the same SQL)/stddev of VARIANCE, VAR_POP, STDDEV and
    STDDEV_POP per group has mean 0 and E z² = 1 (``assert_calibrated``: tolerances from the number of
    z-scores, and the check fails for stddevs 2× too large or too small)."""
    rng = np.random.default_rng(5)
    con = _table([(str(rng.choice(["F", "M"])), "N", round(float(np.clip(rng.normal(8, 9), -10, 30)), 2),
                   int(rng.integers(0, 41)), -3, "p") for _ in range(20_000)])
    sql = ("SELECT sex, VARIANCE(x) AS v, VAR_POP(hours) AS vp, STDDEV(x) AS s, STDDEV_POP(hours) AS sp "
           "FROM people GROUP BY sex ORDER BY sex")
    truth = con.execute(sql).fetchall()
    out = releases(con, SCHEMA_DICT, sql, {"epsilon": 1.0}, runs=300, seed=31)
    z = []
    for (table,) in out:
        assert table.column("sex").to_pylist() == [row[0] for row in truth]
        z.append(np.concatenate([(table.column(name).to_numpy() - [row[k] for row in truth])
                                 / table.column(f"{name}_stddev").to_numpy() for k, name in enumerate(["v", "vp", "s",
                                                                                                       "sp"], 1)]))
    assert_calibrated(np.array(z))


def test_a_second_send_is_answered_free_from_the_kept_release_with_the_same_answers(
        data: duckdb.DuckDBPyConnection) -> None:
    sql = "SELECT region, VARIANCE(x) AS v, STDDEV(hours) AS s, AVG(x) AS a FROM people GROUP BY region ORDER BY region"
    connection = connect(data, epsilon=10.0)
    first = connection.cursor().execute(sql, epsilon=1.0).fetch_arrow_table()
    second = connection.cursor().execute(sql, epsilon=1.0).fetch_arrow_table()
    assert connection.budget.spent == 1.0 and first.column_names == second.column_names
    for name in first.column_names[1:]:
        np.testing.assert_allclose(first.column(name).to_numpy(), second.column(name).to_numpy(), rtol=1e-9)
    spreads = [json.loads(table.schema.metadata[b"dpsql"])["spread"] for table in (first, second)]
    assert spreads[0] == spreads[1]


def test_with_sum_and_count_read_from_value_cells_the_squares_are_their_own_vector() -> None:
    """A column of one value per cell is read as value cells (TaMM): S₁ and n come from one count
    measurement (their covariance enters the delta method), S₂ from its own vector; the answers match DuckDB."""
    rng = np.random.default_rng(2)
    con = duckdb.connect()
    con.execute("CREATE TABLE s (region VARCHAR, score INTEGER)")
    con.executemany("INSERT INTO s VALUES (?, ?)", [(str(rng.choice(["N", "S"])),
                                                     int(rng.integers(0, 10)) if rng.random() > 0.1 else None)
                                                    for _ in range(3000)])
    schema = Schema.load({"tables": {"s": {"columns": {"region": {"type": "categorical", "values": ["N", "S"]},
                                                       "score": {"type": "integer", "lower": 0, "upper": 9}}}}})
    sql = "SELECT region, AVG(score) AS a, VARIANCE(score) AS v FROM s GROUP BY region ORDER BY region"
    connection = dpsql.connect(con, schema=schema, budget=Budget(rho=1e9), rng=SeededRandomSource(3))
    plan = connection.cursor().explain(sql, rho=1.0)
    assert "answered from one count vector (TaMM)" in plan and "group 1: sumsq(score)" in plan
    assert "group 1: sum(score)" not in plan
    assert_matches_duckdb(con, sql, connection.cursor().execute(sql, rho=1e8).fetch_arrow_table(),
                          rounding=SQUARES_ROUNDING)
