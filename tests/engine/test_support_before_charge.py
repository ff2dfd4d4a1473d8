"""A strategy that, rounded to integers, would not support its answers is replaced before the
charge: mechanism.answer's own support check can never fail after it."""

from __future__ import annotations

from dataclasses import replace

import duckdb
import numpy as np
import pytest

from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.matrix.workloads import Explicit
from dpsql.noise import SeededRandomSource
from dpsql.planning import planner
from dpsql.schema import Schema

SCHEMA = Schema.load({"tables": {"t": {"columns": {"x": {"type": "integer", "lower": 0, "upper": 7}}}}})
BATCH = "SELECT x, COUNT(*) AS n FROM t GROUP BY x; SELECT COUNT(*) AS n FROM t WHERE x < 3"


def test_an_unsupporting_strategy_is_replaced_before_the_charge(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = planner.plan

    def short_strategy(W: object, **kwargs: object) -> planner.Plan:
        chosen = plan(W, **kwargs)  # type: ignore[arg-type]
        half = Explicit(np.eye(chosen.strategy.shape[1])[:4])  # reads only half the cells: supports no GROUP BY x
        return replace(chosen, strategy=half, name="half", candidates={**chosen.candidates, "half": 1e-6})

    monkeypatch.setattr(planner, "plan", short_strategy)
    prepared = engine.prepare(BATCH, SCHEMA, PrivacyCost(epsilon=1.0))
    (measurement,) = prepared.groups.measurements
    assert measurement.plan.name in planner.FAMILIES
    assert any("half was replaced by" in note and "does not support" in note for note in measurement.plan.notes)
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT (i % 8)::INTEGER AS x FROM range(200) r(i)")
    budget = Budget(epsilon=5.0)
    tables = engine.run(prepared, backend=DuckDBBackend(con), budget=budget, rng=SeededRandomSource(3))
    assert budget.spent == pytest.approx(1.0) and tables[0].num_rows == 8
