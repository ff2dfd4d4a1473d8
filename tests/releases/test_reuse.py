"""Releases kept and reused (issue: never pay twice): the GLS math against a dense computation,
strategy recipes, and end to end — the same batch twice charges once, sub-ranges of released
ranges are free, a mixed batch charges only for its new statements and its old answers' variances
shrink exactly as predicted (checked by Monte Carlo), EXPLAIN says what is free.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import scipy.sparse as sp

import dpsql
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.errors import LedgerError
from dpsql.matrix.workloads import Explicit, Identity, Kron, Prefix, VStack, Weighted
from dpsql.noise import SeededRandomSource
from dpsql.releases.kept import KeptMeasurement, payload, read_payload
from dpsql.releases.recipes import from_recipe, to_recipe
from dpsql.schema import Schema

SCHEMA = Schema.load({"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 79, "bin_width": 10},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "income": {"type": "numeric", "lower": 0, "upper": 1000},
}}}})
ROWS = 3000


def _data(seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"age": rng.integers(0, 80, ROWS), "sex": rng.choice(["F", "M"], ROWS),
                     "income": np.round(rng.uniform(0, 1000, ROWS), 2)})


@pytest.fixture(scope="module")
def data() -> pa.Table:
    return _data()


def _connect(data: pa.Table, seed: int, budget: Budget | None = None) -> dpsql.Connection:
    con = duckdb.connect()
    con.register("source", data)
    con.execute("CREATE TABLE people AS SELECT * FROM source")
    return dpsql.connect(con, schema=SCHEMA, budget=budget or Budget(epsilon=10.0), rng=SeededRandomSource(seed))


def _write(path: Path, data: pa.Table) -> Path:
    """A DuckDB database file with the table ``people``."""
    with duckdb.connect(str(path)) as con:
        con.register("source", data)
        con.execute("CREATE TABLE people AS SELECT * FROM source")
    return path


def _run(cursor: dpsql.Cursor, sql: str, **options: object) -> list[pa.Table]:
    cursor.execute(sql, **options)
    return list(cursor._results)


def _meta(table: pa.Table) -> dict[str, object]:
    return json.loads(table.schema.metadata[b"dpsql"])


# ------------------------------------------------------------------------------------------- math
def _aggregation(cells: np.ndarray) -> np.ndarray:
    """0/1 matrix: measurement cell × base cell (the test's own lifting)."""
    matrix = np.zeros((cells.max() + 1, cells.size))
    matrix[cells, np.arange(cells.size)] = 1.0
    return matrix


def test_strategy_recipes_round_trip_exactly() -> None:
    strategies = [Kron([Explicit(np.arange(6.0).reshape(2, 3) / 7), Identity(4)]),
                  VStack([Weighted(3.0, Identity(5)), Explicit(sp.csr_array(np.eye(5)[:2]))]),
                  Prefix(6)]
    for strategy in strategies:
        copy = from_recipe(json.loads(json.dumps(to_recipe(strategy))))
        assert np.array_equal(copy.dense(), strategy.dense())


def test_payload_round_trip_and_schema_version() -> None:
    kept = KeptMeasurement(table="people", vector="count", axes=(("age", np.array([0, 0, 1])),),
                           strategy=Identity(2), y=np.array([3.5, -1.0]), noise_variance=2.0, label="count over age(2)")
    text = payload([kept], ["count over age(2)"], "v1")
    again = read_payload(text, 7, "v1")
    assert again[0].release == 7 and np.array_equal(again[0].y, kept.y)
    assert np.array_equal(again[0].axes[0][1], kept.axes[0][1])
    assert read_payload(text, 7, "v2") == []  # another schema version: never used
    with pytest.raises(ValueError):
        read_payload(text.replace('"noise_variance":2.0', '"noise_variance":0.0'), 7, "v1")


# ------------------------------------------------------------------------------------------- end to end
def test_the_same_batch_twice_charges_once(data: pa.Table) -> None:
    sql = "SELECT age, COUNT(*) FROM people GROUP BY age; SELECT sex, SUM(income) FROM people GROUP BY sex"
    connection = _connect(data, seed=1)
    cursor = connection.cursor()
    first = _run(cursor, sql, epsilon=1.0)
    left = connection.budget.remaining
    second = _run(cursor, sql, epsilon=1.0)
    assert connection.budget.remaining == left == pytest.approx(9.0)
    for a, b in zip(first, second):  # the same numbers and standard errors (GLS over the one release: float rounding)
        for name in a.column_names:
            if pa.types.is_floating(a.schema.field(name).type):
                np.testing.assert_allclose(a[name].to_numpy(), b[name].to_numpy(), rtol=1e-9, atol=1e-9)
            else:
                assert a[name].equals(b[name])
        assert _meta(b)["budget_spent"].startswith("nothing: answered by release(s) #1")
    again = _run(cursor, sql, epsilon=1.0, reuse=False)  # measured again on request: an independent replicate
    assert connection.budget.remaining == pytest.approx(8.0)
    assert "reuse" not in _meta(again[0])
    np.testing.assert_allclose(again[0]["count_stddev"].to_numpy(), first[0]["count_stddev"].to_numpy())
    assert not np.allclose(again[0]["count"].to_numpy(), first[0]["count"].to_numpy())
    combined = _run(cursor, sql, epsilon=1.0)  # the third batch is free and combines both releases
    assert connection.budget.remaining == pytest.approx(8.0)
    assert _meta(combined[0])["reuse"]["answered_by_releases"] == [1, 2]
    np.testing.assert_allclose(combined[0]["count_stddev"].to_numpy(), first[0]["count_stddev"].to_numpy() / np.sqrt(2),
                               rtol=1e-9)  # two equal, independent releases: half the variance


def test_subranges_of_released_ranges_are_free_when_the_cost_buys_less(data: pa.Table) -> None:
    """Sums of released bins answer ranges for free when the batch's cost would buy less accuracy;
    a range asked at a cost that buys more is measured and combined with the bins."""
    connection = _connect(data, seed=2)
    cursor = connection.cursor()
    histogram = _run(cursor, "SELECT age, COUNT(*) FROM people GROUP BY age", epsilon=1.0)[0]
    counts = histogram["count"].to_numpy()
    left = connection.budget.remaining
    ranges = _run(cursor, "SELECT COUNT(*) FROM people WHERE age BETWEEN 20 AND 39; "
                          "SELECT COUNT(*) FROM people WHERE age < 50; "
                          "SELECT COUNT(*) AS n FROM people WHERE age >= 70", epsilon=0.05)
    assert connection.budget.remaining == left
    expected = [counts[2:4].sum(), counts[:5].sum(), counts[7:].sum()]
    for table, value in zip(ranges, expected):
        assert table.column(0)[0].as_py() == pytest.approx(value, abs=1e-6 * max(1.0, abs(value)))
    text = cursor.explain("SELECT COUNT(*) FROM people WHERE age BETWEEN 20 AND 39", epsilon=0.1)
    assert "Statement 1: free (answered by release #1" in text and "Cost: nothing" in text
    text = cursor.explain("SELECT COUNT(*) FROM people WHERE age BETWEEN 20 AND 39", epsilon=1.0)
    assert "Statement 1: measured and combined with release #1 (kept alone: stddev" in text
    paid = _run(cursor, "SELECT COUNT(*) AS n FROM people WHERE age BETWEEN 20 AND 39", epsilon=1.0)[0]
    assert connection.budget.remaining == pytest.approx(left - 1.0)
    assert _meta(paid)["reuse"]["answered_by_releases"] == [1, 2]
    kept_alone = ranges[0].column(1)[0].as_py()
    assert paid["n_stddev"][0].as_py() < min(kept_alone, np.sqrt(2.0))  # better than either: bins, or ε = 1 alone


def _dense_variance(connection: dpsql.Connection, query_cells: np.ndarray) -> float:
    """w M⁺ wᵀ on age's base cells (8 bins and outside) × sex's (2 and outside), from the kept
    strategies, by the test's own lifting."""
    information = np.zeros((query_cells.size, query_cells.size))
    for kept in connection.releases.kept():
        lifts = []
        for key in ("age", "sex"):
            cells = dict(kept.axes).get(key)
            lifts.append(_aggregation(cells) if cells is not None else np.ones((1, 9 if key == "age" else 3)))
        names = [key for key, _ in kept.axes]
        lift = np.kron(lifts[0], lifts[1])
        if names == ["sex", "age"]:
            raise AssertionError("axes are in schema order")
        strategy = kept.strategy.dense() @ lift
        information += strategy.T @ strategy / kept.noise_variance
    return float(query_cells @ np.linalg.pinv(information) @ query_cells)


def test_a_mixed_batch_charges_only_its_new_statements_and_old_answers_improve(data: pa.Table) -> None:
    connection = _connect(data, seed=3)
    cursor = connection.cursor()
    old = _run(cursor, "SELECT age, COUNT(*) FROM people GROUP BY age", epsilon=1.0)[0]
    mixed = _run(cursor, "SELECT age, COUNT(*) FROM people GROUP BY age; "
                         "SELECT age, sex, COUNT(*) FROM people GROUP BY age, sex", epsilon=0.5)
    assert connection.budget.remaining == pytest.approx(10 - 1.0 - 0.5)  # only the new statement's ε
    assert _meta(mixed[0])["reuse"]["answered_by_releases"] == [1, 2]
    before, after = old["count_stddev"].to_numpy(), mixed[0]["count_stddev"].to_numpy()
    assert np.all(after < before * 0.999)
    query = np.kron(np.eye(9)[2], np.ones(3))  # bin [20, 30), every sex
    assert after[2] ** 2 == pytest.approx(_dense_variance(connection, query), rel=1e-6)


@pytest.mark.slow
def test_reused_answers_errors_match_their_reported_variance_monte_carlo(data: pa.Table) -> None:
    """Over 200 seeds: batch 1 measures the age histogram at ε = 1; batch 2 repeats it with the
    age × sex table at ε = 0.5. The z-scores (answer − truth)/stddev of one bin in batch 2 (GLS
    over both releases) and of a free range in batch 3 have mean square in [0.6, 1.5]: its
    sampling sd is at most √(5/200) ≈ 0.16 for Laplace-tailed errors, so this holds except with
    probability below 1e-3 when the variances are right, and fails if they are off by 40 %."""
    truth_bin = int(np.sum((data["age"].to_numpy() >= 20) & (data["age"].to_numpy() < 30)))
    truth_range = int(np.sum(data["age"].to_numpy() < 50))
    z_bin, z_range = [], []
    for seed in range(200):
        cursor = _connect(data, seed=1000 + seed).cursor()
        _run(cursor, "SELECT age, COUNT(*) FROM people GROUP BY age", epsilon=1.0)
        mixed = _run(cursor, "SELECT age, COUNT(*) FROM people GROUP BY age; "
                             "SELECT age, sex, COUNT(*) FROM people GROUP BY age, sex", epsilon=0.5)[0]
        z_bin.append((mixed["count"][2].as_py() - truth_bin) / mixed["count_stddev"][2].as_py())
        free = _run(cursor, "SELECT COUNT(*) FROM people WHERE age < 50", epsilon=1.0)[0]
        z_range.append((free["count"][0].as_py() - truth_range) / free["count_stddev"][0].as_py())
    for z in (np.array(z_bin), np.array(z_range)):
        assert abs(z.mean()) < 4 * np.sqrt(1 / len(z))
        assert 0.6 <= float(np.mean(z**2)) <= 1.5


def test_releases_in_the_ledger_answer_a_later_process_for_free(tmp_path: Path, data: pa.Table) -> None:
    """A release kept in the ledger answers the same batch from a new connection without a second
    charge; the release names its charge; once rows are written to the file it is not used; an
    edited release fails closed."""
    path = _write(tmp_path / "people.duckdb", data)
    ledger = Ledger(default_path(path))
    ledger.set_total(path.name, PrivacyCost(epsilon=2.0), binding=Binding.of(SCHEMA, path))
    sql = "SELECT age, COUNT(*) FROM people GROUP BY age"
    with dpsql.connect(path, schema=SCHEMA) as connection:
        first = _run(connection.cursor(), sql, epsilon=0.5)[0]
    with dpsql.connect(path, schema=SCHEMA) as connection:
        again = _run(connection.cursor(), "SELECT COUNT(*) FROM people WHERE age >= 40", epsilon=0.05)[0]
        explained = connection.cursor().explain(sql, epsilon=0.5)
    charges, releases = ledger.history(path.name), ledger.releases(path.name)
    assert len(charges) == 1 and [r.charge for r in releases] == [charges[0].id]
    number = releases[0].id
    assert f"free (answered by release #{number}" in explained
    assert again["count"][0].as_py() == pytest.approx(sum(first["count"].to_numpy()[4:]), rel=1e-9)
    assert _meta(again)["budget_spent"] == f"nothing: answered by release(s) #{number}"
    with duckdb.connect(str(path)) as con:  # rows written since: the kept release describes other data
        con.execute("INSERT INTO people SELECT * FROM people LIMIT 10")
    with dpsql.connect(path, schema=SCHEMA) as connection:
        assert "Statement 1: free" not in connection.cursor().explain(sql, epsilon=0.5)
        _run(connection.cursor(), sql, epsilon=0.5)
    assert len(ledger.history(path.name)) == 2
    with sqlite3.connect(ledger.path) as db:  # an edit the MAC chain does not cover
        db.execute("UPDATE releases SET payload = replace(payload, '\"label\":\"count', '\"label\":\"xount')")
    with dpsql.connect(path, schema=SCHEMA) as connection, pytest.raises(LedgerError):
        connection.cursor().execute(sql, epsilon=0.5)


def test_a_residual_planner_release_is_kept_and_its_gls_is_residual_planners_own_answer(data: pa.Table) -> None:
    """ResidualPlanner's integer releases Ξ_S x + z_S, kept as measurements of their marginals,
    answer the same batch again for free; GLS over them reproduces ResidualPlanner's own
    reconstruction (values and standard errors) — two independent computations of one BLUE."""
    connection = _connect(data, seed=4, budget=Budget(rho=10.0))
    cursor = connection.cursor()
    sql = ("SELECT age, sex, COUNT(*) FROM people GROUP BY age, sex; SELECT age, COUNT(*) FROM people GROUP BY age; "
           "SELECT sex, COUNT(*) FROM people GROUP BY sex")
    first = _run(cursor, sql, rho=0.5)
    assert _meta(first[0])["mechanism"].startswith("ResidualPlanner")
    again = _run(cursor, sql, rho=0.5)
    assert connection.budget.spent == pytest.approx(0.5)
    for a, b in zip(first, again):
        assert _meta(b)["budget_spent"].startswith("nothing: answered by release(s) #1")
        np.testing.assert_allclose(b["count"].to_numpy(), a["count"].to_numpy(), rtol=1e-9, atol=1e-8)
        np.testing.assert_allclose(b["count_stddev"].to_numpy(), a["count_stddev"].to_numpy(), rtol=1e-9)
    marginal = _run(cursor, "SELECT COUNT(*) FROM people WHERE sex = 'F' AND age >= 40", rho=0.001)[0]
    assert connection.budget.spent == pytest.approx(0.5)  # a sum of cells of the (age, sex) marginal: free
    expected = first[0].filter(pc.and_(pc.equal(first[0]["sex"], "F"),
                                               pc.greater_equal(first[0]["age"], 40)))
    assert marginal["count"][0].as_py() == pytest.approx(sum(expected["count"].to_numpy()), rel=1e-9)


def test_releases_made_before_the_owner_rebinds_are_not_used(tmp_path: Path, data: pa.Table) -> None:
    path = _write(tmp_path / "people.duckdb", data)
    ledger = Ledger(default_path(path))
    ledger.set_total(path.name, PrivacyCost(epsilon=2.0), binding=Binding.of(SCHEMA, path))
    sql = "SELECT sex, COUNT(*) FROM people GROUP BY sex"
    with dpsql.connect(path, schema=SCHEMA) as connection:
        _run(connection.cursor(), sql, epsilon=0.5)
        assert "Statement 1: free" in connection.cursor().explain(sql, epsilon=0.5)
    _write(tmp_path / "fresh.duckdb", data).replace(path)  # the data replaced by a new file: the owner rebinds
    ledger.set_total(path.name, PrivacyCost(epsilon=2.0), binding=Binding.of(SCHEMA, path), rebind=True)
    with dpsql.connect(path, schema=SCHEMA) as connection:
        assert "Statement 1: free" not in connection.cursor().explain(sql, epsilon=0.5)


def test_a_total_count_is_free_after_a_total_count(data: pa.Table) -> None:
    """A statement with no columns (the total) pools measurements with no axes: one joint cell."""
    connection = _connect(data, seed=6)
    cursor = connection.cursor()
    first = _run(cursor, "SELECT COUNT(*) AS n FROM people", epsilon=1.0)[0]
    again = _run(cursor, "SELECT COUNT(*) AS n FROM people", epsilon=1.0)[0]
    assert connection.budget.spent == pytest.approx(1.0)
    assert again["n"][0].as_py() == pytest.approx(first["n"][0].as_py(), rel=1e-12)
    assert again["n_stddev"][0].as_py() == pytest.approx(first["n_stddev"][0].as_py(), rel=1e-12)


def test_a_free_batch_still_checks_its_privacy_unit_option(data: pa.Table) -> None:
    cursor = _connect(data, seed=8).cursor()
    _run(cursor, "SELECT sex, COUNT(*) FROM people GROUP BY sex", epsilon=1.0)
    wrong = ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, privacy_unit_column = person) sex, COUNT(*) "
             "FROM people GROUP BY sex")
    with pytest.raises(dpsql.ProgrammingError, match="is not the table's declared privacy unit"):
        cursor.execute(wrong)
    with pytest.raises(dpsql.ProgrammingError, match="is not the table's declared privacy unit"):
        cursor.explain(wrong)


def test_a_repeated_question_stays_free_and_only_improves_however_many_releases_came_after_it(data: pa.Table) -> None:
    """Many later releases neither crowd the one that answers a repeat out of its pool nor make its
    answer worse: every one of them joins (their cells were measured before the bound), and the
    repeat's stddev only shrinks."""
    cursor = _connect(data, 41, Budget(epsilon=100.0)).cursor()
    question = "SELECT COUNT(*) AS n FROM people WHERE age >= 30 AND sex = 'F'"
    first = _run(cursor, question, epsilon=0.5)[0]["n_stddev"][0].as_py()
    stddevs = [first]
    for _ in range(36):  # later releases over the sex cells alone
        cursor.execute("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=0.5, reuse=False)
        assert "Statement 1: free (answered by release #1" in cursor.explain(question, epsilon=0.5)
        stddevs.append(_run(cursor, question, epsilon=0.5)[0]["n_stddev"][0].as_py())
    assert cursor.connection.budget.spent == pytest.approx(0.5 * 37)
    assert all(b <= a * (1 + 1e-9) for a, b in itertools.pairwise(stddevs))
    repeat = _meta(_run(cursor, question, epsilon=0.5)[0])
    assert repeat["reuse"]["answered_by_releases"] == list(range(1, 38))
