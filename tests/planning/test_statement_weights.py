"""Issue 15: the planning objective weighs every statement in its own scale (``dpsql.planning.weights``).

A SUM total beside a big GROUP BY must not come out worse than answering it alone; ``weights=``
moves accuracy between statements; the guard reports a statement it cannot bring under its
per-query baseline; answers keep honest standard errors with weights."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import dpsql
from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.engine.plan.guard import guard_notes, measured_sums
from dpsql.engine.plan.metadata import statement_metadata
from dpsql.errors import ProgrammingError
from dpsql.matrix.workloads import DisjointSum, Explicit, Kron, VStack
from dpsql.noise import SeededRandomSource
from dpsql.planning import accuracy
from dpsql.planning import weights as weighting
from dpsql.schema import Schema

ROWS = 2000
BATCH = "SELECT g, COUNT(*) AS n FROM t GROUP BY g; SELECT SUM(x) AS s FROM t"


def schema() -> Schema:
    """g: 100 groups; x: whole numbers 0..99 (the SUM's public bounds)."""
    return Schema.load({"tables": {"t": {"columns": {
        "g": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 1},
        "x": {"type": "integer", "lower": 0, "upper": 99}}}}})


def table(seed: int = 0) -> duckdb.DuckDBPyConnection:
    rng = np.random.default_rng(seed)
    con = duckdb.connect()
    source = pa.table({"g": rng.integers(0, 100, ROWS), "x": rng.integers(0, 100, ROWS)})
    con.register("source", source)
    con.execute("CREATE TABLE t AS SELECT * FROM source")
    con.unregister("source")
    return con


def sum_variance(prepared: engine.Prepared) -> float:
    """Expected variance of the SUM total (statement 2), from its block and its measurement's plan."""
    statement = prepared.groups.compiled.statements[1]
    block = prepared.groups.compiled.groups[statement.group].blocks[statement.aggregates[0].blocks[0]]
    (m,) = [m for m in prepared.groups.measurements if (m.group, m.vector) == (statement.group, block.data)]
    unit = accuracy.per_query_variance(block.workload, m.plan.strategy, noise=m.plan.noise)
    scale = (m.row_scale / m.share) ** 2 if m.plan.noise == "laplace" else m.row_scale**2 / (2 * m.share)
    return float(unit[0]) * scale * (m.quantum * block.scale) ** 2


@pytest.mark.parametrize("cost", [PrivacyCost(epsilon=1.0), PrivacyCost(rho=0.5)])
def test_a_sum_total_beside_a_big_group_by_is_no_worse_than_answering_it_alone(cost: PrivacyCost) -> None:
    """The Adult failure in small: a 101-answer GROUP BY and one SUM total. Scoring every answer
    cell equally gave the SUM measurement ε·2^{1/3}/(2^{1/3} + 202^{1/3}) ≈ 0.18ε, eight times the
    variance of answering it alone at ε/2 (Laplace, 2·(99·2/ε)²; Gaussian at ρ/2, 99²/ρ). Weighing
    each statement relative to its own baseline brings it under."""
    prepared = engine.prepare(BATCH, schema(), cost)
    laplace = cost.family == "epsilon"
    alone = 2 * (99 * 2 / cost.value) ** 2 if laplace else 99**2 * 2 / (2 * cost.value)
    assert sum_variance(prepared) <= alone * (1 + 1e-9)
    errors = engine.statement_errors(prepared.groups.compiled,
                                     measured_sums(prepared.groups.compiled, prepared.groups.measurements), cost)
    assert [e.ratio <= 1 + 1e-3 for e in errors] == [True, True] and prepared.chosen.guard_notes == ()
    assert errors[1].parts[0][2] == pytest.approx(math.sqrt(alone))


def test_weights_move_accuracy_toward_the_heavier_statement() -> None:
    """Raising the SUM's weight lowers its expected variance and raises the GROUP BY's; the
    default sits between."""
    figures = {}
    for weights in ([4.0, 1.0], None, [1.0, 4.0]):
        prepared = engine.prepare(BATCH, schema(), PrivacyCost(epsilon=1.0), weights=weights)
        errors = engine.statement_errors(prepared.groups.compiled,
                                         measured_sums(prepared.groups.compiled, prepared.groups.measurements),
                                         prepared.cost)
        figures[str(weights)] = (errors[0].ratio, errors[1].ratio, sum_variance(prepared))
    heavy_counts, default, heavy_sum = figures["[4.0, 1.0]"], figures["None"], figures["[1.0, 4.0]"]
    assert heavy_sum[2] < default[2] < heavy_counts[2]
    assert heavy_sum[0] > default[0] > heavy_counts[0]


@pytest.mark.parametrize(("weights", "problem"), [
    ([1.0], "has 1 number(s) but the batch has 2 statement(s)"),
    ([1.0, 0.0], "weights[1] = 0.0 (statement 2) is not a positive finite number"),
    ([-1.0, 1.0], "weights[0] = -1.0 (statement 1) is not a positive finite number"),
    ([1.0, math.nan], "weights[1] = nan (statement 2)"),
    ([1.0, math.inf], "weights[1] = inf (statement 2)"),
    ([True, 1.0], "weights[0] = True (statement 1)"),
    (["1", 1.0], "weights[0] = '1' (statement 1)"),
    ("11", "must be a list of positive numbers"),
])
def test_bad_weights_are_refused_before_anything_is_spent(weights: object, problem: str) -> None:
    budget = Budget(epsilon=1.0)
    con = dpsql.connect(table(), schema=schema(), budget=budget)
    with pytest.raises(ProgrammingError, match="weights") as caught:
        con.cursor().execute(BATCH, epsilon=0.5, weights=weights)  # type: ignore[arg-type]
    assert problem in str(caught.value) and "Nothing was run or charged" in str(caught.value)
    assert budget.remaining == pytest.approx(1.0)
    with pytest.raises(ProgrammingError, match="weights"):
        engine.prepare(BATCH, schema(), PrivacyCost(epsilon=1.0), weights=weights)  # type: ignore[arg-type]


def test_explain_and_metadata_show_each_statement_against_answering_it_alone() -> None:
    """EXPLAIN lists each statement's expected RMSE beside its per-query baseline; the result
    metadata carries the same figures and the statement's weight."""
    con = dpsql.connect(table(), schema=schema(), budget=Budget(epsilon=10.0), rng=SeededRandomSource(3))
    cursor = con.cursor()
    text = cursor.explain(BATCH, epsilon=1.0, weights=[1, 3])
    assert "Statements: the expected standard error of each one's answers" in text
    assert "statement 2: s " in text and "(alone 280" in text
    assert "weight 3" in text
    tables = cursor.execute(BATCH, epsilon=1.0, weights=[1, 3]).fetch_arrow_tables()
    entry = json.loads(tables[1].schema.metadata[b"dpsql"])["statement_error"]
    assert entry["weight"] == 3 and entry["alone_rmse"]["s"] == pytest.approx(2 * 99 * 2 / 1.0 / math.sqrt(2))
    assert entry["ratio_to_alone"] <= 1 and "note" not in entry
    assert entry["expected_rmse"]["s"] == pytest.approx(math.sqrt(entry["ratio_to_alone"]) * entry["alone_rmse"]["s"])


def test_the_guard_names_a_statement_left_worse_than_alone() -> None:
    """A statement expected to do worse than answering it alone gets a note naming the ratio, in
    EXPLAIN and in its result metadata."""
    error = engine.StatementError(parts=(("s", 20.0, 10.0),), ratio=4.0)
    ((index, note),) = guard_notes([engine.StatementError(parts=(("n", 1.0, 2.0),), ratio=0.25), error], 4.0)
    assert index == 1 and note.startswith("expected mean squared error 4× that of answering this statement alone")
    assert "the least worst ratio is 4" in note and "s RMSE 20 against 10 alone" in note
    prepared = engine.prepare(BATCH, schema(), PrivacyCost(epsilon=1.0))
    assert f"    note: {note}" in engine.explain(
        replace(prepared, chosen=replace(prepared.chosen, guard_notes=((1, note),))))
    (metadata, _) = [m.to_json() for m in statement_metadata(
        [error, engine.StatementError(parts=(("n", 1.0, 2.0),), ratio=0.25)], prepared.chosen.weights, 4)]
    assert metadata["statement_error"]["note"].startswith("expected mean squared error 4×")  # type: ignore[index]


def test_the_guard_raises_a_losing_statements_weight_until_it_is_no_worse() -> None:
    """With the SUM's weight set far too low (10⁻⁴), the plan would give it a sliver of the budget;
    the guard raises its weight and splits again until it is no worse than alone, and reports the
    weight it used."""
    prepared = engine.prepare(BATCH, schema(), PrivacyCost(epsilon=1.0), weights=[1.0, 1e-4])
    errors = engine.statement_errors(prepared.groups.compiled,
                                     measured_sums(prepared.groups.compiled, prepared.groups.measurements),
                                     prepared.cost)
    assert errors[1].ratio <= 1 + 1e-3 and prepared.chosen.weights[1] > 1e-4 and prepared.chosen.guard_notes == ()


@pytest.mark.slow
def test_weighted_answers_have_honest_standard_errors() -> None:
    """40 seeded releases at ε = 1 with weights [1, 5]: z-scores of every answer against the exact
    truth have mean within 4.5/√R of 0 and variance within 1.6·6·√(2/R) of 1 (discrete Laplace
    noise has kurtosis up to 6), so weighting the plan leaves the reported stddevs honest."""
    con, runs = table(1), 40
    prepared = engine.prepare(BATCH, schema(), PrivacyCost(epsilon=1.0), weights=[1.0, 5.0])
    counts = dict(con.execute("SELECT g, COUNT(*) FROM t GROUP BY g").fetchall())
    truth = np.array([counts.get(g, 0) for g in range(100)] + [con.execute("SELECT SUM(x) FROM t").fetchone()[0]],
                     dtype=float)
    backend, z = DuckDBBackend(con), []
    for seed in range(runs):
        grouped, total = engine.run(prepared, backend=backend, budget=Budget(epsilon=100.0),
                                    rng=SeededRandomSource(seed))
        values = np.concatenate([grouped.column("n").to_numpy()[:100], total.column("s").to_numpy()])
        stddevs = np.concatenate([grouped.column("n_stddev").to_numpy()[:100], total.column("s_stddev").to_numpy()])
        z.append((values - truth) / stddevs)
    scores = np.array(z)
    assert np.all(np.abs(scores.mean(axis=0)) < 4.5 / math.sqrt(runs))
    assert abs(scores.var(axis=0, ddof=1).mean() - 1) < 1.6 * 6 * math.sqrt(2 / (runs * scores.shape[1]))
    assert np.all(np.abs(scores.var(axis=0, ddof=1) - 1) < 1.6 * 6 * math.sqrt(2 / runs))


def test_scaled_stack_scales_each_blocks_rows_and_keeps_its_structure() -> None:
    """scaled_stack(W, rows, s) = diag(s_b repeated over block b's rows) · W, for a VStack of a
    Kronecker block and a disjoint sum, and for a dense one-axis stack; Kronecker blocks stay
    Kronecker; equal scales of 1 return W itself."""
    rng = np.random.default_rng(4)
    kron = Kron([Explicit(rng.random((2, 3))), Explicit(rng.random((3, 4)))])
    disjoint = DisjointSum([Kron([Explicit(rng.random((1, 3))), Explicit(rng.random((1, 4)))]) for _ in range(2)])
    stacked = VStack([kron, disjoint])
    scaled = weighting.scaled_stack(stacked, [6, 1], [0.5, 2.0])
    assert isinstance(scaled, VStack) and isinstance(scaled.blocks[0], Kron)
    assert isinstance(scaled.blocks[1], DisjointSum)
    np.testing.assert_allclose(scaled.dense(), np.repeat([0.5, 2.0], [6, 1])[:, None] * stacked.dense())
    dense = Explicit(rng.random((5, 7)))
    np.testing.assert_allclose(weighting.scaled_stack(dense, [2, 3], [3.0, 0.25]).dense(),
                               np.repeat([3.0, 0.25], [2, 3])[:, None] * dense.dense())
    assert weighting.scaled_stack(stacked, [6, 1], weighting.normalized([0.1, 0.1])[1]) is stacked
