"""Window aggregates over a statement's released groups (``dpsql.sql.windows``, ``dpsql.answers.windows``).

Shares over the whole result and within partitions, running totals (RANGE with peers, ROWS frames,
DESC), averages and counts over frames, and random frames (Hypothesis) are checked against DuckDB's
exact answer to the same SQL at a very large budget; their standard errors against cᵀ Σ c with
Σ = σ² W (AᵀA)⁺ Wᵀ computed densely from the measurement (and the delta method's gradient for a
share); the answers by GLS over a kept release against the measured ones; an accuracy target met by
a running total; a share and a running total by z-scores over seeded releases at ε = 1; and windows
over rows, unsupported frames and keys are refused, charging nothing.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_calibration import assert_calibrated, releases
from test_derived_sql import SCHEMA, SCHEMA_DICT, _rows, _table, connect

from _helpers import assert_matches_duckdb, assert_refused_free, captured_measurements
from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.noise import SeededRandomSource
from dpsql.sql import windows


@pytest.fixture(scope="module")
def data() -> duckdb.DuckDBPyConnection:
    return _table(_rows())


# Every group of these statements holds rows (x: 0–9, sex × region: 6 groups), so SQL sees the
# same rows dpsql returns (dpsql returns every declared group, also an empty one).
CASES = [
    "SELECT region, COUNT(*) / SUM(COUNT(*)) OVER () AS share FROM people GROUP BY region ORDER BY region",
    "SELECT sex, region, COUNT(*) / SUM(COUNT(*)) OVER (PARTITION BY sex) AS share, "
    "SUM(COUNT(*)) OVER (PARTITION BY region) AS by_region FROM people GROUP BY sex, region ORDER BY sex, region",
    "SELECT x, SUM(COUNT(*)) OVER (ORDER BY x) AS running FROM people GROUP BY x ORDER BY x",
    "SELECT x, SUM(SUM(hours)) OVER (ORDER BY x DESC) AS running FROM people GROUP BY x ORDER BY x",
    "SELECT x, AVG(COUNT(*)) OVER (ORDER BY x ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS moving, "
    "COUNT(COUNT(*)) OVER (ORDER BY x ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS frame FROM people "
    "GROUP BY x ORDER BY x",
    "SELECT x, SUM(COUNT(*)) OVER (ORDER BY x ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS rest "
    "FROM people WHERE hours >= 1 GROUP BY x ORDER BY x",
    # RANGE: the current row's peers (same sex) are in its frame
    "SELECT sex, region, SUM(COUNT(*)) OVER (ORDER BY sex) AS upto, "
    "SUM(COUNT(*)) OVER (ORDER BY sex RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS from_here "
    "FROM people GROUP BY sex, region ORDER BY sex, region",
    "SELECT sex, region, 100.0 * SUM(x) / SUM(SUM(x)) OVER (PARTITION BY region) AS pct FROM people "
    "WHERE hours >= 2 GROUP BY sex, region ORDER BY pct DESC LIMIT 4",
    "SELECT COUNT(*) / SUM(COUNT(*)) OVER () AS whole FROM people",
    # keys named by the output names of group keys (a CASE, a bin, a renamed column), as DuckDB binds them
    "SELECT CASE WHEN x < 4 THEN 'low' ELSE 'high' END AS band, region AS r, COUNT(*) / SUM(COUNT(*)) OVER "
    "(PARTITION BY band) AS share, SUM(COUNT(*)) OVER (PARTITION BY r ORDER BY band DESC) AS run FROM people "
    "GROUP BY band, r ORDER BY band, r",
    "SELECT x // 2 AS h, SUM(COUNT(*)) OVER (ORDER BY h) AS run FROM people GROUP BY h ORDER BY h",
    # a NULL group (a CASE without ELSE) sorts last in either direction and is a partition of its own
    "SELECT CASE WHEN x < 3 THEN 'a' WHEN x < 6 THEN 'b' END AS band, sex, SUM(COUNT(*)) OVER (ORDER BY band DESC) "
    "AS r, COUNT(*) / SUM(COUNT(*)) OVER (PARTITION BY band) AS s FROM people GROUP BY band, sex ORDER BY band, sex",
    # each part of a UNION ALL windows its own rows
    "SELECT sex AS k, COUNT(*) / SUM(COUNT(*)) OVER () AS s FROM people GROUP BY sex UNION ALL "
    "SELECT region, COUNT(*) / SUM(COUNT(*)) OVER () FROM people GROUP BY region ORDER BY k",
    "SELECT region, COUNT(*) AS n, COUNT(*) - AVG(COUNT(*)) OVER () AS above FROM people GROUP BY region "
    "ORDER BY n DESC",
]


@pytest.mark.parametrize("sql", CASES)
def test_windows_match_duckdb_at_a_very_large_budget(data: duckdb.DuckDBPyConnection, sql: str) -> None:
    with connect(data) as connection:
        table = connection.cursor().execute(sql, rho=1e6).fetch_arrow_table()
    assert_matches_duckdb(data, sql, table)


def _bound(offset: int | None, unbounded: str) -> str:
    return unbounded if offset is None else "CURRENT ROW" if offset == 0 else \
        f"{-offset} PRECEDING" if offset < 0 else f"{offset} FOLLOWING"


@st.composite
def _windows(draw: st.DrawFn) -> str:
    """A random window over the sex × region × x groups: partition keys, ORDER BY over the rest (all
    of them for a ROWS frame, so that no two rows tie and SQL's order is the one dpsql uses), a frame."""
    keys = ["sex", "region", "x"]
    partition = draw(st.lists(st.sampled_from(keys), unique=True, max_size=2))
    rest = [k for k in keys if k not in partition]
    rows = draw(st.booleans())
    order = draw(st.permutations(rest)) if rows else draw(st.lists(st.sampled_from(rest), unique=True))
    ordered = ", ".join(f"{k}{draw(st.sampled_from(['', ' DESC']))}" for k in order)
    if rows:
        start = draw(st.one_of(st.none(), st.integers(-3, 2)))
        end = draw(st.one_of(st.none(), st.integers(max(start if start is not None else -3, -3), 3)))
        frame = f" ROWS BETWEEN {_bound(start, 'UNBOUNDED PRECEDING')} AND {_bound(end, 'UNBOUNDED FOLLOWING')}"
    else:
        frame = draw(st.sampled_from(["", " RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
                                      " RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"]))
        frame = frame if order or not frame.startswith(" RANGE BETWEEN CURRENT") else ""
    clauses = " ".join(part for part in (f"PARTITION BY {', '.join(partition)}" if partition else "",
                                         f"ORDER BY {ordered}" if order else "") if part)
    function = draw(st.sampled_from(["SUM", "AVG", "COUNT"]))
    return f"{function}(COUNT(*)) OVER ({clauses}{frame})"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(window=_windows())
def test_random_frames_match_duckdb(data: duckdb.DuckDBPyConnection, window: str) -> None:
    sql = f"SELECT sex, region, x, {window} AS w FROM people GROUP BY sex, region, x ORDER BY sex, region, x"
    with connect(data) as connection:
        table = connection.cursor().execute(sql, rho=1e6).fetch_arrow_table()
    assert_matches_duckdb(data, sql, table)


def test_a_window_costs_what_the_plain_statement_costs_and_is_said_in_the_metadata(
        data: duckdb.DuckDBPyConnection) -> None:
    with connect(data, seed=4, epsilon=5.0) as connection:
        plain = connection.cursor().execute("SELECT x, COUNT(*) AS n FROM people GROUP BY x",
                                            epsilon=1.0).fetch_arrow_table()
        spent = connection.budget.spent
    with connect(data, seed=4, epsilon=5.0) as connection:
        windowed = connection.cursor().execute(
            "SELECT x, COUNT(*) AS n, SUM(COUNT(*)) OVER (ORDER BY x) AS r FROM people GROUP BY x",
            epsilon=1.0).fetch_arrow_table()
        assert connection.budget.spent == spent
    np.testing.assert_array_equal(windowed.column("n").to_numpy(), plain.column("n").to_numpy())
    np.testing.assert_allclose(windowed.column("r").to_numpy(), np.cumsum(plain.column("n").to_numpy()))
    note = json.loads(windowed.schema.metadata[b"dpsql"])["windows"]["r"]
    assert "SUM OVER ORDER BY x RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW" in note
    assert "every declared group is a row" in note


def test_every_declared_group_is_a_row_of_the_window_also_an_empty_one(data: duckdb.DuckDBPyConnection) -> None:
    """WHERE x < 9 leaves the group x = 9 without rows: dpsql returns it (a count near 0), so the
    frames that reach it include it, where SQL would not see the row; an empty frame's SUM is NULL."""
    sql = ("SELECT x, COUNT(*) AS n, SUM(COUNT(*)) OVER (ORDER BY x ROWS BETWEEN 1 FOLLOWING AND 1 FOLLOWING) "
           "AS next FROM people WHERE x < 9 GROUP BY x ORDER BY x")
    with connect(data) as connection:
        table = connection.cursor().execute(sql, rho=1e6).fetch_arrow_table()
    assert table.column("x").to_pylist() == list(range(10)) and len(data.execute(sql).fetchall()) == 9
    n, following = table.column("n").to_numpy(), table.column("next").to_pylist()
    assert abs(n[9]) < 0.01 and following[9] is None
    np.testing.assert_allclose(following[:9], n[1:])


# ============================================================================== standard errors
def test_window_standard_errors_are_c_sigma_c_of_the_dense_covariance(
        data: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per sex × x group (20 rows, one count measurement): a running total within each sex, a
    share of the sex's total, and a moving sum of three rows. Var = cᵀ Σ c with Σ = σ² W (AᵀA)⁺ Wᵀ
    over the statement's rows, computed densely here; for the share c is the delta method's gradient
    e_r/S − a_r/S²·1_partition. The covariances matter: the independent sum differs."""
    sql = ("SELECT sex, x, COUNT(*) AS n, SUM(COUNT(*)) OVER (PARTITION BY sex ORDER BY x) AS run, "
           "COUNT(*) / SUM(COUNT(*)) OVER (PARTITION BY sex) AS share, "
           "SUM(COUNT(*)) OVER (ORDER BY sex, x ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS moving "
           "FROM people GROUP BY sex, x; SELECT sex, COUNT(*) AS n FROM people GROUP BY sex; "
           "SELECT x, COUNT(*) AS n FROM people WHERE x BETWEEN 2 AND 6 GROUP BY x")
    seen = captured_measurements(monkeypatch)
    prepared = engine.prepare(sql, SCHEMA, PrivacyCost(epsilon=1.0))
    table = engine.run(prepared, backend=DuckDBBackend(data), budget=Budget(epsilon=2.0), rng=SeededRandomSource(3))[0]
    compiled = prepared.chosen.compiled
    assert len(seen) == 1
    release, statement = seen[0], compiled.statements[0]
    strategy = release.strategy.dense()
    block = compiled.groups[0].blocks[statement.aggregates[0].blocks[0]]
    W = block.workload.dense()[statement.block_rows] * block.scale
    sigma = release.noise_variance * W @ np.linalg.pinv(strategy.T @ strategy) @ W.T
    sexes, xs = table.column("sex").to_pylist(), table.column("x").to_pylist()
    n = table.column("n").to_numpy()
    same_sex = np.array([[a == b for b in sexes] for a in sexes], dtype=float)
    running = same_sex * np.array([[xb <= xa for xb in xs] for xa in xs], dtype=float)
    position = {key: i for i, key in enumerate(sorted(zip(sexes, xs)))}
    order = np.array([position[key] for key in zip(sexes, xs)])
    moving = (np.abs(order[:, None] - order[None, :]) <= 1).astype(float)
    totals = same_sex @ n
    share = np.eye(len(n)) / totals[:, None] - (n / totals**2)[:, None] * same_sex
    for name, C in (("run", running), ("moving", moving), ("share", share)):
        expected = np.einsum("ij,jk,ik->i", C, sigma, C)
        np.testing.assert_allclose(table.column(f"{name}_stddev").to_numpy() ** 2, expected, rtol=1e-6)
        independent = np.einsum("ij,j,ij->i", C, np.diag(sigma), C)
        assert np.max(np.abs(independent - expected) / expected) > 0.01, f"{name}: the covariances matter"
    np.testing.assert_allclose(table.column("run").to_numpy(), running @ n)


def test_a_window_answered_from_a_kept_release_has_the_measured_standard_errors(
        data: duckdb.DuckDBPyConnection) -> None:
    """Asked again, the statement is free: GLS over the one kept release is the matrix mechanism's
    own answer, so the window's values and standard errors (from the pool's whitening) are the
    measured ones (from (AᵀA)⁺)."""
    sql = ("SELECT sex, region, COUNT(*) / SUM(COUNT(*)) OVER (PARTITION BY sex) AS share, "
           "SUM(COUNT(*)) OVER (ORDER BY sex, region) AS run FROM people GROUP BY sex, region")
    with connect(data, seed=6, epsilon=5.0) as connection:
        first = connection.cursor().execute(sql, epsilon=1.0).fetch_arrow_table()
        spent = connection.budget.spent
        again = connection.cursor().execute(sql, epsilon=1.0).fetch_arrow_table()
        assert connection.budget.spent == spent, "answered from the kept release"
    for name in ("share", "share_stddev", "run", "run_stddev"):
        np.testing.assert_allclose(again.column(name).to_numpy(), first.column(name).to_numpy(), rtol=1e-6)


def test_an_accuracy_target_covers_a_running_total_and_not_a_share(data: duckdb.DuckDBPyConnection) -> None:
    """A sum over a window is linear in the answers: its standard error is known before the data
    (cᵀ Σ c from the plan), so the least cost meeting max_stddev makes the largest running total's
    stddev the target; a share's delta-method error depends on the noisy values and is refused."""
    sql = "SELECT x, COUNT(*) AS n, SUM(COUNT(*)) OVER (ORDER BY x) AS r FROM people GROUP BY x"
    with connect(data, seed=8, epsilon=50.0) as connection:
        table = connection.cursor().execute(sql, max_stddev=20).fetch_arrow_table()
        worst = table.column("r_stddev").to_numpy().max()
        assert 0.999 * 20 <= worst <= 20 and table.column("n_stddev").to_numpy().max() < 10
        with pytest.raises(NotSupportedError, match="'s' \\(line 1, col 11\\): a derived output that is not linear"):
            connection.cursor().execute("SELECT x, COUNT(*) / SUM(COUNT(*)) OVER () AS s FROM people GROUP BY x",
                                        max_stddev=20)


def test_local_mode_gives_a_windowed_total_the_standard_error_of_the_total(tmp_path: Any) -> None:
    """Local answers read one estimate x̂: SUM(COUNT(*)) OVER () over the sexes is the count of F or M,
    with its value and standard error (without the covariance it would be √(var F + var M))."""
    from dpsql.local.sql import answer_batch, design_batch, simulate_database
    database = tmp_path / "people.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE people (sex VARCHAR, region VARCHAR, hours INTEGER, x INTEGER)")
        con.executemany("INSERT INTO people VALUES (?, ?, ?, ?)", _rows())
    queries = ("SELECT sex, COUNT(*) AS n, SUM(COUNT(*)) OVER () AS t FROM people GROUP BY sex; "
               "SELECT COUNT(*) AS total FROM people WHERE sex = 'F' OR sex = 'M'")
    published = design_batch(queries, SCHEMA_DICT, epsilon=1.0, seed=0)
    windowed, total = answer_batch(queries, published,
                                   simulate_database(published, database, rng=np.random.default_rng(3)))
    np.testing.assert_allclose(windowed.column("t").to_numpy(), total.column("total").to_numpy()[0], rtol=1e-9)
    np.testing.assert_allclose(windowed.column("t_stddev").to_numpy(), total.column("total_stddev").to_numpy()[0],
                               rtol=1e-6)


# ============================================================================== calibration
@pytest.mark.slow
def test_a_share_and_a_running_total_are_calibrated_at_epsilon_1() -> None:
    """300 seeded releases at ε = 1: z = (answer − DuckDB's truth)/stddev of each region's share
    within its sex (delta method: the numerator is part of the denominator) and of a running total
    over x has mean 0 and E z² = 1 (test_calibration.calibrated, whose tolerances follow from the
    number of z-scores), and the check fails for a stddev off by 2."""
    con = _table(_rows())
    sql = ("SELECT sex, region, COUNT(*) / SUM(COUNT(*)) OVER (PARTITION BY sex) AS share FROM people "
           "GROUP BY sex, region ORDER BY sex, region; "
           "SELECT x, SUM(COUNT(*)) OVER (ORDER BY x) AS run FROM people GROUP BY x ORDER BY x")
    truths = [[row[-1] for row in con.execute(statement).fetchall()] for statement in sql.split(";")]
    out = releases(con, SCHEMA_DICT, sql, {"epsilon": 1.0}, runs=300, seed=29)
    z = [np.concatenate([(tables[k].column(name).to_numpy() - truths[k]) / tables[k].column(f"{name}_stddev").to_numpy()
                         for k, name in enumerate(("share", "run"))]) for tables in out]
    assert_calibrated(np.array(z))


@pytest.mark.slow
def test_a_share_combined_with_a_kept_release_by_gls_is_calibrated_at_epsilon_1() -> None:
    """200 seeded pairs of releases at ε = 0.5 each: the counts by sex × region, then a share within
    each sex answered by GLS over both measurements (the metadata says so): the share's delta-method
    error reads the pool's whitening, and its z-scores against DuckDB's truth are calibrated."""
    con = _table(_rows())
    sql = ("SELECT sex, region, COUNT(*) / SUM(COUNT(*)) OVER (PARTITION BY sex) AS share FROM people "
           "GROUP BY sex, region ORDER BY sex, region")
    truth = [row[-1] for row in con.execute(sql).fetchall()]
    z = []
    for seed in range(200):
        with connect(con, seed=1000 + seed, epsilon=5.0) as connection:
            connection.cursor().execute("SELECT sex, region, COUNT(*) FROM people GROUP BY sex, region", epsilon=0.5)
            table = connection.cursor().execute(sql, epsilon=0.5).fetch_arrow_table()
        assert json.loads(table.schema.metadata[b"dpsql"])["reuse"]["answered_by_releases"] == [1]
        z.append((table.column("share").to_numpy() - truth) / table.column("share_stddev").to_numpy())
    assert_calibrated(np.array(z))


# ============================================================================== refusals and EXPLAIN
@pytest.mark.parametrize("sql, error, words", [
    ("SELECT x, ROW_NUMBER() OVER (ORDER BY x) AS r, COUNT(*) FROM people GROUP BY x", NotSupportedError,
     "window function ROW_NUMBER() OVER (...) over the table's rows is not supported (line 1, col 11"),
    ("SELECT x, LAG(x) OVER (ORDER BY x) AS r, COUNT(*) FROM people GROUP BY x", NotSupportedError,
     "would read individual rows"),
    ("SELECT x, SUM(x) OVER () AS s, COUNT(*) FROM people GROUP BY x", NotSupportedError,
     "window function SUM() OVER (...) over the table's rows"),
    ("SELECT x, COUNT(*) OVER () AS s FROM people GROUP BY x", NotSupportedError, "COUNT(COUNT(*)) OVER"),
    ("SELECT x, SUM(COUNT(*)) OVER (ORDER BY x RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) FROM people GROUP BY x",
     NotSupportedError, "a RANGE frame with an offset is not supported (line 1, col 11"),
    ("SELECT x, SUM(COUNT(*)) OVER (ORDER BY x GROUPS UNBOUNDED PRECEDING) FROM people GROUP BY x",
     NotSupportedError, "GROUPS or EXCLUDE"),
    ("SELECT x, SUM(COUNT(*)) OVER (ORDER BY x ROWS UNBOUNDED PRECEDING EXCLUDE CURRENT ROW) FROM people GROUP BY x",
     NotSupportedError, "GROUPS or EXCLUDE"),
    ("SELECT x, SUM(COUNT(*)) OVER (ORDER BY hours) FROM people GROUP BY x", NotSupportedError,
     "the window key hours (line 1, col 40) is not a GROUP BY column"),
    ("SELECT sex, SUM(AVG(x)) OVER () FROM people GROUP BY sex", NotSupportedError, "SUM(SUM(x)) OVER (...) by"),
    ("SELECT sex, COUNT(*) / SUM(COUNT(*)) OVER () AS s FROM people GROUP BY sex HAVING COUNT(*) > 10",
     NotSupportedError, "with HAVING is not supported"),
    ("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex ORDER BY SUM(COUNT(*)) OVER ()", NotSupportedError,
     "a window function outside the SELECT list"),
    ("SELECT sex, SUM(COUNT(*)) OVER (PARTITION BY sex + 1) FROM people GROUP BY sex", NotSupportedError,
     "as a window key"),
    ("SELECT x, SUM(COUNT(*) + 1) OVER () FROM people GROUP BY x", NotSupportedError, "inside a window function"),
    ("SELECT x, MAX(COUNT(*)) OVER () FROM people GROUP BY x", NotSupportedError,
     "aggregate MAX() OVER (...) of an aggregate is not supported (line 1, col 11"),
    ("SELECT x, SUM(COUNT(*)) FILTER (WHERE x > 1) OVER () FROM people GROUP BY x", NotSupportedError,
     "SUM(COUNT(*) FILTER (WHERE ...)) OVER (...)"),
    ("SELECT x, SUM(COUNT(*)) OVER w FROM people GROUP BY x WINDOW w AS (ORDER BY x)", NotSupportedError,
     "a named window (OVER w, WINDOW w AS ...) is not supported"),
    ("SELECT x, SUM(COUNT(*)) OVER (ORDER BY x NULLS FIRST) FROM people GROUP BY x", NotSupportedError,
     "NULLS FIRST in a window's ORDER BY"),
])
def test_refused_windows_name_the_construct_its_position_and_charge_nothing(
        data: duckdb.DuckDBPyConnection, sql: str, error: type[Exception], words: str) -> None:
    assert_refused_free(data, SCHEMA_DICT, sql, error, words)


def test_a_window_beyond_the_work_bound_is_refused_before_anything_is_spent(
        data: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "WINDOW_WORK", 100)
    assert_refused_free(data, SCHEMA_DICT, "SELECT x, SUM(COUNT(*)) OVER (ORDER BY x) FROM people GROUP BY x",
                        ProgrammingError, "above WINDOW_WORK = 100")


def test_explain_describes_a_window_and_residual_planner_declines_it() -> None:
    sql = ("SELECT sex, region, COUNT(*) / SUM(COUNT(*)) OVER (PARTITION BY sex) AS share FROM people "
           "GROUP BY sex, region")
    text = engine.explain(engine.prepare(sql, SCHEMA, PrivacyCost(rho=1.0)))
    assert ("share: window over the released groups (SUM OVER PARTITION BY sex RANGE BETWEEN UNBOUNDED PRECEDING "
            "AND UNBOUNDED FOLLOWING): post-processing, no extra privacy cost") in text
    assert "a window combines the answers of several groups" in text
