"""Declaring columns no statement reads changes no answer (issue 29 §5).

A batch is planned from the columns its statements read; a column declared in the schema and read
by no statement must change neither the plan (strategies, budget split, expected errors) nor any
seeded answer or standard error, wherever it is declared among the others.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _helpers import ADULT_BATCH, ADULT_COLUMNS, adult_like
from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

#: The columns ADULT_BATCH reads, in the data set's order; the other six are declared by a real schema.
READ = ["age", "education_num", "marital_status", "occupation", "sex", "capital_gain", "hours_per_week", "income_gt50k"]
UNREAD = [name for name in ADULT_COLUMNS if name not in READ]

other_column = st.one_of(
    st.integers(2, 40).map(lambda k: {"type": "categorical", "values": list(range(k))}),
    st.tuples(st.integers(0, 50), st.integers(1, 200), st.sampled_from([1, 2, 5])).map(
        lambda t: {"type": "integer", "lower": t[0], "upper": t[0] + t[1] * t[2], "bin_width": t[2]}),
    st.sampled_from([{"type": "numeric", "lower": 0, "upper": 1000, "bin_width": 100, "resolution": 10},
                     {"type": "integer", "lower": 0, "upper": 10**6, "bin_width": 10**5, "truncate": "svt"},
                     {"type": "numeric", "lower": 0, "upper": 3, "bin_width": 1, "resolution": 0.5,
                      "value_cells": "rounded"}]))


def _release(columns: dict[str, Any], extra: dict[str, Any]) -> tuple[list[tuple[object, ...]], list[object]]:
    """(each measurement's plan, every statement's columns) of one seeded release of ADULT_BATCH at ε = 1
    with ``columns`` declared, over 2,000 Adult-like rows and ``extra``'s columns at their lowest value."""
    prepared = engine.prepare(ADULT_BATCH, Schema.load({"tables": {"adult": {"columns": columns}}}),
                              PrivacyCost(epsilon=1.0))
    plan = [(m.name, m.plan.name, m.share, m.expected_rmse(m.plan.name)) for m in prepared.chosen.measurements]
    con = adult_like(2_000, seed=7)
    for name, spec in extra.items():
        lowest = spec["values"][0] if "values" in spec else spec["lower"]
        con.execute(f"ALTER TABLE adult ADD COLUMN {name} BIGINT DEFAULT {lowest}")
    tables = engine.run(prepared, backend=DuckDBBackend(con), budget=Budget(epsilon=10.0), rng=SeededRandomSource(3))
    return plan, [table.to_pydict() for table in tables]


@pytest.mark.slow  # 14 s of CPU: 15 batches planned and answered twice
@settings(max_examples=15, deadline=None)
@given(unread=st.lists(st.sampled_from(UNREAD), unique=True),
       extra=st.lists(st.tuples(other_column, st.integers(0, len(ADULT_COLUMNS))), max_size=2))
def test_declaring_unused_columns_changes_no_plan_and_no_seeded_answer(
        unread: list[str], extra: list[tuple[dict[str, Any], int]]) -> None:
    """Issue 29 §5's batch on an Adult-like table, its eight read columns declared alone or with
    any of Adult's six others and up to two more (categorical, integer, numeric, truncated,
    rounded value cells) anywhere among them — the read ones keep their order: the same plan and,
    with the same seed, the same answers and standard errors, bit for bit."""
    names = [name for name in ADULT_COLUMNS if name in READ or name in unread]
    others = {f"other_{number}": spec for number, (spec, _) in enumerate(extra)}
    for name, (_, position) in zip(others, extra):
        names.insert(min(position, len(names)), name)
    declared = {name: others[name] if name in others else ADULT_COLUMNS[name] for name in names}
    assert _release(declared, others) == _release({name: ADULT_COLUMNS[name] for name in READ}, others)
