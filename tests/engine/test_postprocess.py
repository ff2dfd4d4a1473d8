"""Opt-in post-processing: non-negativity and isotonic chains of nested statements; free, biased,
reported in the metadata, and refused with nothing charged when misspelled."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest

from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.errors import ProgrammingError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

SCHEMA = Schema.load({"tables": {"t": {"columns": {
    "income": {"type": "integer", "lower": 0, "upper": 10_000, "bin_width": 1000},
    "change": {"type": "integer", "lower": -50, "upper": 50},
    "g": {"type": "categorical", "values": [0, 1, 2, 3, 4, 5, 6, 7]}}}}})
PREFIX = ";\n".join(f"SELECT SUM(income) AS s FROM t WHERE income < {x}" for x in range(1000, 10_001, 1000))


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.execute("SELECT setseed(0.25)")
    connection.execute("CREATE TABLE t AS SELECT CAST(floor(10000 * pow(random(), 3)) AS INTEGER) AS income, "
                       "CAST(floor(101 * random()) - 50 AS INTEGER) AS change, CAST(floor(2 * "
                       "random()) AS INTEGER) AS g FROM range(300)")  # groups 2…7 are declared but empty
    return connection


def run(con: duckdb.DuckDBPyConnection, sql: str, steps: list[str], seed: int = 0, epsilon: float = 0.2) -> list:  # type: ignore[type-arg]
    prepared = engine.prepare(sql, SCHEMA, PrivacyCost(epsilon=epsilon))
    return engine.run(prepared, backend=DuckDBBackend(con), budget=Budget(epsilon=10.0), rng=SeededRandomSource(seed),
                      postprocess=steps)


def test_nonnegative_clips_counts_and_non_negative_sums_only(con: duckdb.DuckDBPyConnection) -> None:
    sql = "SELECT g, COUNT(*) AS n, SUM(income) AS s, SUM(change) AS c FROM t GROUP BY g"
    (raw,) = run(con, sql, [])
    (clipped,) = run(con, sql, ["nonnegative"])
    for name in ("n", "s"):
        before, after = raw.column(name).to_numpy(), clipped.column(name).to_numpy()
        assert (before < 0).any() and np.array_equal(after, np.maximum(before, 0))
        assert np.array_equal(raw.column(f"{name}_stddev").to_numpy(), clipped.column(f"{name}_stddev").to_numpy())
    assert np.array_equal(raw.column("c").to_numpy(), clipped.column("c").to_numpy())  # change may be negative
    note = json.loads(clipped.schema.metadata[b"dpsql"])["postprocessing"][0]
    assert "set to 0" in note and "stddev is that of the answers before it" in note


def test_isotonic_makes_nested_prefix_sums_non_decreasing(con: duckdb.DuckDBPyConnection) -> None:
    raw = np.array([t.column("s")[0].as_py() for t in run(con, PREFIX, [], seed=3, epsilon=0.05)])
    tables = run(con, PREFIX, ["isotonic"], seed=3, epsilon=0.05)
    fitted = np.array([t.column("s")[0].as_py() for t in tables])
    variances = np.array([t.column("s_stddev")[0].as_py() ** 2 for t in tables])
    assert np.any(np.diff(raw) < 0) and np.all(np.diff(fitted) >= -1e-9 * np.abs(fitted).max())
    assert np.sum(fitted / variances) == pytest.approx(np.sum(raw / variances), rel=1e-9)  # weighted PAVA keeps Σ y/σ²
    assert "1 chain(s)" in json.loads(tables[0].schema.metadata[b"dpsql"])["postprocessing"][0]


def test_statements_that_are_not_nested_are_left_alone(con: duckdb.DuckDBPyConnection) -> None:
    sql = "SELECT SUM(income) AS s FROM t WHERE income < 3000; SELECT SUM(income) AS s FROM t WHERE income >= 5000"
    raw = [t.column("s")[0].as_py() for t in run(con, sql, [], seed=1)]
    tables = run(con, sql, ["isotonic"], seed=1)
    assert [t.column("s")[0].as_py() for t in tables] == raw
    assert "nothing to change" in json.loads(tables[0].schema.metadata[b"dpsql"])["postprocessing"][0]


def test_an_unknown_step_is_refused_before_anything_is_spent(con: duckdb.DuckDBPyConnection) -> None:
    prepared = engine.prepare("SELECT COUNT(*) AS n FROM t", SCHEMA, PrivacyCost(epsilon=1.0))
    budget = Budget(epsilon=1.0)
    with pytest.raises(ProgrammingError, match="unknown post-processing step"):
        engine.run(prepared, backend=DuckDBBackend(con), budget=budget, postprocess=["monotone"])
    assert budget.spent == 0.0
