"""A batch's first answer combines every kept-eligible measurement of the batch that informs each
statement (``dpsql.engine.reuse.reuse.keep_and_answer``, issue 31): across statement groups, by
generalized least squares over the batch's own release.

1. The first send equals the same batch sent again, answered free over that release.
2. No statement's variance exceeds its own group's measurements alone (the answer before combining).
3. The reported stddevs describe the returned numbers: z-scores over many seeds (slow).
4. EXPLAIN's combined stddev is the stddev execute reports; the predicted stddevs are the reported ones.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsql
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.engine.plan.prepare import prepare, read_batch
from dpsql.engine.reuse.predicted import block_answers, predicted_stddevs
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema
from tests.test_pinned_answers import BATCHES, PLAIN, _database

SCHEMA = Schema.load({"tables": PLAIN})
#: Statement groups that overlap (counts over sex, region × sex and age ranges; sums by sex, rooms by region).
BATCH = BATCHES["statement groups, epsilon"].executes[0][0]
STATEMENTS = [s.strip() for s in BATCH.split(";") if s.strip()]
COUNTS = (  # plain COUNT statements: every output has a stddev fixed by the plan
    "SELECT sex, COUNT(*) AS n FROM t GROUP BY sex",
    "SELECT region, sex, COUNT(*) AS n FROM t GROUP BY region, sex",
    "SELECT COUNT(*) AS n FROM t WHERE age BETWEEN 3 AND 11",
    "SELECT COUNT(*) AS n FROM t WHERE age BETWEEN 0 AND 15",
    "SELECT COUNT(*) AS n FROM t WHERE age >= 12",
    "SELECT COUNT(*) AS n FROM t",
    "SELECT rooms, COUNT(*) AS n FROM t WHERE age < 10 GROUP BY rooms",
    "SELECT region, COUNT(*) AS n FROM t GROUP BY region",
)


def _connect(seed: int) -> dpsql.Connection:
    return dpsql.connect(_database(PLAIN), schema=SCHEMA, budget=Budget(rho=10.0**6),
                         rng=SeededRandomSource(seed))


def _columns(tables: list[pa.Table], suffix: str = "") -> list[np.ndarray]:
    return [np.asarray(t[name].to_numpy(zero_copy_only=False), dtype=float) for t in tables
            for name in t.column_names if pa.types.is_floating(t.schema.field(name).type)
            and name.endswith(suffix)]


def _largest_stddev(table: pa.Table) -> float:
    return max(float(np.max(c)) for c in _columns([table], "_stddev"))


@pytest.mark.parametrize("cost", [{"epsilon": 1.0}, {"rho": 0.2}])
def test_the_first_send_equals_the_second_free_send(cost: dict[str, float]) -> None:
    connection = _connect(21)
    cursor = connection.cursor()
    sql = ";\n".join(COUNTS)
    first = cursor.execute(sql, **cost).fetch_arrow_tables()
    spent = connection.budget.spent
    second = cursor.execute(sql, **cost).fetch_arrow_tables()
    assert connection.budget.spent == spent  # free: answered over the first release
    for a, b in zip(_columns(first), _columns(second), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    plan = prepare(read_batch(sql, None, SCHEMA), SCHEMA, PrivacyCost(**cost))
    before = predicted_stddevs(plan, block_answers)
    assert any(  # some statement is combined across groups, so more accurate
        float(np.max(found)) < float(np.max(before[s][alias])) * (1 - 1e-6)
        for s, table in enumerate(first) for alias, found in
        ((a, table[f"{a}_stddev"].to_numpy()) for a in before[s] if f"{a}_stddev" in table.column_names))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(COUNTS), min_size=2, max_size=5, unique=True),
       st.sampled_from([{"epsilon": 0.5}, {"epsilon": 2.0}, {"rho": 0.3}]))
def test_no_variance_exceeds_its_groups_measurements_alone(statements: list[str], cost: dict[str, float]) -> None:
    sql = ";\n".join(statements)
    plan = prepare(read_batch(sql, None, SCHEMA), SCHEMA, PrivacyCost(**cost))
    alone = predicted_stddevs(plan, block_answers)
    combined = predicted_stddevs(plan)
    tables = _connect(5).cursor().execute(sql, **cost).fetch_arrow_tables()
    for s, table in enumerate(tables):
        for alias, before in alone[s].items():
            reported = table[f"{alias}_stddev"].to_numpy()
            assert np.all(combined[s][alias] <= before * (1 + 1e-9))
            np.testing.assert_allclose(reported, combined[s][alias][:reported.size], rtol=1e-7)


def test_explain_says_the_combined_stddev_execute_reports() -> None:
    cursor = _connect(8).cursor()
    text = cursor.explain(BATCH, epsilon=1.0)
    found = {int(n): float(v) for n, v in re.findall(r"statement (\d+) of the plan below: stddev ([0-9.e+-]+)", text)}
    assert found, text  # the batch's groups overlap: some statement is combined
    tables = cursor.execute(BATCH, epsilon=1.0).fetch_arrow_tables()
    for number, stddev in found.items():
        if STATEMENTS[number - 1].startswith("SELECT sex, SUM"):  # its AVG's stddev is the delta method's
            continue
        assert _largest_stddev(tables[number - 1]) == pytest.approx(stddev, rel=1e-5)


def test_reuse_off_combines_the_batch_but_no_earlier_release() -> None:
    cursor = _connect(9).cursor()
    cursor.execute("SELECT COUNT(*) AS n FROM t", epsilon=5.0).fetch_arrow_tables()  # kept, then not reused
    off = cursor.execute(BATCH, epsilon=1.0, reuse=False).fetch_arrow_tables()
    fresh = _connect(9).cursor()
    fresh.execute("SELECT COUNT(*) AS n FROM t", epsilon=5.0).fetch_arrow_tables()
    fresh.connection.releases.releases.clear()  # nothing kept before: the same noise, the batch alone
    on = fresh.execute(BATCH, epsilon=1.0).fetch_arrow_tables()
    for a, b in zip(_columns(off), _columns(on), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_combined_answers_are_calibrated() -> None:
    """Over many seeds, (answer − truth)/stddev of the combined statements has mean 0 and mean square 1:
    a stddev of the group's measurements alone (larger than the combined one) fails it."""
    truth = _database(PLAIN).execute("SELECT COUNT(*) FROM t").fetchone()
    assert truth is not None
    sql = ";\n".join(COUNTS[:6])  # the total count is combined with every group's counts
    seeds = 200
    z = np.array([(lambda t: (t["n"][0].as_py() - truth[0]) / t["n_stddev"][0].as_py())(
        _connect(1000 + seed).cursor().execute(sql, rho=0.05).fetch_arrow_tables()[5]) for seed in range(seeds)])
    assert abs(float(z.mean())) <= 4 / np.sqrt(seeds)
    assert abs(float(np.mean(z**2)) - 1) <= 4 * np.sqrt(2 / seeds)  # Gaussian noise: Var z² = 2
