"""Accuracy-first execution (issue 19 item 1): ``execute(sql, max_stddev=s)`` finds the least cost
whose plan meets the target for every answer, before any data is read, and charges exactly that.

Checked here: the predicted standard errors equal the reported ones on real executes (both routes,
counts and sums, GROUP BY and WHERE); the cost found meets the target and 1 % less misses it (ε and
ρ); per-statement and relative targets; refusals (over the budget, before any data is read and with
the budget untouched; outputs whose error depends on the data; bad targets); the CLI; and a Monte
Carlo check that the empirical errors at the found cost match the reported standard error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

import dpsql
from dpsql import engine
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.cli import main
from dpsql.engine import pipeline
from dpsql.engine.reuse import accuracy_target as at
from dpsql.engine.reuse.predicted import predicted_stddevs
from dpsql.errors import BudgetExhaustedError, NotSupportedError, ProgrammingError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

COLUMNS: dict[str, dict[str, Any]] = {
    "age": {"type": "integer", "lower": 0, "upper": 19, "bin_width": 5},
    "income": {"type": "numeric", "lower": 0, "upper": 100, "bin_width": 50, "resolution": 10},
    "sex": {"type": "categorical", "values": ["F", "M", "X"]},
    "rooms": {"type": "integer", "lower": 1, "upper": 4},
    "wage": {"type": "integer", "lower": 0, "upper": 100_000, "bin_width": 1000, "truncate": "svt"},
}
SCHEMA = Schema.load({"tables": {"t": {"columns": COLUMNS}}})
ROWS = 500
# groups route: counts and sums, GROUP BY and WHERE, two statement groups
MIXED = ("SELECT age, COUNT(*) AS n, SUM(income) AS s FROM t WHERE rooms >= 2 GROUP BY age; "
         "SELECT sex, COUNT(*) AS n FROM t GROUP BY sex")
# ResidualPlanner route under ρ: COUNT(*) marginals
MARGINALS = ("SELECT age, sex, COUNT(*) AS n FROM t GROUP BY age, sex; SELECT sex, COUNT(*) AS n FROM t GROUP BY sex; "
             "SELECT age, COUNT(*) AS n FROM t GROUP BY age")


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    rng = np.random.default_rng(19)
    con = duckdb.connect()
    con.register("source", pa.table({
        "age": rng.integers(0, 20, ROWS), "income": np.round(rng.uniform(0, 100, ROWS), 1),
        "sex": rng.choice(["F", "M"], ROWS), "rooms": rng.integers(1, 5, ROWS), "wage": rng.integers(0, 90_000, ROWS)}))
    con.execute("CREATE TABLE t AS SELECT * FROM source")
    con.unregister("source")
    yield con
    con.close()


def connect(data: duckdb.DuckDBPyConnection, budget: Budget, seed: int = 0) -> dpsql.Connection:
    return dpsql.connect(data, schema=SCHEMA, budget=budget, rng=SeededRandomSource(seed))


def prepared_at(sql: str, cost: PrivacyCost) -> engine.Prepared:
    return engine.prepare(sql, SCHEMA, cost)


def worst(sql: str, cost: PrivacyCost, targets: Sequence[at.StatementTarget]) -> float:
    return at.worst_ratio(predicted_stddevs(prepared_at(sql, cost)), targets)


# ------------------------------------------------------------------------------------------------ predictions
@pytest.mark.parametrize(("sql", "cost", "route"), [
    (MIXED, PrivacyCost(epsilon=0.7), "GroupsPlan"),
    (MIXED, PrivacyCost(rho=0.3), "GroupsPlan"),
    (MARGINALS, PrivacyCost(rho=0.3), "ResidualPlan"),
    (MIXED, PrivacyCost(epsilon=300.0), "GroupsPlan"),  # tiny noise: the exact discrete variances differ from
    (MARGINALS, PrivacyCost(rho=200.0), "ResidualPlan"),  # the continuous ones (2t², σ²) the planner scores
])
def test_predicted_stddevs_are_the_reported_ones(data: duckdb.DuckDBPyConnection, sql: str, cost: PrivacyCost,
                                                  route: str) -> None:
    prepared = prepared_at(sql, cost)
    assert type(prepared.chosen).__name__ == route
    predicted = predicted_stddevs(prepared)
    budget = Budget(epsilon=1000) if cost.family == "epsilon" else Budget(rho=1000)
    tables = connect(data, budget).cursor().execute(sql, epsilon=cost.epsilon, rho=cost.rho).fetch_arrow_tables()
    assert len(tables) == len(predicted)
    for table, answers in zip(tables, predicted):
        assert set(answers) == {name for name in table.column_names if f"{name}_stddev" in table.column_names}
        for alias, stddevs in answers.items():
            np.testing.assert_array_equal(np.asarray(table.column(f"{alias}_stddev")), stddevs)  # exactly equal


def test_linear_derived_outputs_are_predicted_exactly(data: duckdb.DuckDBPyConnection) -> None:
    """Var(Σ c_i a_i) = cᵀ Σ c with the covariances of answers sharing a measurement; a ratio is not predicted."""
    sql = ("SELECT sex, SUM(income) - 2 * COUNT(*) AS d, (SUM(income) + SUM(income) FILTER (WHERE age < 5)) / 2 AS h, "
           "COUNT(*) AS n, SUM(income) / COUNT(*) AS r FROM t GROUP BY sex")
    predicted = predicted_stddevs(prepared_at(sql, PrivacyCost(epsilon=1.0)))[0]
    assert set(predicted) == {"d", "h", "n"}
    table = connect(data, Budget(epsilon=10)).cursor().execute(sql, epsilon=1.0).fetch_arrow_table()
    for alias, stddevs in predicted.items():
        np.testing.assert_array_equal(np.asarray(table.column(f"{alias}_stddev")), stddevs)
    targeted = "SELECT sex, SUM(income) - 2 * COUNT(*) AS d FROM t GROUP BY sex HAVING COUNT(*) > 0"
    found = at.find(at.TargetRequest(max_stddev=100.0), targeted, SCHEMA)
    assert found.worst <= 1 < worst(targeted, PrivacyCost(epsilon=found.cost.value * 0.99), [100.0])


def test_unguaranteed_outputs_are_left_out_of_the_prediction() -> None:
    prepared = prepared_at("SELECT age, COUNT(*) AS n, AVG(income) AS a, SUM(wage) AS w FROM t GROUP BY age",
                           PrivacyCost(epsilon=1.0))
    assert set(predicted_stddevs(prepared)[0]) == {"n"}


# ------------------------------------------------------------------------------------------------ least cost
@pytest.mark.parametrize("family", ["epsilon", "rho"])
def test_least_cost_meets_the_target_and_one_percent_less_misses(data: duckdb.DuckDBPyConnection,
                                                                   family: str) -> None:
    budget = Budget(epsilon=100) if family == "epsilon" else Budget(rho=100)
    cursor = connect(data, budget).cursor().execute(MIXED, max_stddev=20.0, family=family)
    tables = cursor.fetch_arrow_tables()
    metadata = json.loads(tables[0].schema.metadata[b"dpsql"])
    found = metadata["accuracy_target"]
    cost = PrivacyCost.of(family, float(found["least_cost"].split("=")[1]))  # type: ignore[arg-type]
    assert metadata["budget_spent"] == cost.describe() and float(budget.exact_spent) == cost.value  # charged exactly
    reported = [np.asarray(t.column(c)) for t in tables for c in t.column_names if c.endswith("_stddev")]
    assert max(float(r.max()) for r in reported) <= 20.0
    assert max(float(r.max()) for r in reported) > 20.0 * 0.999  # the target binds
    assert worst(MIXED, PrivacyCost.of(family, cost.value * 0.99), [20.0, 20.0]) > 1  # 1 % less misses
    assert found["worst_stddev_over_target"] <= 1 and found["family"] == family


@pytest.mark.parametrize("family", ["epsilon", "rho"])
def test_least_cost_brackets_to_the_precision(family: str) -> None:
    found = at.find(at.TargetRequest(max_stddev=[None, 0.8], family=family), MIXED, SCHEMA)
    assert found.miss is not None and found.cost.value / found.miss - 1 <= at.PRECISION
    assert found.worst <= 1 < worst(MIXED, PrivacyCost.of(found.cost.family, found.miss), found.targets)
    assert found.plans <= at.MAX_PLANS


def test_residual_route_search() -> None:
    found = at.find(at.TargetRequest(max_stddev=2.0, family="rho"), MARGINALS, SCHEMA)
    assert type(found.prepared.chosen).__name__ == "ResidualPlan"
    assert found.worst <= 1 < worst(MARGINALS, PrivacyCost(rho=found.cost.value * 0.99), found.targets)


def test_per_statement_targets(data: duckdb.DuckDBPyConnection) -> None:
    both = at.find(at.TargetRequest(max_stddev=[30.0, 0.5]), MIXED, SCHEMA)
    first = at.find(at.TargetRequest(max_stddev=[30.0, None]), MIXED, SCHEMA)
    second = at.find(at.TargetRequest(max_stddev=[None, 0.5]), MIXED, SCHEMA)
    assert both.cost.value >= max(first.cost.value, second.cost.value) * (1 - at.PRECISION)
    assert first.targets == (30.0, None) and second.stddevs[0]  # untargeted statements are still predicted
    tables = connect(data, Budget(epsilon=100)).cursor().execute(MIXED, max_stddev=[None, 0.5]).fetch_arrow_tables()
    assert float(np.max(tables[1].column("n_stddev"))) <= 0.5
    assert json.loads(tables[0].schema.metadata[b"dpsql"])["accuracy_target"]["worst_stddev_over_target"] == 0


def test_union_all_takes_one_target_per_user_statement() -> None:
    sql = ("SELECT COUNT(*) AS n FROM t WHERE age < 5 UNION ALL SELECT COUNT(*) AS n FROM t WHERE age >= 15; "
           "SELECT sex, COUNT(*) AS n FROM t GROUP BY sex")
    found = at.find(at.TargetRequest(max_stddev=[1.0, None]), sql, SCHEMA)
    assert found.targets == (1.0, 1.0, None)
    assert found.worst <= 1 < at.worst_ratio(predicted_stddevs(prepared_at(sql, PrivacyCost(
        epsilon=found.cost.value * 0.99))), found.targets)


def test_relative_target_is_per_row_of_the_declared_bounds() -> None:
    found = at.find(at.TargetRequest(max_relative_stddev=[3.0, None]), MIXED, SCHEMA)
    assert found.targets == ({"n": 3.0, "s": 300.0}, None)  # a COUNT's row adds 1, a SUM(income)'s at most 100
    both = at.find(at.TargetRequest(max_relative_stddev=3.0, max_stddev=[100.0, None]), MIXED, SCHEMA)
    assert both.targets[0] == {"n": 3.0, "s": 100.0}  # each answer meets the smaller


def test_a_hooked_stddevs_that_is_not_one_over_epsilon_is_searched_exactly() -> None:
    """The hook may count earlier information: Var = 1/(1/v + 1/v0), monotone in the cost but not ∝ 1/ε²."""
    def combined(prepared: engine.Prepared) -> list[dict[str, np.ndarray]]:
        return [{alias: np.sqrt(1 / (1 / s**2 + 1 / 4.0)) for alias, s in answers.items()}
                for answers in predicted_stddevs(prepared)]

    targets = [1.5, None]
    found = at.least_cost(lambda cost: prepared_at(MIXED, cost), "epsilon", targets, stddevs=combined)
    below = prepared_at(MIXED, PrivacyCost(epsilon=found.cost.value * 0.99))
    assert found.worst <= 1 < at.worst_ratio(combined(below), targets)
    plain = at.least_cost(lambda cost: prepared_at(MIXED, cost), "epsilon", targets)
    assert found.cost.value < plain.cost.value  # the earlier information is worth something


def test_executemany_finds_each_runs_least_cost(data: duckdb.DuckDBPyConnection) -> None:
    sql = "SELECT sex, COUNT(*) AS n FROM t WHERE age < ? GROUP BY sex"
    budget = Budget(epsilon=100)
    tables = connect(data, budget).cursor().executemany(sql, [[5], [10]], max_stddev=2.0).fetch_arrow_tables()
    costs = [json.loads(t.schema.metadata[b"dpsql"])["accuracy_target"]["least_cost"] for t in tables]
    assert budget.spent == pytest.approx(sum(float(c.split("=")[1]) for c in costs), rel=1e-12)
    assert all(float(np.max(t.column("n_stddev"))) <= 2.0 for t in tables)


# ------------------------------------------------------------------------------------------------ refusals
def test_over_the_budget_is_refused_before_any_data_is_read(data: duckdb.DuckDBPyConnection,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    need = at.find(at.TargetRequest(max_stddev=5.0), MIXED, SCHEMA).cost.value
    budget = Budget(epsilon=need * 0.9)
    connection = connect(data, budget)

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the batch reached the engine's run: data would be read")

    monkeypatch.setattr(pipeline, "run", no_run)
    with pytest.raises(BudgetExhaustedError, match=rf"needs ε={need:.6g} .* has ε={need * 0.9:.6g} left"):
        connection.cursor().execute(MIXED, max_stddev=5.0)
    assert budget.exact_spent == 0 and budget.spent == 0


def test_far_over_the_budget_is_refused_without_narrowing_it_down() -> None:
    with pytest.raises(BudgetExhaustedError, match="needs about ε=") as caught:
        at.find(at.TargetRequest(max_stddev=0.01), MIXED, SCHEMA, budget=Budget(epsilon=1.0))
    assert "Nothing was run or charged" in str(caught.value)


def test_the_limit_is_compared_exactly() -> None:
    found = at.find(at.TargetRequest(max_stddev=5.0), MIXED, SCHEMA)
    assert at.least_cost(lambda cost: prepared_at(MIXED, cost), "epsilon", found.targets,
                         limit=found.cost.exact).cost == found.cost
    with pytest.raises(BudgetExhaustedError):
        at.least_cost(lambda cost: prepared_at(MIXED, cost), "epsilon", found.targets, limit=Fraction(found.miss or 0))


def test_an_epsilon_target_on_a_rho_budget_is_priced_in_rho(data: duckdb.DuckDBPyConnection) -> None:
    need = at.find(at.TargetRequest(max_stddev=5.0), MIXED, SCHEMA).cost.value
    with pytest.raises(BudgetExhaustedError, match=f"ε={need:.6g}"):
        connect(data, Budget(rho=need**2 / 2 * 0.98)).cursor().execute(MIXED, max_stddev=5.0)
    budget = Budget(rho=need**2 / 2 * 1.01)
    connect(data, budget).cursor().execute(MIXED, max_stddev=5.0)
    assert math.isclose(budget.spent, need**2 / 2, rel_tol=1e-12)


@pytest.mark.parametrize(("sql", "named"), [
    ("SELECT age, AVG(income) AS a FROM t GROUP BY age", r"'a' \(line 1, col 13\): an AVG"),
    ("SELECT MEDIAN(age) AS m FROM t", r"'m' \(line 1, col 8\): an order statistic"),
    ("SELECT sex, SUM(income) / COUNT(*) AS r FROM t GROUP BY sex", r"'r' \(line 1, col 13\): a derived output"),
    ("SELECT age, SUM(wage) AS w FROM t GROUP BY age", r"'w' \(line 1, col 13\): a truncated SUM"),
])
def test_outputs_whose_error_depends_on_the_data_are_refused(data: duckdb.DuckDBPyConnection, sql: str,
                                                              named: str) -> None:
    budget = Budget(epsilon=10)
    with pytest.raises(NotSupportedError, match=named) as caught:
        connect(data, budget).cursor().execute(sql, max_stddev=5.0)
    assert "Ask for SUM and COUNT" in str(caught.value) and "give epsilon=" in str(caught.value)
    assert budget.spent == 0


def test_an_untargeted_statement_may_hold_an_average(data: duckdb.DuckDBPyConnection) -> None:
    sql = "SELECT sex, COUNT(*) AS n FROM t GROUP BY sex; SELECT age, AVG(income) AS a FROM t GROUP BY age"
    tables = connect(data, Budget(epsilon=100)).cursor().execute(sql, max_stddev=[1.0, None]).fetch_arrow_tables()
    assert float(np.max(tables[0].column("n_stddev"))) <= 1.0


@pytest.mark.parametrize(("arguments", "message"), [
    ({"max_stddev": 0}, "max_stddev must be finite and > 0"),
    ({"max_stddev": -2.0}, "max_stddev must be finite and > 0"),
    ({"max_stddev": float("nan")}, "max_stddev must be finite and > 0"),
    ({"max_stddev": float("inf")}, "max_stddev must be finite and > 0"),
    ({"max_stddev": [1.0, 0.0]}, "for statement 2"),
    ({"max_stddev": [1.0, 2.0, 3.0, 4.0]}, "has 4 entries but the batch has 2 statement"),
    ({"max_stddev": "3"}, "max_stddev must be a positive number"),
    ({"max_stddev": True}, "max_stddev must be a positive number"),
    ({"max_stddev": [None, None]}, "every statement's target is None"),
    ({"max_relative_stddev": -1.0}, "max_relative_stddev must be finite and > 0"),
    ({"max_stddev": 1.0, "epsilon": 1.0}, r"both an accuracy target and a cost \(epsilon=\)"),
    ({"max_stddev": 1.0, "rho": 1.0}, r"both an accuracy target and a cost \(rho=\)"),
    ({"max_stddev": 1.0, "family": "delta"}, "family must be 'epsilon'"),
    ({"family": "rho"}, "give max_stddev="),
])
def test_bad_targets_are_programming_errors_and_charge_nothing(data: duckdb.DuckDBPyConnection,
                                                                arguments: dict[str, Any], message: str) -> None:
    budget = Budget(rho=100)
    cursor = connect(data, budget).cursor()
    with pytest.raises(ProgrammingError, match=message):
        cursor.execute(MIXED, **arguments)
    with pytest.raises(ProgrammingError, match=message):
        cursor.explain(MIXED, **arguments)
    assert budget.spent == 0


def test_exact_answers_meet_any_target_but_fix_no_cost_for_the_others(data: duckdb.DuckDBPyConnection) -> None:
    budget = Budget(epsilon=10)
    table = connect(data, budget).cursor().execute("SELECT COUNT(*) AS n FROM t WHERE age < 0",
                                                   max_stddev=1.0).fetch_arrow_table()
    assert table.column("n_stddev").to_pylist() == [0.0] and budget.spent == 0  # never TRUE: nothing measured
    with pytest.raises(ProgrammingError, match="every targeted answer is exact"):
        connect(data, budget).cursor().execute("SELECT COUNT(*) AS n FROM t WHERE age < 0; SELECT COUNT(*) FROM t",
                                               max_stddev=[1.0, None])
    assert budget.spent == 0


def test_a_target_with_bigquerys_cost_clause_is_refused(data: duckdb.DuckDBPyConnection) -> None:
    budget = Budget(epsilon=10)
    sql = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1) COUNT(*) AS n FROM t"
    with pytest.raises(ProgrammingError, match="WITH DIFFERENTIAL_PRIVACY OPTIONS"):
        connect(data, budget).cursor().execute(sql, max_stddev=3.0)
    assert budget.spent == 0


def test_explain_shows_the_cost_found_and_spends_nothing(data: duckdb.DuckDBPyConnection) -> None:
    budget = Budget(epsilon=100)
    text = connect(data, budget).cursor().explain(MIXED, max_stddev=[20.0, None])
    found = at.find(at.TargetRequest(max_stddev=[20.0, None]), MIXED, SCHEMA)
    assert f"Cost: {found.cost.describe()}" in text
    assert f"least cost ε={found.cost.value:.6g} meets every target" in text and "EXPLAIN spends nothing" in text
    assert "statement 1: largest predicted stddev 20; worst stddev/target 1.0000" in text
    assert "statement 2: no target" in text
    assert budget.spent == 0


# ------------------------------------------------------------------------------------------------ CLI
@pytest.fixture()
def files(tmp_path: Path, data: duckdb.DuckDBPyConnection) -> dict[str, str]:
    database = tmp_path / "people.duckdb"
    rows = data.execute("SELECT age, income, sex, rooms, wage FROM t").fetchall()
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE t (age INTEGER, income DOUBLE, sex VARCHAR, rooms INTEGER, wage INTEGER)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    (tmp_path / "q.sql").write_text(MIXED)
    Ledger(default_path(database)).set_total("people.duckdb", PrivacyCost(epsilon=3.0),
                                             binding=Binding.of(SCHEMA, database))
    schema = tmp_path / "schema.toml"
    schema.write_text("\n".join(f"[tables.t.columns.{name}]\n" + "\n".join(f"{k} = {json.dumps(v)}"
                                                                            for k, v in spec.items())
                                for name, spec in COLUMNS.items()))
    return {"db": str(database), "schema": str(schema), "queries": str(tmp_path / "q.sql")}


def cli(files: dict[str, str], command: str, *extra: str) -> int:
    return main([command, files["queries"], "--db", files["db"], "--schema", files["schema"], *extra])


def test_cli_run_and_explain_take_a_target(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    found = at.find(at.TargetRequest(max_stddev=[300.0, None]), MIXED, SCHEMA)
    assert cli(files, "explain", "--max-stddev", "300,none") == 0
    assert f"least cost ε={found.cost.value:.6g}" in capsys.readouterr().out
    assert cli(files, "run", "--max-stddev", "300,none") == 0
    captured = capsys.readouterr()
    assert "± " in captured.out and f"charged {found.cost.describe()}" in captured.err
    balance = Ledger(default_path(Path(files["db"]))).balance("people.duckdb")
    assert balance.charges == 1 and balance.left == 3 - found.cost.exact


def test_cli_refuses_a_target_over_the_budget_and_charges_nothing(files: dict[str, str],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(files, "run", "--max-stddev", "0.05") == 2
    assert "BudgetExhaustedError: the accuracy target needs" in capsys.readouterr().err
    assert Ledger(default_path(Path(files["db"]))).balance("people.duckdb").charges == 0
    assert cli(files, "run", "--max-stddev", "1", "--epsilon", "1") == 2
    assert "both an accuracy target and a cost" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: not a list of numbers
        cli(files, "run", "--max-stddev", "1,x")
    assert "is not a number or a comma-separated list of numbers and 'none'" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ Monte Carlo
RELEASES = 240


@pytest.mark.slow
@pytest.mark.parametrize("family", ["epsilon", "rho"])
def test_empirical_errors_at_the_found_cost_match_the_reported_stddev(data: duckdb.DuckDBPyConnection,
                                                                      family: str) -> None:
    """RELEASES seeded releases at the found cost; per answer, the sample variance of (answer − truth)
    against the reported variance σ². For Gaussian noise (n−1)S²/σ² ~ χ²(n−1); discrete Laplace
    answers have excess kurtosis κ ≤ 3, so Var(S²/σ²) ≤ 2/(n−1) + κ/n, and the tolerance below
    (the χ² 0.9995 quantiles, widened by √(1 + κ(n−1)/(2n)) for Laplace) fails by chance about
    once in a thousand per answer."""
    sql = "SELECT COUNT(*) AS n, SUM(income) AS s FROM t WHERE rooms >= 2 AND age < 10"
    target = {"n": 3.0, "s": 300.0}
    truth = dict(zip(("n", "s"), data.execute("SELECT COUNT(*), SUM(income) FROM t WHERE rooms >= 2 AND age < 10")
                     .fetchone() or ()))
    budget = Budget(epsilon=1e9) if family == "epsilon" else Budget(rho=1e9)
    errors: dict[str, list[float]] = {"n": [], "s": []}
    reported: dict[str, float] = {}
    for release in range(RELEASES):  # a connection each: one connection would answer the repeats from the first
        cursor = connect(data, budget, seed=2024 + release).cursor()
        table = cursor.execute(sql, max_relative_stddev=3.0, family=family).fetch_arrow_table()
        for alias in errors:
            errors[alias].append(float(table.column(alias)[0].as_py()) - float(truth[alias]))
            reported[alias] = float(table.column(f"{alias}_stddev")[0].as_py())
    n = RELEASES
    widen = 1.0 if family == "rho" else math.sqrt(1 + 3 * (n - 1) / (2 * n))
    for alias, values in errors.items():
        assert reported[alias] <= target[alias]
        ratio = float(np.var(values, ddof=1)) / reported[alias] ** 2
        low, high = (stats.chi2.ppf(q, n - 1) / (n - 1) for q in (0.0005, 0.9995))
        assert 1 - (1 - low) * widen <= ratio <= 1 + (high - 1) * widen, (alias, ratio)
        assert math.sqrt(ratio) * reported[alias] <= target[alias] * math.sqrt(1 + (high - 1) * widen)
        assert abs(float(np.mean(values))) <= 4 * reported[alias] / math.sqrt(n)  # unbiased
