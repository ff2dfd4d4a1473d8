"""NaN is not a value (issue 14, item 8): like NULL it is not counted by COUNT(col), left out of
SUM and AVG, and in the outside cell for predicates and GROUP BY — on every route.

The table: 100 rows, 50 of them NaN, the rest 25 × 5.0 and 25 × 15.0 (COUNT(x) = 50, AVG(x) = 10).
Each route is forced and its answers are compared with that truth by z-scores over seeded releases.
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.engine.plan import residual_route
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema
from dpsql.sql.parse import parse_batch

RUNS = 20
TRUTH = {"n": 100.0, "c": 50.0, "a": 10.0}


def nan_table() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    x = np.r_[np.full(50, np.nan), np.full(25, 5.0), np.full(25, 15.0)]
    con.register("source", pa.table({"x": x, "g": np.arange(100) % 2}))
    con.execute("CREATE TABLE t AS SELECT * FROM source")
    con.unregister("source")
    return con


def nan_schema(kind: str = "integer", **extra: object) -> Schema:
    return Schema.load({"tables": {"t": {"columns": {
        "x": {"type": kind, "lower": 0, "upper": 20, **extra},
        "g": {"type": "categorical", "values": [0, 1]}}}}})


def z_scores(prepared: engine.Prepared, con: duckdb.DuckDBPyConnection, truth: dict[str, float]) -> np.ndarray:
    """(runs × answers) z-scores of every named output against its truth."""
    backend, scores = DuckDBBackend(con), []
    for seed in range(RUNS):
        (result,) = engine.run(prepared, backend=backend, budget=Budget(epsilon=1000.0), rng=SeededRandomSource(seed))
        row = result.to_pylist()[0]
        scores.append([(row[name] - value) / row[f"{name}_stddev"] for name, value in truth.items()])
    return np.array(scores)


def assert_calibrated(scores: np.ndarray) -> None:
    """Mean z within 4.5/√R of 0 and every |z| below 6 (discrete Laplace tails)."""
    assert np.all(np.abs(scores.mean(axis=0)) < 4.5 / math.sqrt(len(scores))), scores.mean(axis=0)
    assert np.all(np.abs(scores) < 6.0)


@pytest.mark.parametrize(("sql", "kind", "extra", "route"), [
    ("SELECT COUNT(*) AS n, COUNT(x) AS c, AVG(x) AS a FROM t", "integer", {}, "TaMM"),
    ("SELECT COUNT(x) AS c, AVG(x) AS a FROM t", "integer", {}, "TaMM"),
    # measure bounds beyond the domain's cells: value cells are impossible, counts and sums measured apart
    ("SELECT COUNT(*) AS n, COUNT(x) AS c, AVG(x) AS a FROM t", "integer", {"measure_lower": -1}, "TiMM"),
    ("SELECT COUNT(x) AS c, AVG(x) AS a FROM t", "numeric", {"measure_lower": -1}, "TiMM"),
])
def test_count_and_avg_skip_nan_on_every_route(sql: str, kind: str, extra: dict[str, object], route: str) -> None:
    prepared = engine.prepare(sql, nan_schema(kind, **extra), PrivacyCost(epsilon=1.0))
    note = " ".join(n for _, n in prepared.groups.answering_notes)
    assert ("(TaMM)" in note) == (route == "TaMM")
    truth = {name: value for name, value in TRUTH.items() if f" AS {name}" in sql}
    assert_calibrated(z_scores(prepared, nan_table(), truth))


def test_predicates_and_group_by_put_nan_in_the_outside_cell() -> None:
    """WHERE x >= 0 and WHERE NOT x >= 0 are both UNKNOWN on NaN (50 and 0 rows); GROUP BY x with
    other = true shows the 50 NaN rows in the NULL group — on the ε statement-group route."""
    con = nan_table()
    declared = nan_schema(other=True, bin_width=10)
    prepared = engine.prepare("SELECT COUNT(*) AS y FROM t WHERE x >= 0; SELECT COUNT(*) AS y FROM t WHERE NOT x >= 0; "
                              "SELECT x, COUNT(*) AS y FROM t GROUP BY x", declared, PrivacyCost(epsilon=1.0))
    backend, scores = DuckDBBackend(con), []
    for seed in range(RUNS):
        tables = engine.run(prepared, backend=backend, budget=Budget(epsilon=1000.0), rng=SeededRandomSource(seed))
        assert tables[1].to_pylist() == [{"y": 0.0, "y_stddev": 0.0}]  # no cell makes NOT x >= 0 TRUE: an exact 0
        answers = np.concatenate([t.column("y").to_numpy() for t in (tables[0], tables[2])])
        stddevs = np.concatenate([t.column("y_stddev").to_numpy() for t in (tables[0], tables[2])])
        # bins [0, 10), [10, 20), [20, 21), NULL
        scores.append((answers - np.array([50.0, 25.0, 25.0, 0.0, 50.0])) / stddevs)
    assert_calibrated(np.array(scores))


def test_residual_planner_route_puts_nan_in_the_outside_cell() -> None:
    """A zCDP COUNT(*) batch answered by ResidualPlanner: WHERE x >= 0 counts the 50 values per g."""
    con, declared = nan_table(), nan_schema()
    batch = parse_batch("SELECT g, COUNT(*) AS n FROM t WHERE x >= 0 GROUP BY g")
    route = residual_route.plan(batch, declared, PrivacyCost(rho=1.0), (1.0,))
    assert isinstance(route, residual_route.ResidualPlan)
    scores = []
    for seed in range(RUNS):
        answers = residual_route.answer(route, backend=DuckDBBackend(con), rng=SeededRandomSource(seed),
                                        report=lambda _: None)
        found = answers[0, 0]
        scores.append((found.values - 25.0) / np.sqrt(found.variances))
    assert_calibrated(np.array(scores))
