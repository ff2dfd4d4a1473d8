"""Outputs computed from released aggregates (arithmetic, constants, HAVING), end to end.

Each construct is checked against DuckDB's exact answer to the same SQL at a very large budget; the
standard error of a linear combination against Σ c_i c_j Cov(a_i, a_j) computed densely from the
measurement; a ratio and a difference of correlated counts by z-scores over seeded releases at
ε = 1; and derived outputs and HAVING against the cost and noise of the plain statement.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_calibration import assert_calibrated, releases

import dpsql
from _helpers import assert_matches_duckdb, captured_measurements, duckdb_table
from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema
from dpsql.sql import derived
from dpsql.sql.parse import parse_batch

COLUMNS: dict[str, dict[str, object]] = {
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "region": {"type": "categorical", "values": ["N", "S", "E"]},
    "hours": {"type": "integer", "lower": 0, "upper": 7},
    "x": {"type": "integer", "lower": 0, "upper": 9},
}
SCHEMA_DICT: dict[str, Any] = {"tables": {"people": {"columns": COLUMNS}}}
SCHEMA = Schema.load(SCHEMA_DICT)
ROWS = 3000


def _rows(seed: int = 5) -> list[tuple[object, ...]]:
    """Regions with shares 1/2, 3/10, 1/5 (counts far apart); hours NULL in ~20 % of rows."""
    rng = np.random.default_rng(seed)
    return [(str(rng.choice(["F", "M"])), str(rng.choice(["N", "S", "E"], p=[0.5, 0.3, 0.2])),
             None if rng.random() < 0.2 else int(rng.integers(0, 8)), int(rng.integers(0, 10)))
            for _ in range(ROWS)]


def _table(rows: list[tuple[object, ...]]) -> duckdb.DuckDBPyConnection:
    return duckdb_table("people", "sex VARCHAR, region VARCHAR, hours INTEGER, x INTEGER", rows)


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = _table(_rows())
    yield con
    con.close()


def connect(con: duckdb.DuckDBPyConnection, seed: int = 0, **budget: float) -> dpsql.Connection:
    return dpsql.connect(con, schema=SCHEMA, budget=Budget(**(budget or {"rho": 1e7})), rng=SeededRandomSource(seed))


# ============================================================================== against DuckDB
CASES = [
    "SELECT sex, SUM(x)/COUNT(*) AS r FROM people GROUP BY sex ORDER BY sex",
    "SELECT region, AVG(x)*12 AS a FROM people GROUP BY region ORDER BY region",
    "SELECT sex, COUNT(*) - SUM(x) AS d FROM people GROUP BY sex ORDER BY sex",
    "SELECT 100.0 * SUM(hours) / SUM(x) AS p FROM people",
    "SELECT sex, (SUM(x) + SUM(hours)) / 2 AS m, -COUNT(*) AS neg, COUNT(hours) * (1 + 1) AS twice "
    "FROM people GROUP BY sex ORDER BY sex",
    "SELECT sex, AVG(hours) / AVG(x) - 1 AS q, SUM(x) * SUM(hours) / COUNT(*) AS prod FROM people GROUP BY sex "
    "ORDER BY sex",
    "SELECT 'adults' AS grp, 7 AS seven, sex, COUNT(*) AS n FROM people WHERE x >= 3 GROUP BY sex ORDER BY sex",
    # GROUP BY ALL: the select items without an aggregate that are not constants
    "SELECT sex, region, COUNT(*) AS n FROM people GROUP BY ALL ORDER BY sex, region",
    "SELECT 'k' AS k, CASE WHEN x < 5 THEN 'low' ELSE 'high' END AS band, SUM(x) / COUNT(*) AS m FROM people "
    "GROUP BY ALL ORDER BY band",
    "SELECT region, COUNT(*) AS n FROM people GROUP BY region HAVING COUNT(*) > 750 ORDER BY n DESC",
    "SELECT sex, region, AVG(x) AS a FROM people GROUP BY sex, region "
    "HAVING SUM(x) / COUNT(*) > 0 AND region <> 'E' ORDER BY a DESC LIMIT 3",
    "SELECT region, COUNT(*) AS n FROM people GROUP BY region HAVING n > 500 AND region IN ('N', 'E') ORDER BY 1",
    # OFFSET after ORDER BY: plain, derived, after UNION ALL and on an aggregate CTE
    "SELECT region, COUNT(*) AS n FROM people GROUP BY region ORDER BY n DESC LIMIT 1 OFFSET 1",
    "SELECT region, SUM(x) / COUNT(*) AS r FROM people GROUP BY region ORDER BY region OFFSET 2",
    "SELECT 'low' AS band, COUNT(*) AS n FROM people WHERE x < 5 UNION ALL SELECT 'high', COUNT(*) FROM people "
    "WHERE x >= 5 ORDER BY band LIMIT 1 OFFSET 1",
    "WITH s AS (SELECT region, COUNT(*) AS n FROM people GROUP BY region) SELECT region, n FROM s ORDER BY n OFFSET 1",
    "SELECT region FROM people GROUP BY region HAVING NOT COUNT(*) BETWEEN 700 AND 1200 ORDER BY region",
    "SELECT region, SUM(x) / COUNT(*) AS r FROM people GROUP BY region HAVING r IS NOT NULL ORDER BY r DESC LIMIT 2",
    # UNION ALL: one table, names from the first part, ORDER BY/LIMIT on the whole
    "SELECT 'low' AS band, COUNT(*) AS n FROM people WHERE x < 5 "
    "UNION ALL SELECT 'high', COUNT(*) FROM people WHERE x >= 5 ORDER BY n DESC",
    "SELECT sex AS k, SUM(x) / COUNT(*) AS r FROM people GROUP BY sex "
    "UNION ALL SELECT region, AVG(x) FROM people GROUP BY region ORDER BY k LIMIT 4",
    "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex UNION ALL (SELECT sex, COUNT(*) FROM people WHERE x > 4 "
    "GROUP BY sex) UNION ALL SELECT sex, SUM(hours) FROM people GROUP BY sex ORDER BY 1, 2",
    # WITH: a filtered view, a projection, an aggregate statement, and with UNION ALL
    "WITH big AS (SELECT * FROM people WHERE x >= 3) SELECT sex, COUNT(*) AS n FROM big WHERE big.hours > 2 "
    "GROUP BY sex ORDER BY sex",
    "WITH v AS (SELECT sex, x FROM people p WHERE p.x < 8), w AS (SELECT * FROM v WHERE x > 1) "
    "SELECT sex, SUM(x) AS s FROM w GROUP BY sex ORDER BY sex",
    "WITH s AS (SELECT region, COUNT(*) AS n, SUM(x) AS t FROM people GROUP BY region) "
    "SELECT region, t / n AS r FROM s WHERE n > 700 ORDER BY r DESC",
    "WITH s AS (SELECT region, COUNT(*) AS n FROM people GROUP BY region) SELECT * FROM s ORDER BY n LIMIT 2",
    "WITH a AS (SELECT * FROM people WHERE x < 5) SELECT 'F' AS s, COUNT(*) AS n FROM a WHERE sex = 'F' "
    "UNION ALL SELECT 'M', COUNT(*) FROM a WHERE sex = 'M' ORDER BY s",
    # with the other constructs of the grammar: FILTER, conditional aggregates, CASE keys, IS NULL
    "SELECT sex, COUNT(*) FILTER (WHERE x >= 5) / COUNT(*) AS share, COUNT_IF(hours IS NULL) AS missing "
    "FROM people GROUP BY sex ORDER BY sex",
    "SELECT CASE WHEN x < 5 THEN 'low' ELSE 'high' END AS band, SUM(CASE WHEN sex = 'F' THEN hours ELSE 0 END) "
    "/ COUNT(*) AS f_hours FROM people GROUP BY band HAVING COUNT(*) FILTER (WHERE region = 'N') > 100 ORDER BY 1",
]


@pytest.mark.parametrize("sql", CASES)
def test_derived_outputs_and_having_match_duckdb_at_a_very_large_budget(data: duckdb.DuckDBPyConnection,
                                                                       sql: str) -> None:
    with connect(data) as connection:
        table = connection.cursor().execute(sql, rho=1e6).fetch_arrow_table()
    assert_matches_duckdb(data, sql, table)


def test_default_names_are_the_expression_text_and_constants_keep_their_type(data: duckdb.DuckDBPyConnection) -> None:
    with connect(data) as connection:
        table = connection.cursor().execute("SELECT 'all' AS g, 2, SUM(x)  /  COUNT(*), COUNT(*) FROM people",
                                            rho=1e6).fetch_arrow_table()
    assert table.column_names == ["g", "2", "SUM(x) / COUNT(*)", "SUM(x) / COUNT(*)_stddev", "count", "count_stddev"]
    assert table.schema.field("g").type == pa.string() and table.schema.field("2").type == pa.int64()
    assert table.column("g").to_pylist() == ["all"] and table.column("2").to_pylist() == [2]


def test_a_having_on_the_noise_keeps_rows_by_their_noisy_values(data: duckdb.DuckDBPyConnection) -> None:
    """HAVING compares the released values: with a threshold at a group's true count, the row is
    kept exactly when its noisy count passes it (not its true count)."""
    truth = dict(data.execute("SELECT region, COUNT(*) FROM people GROUP BY region").fetchall())
    sql = f"SELECT region, COUNT(*) AS n FROM people GROUP BY region HAVING n >= {truth['S']} ORDER BY region"
    plain = "SELECT region, COUNT(*) AS n FROM people GROUP BY region ORDER BY region"
    kept, all_rows = set(), set()
    for seed in range(6):
        with connect(data, seed=seed, epsilon=10.0) as connection:
            noisy = connection.cursor().execute(plain, epsilon=1.0).fetch_arrow_table()
        with connect(data, seed=seed, epsilon=10.0) as connection:
            table = connection.cursor().execute(sql, epsilon=1.0).fetch_arrow_table()
        expected = [r for r, n in zip(noisy.column("region").to_pylist(), noisy.column("n").to_pylist())
                    if n >= truth["S"]]
        assert table.column("region").to_pylist() == expected
        kept.add("S" in expected)
        all_rows.add(len(expected))
    assert kept == {True, False}, "the noisy count fell on both sides of the threshold over the seeds"


# ============================================================================== cost and noise
def test_derived_outputs_and_having_cost_and_measure_what_the_plain_statement_does(
        data: duckdb.DuckDBPyConnection) -> None:
    """Same charge, same plan, same noise (same seed): the derived output is the plain answers'
    ratio, HAVING only drops rows, and hidden aggregates are measured as selected ones would be."""
    plain = "SELECT region, SUM(x) AS s, COUNT(*) AS n FROM people GROUP BY region ORDER BY region"
    fancy = ("SELECT region, SUM(x) / COUNT(*) AS r, 'k' AS k FROM people GROUP BY region "
             "HAVING COUNT(*) > 0 AND SUM(x) > 0 ORDER BY region")
    tables, spent = [], []
    for sql in (plain, fancy):
        with connect(data, seed=11, epsilon=5.0) as connection:
            tables.append(connection.cursor().execute(sql, epsilon=1.0).fetch_arrow_table())
            spent.append(connection.budget.spent)
    assert spent[0] == spent[1] == 1.0
    base, derived_table = tables
    assert derived_table.column("region").to_pylist() == base.column("region").to_pylist()
    s, n = np.array(base.column("s").to_pylist()), np.array(base.column("n").to_pylist())
    np.testing.assert_allclose(derived_table.column("r").to_numpy(), s / n, rtol=1e-12)
    costs = [engine.prepare(sql, SCHEMA, PrivacyCost(epsilon=1.0)).chosen.cost_parts() for sql in (plain, fancy)]
    assert costs[0] == costs[1]
    metadata = json.loads(derived_table.schema.metadata[b"dpsql"])
    assert metadata["having"] == derived.HAVING_NOTE and "delta method" in metadata["derived"]["r"]


def test_explain_states_that_having_is_post_processing() -> None:
    prepared = engine.prepare("SELECT sex, COUNT(*) FROM people GROUP BY sex HAVING SUM(x) > 3", SCHEMA,
                              PrivacyCost(epsilon=1.0))
    text = engine.explain(prepared)
    assert derived.HAVING_NOTE in text and "sum_x [hidden]" in text
    union = engine.explain(engine.prepare("SELECT COUNT(*) FROM people UNION ALL SELECT COUNT(*) FROM people "
                                          "WHERE x > 3", SCHEMA, PrivacyCost(epsilon=1.0)))
    assert "part 2 of 2 of the UNION ALL at line 1, col 1, returned as one table" in union


# ============================================================================== standard errors
def test_a_linear_combination_has_the_exact_standard_error_of_the_covariance_formula(
        data: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch) -> None:
    """d = 2·COUNT(*) − 3·COUNT(hours) + SUM(hours)/4, all three read from one value-cell count
    measurement (TaMM): Var(d) = cᵀ Σ c with Σ_jk = σ² w_j (AᵀA)⁺ w_kᵀ computed densely here; the
    covariances matter (the answer without them differs)."""
    sql = ("SELECT sex, COUNT(*) AS n, COUNT(hours) AS h, SUM(hours) AS s, "
           "2 * COUNT(*) - 3 * COUNT(hours) + SUM(hours) / 4 AS d FROM people GROUP BY sex")
    releases_seen = captured_measurements(monkeypatch)
    prepared = engine.prepare(sql, SCHEMA, PrivacyCost(epsilon=1.0))
    table = engine.run(prepared, backend=DuckDBBackend(data), budget=Budget(epsilon=2.0),
                       rng=SeededRandomSource(1))[0]
    compiled = prepared.chosen.compiled
    assert len(compiled.groups) == 1 and len(releases_seen) == 1, "one shared count measurement (value cells)"
    release = releases_seen[0]
    strategy = release.strategy.dense()
    profile = np.linalg.pinv(strategy.T @ strategy)
    statement = compiled.statements[0]
    blocks = [compiled.groups[0].blocks[output.blocks[0]] for output in statement.aggregates]
    rows = [block.workload.dense()[statement.block_rows] * block.scale for block in blocks]
    combined = 2 * rows[0] - 3 * rows[1] + rows[2] / 4
    expected = release.noise_variance * np.einsum("ij,jk,ik->i", combined, profile, combined)
    np.testing.assert_allclose(table.column("d_stddev").to_numpy() ** 2, expected, rtol=1e-6)
    independent = sum((c * table.column(f"{name}_stddev").to_numpy()) ** 2
                      for c, name in ((2, "n"), (3, "h"), (0.25, "s")))
    assert np.all(np.abs(independent - expected) > 0.05 * expected), "the covariances change the answer"
    np.testing.assert_allclose(table.column("d").to_numpy(), 2 * table.column("n").to_numpy()
                               - 3 * table.column("h").to_numpy() + table.column("s").to_numpy() / 4)


def test_scaling_an_avg_scales_its_standard_error(data: duckdb.DuckDBPyConnection) -> None:
    with connect(data, seed=2, epsilon=5.0) as connection:
        first = connection.cursor().execute("SELECT sex, AVG(x) AS a FROM people GROUP BY sex",
                                            epsilon=1.0).fetch_arrow_table()
    with connect(data, seed=2, epsilon=5.0) as connection:
        second = connection.cursor().execute("SELECT sex, AVG(x) * 12 AS a FROM people GROUP BY sex",
                                             epsilon=1.0).fetch_arrow_table()
    np.testing.assert_allclose(second.column("a").to_numpy(), 12 * first.column("a").to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(second.column("a_stddev").to_numpy(), 12 * first.column("a_stddev").to_numpy(),
                               rtol=1e-9)


def test_a_ratio_whose_denominator_is_lost_in_the_noise_is_null(data: duckdb.DuckDBPyConnection) -> None:
    """A WHERE clause never TRUE gives exact zeros: the ratio divides by an exact zero and is NULL, with a note."""
    sql = "SELECT SUM(hours) / COUNT(*) AS r FROM people WHERE x = 9 AND x <> 9"
    with connect(data, epsilon=5.0) as connection:
        table = connection.cursor().execute(sql, epsilon=1.0).fetch_arrow_table()
    assert table.column("r").to_pylist() == [None] and table.column("r_stddev").to_pylist() == [None]
    assert "r" in json.loads(table.schema.metadata[b"dpsql"])["avg_null"]
    with connect(data, epsilon=5.0) as connection:  # the note counts the rows HAVING keeps, here none
        table = connection.cursor().execute(sql + " HAVING r IS NOT NULL", epsilon=1.0).fetch_arrow_table()
    assert table.num_rows == 0 and "avg_null" not in json.loads(table.schema.metadata[b"dpsql"])


# ============================================================================== calibration
@pytest.mark.slow
def test_a_ratio_and_a_difference_of_correlated_counts_are_calibrated_at_epsilon_1() -> None:
    """300 seeded releases at ε = 1 of SUM(x)/COUNT(*) per region (delta method) and COUNT(*) −
    COUNT(hours) per region (three blocks of one value-cell measurement: their covariances are in the
    standard error): z = (answer − DuckDB's truth)/stddev has mean 0 and E z² = 1
    (test_calibration.calibrated), and fails when the stddev is off by 2."""
    con = _table(_rows())
    sql = ("SELECT region, SUM(x) / COUNT(*) AS r, COUNT(*) - COUNT(hours) AS d, SUM(hours) AS s FROM people "
           "GROUP BY region ORDER BY region")
    truth = con.execute("SELECT region, SUM(x) / COUNT(*), COUNT(*) - COUNT(hours) FROM people GROUP BY region "
                        "ORDER BY region").fetchall()
    out = releases(con, SCHEMA_DICT, sql, {"epsilon": 1.0}, runs=300, seed=17)
    answering = json.loads(out[0][0].schema.metadata[b"dpsql"])["answering"]
    assert any("TaMM" in note for note in answering), answering
    z = []
    for (table,) in out:
        assert table.column("region").to_pylist() == [row[0] for row in truth]
        ratio = (table.column("r").to_numpy() - [row[1] for row in truth]) / table.column("r_stddev").to_numpy()
        difference = (table.column("d").to_numpy() - [row[2] for row in truth]) / table.column("d_stddev").to_numpy()
        z.append(np.concatenate([ratio, difference]))
    assert_calibrated(np.array(z))


# ============================================================================== refusals
@pytest.mark.parametrize("sql, error, words", [
    ("SELECT x + COUNT(*) FROM people GROUP BY x", NotSupportedError, "a column in an output expression"),
    ("SELECT COUNT(*) // 2 FROM people", NotSupportedError, "(//, %, ^)"),
    ("SELECT SUM(x) / 0 FROM people", ProgrammingError, "division by the constant zero"),
    ("SELECT 'a' || 'b', COUNT(*) FROM people", NotSupportedError, "string concatenation"),
    ("SELECT 'a' AS k FROM people", NotSupportedError, "without COUNT, SUM or AVG"),
    ("SELECT sex, COUNT(*) FROM people GROUP BY sex HAVING hours > 3", ProgrammingError,
     "neither an output name nor a GROUP BY column"),
    ("SELECT sex, COUNT(*) FROM people GROUP BY sex HAVING sex > 3", NotSupportedError, "different types"),
    ("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex HAVING n + sex > 3", NotSupportedError, "non-number"),
    ("SELECT sex, COUNT(*) FROM people GROUP BY sex HAVING COUNT(*) > (SELECT 1)", NotSupportedError, "subquery"),
    ("SELECT 'x' + COUNT(*) FROM people", NotSupportedError, "non-number"),
    ("SELECT 99999999999999999999 AS big, COUNT(*) FROM people", ProgrammingError, "64-bit integer"),
    ("SELECT COUNT(*) AS n, SUM(x) / COUNT(*) AS n_stddev FROM people", ProgrammingError, "would appear twice"),
    ("SELECT sex, SUM(x) / COUNT(*) AS r FROM people GROUP BY sex ORDER BY q", ProgrammingError, "names no output"),
    ("SELECT COUNT(*) FROM people UNION SELECT COUNT(*) FROM people", NotSupportedError, "UNION without ALL"),
    ("SELECT COUNT(*) FROM people INTERSECT SELECT COUNT(*) FROM people", NotSupportedError, "INTERSECT"),
    ("SELECT COUNT(*) FROM people UNION ALL SELECT sex, COUNT(*) FROM people GROUP BY sex", NotSupportedError,
     "of 2 and 3 output columns"),
    ("SELECT sex, COUNT(*) FROM people GROUP BY sex UNION ALL SELECT hours, COUNT(*) FROM people GROUP BY hours",
     NotSupportedError, "one type in every part"),
    ("SELECT COUNT(*) AS n FROM people UNION ALL SELECT COUNT(*) FROM people ORDER BY m", NotSupportedError,
     "names no output of its first statement"),
    ("SELECT COUNT(*) AS n FROM people UNION ALL SELECT COUNT(*) FROM people ORDER BY n + 1", NotSupportedError,
     "ORDER BY after UNION ALL"),
    ("WITH RECURSIVE a AS (SELECT * FROM people) SELECT COUNT(*) FROM a", NotSupportedError, "WITH RECURSIVE"),
    ("WITH a (s) AS (SELECT sex FROM people) SELECT COUNT(*) FROM a", NotSupportedError, "column list"),
    ("WITH a AS (SELECT sex AS s FROM people) SELECT COUNT(*) FROM a", NotSupportedError, "renamed column"),
    ("WITH a AS (SELECT sex FROM people) SELECT COUNT(*) FROM a WHERE x > 1", NotSupportedError,
     "does not select"),
    ("WITH a AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) SELECT SUM(n) FROM a", NotSupportedError,
     "an aggregate over the aggregate CTE"),
    ("WITH a AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) SELECT sex, m FROM a", ProgrammingError,
     "not an output of the CTE"),
    ("WITH a AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex LIMIT 1) SELECT sex FROM a", NotSupportedError,
     "inside the aggregate CTE"),
])
def test_refused_shapes_name_the_construct_and_charge_nothing(data: duckdb.DuckDBPyConnection, sql: str,
                                                              error: type[Exception], words: str) -> None:
    with connect(data, epsilon=5.0) as connection:
        with pytest.raises(error) as caught:
            connection.cursor().execute(sql, epsilon=1.0)
        assert words in str(caught.value) and connection.budget.spent == 0.0


def test_an_aggregate_written_twice_is_measured_once() -> None:
    statement = parse_batch("SELECT COUNT(*) AS n, COUNT(*) * 2 AS m, SUM(x) / count(*) AS r FROM people "
                            "HAVING SUM(x) > 1").statements[0]
    assert [a.alias for a in statement.aggregates] == ["n", "sum_x [hidden]"]
    assert derived.covariance_pairs(statement)
    single = parse_batch("SELECT COUNT(*) * 2 - COUNT(*) AS m FROM people").statements[0]
    assert len(single.aggregates) == 1 and not derived.covariance_pairs(single)


def test_residual_planner_answers_expressions_of_one_count_and_declines_those_needing_covariances() -> None:
    """One COUNT(*) (scaled, or in HAVING): ResidualPlanner may answer; an expression reading AVG needs
    the covariances only the statement groups compute."""
    one = engine.prepare("SELECT sex, region, COUNT(*) * 2 AS c FROM people GROUP BY sex, region "
                         "HAVING COUNT(*) > 1; SELECT sex, COUNT(*) FROM people GROUP BY sex",
                         SCHEMA, PrivacyCost(rho=1.0))
    assert not isinstance(one.residual, engine.NotApplicable)
    batch = parse_batch("SELECT sex, COUNT(*) * 2 AS c, AVG(x) / COUNT(*) AS q FROM people GROUP BY sex")
    from dpsql.engine.plan import residual_route
    reason = residual_route.plan(batch, SCHEMA, PrivacyCost(rho=1.0), (1.0,))
    assert isinstance(reason, engine.NotApplicable) and "covariances" in reason.reason


# ============================================================================== UNION ALL through the DB-API
def test_a_union_all_is_one_result_set_measured_with_the_batch(data: duckdb.DuckDBPyConnection) -> None:
    """``A UNION ALL B; C`` gives two result sets (nextset), weights one per user statement, and the
    parts are measured exactly as the batch ``A; B; C`` (same cost, same noise with the same seed)."""
    union = ("SELECT 'low' AS band, COUNT(*) AS n FROM people WHERE x < 5 "
             "UNION ALL SELECT 'high', COUNT(*) FROM people WHERE x >= 5; SELECT SUM(x) AS s FROM people")
    apart = ("SELECT 'low' AS band, COUNT(*) AS n FROM people WHERE x < 5; "
             "SELECT 'high', COUNT(*) FROM people WHERE x >= 5; SELECT SUM(x) AS s FROM people")
    with connect(data, seed=4, epsilon=5.0) as connection:
        cursor = connection.cursor().execute(union, epsilon=1.0, weights=[2.0, 1.0])
        first = cursor.fetchall()
        assert cursor.nextset() and [d[0] for d in cursor.description] == ["s", "s_stddev"]
        assert cursor.nextset() is None
        spent = connection.budget.spent
    with connect(data, seed=4, epsilon=5.0) as connection:
        parts = connection.cursor().execute(apart, epsilon=1.0, weights=[2.0, 2.0, 1.0]).fetch_arrow_tables()
        assert connection.budget.spent == spent == 1.0
    assert first == [tuple(t.to_pylist()[0].values()) for t in parts[:2]]
    assert engine.prepare(union, SCHEMA, PrivacyCost(epsilon=1.0), weights=[2.0, 1.0]).chosen.cost_parts() == \
        engine.prepare(apart, SCHEMA, PrivacyCost(epsilon=1.0), weights=[2.0, 2.0, 1.0]).chosen.cost_parts()


def test_local_mode_returns_a_union_all_as_one_table(tmp_path: Any) -> None:
    from dpsql.local.sql import answer_batch, design_batch, simulate_database
    database = tmp_path / "people.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE people (sex VARCHAR, region VARCHAR, hours INTEGER, x INTEGER)")
        con.executemany("INSERT INTO people VALUES (?, ?, ?, ?)", _rows())
    queries = ("SELECT sex AS k, COUNT(*) AS n FROM people GROUP BY sex "
               "UNION ALL SELECT region, COUNT(*) FROM people GROUP BY region")
    published = design_batch(queries, SCHEMA_DICT, epsilon=1.0, seed=0)
    tables = answer_batch(queries, published, simulate_database(published, database, rng=np.random.default_rng(3)))
    assert len(tables) == 1 and tables[0].column_names == ["k", "n", "n_stddev"]
    assert tables[0].column("k").to_pylist() == ["F", "M", "N", "S", "E"]


# ============================================================================== HAVING's logic, property-based
_atoms = st.tuples(st.sampled_from(["COUNT(*)", "SUM(x)", "SUM(hours)", "COUNT(hours)"]),
                   st.sampled_from(["<", "<=", ">", ">=", "=", "<>"]),
                   st.integers(0, 8000).map(lambda t: t + 0.5))


def _having(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 2 or draw(st.booleans()):
        column, operator, value = draw(_atoms)
        return f"{column} {operator} {value}"
    kind = draw(st.sampled_from(["AND", "OR", "NOT"]))
    if kind == "NOT":
        return f"NOT ({_having(draw, depth + 1)})"
    return f"({_having(draw, depth + 1)}) {kind} ({_having(draw, depth + 1)})"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(condition=st.composite(_having)())
def test_having_keeps_the_rows_duckdb_keeps(data: duckdb.DuckDBPyConnection, condition: str) -> None:
    """Random AND/OR/NOT of comparisons between aggregates and thresholds half-way between integers
    (the answers, integers, are read within 1e-3 at this budget): the rows DuckDB keeps."""
    sql = f"SELECT region, COUNT(*) AS n FROM people GROUP BY region HAVING {condition} ORDER BY region"
    with connect(data) as connection:
        table = connection.cursor().execute(sql, rho=1e6).fetch_arrow_table()
    assert table.column("region").to_pylist() == [row[0] for row in data.execute(sql).fetchall()]


def test_local_mode_gives_a_sum_of_filtered_counts_the_standard_error_of_the_one_count(tmp_path: Any) -> None:
    """Every local answer reads one estimate x̂, so two counts are correlated: F + M must have the value and
    the standard error of the count of F or M (without the covariance it would be √(var F + var M))."""
    from dpsql.local.sql import answer_batch, design_batch, simulate_database
    database = tmp_path / "people.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE people (sex VARCHAR, region VARCHAR, hours INTEGER, x INTEGER)")
        con.executemany("INSERT INTO people VALUES (?, ?, ?, ?)", _rows())
    queries = ("SELECT COUNT(*) FILTER (WHERE sex = 'F') + COUNT(*) FILTER (WHERE sex = 'M') AS a, "
               "COUNT(*) FILTER (WHERE sex IN ('F', 'M')) AS b FROM people")
    published = design_batch(queries, SCHEMA_DICT, epsilon=1.0, seed=0)
    table = answer_batch(queries, published, simulate_database(published, database, rng=np.random.default_rng(3)))[0]
    row = table.to_pylist()[0]
    assert row["a"] == pytest.approx(row["b"], rel=1e-9) and row["a_stddev"] == pytest.approx(row["b_stddev"], rel=1e-6)
