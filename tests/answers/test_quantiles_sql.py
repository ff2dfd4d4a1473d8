"""Order statistics (MEDIAN, PERCENTILE_CONT/DISC, QUANTILE_CONT/DISC, MIN, MAX) from released prefix counts.

The math (``dpsql.answers.quantiles``) on hand-made prefix counts; end to end against DuckDB's exact
answers at ε = 10⁶; refusals with their positions; and the 95 % confidence interval's coverage at ε = 1.
Also COUNT(DISTINCT <privacy unit>) (``dpsql.sql.units``), exact against DuckDB where each unit has one row.

Tolerance at ε = 10⁶ (integer data, cells of one value, v standing for [v − ½, v + ½]): with exact
prefix counts F, the estimate x̂ solves F̂(x̂) = p·N on the interpolated counts. DuckDB's
quantile_cont interpolates between the order statistics u = x_(⌊r⌋) and v = x_(⌈r⌉) at rank
r = (N − 1)p + 1, and p·N ∈ [r − 1, r]; since #{x ≤ v} ≥ r ≥ p·N, F(v + ½) ≥ p·N, so x̂ ≤ v + ½; since
#{x < u} ≤ r − 1 ≤ p·N, F(u − ½) ≤ p·N, so x̂ ≥ u − ½. Hence x̂ ∈ [u − ½, v + ½] (the cell width w
generally: [u − w/2, v + w/2]). The noise (prefix-count standard error ≈ 10⁻⁵ at this ε) moves x̂ by
at most its size over the rows of a cell (≥ 1), far below the 10⁻³ slack added.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import warnings
from collections.abc import Iterator
from fractions import Fraction

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsql
from dpsql.answers.quantiles import PrefixCounts, cell_boundaries, estimate_quantile
from dpsql.answers.tail_bounds import NoiseLaw
from dpsql.budget.accounting import Budget
from dpsql.errors import InvalidQueryError, SchemaError, UnsupportedQueryError
from dpsql.noise import SeededRandomSource, discrete_gaussian_variance
from dpsql.schema import Schema

SLACK = 1e-3
HUGE = 1e6
SCHEMA = Schema.load({"tables": {"t": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 99},
    "g": {"type": "categorical", "values": ["a", "b"]},
    "day": {"type": "date", "lower": "2020-01-01", "upper": "2020-12-31"},
    "x": {"type": "numeric", "lower": 0, "upper": 15, "resolution": 0.5},
}}}})
ROWS = 3001


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    rng = np.random.default_rng(2024)
    ages = np.clip(rng.normal(40, 12, ROWS).round(), 5, 95).astype(int)
    groups = rng.choice(["a", "b"], ROWS)
    con = duckdb.connect()
    con.execute("CREATE TABLE t (age INTEGER, g VARCHAR, day DATE, x DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, DATE '2020-01-01' + ?::INTEGER, ?)",
                    [(int(a), str(g), int(a) * 3, a / 7) for a, g in zip(ages, groups)])
    con.execute("INSERT INTO t VALUES (NULL, 'a', NULL, NULL)")  # NULLs are ignored, as by DuckDB's median
    yield con
    con.close()


def run(con: duckdb.DuckDBPyConnection, sql: str, *, epsilon: float = HUGE, seed: int = 1) -> dict[str, list[object]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cursor = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=epsilon),
                               rng=SeededRandomSource(seed)).cursor()
        cursor.execute(sql, epsilon=epsilon)
        table = cursor.fetch_arrow_table()
    return {**table.to_pydict(), "_meta": [json.loads(table.schema.metadata[b"dpsql"])]}


def order_statistics(con: duckdb.DuckDBPyConnection, where: str, p: float) -> tuple[float, float]:
    """(u, v): the order statistics DuckDB's quantile_cont interpolates between (rank r = (N − 1)p + 1)."""
    values = sorted(v for (v,) in con.execute(f"SELECT age FROM t WHERE age IS NOT NULL {where}").fetchall())
    r = (len(values) - 1) * p + 1
    return values[math.floor(r) - 1], values[math.ceil(r) - 1]


# ==================================================================================== the math
def exact(counts: list[float]) -> PrefixCounts:
    prefix = np.cumsum(np.asarray(counts, dtype=np.float64))
    return PrefixCounts(values=prefix, variances=np.zeros_like(prefix), total_covariances=np.zeros_like(prefix))


def test_median_interpolates_inside_the_cell_where_the_prefix_reaches_half() -> None:
    # values 0 (2 rows), 1 (3 rows), 2 (5 rows): F at -0.5, 0.5, 1.5, 2.5 is 0, 2, 5, 10; p·N = 5 at 1.5
    c = cell_boundaries([0, 1, 2], [0, 1, 2], discrete=True)
    found = estimate_quantile(exact([2, 3, 5]), c, 0.5)
    assert found.value == pytest.approx(1.5)
    assert (found.low, found.high) == (0.5, 2.5)  # F(0.5) = 2 < 5 < F(2.5) = 10; F(1.5) = 5 is not excluded
    assert found.stddev == pytest.approx((2.5 - 0.5) / (2 * 1.959963984540054))
    low = estimate_quantile(exact([2, 3, 5]), c, 0.1)  # p·N = 1: halfway through the 2 rows at 0
    assert low.value == pytest.approx(0.0)
    assert (low.low, low.high) == (-0.5, 0.5)


def test_the_estimate_is_clamped_to_the_domain_and_disc_returns_the_cell_value() -> None:
    c = cell_boundaries([0, 1, 2], [0, 1, 2], discrete=True)
    assert estimate_quantile(exact([4, 0, 0]), c, 0.0, clamp=(0.0, 2.0)).value == 0.0  # c_0 = -0.5, clamped
    assert estimate_quantile(exact([0, 0, 4]), c, 1.0, clamp=(0.0, 2.0)).value == 2.0  # c_3 = 2.5, clamped
    assert estimate_quantile(exact([2, 3, 5]), c, 0.5, "disc", representatives=[0, 1, 2]).value == 1.0
    assert estimate_quantile(exact([2, 3, 5]), c, 0.6, "disc", representatives=[0, 1, 2]).value == 2.0


def test_min_and_max_with_exact_counts_lie_in_the_extreme_cells() -> None:
    c = cell_boundaries(range(5), range(5), discrete=True)  # values 0..4; rows at 2 (4) and 3 (1)
    low = estimate_quantile(exact([0, 0, 4, 1, 0]), c, 0.0, "min")
    assert (low.low, low.high) == (1.5, 2.5)  # F(1.5) = 0 surely, F(2.5) ≥ 1 surely
    assert low.value == 2.0 and low.stddev == pytest.approx(0.5 / 1.959963984540054)  # the middle of the interval
    high = estimate_quantile(exact([0, 0, 4, 1, 0]), c, 1.0, "max")
    assert (high.low, high.high) == (2.5, 3.5)
    assert high.value == 3.0


#: Noise of sd 3 per prefix count: a discrete Gaussian with σ² = 9 and coefficients of norm 1.
GAUSS9 = NoiseLaw(kind="gaussian", scale=9.0, variance=discrete_gaussian_variance(9))


def test_noisy_min_does_not_claim_an_empty_lower_tail() -> None:
    """With noise of sd 3 per prefix count, no count can show F = 0 (that needs F̂ + q < 1 with
    q = κ·3 ≫ 1), so the CI's low end stays at the domain's bound; the value is its midpoint."""
    counts = exact([0, 0, 0, 50, 50])
    noisy = PrefixCounts(values=counts.values + np.array([2.0, -1.0, 5.0, 0.0, 0.0]),
                         variances=np.full(5, 9.0), total_covariances=np.full(5, 9.0))
    found = estimate_quantile(noisy, cell_boundaries(range(5), range(5), discrete=True), 0.0, "min",
                              clamp=(0.0, 4.0), law=GAUSS9)
    assert found.low == 0.0 and found.high == 3.5
    assert found.value == 1.5  # (−0.5 + 3.5) / 2: the middle of the boundaries, then clamped


def test_the_threshold_grows_with_the_boundaries_scanned() -> None:
    """A count of 7 at sd 3 (2.3 standard errors) is not proof of a row when 5 boundaries are
    scanned: q = κ·3 with P(e ≥ κ·3) ≤ 0.05/5 for each, κ = √(2 ln 100) ≈ 3.03 (σ²-sub-Gaussian).
    With exact counts no threshold is needed; without the noise's law noisy counts are refused."""
    c = cell_boundaries(range(5), range(5), discrete=True)
    kappa = math.sqrt(9.0 / discrete_gaussian_variance(9)) * math.sqrt(2 * math.log(5 / 0.05))
    for seven, expected_high in [(7.0, 2.5), (3 * kappa + 0.01, 1.5)]:  # F̂(1.5) = seven, F̂(2.5) = 50
        noisy = PrefixCounts(values=np.array([0.0, seven, 50.0, 100.0, 100.0]), variances=np.full(5, 9.0),
                             total_covariances=np.full(5, 9.0))
        assert estimate_quantile(noisy, c, 0.0, "min", law=GAUSS9).high == expected_high
    with pytest.raises(ValueError, match="noise law"):
        estimate_quantile(noisy, c, 0.0, "min")


def test_a_whole_count_rounded_below_one_is_not_read_as_an_empty_tail() -> None:
    """At a huge ε (sd ~1e-40 per count) the counts are whole numbers up to the float rounding of the
    least squares: one row above 3.5 came out as 0.9999999999997726 under one BLAS kernel and 1.0000000000002
    under another. MAX must not call the tail above 3.5 empty by that last bit (it did: the interval
    [.., 3.5] missed the true 4); the counts' rounding margin r (module docstring) keeps both the same."""
    c = cell_boundaries(range(5), range(5), discrete=True)
    law = NoiseLaw(kind="gaussian", scale=1e-6, variance=discrete_gaussian_variance(Fraction(1, 10**6)))
    for one in (1.0 - 2.3e-13, 1.0, 1.0 + 2.3e-13):
        values = np.array([0.0, 500.0, 1000.0, 1499.0 + (1.0 - one), 1500.0])  # one row at 4, at most
        noisy = PrefixCounts(values=values, variances=np.full(5, 1e-80), total_covariances=np.full(5, 1e-80))
        high = estimate_quantile(noisy, c, 1.0, "max", clamp=(0.0, 4.0), law=law)
        assert (high.low, high.high) == (3.5, 4.0), one  # [3.5, 4.5] clamped to the domain: holds 4
        low = estimate_quantile(noisy, c, 0.0, "min", clamp=(0.0, 4.0), law=law)
        assert (low.low, low.high) == (0.5, 1.5)  # no row at 0, 500 at 1

def test_a_group_with_too_few_rows_is_null_with_a_reason() -> None:
    noisy = PrefixCounts(values=np.array([0.5, 1.0, 3.0]), variances=np.full(3, 4.0),
                         total_covariances=np.full(3, 4.0))  # N̂ = 3 < 2·sd = 4
    found = estimate_quantile(noisy, cell_boundaries([0, 1, 2], [0, 1, 2], discrete=True), 0.5)
    assert math.isnan(found.value) and math.isnan(found.low) and math.isnan(found.stddev)
    assert found.null is not None and "too few rows" in found.null


def test_the_interval_uses_the_covariance_with_the_total() -> None:
    """Var(F̂ − p·N̂) = Var F̂ + p²·Var N̂ − 2p·Cov(F̂, N̂): with the covariance the boundary at 1.5
    (D = −20, sd 10 − 5 = 5 → excluded); without it (sd √125 ≈ 11.2), 1.96·sd > 20 keeps it."""
    c = cell_boundaries(range(4), range(4), discrete=True)
    values = np.array([10.0, 30.0, 100.0, 100.0])
    variances = np.full(4, 100.0)
    with_covariance = PrefixCounts(values=values, variances=variances, total_covariances=np.full(4, 100.0))
    without = PrefixCounts(values=values, variances=variances, total_covariances=np.zeros(4))
    assert estimate_quantile(with_covariance, c, 0.5).low == 1.5
    assert estimate_quantile(without, c, 0.5).low == 0.5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=60), st.floats(0.0, 1.0))
def test_exact_counts_give_a_value_between_the_order_statistics_half_a_cell_wide(values: list[int], p: float) -> None:
    """The derivation in the module docstring, checked against numpy's linear quantile (DuckDB's rule)."""
    counts = np.bincount(values, minlength=10).astype(float)
    found = estimate_quantile(exact(list(counts)), cell_boundaries(range(10), range(10), discrete=True), p,
                              clamp=(0.0, 9.0))
    ordered = sorted(values)
    r = (len(values) - 1) * p + 1
    u, v = ordered[math.floor(r) - 1], ordered[min(math.ceil(r), len(values)) - 1]
    assert u - 0.5 - 1e-9 <= found.value <= v + 0.5 + 1e-9
    assert 0.0 <= found.low <= found.value <= found.high <= 9.0


# ==================================================================================== end to end
def test_median_and_percentiles_match_duckdb_at_a_huge_epsilon(data: duckdb.DuckDBPyConnection) -> None:
    sql = ("SELECT MEDIAN(age) AS m, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age) AS p90, "
           "QUANTILE_CONT(age, 0.25) AS q25, PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY age DESC) AS d75 FROM t")
    found = run(data, sql)
    truth = data.execute("SELECT median(age), quantile_cont(age, 0.9), quantile_cont(age, 0.25), "
                         "quantile_cont(age, 0.75) FROM t").fetchone()
    assert truth is not None
    for name, p, exact_value in zip(["m", "p90", "q25", "d75"], [0.5, 0.9, 0.25, 0.75], truth):
        u, v = order_statistics(data, "", p)
        assert u <= exact_value <= v
        value = found[name][0]
        assert isinstance(value, float)
        assert u - 0.5 - SLACK <= value <= v + 0.5 + SLACK, (name, value, exact_value)
        assert found[f"{name}_low"][0] <= exact_value <= found[f"{name}_high"][0]
        assert found[f"{name}_stddev"][0] <= 1.0 / 1.96 + SLACK  # the CI is at most the two cells around it
    entry = found["_meta"][0]["order_statistics"]["m"]
    assert entry["bias_bound"] == 1.0 and "0.5 quantile" in entry["definition"]


def test_grouped_filtered_min_max_match_duckdb(data: duckdb.DuckDBPyConnection) -> None:
    """At ε = 10⁶ the counts' noise (sd ~10⁻⁴⁰) cannot cross the MIN/MAX thresholds, so the intervals'
    claims are exact for every seed, not a 95 % event: only the counts' float rounding could make a
    whole count of 1 read as an empty tail, and the rounding margin covers it (this test failed on
    AVX-512 BLAS kernels before; test_a_whole_count_rounded_below_one_is_not_read_as_an_empty_tail)."""
    sql = ("SELECT g, MEDIAN(age), MIN(age), MAX(age) FROM t WHERE age > 20 AND age <= 80 GROUP BY g ORDER BY g")
    found = run(data, sql)
    truth = data.execute("SELECT g, median(age), min(age), max(age) FROM t WHERE age > 20 AND age <= 80 "
                         "GROUP BY g ORDER BY g").fetchall()
    assert found["g"] == ["a", "b"]
    for row, (group, median, low, high) in enumerate(truth):
        u, v = order_statistics(data, f"AND age > 20 AND age <= 80 AND g = '{group}'", 0.5)
        assert u - 0.5 - SLACK <= found["median_age"][row] <= v + 0.5 + SLACK
        assert abs(found["min_age"][row] - low) <= 0.5 + SLACK
        assert abs(found["max_age"][row] - high) <= 0.5 + SLACK
        assert found["min_age_low"][row] <= low <= found["min_age_high"][row]
        assert found["max_age_low"][row] <= high <= found["max_age_high"][row]
        assert found["min_age_high"][row] - found["min_age_low"][row] <= 1.0  # at ε = 10⁶ F = 0 shows
        assert median is not None


def test_a_filter_clause_selects_the_rows_of_an_order_statistic(data: duckdb.DuckDBPyConnection) -> None:
    """``MEDIAN(age) FILTER (WHERE g = 'a')`` is the median over the rows the filter keeps (it was dropped)."""
    found = run(data, "SELECT MEDIAN(age) FILTER (WHERE g = 'a') AS m, MAX(age) FILTER (WHERE age < 50) AS top FROM t")
    u, v = order_statistics(data, "AND g = 'a'", 0.5)
    assert u - 0.5 - SLACK <= found["m"][0] <= v + 0.5 + SLACK
    assert abs(found["top"][0] - data.execute("SELECT max(age) FROM t WHERE age < 50").fetchone()[0]) <= 0.5 + SLACK


def test_disc_numeric_and_date_columns(data: duckdb.DuckDBPyConnection) -> None:
    found = run(data, "SELECT QUANTILE_DISC(age, 0.3) AS d, QUANTILE_CONT(x, 0.25) AS qx, MEDIAN(day) AS md FROM t")
    values = sorted(v for (v,) in data.execute("SELECT age FROM t WHERE age IS NOT NULL").fetchall())
    assert found["d"][0] == values[math.ceil(0.3 * len(values)) - 1]  # the first value whose count reaches p·N
    qx = data.execute("SELECT quantile_cont(x, 0.25) FROM t").fetchone()
    assert qx is not None
    cell = math.floor(qx[0] / 0.5) * 0.5  # numeric cells [0.5k, 0.5k + 0.5): x̂ lies in the true quantile's cell
    assert cell - SLACK <= found["qx"][0] <= cell + 0.5 + SLACK
    median_day = data.execute("SELECT median(day) FROM t").fetchone()
    assert median_day is not None
    assert isinstance(found["md"][0], dt.date)
    assert abs((found["md"][0] - median_day[0].date()).days) <= 1
    assert found["md_low"][0] <= median_day[0].date() <= found["md_high"][0]


def test_a_wide_domain_is_read_in_runs_of_cells_with_the_bias_bound_reported() -> None:
    """0..9999 in MAX_QUANTILE_CELLS = 512 runs of 19 or 20 values: with exact counts the estimate
    lies in the run holding DuckDB's median (u = v here: N odd), so it is within one run's width."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (v INTEGER)")
    con.execute("INSERT INTO t SELECT (i * 7919) % 10000 FROM range(4001) r(i)")
    schema = Schema.load({"tables": {"t": {"columns": {"v": {"type": "integer", "lower": 0, "upper": 9999}}}}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cursor = dpsql.connect(con, schema=schema, budget=Budget(epsilon=HUGE), rng=SeededRandomSource(2)).cursor()
        cursor.execute("SELECT MEDIAN(v) AS m FROM t", epsilon=HUGE)
    table = cursor.fetch_arrow_table()
    width = json.loads(table.schema.metadata[b"dpsql"])["order_statistics"]["m"]["bias_bound"]
    assert width == 20.0
    truth = con.execute("SELECT median(v) FROM t").fetchone()
    assert truth is not None
    found = table.to_pydict()
    assert abs(found["m"][0] - truth[0]) <= width + SLACK
    assert found["m_low"][0] <= truth[0] <= found["m_high"][0]


def test_explain_names_the_order_statistic_and_its_bias_bound(data: duckdb.DuckDBPyConnection) -> None:
    cursor = dpsql.connect(data, schema=SCHEMA, budget=Budget(epsilon=1.0)).cursor()
    report = cursor.explain("SELECT MEDIAN(age) FROM t", epsilon=1.0)
    assert "order statistic median_age: the 0.5 quantile, interpolated, from 100 noisy prefix counts" in report
    assert "bias ≤ the cell width 1" in report and "ratio 0.0" in report


def test_explain_and_metadata_describe_the_min_max_interval(data: duckdb.DuckDBPyConnection) -> None:
    cursor = dpsql.connect(data, schema=SCHEMA, budget=Budget(epsilon=1.0)).cursor()
    report = cursor.explain("SELECT MAX(age) AS top, PERCENTILE_CONT(0) WITHIN GROUP (ORDER BY age) AS bottom FROM t",
                            epsilon=1.0)
    assert "order statistic top: approximate MAX, the middle of a 95% CI that holds for any data" in report
    assert "order statistic bottom: approximate MIN" in report and "union bound" in report
    entry = run(data, "SELECT MIN(age) AS m FROM t")["_meta"][0]["order_statistics"]["m"]
    assert "approximate MIN: the middle of a 95% CI that holds for any data" in entry["definition"]
    assert "1.96·stddev" in entry["bias_note"]


def test_under_rho_the_statement_groups_answer_and_say_why_not_residual_planner(
        data: duckdb.DuckDBPyConnection) -> None:
    cursor = dpsql.connect(data, schema=SCHEMA, budget=Budget(rho=HUGE), rng=SeededRandomSource(4)).cursor()
    sql = "SELECT g, COUNT(*), MEDIAN(age) FROM t GROUP BY g"
    assert "order statistics (MEDIAN, PERCENTILE, MIN, MAX) need the covariances" in cursor.explain(sql, rho=HUGE)
    cursor.execute(sql, rho=HUGE)
    found = cursor.fetch_arrow_table().to_pydict()
    for row, group in enumerate(found["g"]):
        u, v = order_statistics(data, f"AND g = '{group}'", 0.5)
        assert u - 0.5 - SLACK <= found["median_age"][row] <= v + 0.5 + SLACK


def test_sum_avg_and_median_of_one_column_share_the_batch(data: duckdb.DuckDBPyConnection) -> None:
    found = run(data, "SELECT SUM(age) AS s, AVG(age) AS a, MEDIAN(age) AS m FROM t")
    truth = data.execute("SELECT sum(age), avg(age) FROM t").fetchone()
    assert truth is not None
    assert abs(found["s"][0] - truth[0]) <= 4 * found["s_stddev"][0] + SLACK
    assert abs(found["a"][0] - truth[1]) <= 4 * found["a_stddev"][0] + SLACK
    u, v = order_statistics(data, "", 0.5)
    assert u - 0.5 - SLACK <= found["m"][0] <= v + 0.5 + SLACK


def test_order_by_the_interval_columns(data: duckdb.DuckDBPyConnection) -> None:
    found = run(data, "SELECT g, MEDIAN(age) AS m FROM t GROUP BY g ORDER BY m_high DESC, g")
    assert found["m_high"] == sorted(found["m_high"], reverse=True)


def test_an_empty_group_is_null_from_noisy_values(data: duckdb.DuckDBPyConnection) -> None:
    found = run(data, "SELECT g, MEDIAN(age) FROM t WHERE age > 97 GROUP BY g", epsilon=1.0)
    assert found["median_age"] == [None, None]  # no rows: N̂ is noise, below 2 standard errors (seeded)
    assert "2 group(s) NULL" in found["_meta"][0]["order_statistics"]["median_age"]["null"]


def test_a_where_clause_never_true_gives_null_and_charges_nothing(data: duckdb.DuckDBPyConnection) -> None:
    budget = Budget(epsilon=1.0)
    cursor = dpsql.connect(data, schema=SCHEMA, budget=budget).cursor()
    cursor.execute("SELECT MEDIAN(age) FROM t WHERE age > 5 AND age < 3", epsilon=0.5)
    assert cursor.fetch_arrow_table().to_pydict()["median_age"] == [None]  # N̂ = 0 exactly: below 1
    assert budget.remaining == 1.0


# ==================================================================================== refusals
@pytest.mark.parametrize(("sql", "error", "words"), [
    ("SELECT MEDIAN(g) FROM t", SchemaError, ["categorical", "line 1, col 8"]),
    ("SELECT MEDIAN(income) FROM t", SchemaError, ["income"]),
    ("SELECT QUANTILE_CONT(age, 1.5) FROM t", InvalidQueryError, ["outside [0, 1]", "line 1, col 27"]),
    ("SELECT PERCENTILE_CONT(-0.1) WITHIN GROUP (ORDER BY age) FROM t", InvalidQueryError, ["outside [0, 1]"]),
    ("SELECT QUANTILE_CONT(age, [0.1, 0.5]) FROM t", UnsupportedQueryError, ["a list of fractions", "one QUANTILE"]),
    ("SELECT age, MEDIAN(age) FROM t GROUP BY age", UnsupportedQueryError, ["grouped by age"]),
    ("SELECT QUANTILE_CONT(age) FROM t", UnsupportedQueryError, ["QUANTILE_CONT without a fraction", "col 8"]),
    ("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY age, g) FROM t", UnsupportedQueryError, ["2 keys"]),
    ("SELECT MIN(age + 1) FROM t", UnsupportedQueryError, ["arithmetic in MIN()", "col 12"]),
    ("SELECT MEDIAN(age) AS m, COUNT(*) AS m_low FROM t", InvalidQueryError, ["'m_low' would appear twice"]),
    ("SELECT g, MEDIAN(age) AS m FROM t GROUP BY g HAVING COUNT(*) > 5", UnsupportedQueryError,
     ["order statistic m (line 1, col 11)", "HAVING", "a statement of its own"]),
    ("SELECT MEDIAN(age) FROM t UNION ALL SELECT MEDIAN(age) FROM t WHERE g = 'a'", UnsupportedQueryError,
     ["UNION ALL", "a statement of its own"]),
])
def test_refusals_name_the_problem_and_leave_the_budget(data: duckdb.DuckDBPyConnection, sql: str,
                                                         error: type[Exception], words: list[str]) -> None:
    budget = Budget(epsilon=1.0)
    cursor = dpsql.connect(data, schema=SCHEMA, budget=budget).cursor()
    with pytest.raises(error) as raised:
        cursor.execute(sql, epsilon=0.5)
    for word in words:
        assert word in str(raised.value)
    assert budget.remaining == 1.0


# ==================================================================================== calibration
CALIBRATION_DRAWS = 300


@pytest.mark.slow
def test_the_95_percent_interval_covers_the_median_about_95_percent_of_the_time() -> None:
    """At ε = 1 over 300 seeded releases: coverage of DuckDB's exact median by [low, high].

    1,001 integers uniform over 0..499 (cells of one value, about 2 rows each), N odd so the median
    is one data value. The prefix counts' noise (sd ≈ 10 rows) spans some 5 cells, so widening the
    CI to cell boundaries adds little and the coverage should be near the nominal 95 % (a run
    gave 96 %). The binomial standard error at 95 % over 300 draws is 1.26 %; the test accepts
    [0.95 − 3.5·se, 0.95 + 3.5·se] = [0.906, 0.994]: a CI too narrow (e.g. without the covariance
    term, or a z of 1) or one that never misses (e.g. always the whole domain) fails.
    """
    rng = np.random.default_rng(5)
    con = duckdb.connect()
    con.execute("CREATE TABLE t (v INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(int(a),) for a in rng.integers(0, 500, 1001)])
    schema = Schema.load({"tables": {"t": {"columns": {"v": {"type": "integer", "lower": 0, "upper": 499}}}}})
    truth = con.execute("SELECT median(v) FROM t").fetchone()
    assert truth is not None
    cursor = dpsql.connect(con, schema=schema, budget=Budget(epsilon=CALIBRATION_DRAWS),
                           rng=SeededRandomSource(11)).cursor()
    covered, errors = 0, []
    for _ in range(CALIBRATION_DRAWS):
        cursor.execute("SELECT MEDIAN(v) AS q FROM t", epsilon=1.0)
        table = cursor.fetch_arrow_table().to_pydict()
        covered += table["q_low"][0] <= truth[0] <= table["q_high"][0]
        errors.append(table["q"][0] - truth[0])
    se = math.sqrt(0.95 * 0.05 / CALIBRATION_DRAWS)
    assert 0.95 - 3.5 * se <= covered / CALIBRATION_DRAWS <= 0.95 + 3.5 * se, covered
    assert abs(np.mean(errors)) < 4 * np.std(errors) / math.sqrt(CALIBRATION_DRAWS) + 0.5  # unbiased to the cell


# ==================================================================================== COUNT(DISTINCT unit)
UNIT_COLUMNS = {"pid": {"type": "integer", "lower": 0, "upper": 999, "bin_width": 1000},
                "g": {"type": "categorical", "values": ["a", "b"]},
                "age": {"type": "integer", "lower": 0, "upper": 49}}


def unit_schema(max_rows: int) -> Schema:
    return Schema.load({"tables": {"p": {"columns": UNIT_COLUMNS,
                                         "privacy_unit": {"column": "pid", "max_rows": max_rows}}}})


@pytest.fixture(scope="module")
def people() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("CREATE TABLE p AS SELECT i AS pid, CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END AS g, i % 50 AS age "
                "FROM range(1000) r(i)")
    yield con
    con.close()


def test_count_distinct_unit_matches_duckdb_where_each_unit_has_one_row(people: duckdb.DuckDBPyConnection) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cursor = dpsql.connect(people, schema=unit_schema(1), budget=Budget(epsilon=HUGE),
                               rng=SeededRandomSource(1)).cursor()
        cursor.execute("SELECT g, COUNT(DISTINCT pid) AS n, COUNT(*) AS c FROM p WHERE age < 20 GROUP BY g",
                       epsilon=HUGE)
    found = cursor.fetch_arrow_table().to_pydict()
    truth = people.execute("SELECT g, COUNT(DISTINCT pid) FROM p WHERE age < 20 GROUP BY g ORDER BY g").fetchall()
    for row, (group, count) in enumerate(truth):
        assert found["g"][row] == group
        assert abs(found["n"][row] - count) <= 4 * found["n_stddev"][row] + SLACK
        assert found["n_stddev"][row] == found["c_stddev"][row]  # COUNT(*)'s queries: the same error


@pytest.mark.parametrize(("sql", "max_rows", "words"), [
    ("SELECT COUNT(DISTINCT age) FROM p", 1, ["COUNT(DISTINCT age) (line 1, col 8)", "privacy unit is 'pid'"]),
    ("SELECT COUNT(DISTINCT pid) FROM p WHERE age < 20", 3, ["COUNT(DISTINCT pid) (line 1, col 8)",
                                                              "keeps up to 3 rows", "one declared cell"]),
    ("SELECT COUNT(DISTINCT pid, age) FROM p", 1, ["COUNT(DISTINCT) of 2 expressions"]),
])
def test_count_distinct_refusals(people: duckdb.DuckDBPyConnection, sql: str, max_rows: int,
                                 words: list[str]) -> None:
    budget = Budget(epsilon=1.0)
    cursor = dpsql.connect(people, schema=unit_schema(max_rows), budget=budget).cursor()
    with pytest.raises(UnsupportedQueryError) as raised:
        cursor.execute(sql, epsilon=0.5)
    for word in words:
        assert word in str(raised.value)
    assert budget.remaining == 1.0
