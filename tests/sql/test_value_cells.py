"""Truncation-aware answering through SQL (TaMM, seed 003): a measure read as value cells, so
COUNT, SUM and AVG share one count vector and one measurement; the choice against separate
measurements (TiMM), the rounding it reports, and answers that match the predicted variance."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.engine import postprocess
from dpsql.engine.measuring.scan import batch_vector
from dpsql.matrix.workloads import Explicit, Kron, Sum
from dpsql.noise import SeededRandomSource
from dpsql.planning import mechanism
from dpsql.schema import Schema
from dpsql.sql.compile import CompiledBatch, compile_group
from dpsql.sql.parse import parse_batch
from dpsql.sql.value_cells import ValueCells, value_cells_problem
from dpsql.sql.vectors import COUNTS

ROWS = 3000


def table(seed: int = 0) -> duckdb.DuckDBPyConnection:
    """x: whole numbers 0..20 with NULLs and a few values outside [0, 20]; y: reals in [0, 100); g: 4 groups."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 21, ROWS).astype(float)
    x[rng.random(ROWS) < 0.03] = 25.0
    x[rng.random(ROWS) < 0.03] = -3.0
    con = duckdb.connect()
    source = pa.table({"x": pa.array(x, mask=rng.random(ROWS) < 0.05), "y": rng.random(ROWS) * 100,
                       "g": rng.integers(0, 4, ROWS)})
    con.register("source", source)
    con.execute("CREATE TABLE t AS SELECT * FROM source")
    con.unregister("source")
    return con


def schema(policy: str = "drop") -> Schema:
    return Schema.load({"tables": {"t": {"columns": {
        "x": {"type": "integer", "lower": 0, "upper": 20, "out_of_domain": policy},
        "y": {"type": "numeric", "lower": 0, "upper": 100, "bin_width": 10},
        "g": {"type": "categorical", "values": [0, 1, 2, 3]}}}}})


def exact(con: duckdb.DuckDBPyConnection, sql: str) -> dict[object, tuple[float, ...]]:
    return {row[0]: row[1:] for row in con.execute(sql).fetchall()}


@pytest.mark.parametrize("high", [20.0, 7.0])
def test_value_cells_answer_clamped_and_truncated_sums_exactly(high: float) -> None:
    """On whole-value cells the weighted count blocks reproduce SUM of the value clamped to
    [0, high] (out-of-range rows in the edge cells), COUNT(x) and COUNT(*) exactly."""
    con, declared = table(), schema()
    t = declared.table("t")
    batch = parse_batch("SELECT g, SUM(x) AS s, COUNT(x) AS c, COUNT(*) AS n FROM t GROUP BY g")
    group, _ = compile_group(batch, t, [0], 0, {"x": ValueCells(low=0.0, high=high)})
    assert {block.data for block in group.blocks} == {("count", None)}
    assert [block.kind for block in group.blocks] == [("sum", "x"), ("nonnull", "x"), ("count", None)]
    cells = replace(t, columns={**t.columns, **{axis.column.name: axis.column for axis in group.axes}})
    data = DuckDBBackend(con).cell_data(cells, [axis.column for axis in group.axes])
    vector = batch_vector(group, data, COUNTS)
    answers = [block.workload @ vector * block.scale for block in group.blocks]
    truth = exact(con, f"SELECT g, SUM(CASE WHEN x IS NULL THEN 0 ELSE LEAST(GREATEST(x, 0), {high}) END), "
                       "COUNT(x), COUNT(*) FROM t GROUP BY g ORDER BY g")
    for position in range(3):
        assert np.allclose(answers[position][:4], [truth[g][position] for g in range(4)], atol=1e-9)


def test_value_cells_on_a_grid_round_to_midpoints_within_the_reported_bound() -> None:
    con, declared = table(), schema()
    t = declared.table("t")
    group, _ = compile_group(parse_batch("SELECT g, SUM(y) AS s FROM t GROUP BY g"), t, [0], 0,
                             {"y": ValueCells(low=0.0, high=100.0)})
    cells = ValueCells(low=0.0, high=100.0)
    assert cells.rounding(t.columns["y"].domain) == pytest.approx(5.0)  # cells of width 10 around their midpoints
    data = DuckDBBackend(con).cell_data(replace(t,
                                                columns={**t.columns, **{a.column.name: a.column for a in group.axes}}),
                                        [a.column for a in group.axes])
    (block,) = group.blocks
    answers = block.workload @ batch_vector(group, data, COUNTS) * block.scale
    truth = exact(con, "SELECT g, SUM(y), COUNT(*) FROM t GROUP BY g ORDER BY g")
    for g in range(4):
        assert abs(answers[g] - truth[g][0]) <= 5.0 * truth[g][1]
        assert answers[g] != pytest.approx(truth[g][0], abs=1e-6)  # rounding is real on reals


def test_which_columns_can_be_read_as_value_cells() -> None:
    plain = schema().table("t").columns
    assert value_cells_problem(plain["x"], touched=False) is None
    assert 'out_of_domain = "clamp" or "exclude"' in str(value_cells_problem(plain["x"], touched=True))
    assert value_cells_problem(schema("clamp").table("t").columns["x"], touched=True) is None
    assert value_cells_problem(schema("exclude").table("t").columns["x"], touched=True) is None
    wide = Schema.load({"tables": {"t": {"columns": {"x": {"type": "integer", "lower": 0, "upper": 20,
                                                           "measure_upper": 50}}}}})
    assert "beyond its domain" in str(value_cells_problem(wide.table("t").columns["x"], touched=False))
    assert "not a numeric measure" in str(value_cells_problem(plain["g"], touched=False))


@pytest.mark.parametrize("cost", [PrivacyCost(epsilon=1.0), PrivacyCost(rho=0.5)])
def test_the_planner_reads_count_and_sum_as_one_vector_when_that_is_more_accurate(cost: PrivacyCost) -> None:
    """COUNT(*) and SUM(x) over the whole table: one optimized measurement of the 22 value cells
    beats two separate ones; EXPLAIN and the note say so, with the per-row rounding (none here)."""
    prepared = engine.prepare("SELECT COUNT(*) AS n, SUM(x) AS s FROM t", schema(), cost)
    ((group, note),) = prepared.groups.answering_notes
    assert (group == 0 and note.startswith("answered from one count vector (TaMM)")
            and "x exact (one value per cell" in note)
    assert [m.vector for m in prepared.groups.measurements] == [("count", None)]
    assert note in engine.explain(prepared)
    apart = engine.prepare("SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g", schema(), cost)
    assert {m.vector for m in apart.groups.measurements} == {("count", None), ("sum", "x")}
    # a tie: [1; r/s] per group costs what two measurements do
    assert "measured apart (TiMM)" in apart.groups.answering_notes[0][1]


@pytest.mark.slow
def test_grouped_count_and_avg_share_the_value_basis_and_match_the_predicted_variance() -> None:
    """COUNT(*) and AVG(x) GROUP BY g: three separate vectors, or one over g × value cells measured
    with I ⊗ [outside; non-NULL; r/s] (sensitivity 2 instead of 3 budget shares). 30 seeded
    releases: every group's COUNT, SUM-based AVG z-scores have mean within 4.5/√R of 0 and
    variance within 1.6·6·√(2/R) of 1."""
    con, runs = table(4), 30
    prepared = engine.prepare("SELECT g, COUNT(*) AS n, AVG(x) AS a FROM t GROUP BY g", schema(),
                              PrivacyCost(epsilon=1.0))
    ((_, note),) = prepared.groups.answering_notes
    (measurement,) = prepared.groups.measurements
    assert note.startswith("answered from one count vector (TaMM)") and measurement.plan.name == "value basis"
    truth = exact(con,
                  "SELECT g, COUNT(*), SUM(CASE WHEN x IS NULL THEN 0 ELSE LEAST(GREATEST(x, 0), 20) END) / COUNT(x) "
                       "FROM t GROUP BY g ORDER BY g")
    backend, z = DuckDBBackend(con), []
    for seed in range(runs):
        (result,) = engine.run(prepared, backend=backend, budget=Budget(epsilon=100.0), rng=SeededRandomSource(seed))
        columns = {name: result.column(name).to_numpy() for name in ("n", "n_stddev", "a", "a_stddev")}
        z.append([(columns["n"][g] - truth[g][0]) / columns["n_stddev"][g] for g in range(4)]
                 + [(columns["a"][g] - truth[g][1]) / columns["a_stddev"][g] for g in range(4)])
    scores = np.array(z)
    assert np.all(np.abs(scores.mean(axis=0)) < 4.5 / math.sqrt(runs))
    assert np.all(np.abs(scores.var(axis=0, ddof=1) - 1) < 1.6 * 6 * math.sqrt(2 / runs))


@pytest.mark.slow
def test_shared_measurement_answers_match_the_predicted_variance_and_avg_uses_the_covariance() -> None:
    """40 seeded releases at ε = 1 of COUNT(*), SUM(x), AVG(x), read as value cells: z-scores of
    every answer against the exact truth have mean within 4.5/√R of 0 and variance within
    6·√(2/R)·1.6 of 1 (discrete Laplace noise has kurtosis up to 6); the AVG standard error, which
    subtracts 2·S·Cov(S, C)/C³, matches the spread of the AVG answers the same way."""
    con, runs = table(3), 40
    prepared = engine.prepare("SELECT COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM t", schema(),
                              PrivacyCost(epsilon=1.0))
    assert [m.vector for m in prepared.groups.measurements] == [("count", None)]
    ((n, s, c),) = con.execute("SELECT COUNT(*), SUM(CASE WHEN x IS NULL THEN 0 ELSE LEAST(GREATEST(x, 0), 20) END), "
                               "COUNT(x) FROM t").fetchall()
    backend, z = DuckDBBackend(con), []
    for seed in range(runs):
        (result,) = engine.run(prepared, backend=backend, budget=Budget(epsilon=100.0), rng=SeededRandomSource(seed))
        row = {name: result.column(name)[0].as_py() for name in result.column_names}
        z.append([(row["n"] - n) / row["n_stddev"], (row["s"] - s) / row["s_stddev"],
                  (row["a"] - s / c) / row["a_stddev"]])
        metadata = json.loads(result.schema.metadata[b"dpsql"])
        assert metadata["strategy"] == {"group 1: count": prepared.groups.measurements[0].plan.name}
    scores = np.array(z)
    assert np.all(np.abs(scores.mean(axis=0)) < 4.5 / math.sqrt(runs))
    assert np.all(np.abs(scores.var(axis=0, ddof=1) - 1) < 1.6 * 6 * math.sqrt(2 / runs))


def test_answer_covariance_matches_the_dense_formula() -> None:
    rng = np.random.default_rng(0)
    A = Explicit(rng.integers(0, 3, (6, 4)).astype(float) + np.eye(6, 4))
    release = mechanism.measure(A, np.arange(4), rng=SeededRandomSource(0), epsilon=1)
    U = Sum([Kron([Explicit(rng.random((2, 2))), Explicit(rng.random((1, 2)))]),
             Kron([Explicit(rng.random((2, 2))), Explicit(rng.random((1, 2)))])])
    V = Kron([Explicit(rng.random((2, 2))), Explicit(rng.random((1, 2)))])
    dense = U.dense() @ np.linalg.pinv(A.dense().T @ A.dense()) @ V.dense().T
    assert np.allclose(mechanism.answer_covariance(U, V, release), release.noise_variance * np.diag(dense))


def test_prefix_sums_on_a_clamped_measure_can_be_value_cells_and_form_an_isotonic_chain() -> None:
    """SUM(x) WHERE x < k for k = 2, 4, …, 20 on a column declared out_of_domain = "clamp" are
    eligible (the planner weighs both forms); read as value cells their weighted rows are nested,
    so the isotonic step finds one chain and makes decreasing answers non-decreasing."""
    sql = ";".join(f"SELECT SUM(x) AS s FROM t WHERE x < {k}" for k in range(2, 21, 2))
    prepared = engine.prepare(sql, schema("clamp"), PrivacyCost(epsilon=1.0))
    ((_, note),) = prepared.groups.answering_notes
    assert "error score with x as value cells" in note
    batch, t = parse_batch(sql), schema("clamp").table("t")
    group, statements = compile_group(batch, t, list(range(10)), 0, {"x": ValueCells(low=0.0, high=20.0)})
    assert all(block.kind == ("sum", "x") and block.data == ("count", None) for block in group.blocks)
    compiled = CompiledBatch(table=t, groups=(group,), statements=tuple(statements))
    answers = {(0, b): mechanism.Answers(values=np.array([-float(b)]), variances=np.ones(1)) for b in range(10)}
    fitted, notes = postprocess.apply(compiled, answers, ["isotonic"])
    assert "1" in notes[0] and np.all(np.diff([fitted[0, b].values[0] for b in range(10)]) >= 0)
