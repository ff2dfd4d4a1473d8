"""Declaring columns no statement reads changes no answer (issue 29 §5).

A batch is planned from the columns its statements read; a column declared in the schema and read
by no statement must change neither the plan (strategies, budget split, expected errors) nor any
seeded answer or standard error, wherever it is declared among the others.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql import engine
from dpsql.accounting import Budget, PrivacyCost
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

USED: dict[str, dict[str, Any]] = {
    "a": {"type": "integer", "lower": 0, "upper": 29, "bin_width": 5},
    "g": {"type": "categorical", "values": [0, 1, 2, 3, 4, 5]},
    "k": {"type": "categorical", "values": [0, 1]},
    "m": {"type": "categorical", "values": [0, 1, 2, 3]},
    "x": {"type": "integer", "lower": 0, "upper": 20, "bin_width": 7},
}
#: Issue 29 §5's batch in small: the range count and both SUMs share a statement group over (a, k),
#: measured with HDMM-Kron strategies.
BATCH = """
    SELECT COUNT(*) AS n FROM t;
    SELECT m, k, COUNT(*) AS n FROM t GROUP BY m, k;
    SELECT g, k, COUNT(*) AS n FROM t GROUP BY g, k;
    SELECT g, m, COUNT(*) AS n FROM t GROUP BY g, m;
    SELECT COUNT(*) AS n FROM t WHERE a BETWEEN 5 AND 14;
    SELECT k, SUM(x) AS s FROM t GROUP BY k;
    SELECT SUM(x) AS s FROM t WHERE a BETWEEN 15 AND 24"""
ROWS = 300

unused_column = st.one_of(
    st.integers(2, 40).map(lambda k: {"type": "categorical", "values": list(range(k))}),
    st.tuples(st.integers(0, 50), st.integers(1, 200), st.sampled_from([1, 2, 5])).map(
        lambda t: {"type": "integer", "lower": t[0], "upper": t[0] + t[1] * t[2], "bin_width": t[2]}),
    st.sampled_from([{"type": "numeric", "lower": 0, "upper": 1000, "bin_width": 100, "resolution": 10},
                     {"type": "integer", "lower": 0, "upper": 10**6, "bin_width": 10**5, "truncate": "svt"},
                     {"type": "numeric", "lower": 0, "upper": 3, "bin_width": 1, "resolution": 0.5,
                      "value_cells": "rounded"}]))


def _table(columns: dict[str, dict[str, Any]]) -> duckdb.DuckDBPyConnection:
    """ROWS fixed rows over the used columns; every other column holds its domain's lowest value."""
    rng = np.random.default_rng(5)
    data = {name: rng.integers(0, 30 if name == "a" else 21 if name == "x" else len(spec["values"]), ROWS)
            for name, spec in USED.items()}
    data |= {name: np.full(ROWS, spec["values"][0] if "values" in spec else spec["lower"])
             for name, spec in columns.items() if name not in USED}
    con = duckdb.connect(":memory:")
    con.from_arrow(pa.table({name: data[name] for name in columns})).create("t")
    return con


def _release(columns: dict[str, dict[str, Any]]) -> tuple[list[tuple[object, ...]], list[dict[str, list[object]]]]:
    """(each measurement's plan, every statement's columns) of one seeded release at ε = 1."""
    prepared = engine.prepare(BATCH, Schema.load({"tables": {"t": {"columns": columns}}}), PrivacyCost(epsilon=1.0))
    plan = [(m.name, m.plan.name, m.share, m.expected_rmse(m.plan.name)) for m in prepared.chosen.measurements]
    tables = engine.run(prepared, backend=DuckDBBackend(_table(columns)), budget=Budget(epsilon=10.0),
                        rng=SeededRandomSource(3))
    return plan, [table.to_pydict() for table in tables]


@settings(max_examples=20, deadline=None)
@given(extra=st.lists(st.tuples(unused_column, st.integers(0, len(USED))), min_size=1, max_size=4))
def test_declaring_unused_columns_changes_no_plan_and_no_seeded_answer(
        extra: list[tuple[dict[str, Any], int]]) -> None:
    """The batch reads a, g, k, m and x (BATCH). Declaring up to four more columns (categorical,
    integer, numeric, truncated, rounded value cells) anywhere among them — the used ones keep
    their order — gives the same plan and, with the same seed, the same answers and standard
    errors, bit for bit."""
    names = list(USED)
    for number, (_, position) in enumerate(extra):
        names.insert(min(position, len(names)), f"unused_{number}")
    declared = {name: USED[name] if name in USED else extra[int(name.split("_")[1])][0] for name in names}
    assert _release(declared) == _release(USED)
