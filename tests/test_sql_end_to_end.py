"""SQL text to Arrow, end to end: groups and types, unbiased answers with honest standard errors,
budget accounting, PEP 249 error classes with positions, ORDER BY/LIMIT, parameters, explain,
metadata, and the privacy unit.

Every test draws noise from a seeded ``SeededRandomSource``; the statistical tests state their
tolerances in standard errors and how often they could fail by chance.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import dpsql
from dpsql import engine
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.errors import (
    BudgetExhaustedError,
    NotSupportedError,
    OperationalError,
    PrivacyParameterError,
    ProgrammingError,
    SchemaError,
    SqlSyntaxError,
    UnsupportedQueryError,
)
from dpsql.noise import SeededRandomSource, discrete_gaussian_variance, discrete_laplace_variance
from dpsql.planning import accuracy, mechanism, planner
from dpsql.schema import Schema

COLUMNS = {
    "age": {"type": "integer", "lower": 0, "upper": 19, "bin_width": 5, "resolution": 1},
    "income": {"type": "numeric", "lower": 0, "upper": 100, "bin_width": 50, "resolution": 10},
    "sex": {"type": "categorical", "values": ["F", "M", "X"], "other": True},
    "rooms": {"type": "integer", "lower": 1, "upper": 4},
    "floor": {"type": "categorical", "values": [0, 1, 2]},
    "day": {"type": "date", "lower": "2021-01-01", "upper": "2021-01-06", "bin_width": 2},
    "week": {"type": "date", "lower": "2021-01-01", "upper": "2021-01-03"},
    "person_id": {"type": "integer", "lower": 0, "upper": 1000, "bin_width": 1000},
}
SCHEMA = Schema.load({"tables": {"t": {"columns": COLUMNS}}})
UNIT_SCHEMA = Schema.load({"tables": {"t": {"columns": COLUMNS,
                                            "privacy_unit": {"column": "person_id", "max_rows": 2}}}})
ROWS = 600
HEAVY_ROWS = 40  # person 0 has this many rows


def _rows(seed: int = 7) -> list[tuple[object, ...]]:
    """Clean, in-domain values (sex NULL in ~5 % of rows); person 0 owns HEAVY_ROWS rows, 10 rows have no person."""
    rng = np.random.default_rng(seed)
    people = [0] * HEAVY_ROWS + list(rng.integers(1, 300, ROWS - HEAVY_ROWS - 10)) + [None] * 10
    rows = []
    for person in people:
        sex = None if rng.random() < 0.05 else str(rng.choice(["F", "M"]))  # X is declared but never occurs
        rows.append((None if person is None else int(person), int(rng.integers(0, 20)),
                     round(float(rng.uniform(0, 100)), 2), sex,
                     int(rng.integers(1, 5)), int(rng.integers(0, 3)),
                     dt.date(2021, 1, 1) + dt.timedelta(days=int(rng.integers(6))),
                     dt.date(2021, 1, 1) + dt.timedelta(days=int(rng.integers(3)))))
    return rows


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (person_id INTEGER, age INTEGER, income DOUBLE, sex VARCHAR, rooms INTEGER, "
                "floor INTEGER, day DATE, week DATE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _rows())
    yield con
    con.close()


def connect(data: duckdb.DuckDBPyConnection, *, seed: int = 0, schema: Schema = SCHEMA,
            **budget: float) -> dpsql.Connection:
    return dpsql.connect(data, schema=schema, budget=Budget(**(budget or {"rho": 1e6})), rng=SeededRandomSource(seed))


# ============================================================================== groups and types
@pytest.mark.slow
def test_every_declared_group_in_declared_order_and_arrow_type(data: duckdb.DuckDBPyConnection) -> None:
    batch = """SELECT age, COUNT(*) FROM t GROUP BY age;
               SELECT income, COUNT(*) FROM t GROUP BY income;
               SELECT sex, COUNT(*) FROM t GROUP BY sex;
               SELECT rooms, COUNT(*) FROM t GROUP BY rooms;
               SELECT floor, COUNT(*) FROM t GROUP BY floor;
               SELECT day, COUNT(*) FROM t GROUP BY day;
               SELECT week, COUNT(*) FROM t GROUP BY week"""
    tables = connect(data).cursor().execute(batch, epsilon=1.0).fetch_arrow_tables()
    d = dt.date
    expected = [
        {"age": (pa.int64(), [0, 5, 10, 15]), "age_upper": (pa.int64(), [5, 10, 15, 20])},
        {"income": (pa.float64(), [0.0, 50.0]), "income_upper": (pa.float64(), [50.0, 100.0])},
        {"sex": (pa.string(), ["F", "M", "X", None])},  # X never occurs; NULL is the declared `other` group
        {"rooms": (pa.int64(), [1, 2, 3, 4])},  # one value per bin: no rooms_upper
        {"floor": (pa.int64(), [0, 1, 2])},  # integer categories
        {"day": (pa.date32(), [d(2021, 1, 1), d(2021, 1, 3), d(2021, 1, 5)]),
         "day_upper": (pa.date32(), [d(2021, 1, 3), d(2021, 1, 5), d(2021, 1, 7)])},
        {"week": (pa.date32(), [d(2021, 1, 1), d(2021, 1, 2), d(2021, 1, 3)])},
    ]
    for table, groups in zip(tables, expected):
        assert table.column_names == [*groups, "count", "count_stddev"]
        for name, (kind, values) in groups.items():
            assert table.schema.field(name).type == kind and table.column(name).to_pylist() == values
        assert table.schema.field("count").type == pa.float64() and table.column("count").null_count == 0


def test_two_column_groups_follow_group_by_order_whatever_the_select_order(data: duckdb.DuckDBPyConnection) -> None:
    batch = ("SELECT age, sex, COUNT(*) AS n FROM t GROUP BY sex, age; "
             "SELECT sex, age, COUNT(*) AS n FROM t GROUP BY age, sex")
    first, second = connect(data).cursor().execute(batch, epsilon=1.0).fetch_arrow_tables()
    sexes, ages = ["F", "M", "X", None], [0, 5, 10, 15]
    assert first.column_names[:2] == ["age", "age_upper"] and first.column_names[2] == "sex"
    assert list(zip(first.column("sex").to_pylist(), first.column("age").to_pylist())) == [
        (s, a) for s in sexes for a in ages]
    assert list(zip(second.column("age").to_pylist(), second.column("sex").to_pylist())) == [
        (a, s) for a in ages for s in sexes]
    again = connect(data, seed=99).cursor().execute(batch, epsilon=1.0).fetch_arrow_tables()
    assert [t.select(["age", "sex"]) for t in again] == [t.select(["age", "sex"]) for t in (first, second)]


# ============================================================================== statistics
STATS_BATCH = """SELECT sex, COUNT(*) AS n FROM t GROUP BY sex;
SELECT COUNT(*) AS older_women FROM t WHERE age >= 10 AND sex = 'F';
SELECT age, SUM(income) AS total FROM t GROUP BY age;
SELECT rooms, AVG(income) AS mean FROM t GROUP BY rooms"""
TRUTH_SQL = ["SELECT COUNT(*) FILTER (WHERE sex = 'F'), COUNT(*) FILTER (WHERE sex = 'M'), 0, COUNT(*) FILTER "
             "(WHERE sex IS NULL) FROM t",
             "SELECT COUNT(*) FROM t WHERE age >= 10 AND sex = 'F'",
             "SELECT " + ", ".join(f"SUM(income) FILTER (WHERE age >= {a} AND age < {a + 5})"
                                   for a in (0, 5, 10, 15)) + " FROM t",
             "SELECT " + ", ".join(f"AVG(income) FILTER (WHERE rooms = {r})" for r in (1, 2, 3, 4)) + " FROM t"]
RUNS = 300


class _ScanOnce(DuckDBBackend):
    """The real backend, remembering each cell_data result: the table does not change between the
    releases of the statistical tests, so rescanning would only cost time (the noise is fresh each run)."""

    def __init__(self, data: duckdb.DuckDBPyConnection) -> None:
        super().__init__(data)
        self.scans: dict[tuple[object, ...], object] = {}

    def cell_data(self, table, cell_columns, *, sum_columns=None, count_columns=()):  # type: ignore[no-untyped-def]
        key = (table.name, tuple(c.name for c in cell_columns),
               tuple((c.name, q) for c, q in (sum_columns or {}).items()),
               tuple(c.name for c in count_columns))
        if key not in self.scans:
            self.scans[key] = super().cell_data(table, cell_columns, sum_columns=sum_columns or {},
                                                count_columns=count_columns)
        return self.scans[key]

    def cell_data_sets(self, table, cell_sets, *, sum_columns=None, count_columns=()):  # type: ignore[no-untyped-def]
        key = (table.name, tuple(tuple(c.name for c in cells) for cells in cell_sets),
               tuple((c.name, q) for c, q in (sum_columns or {}).items()), tuple(c.name for c in count_columns))
        if key not in self.scans:
            self.scans[key] = super().cell_data_sets(table, cell_sets, sum_columns=sum_columns or {},
                                                     count_columns=count_columns)
        return self.scans[key]


def _truth(data: duckdb.DuckDBPyConnection) -> list[np.ndarray]:
    return [np.asarray(data.execute(sql).fetchone(), dtype=np.float64) for sql in TRUTH_SQL]


@pytest.mark.slow
@pytest.mark.parametrize("cost", [{"epsilon": 1.0}, {"rho": 0.5}], ids=["laplace", "gaussian"])
def test_answers_are_unbiased_and_their_standard_errors_are_calibrated(data: duckdb.DuckDBPyConnection,
                                                                       cost: dict) -> None:
    """RUNS independent releases of one batch; z = (answer - truth) / reported stddev.

    Counts and sums: the reported stddev is exact, so E z = 0 and E z² = 1. Each answer's mean
    error must lie within 6 standard errors (stddev/√RUNS) of 0, and the mean of z² (averaged over
    answers within a run, then over the independent runs) within 6 of its own empirical standard
    errors of 1. Under the CLT each check fails by chance with probability ≈ 2e-9; with about 15
    checks per noise family, below 1e-7. AVG's delta-method stddev ignores O((σ_C/C)²) ≈ 2e-2 terms
    here, so its root-mean-square z must lie within 25 % of 1 (its sampling error is about 4 %, so a
    chance failure needs more than 6 standard errors); the ratio's bias, ≈ mean·σ_C²/C², is under
    0.1 stddev, well inside the 6/√RUNS ≈ 0.35 allowed for its mean z.
    """
    truth = _truth(data)
    prepared = engine.prepare(STATS_BATCH, SCHEMA, PrivacyCost(**cost))
    backend, budget, rng = _ScanOnce(data), Budget(rho=1e9), SeededRandomSource(4242)
    runs = [engine.run(prepared, backend=backend, budget=budget, rng=rng) for _ in range(RUNS)]
    # one scan serves both statement groups
    assert len(prepared.groups.compiled.groups) == 2 and len(backend.scans) == 1
    assert budget.spent == pytest.approx(RUNS * budget.price(PrivacyCost(**cost)))
    names = ["n", "older_women", "total", "mean"]
    values = [np.stack([run[i].column(name).to_numpy(zero_copy_only=False) for run in runs])
              for i, name in enumerate(names)]
    stddevs = [np.stack([run[i].column(f"{name}_stddev").to_numpy(zero_copy_only=False) for run in runs])
               for i, name in enumerate(names)]
    exact_v = np.concatenate(values[:3], axis=1)
    exact_sd = np.concatenate(stddevs[:3], axis=1)
    exact_truth = np.concatenate(truth[:3])
    assert np.all(exact_sd == exact_sd[0]), "count and sum stddevs do not depend on the data or the noise"
    mean_error = (exact_v - exact_truth).mean(axis=0)
    assert np.all(np.abs(mean_error) <= 6 * exact_sd[0] / math.sqrt(RUNS)), (mean_error, exact_sd[0])
    per_run = (((exact_v - exact_truth) / exact_sd) ** 2).mean(axis=1)
    calibration, standard_error = per_run.mean(), per_run.std(ddof=1) / math.sqrt(RUNS)
    assert standard_error < 0.1, "enough runs for the calibration check to mean something"
    assert abs(calibration - 1.0) <= 6 * standard_error, (calibration, standard_error)

    mean_v, mean_sd = values[3], stddevs[3]
    assert np.all(np.isfinite(mean_v)) and np.all(mean_sd > 0)
    z = (mean_v - truth[3]) / mean_sd
    assert np.all(np.abs(z.mean(axis=0)) <= 6 / math.sqrt(RUNS)), z.mean(axis=0)
    assert 0.75 <= math.sqrt(np.mean(z**2)) <= 1.25, math.sqrt(np.mean(z**2))


def _predicted_stddevs(prepared: engine.Prepared) -> list[dict[str, np.ndarray]]:
    """Each statement's COUNT/SUM stddevs from the plan alone: exact lattice-noise variance times diag(W (ÃᵀÃ)⁺ Wᵀ)."""
    compiled = prepared.groups.compiled
    per_block: dict[tuple[int, int], np.ndarray] = {}
    for m in prepared.groups.measurements:
        A = mechanism.integral_strategy(m.plan.strategy)
        group = compiled.groups[m.group]
        if m.plan.noise == "laplace":
            variance = discrete_laplace_variance(A.sensitivity("l1") * m.row_scale / m.share)
        else:
            variance = discrete_gaussian_variance((A.sensitivity("l2") * m.row_scale) ** 2 / (2 * m.share))
        for b, block in enumerate(group.blocks):
            if block.data == m.vector:
                shape = (accuracy.per_query_variance(block.workload, A, noise=m.plan.noise)
                         / accuracy.unit_noise_variance(A, m.plan.noise))
                per_block[m.group, b] = np.sqrt(variance * shape) * m.quantum
    return [{out.aggregate.alias: per_block[s.group, out.blocks[0]][s.block_rows] for out in s.aggregates
             if out.aggregate.function != "avg"} for s in compiled.statements]


@pytest.mark.slow
@pytest.mark.parametrize("cost", [{"epsilon": 0.5}, {"rho": 0.125}], ids=["laplace", "gaussian"])
def test_stddev_columns_are_the_plan_s_prediction_and_do_not_depend_on_the_seed(data: duckdb.DuckDBPyConnection,
                                                                                cost: dict) -> None:
    first = connect(data, seed=1).cursor().execute(STATS_BATCH, **cost).fetch_arrow_tables()
    second = connect(data, seed=2).cursor().execute(STATS_BATCH, **cost).fetch_arrow_tables()
    predicted = _predicted_stddevs(engine.prepare(STATS_BATCH, SCHEMA, PrivacyCost(**cost)))
    for a, b, expected in zip(first, second, predicted):
        for alias, stddev in expected.items():
            assert a.column(f"{alias}_stddev").to_pylist() == b.column(f"{alias}_stddev").to_pylist()
            # Scale parameters are rounded to rationals with denominators ≤ 2^20: relative 1e-6.
            np.testing.assert_allclose(a.column(f"{alias}_stddev").to_numpy(), stddev, rtol=1e-6)
    assert first[0].column("n").to_pylist() != second[0].column("n").to_pylist(), "different seeds, different noise"


@pytest.mark.slow
@pytest.mark.parametrize("family, small, large, ratio", [("epsilon", 0.1, 0.2, 2.0), ("rho", 0.01, 0.16, 4.0)])
def test_stddevs_scale_as_one_over_epsilon_and_one_over_root_rho(data: duckdb.DuckDBPyConnection, family: str,
                                                                 small: float, large: float, ratio: float) -> None:
    """σ ∝ 1/ε (Laplace) and 1/√ρ (Gaussian). The lattice noise is not exactly homogeneous: at these
    scales (t ≥ 15) the discrete Laplace variance is 2t²(1 - 1/(12t²) + ...), so relative 1e-3; the
    discrete Gaussian's differs from σ² by terms of order e^(-2π²σ²)."""
    noisy = connect(data).cursor().execute(STATS_BATCH, **{family: small}).fetch_arrow_tables()
    precise = connect(data).cursor().execute(STATS_BATCH, **{family: large}).fetch_arrow_tables()
    for a, b, name in zip(noisy, precise, ["n", "older_women", "total"]):
        np.testing.assert_allclose(a.column(f"{name}_stddev").to_numpy() / b.column(f"{name}_stddev").to_numpy(), ratio,
                                   rtol=1e-3)


# ============================================================================== budget
TWELVE = ";\n".join([
    "SELECT sex, COUNT(*) FROM t GROUP BY sex", "SELECT COUNT(*) FROM t WHERE age >= 18",
    "SELECT age, COUNT(*) FROM t GROUP BY age",
    "SELECT rooms, COUNT(*) FROM t GROUP BY rooms", "SELECT floor, AVG(income) FROM t GROUP BY floor",
    "SELECT sex, SUM(income) FROM t GROUP BY sex", "SELECT COUNT(*) FROM t WHERE income >= 50",
    "SELECT age, COUNT(*) FROM t WHERE age >= 10 GROUP BY age",
    "SELECT COUNT(*) AS n FROM t WHERE sex = 'F' AND age < 5",
    "SELECT day, COUNT(*) FROM t GROUP BY day", "SELECT COUNT(*) FROM t WHERE rooms IN (1, 2)",
    "SELECT COUNT(*) FROM t WHERE age < 5 OR age >= 15"])


@pytest.mark.slow
def test_a_batch_is_charged_once_exactly_its_cost(data: duckdb.DuckDBPyConnection) -> None:
    with connect(data, epsilon=3.0) as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT sex, COUNT(*) FROM t GROUP BY sex", epsilon=0.5)
        assert connection.budget.spent == 0.5
        cursor.execute(TWELVE, epsilon=0.25)
        assert len(cursor.fetch_arrow_tables()) == 12
        assert connection.budget.spent == 0.75 and connection.budget.remaining == 2.25


@pytest.mark.slow
def test_an_epsilon_batch_on_a_rho_budget_costs_epsilon_squared_over_two(data: duckdb.DuckDBPyConnection) -> None:
    with connect(data, rho=1.0) as connection:
        connection.cursor().execute(TWELVE, epsilon=0.5)
        assert connection.budget.spent == 0.125
        with pytest.raises(PrivacyParameterError):
            connect(data, epsilon=1.0).cursor().execute("SELECT sex, COUNT(*) FROM t GROUP BY sex", rho=0.1)


def test_a_batch_over_budget_releases_nothing_and_charges_nothing(data: duckdb.DuckDBPyConnection) -> None:
    with connect(data, epsilon=1.0) as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT sex, COUNT(*) FROM t GROUP BY sex", epsilon=0.6)
        released = cursor.fetch_arrow_tables()
        with pytest.raises(BudgetExhaustedError, match=r"Nothing was run or charged") as caught:
            cursor.execute(TWELVE, epsilon=0.6)
        assert isinstance(caught.value, OperationalError)
        assert connection.budget.spent == 0.6
        assert cursor.fetch_arrow_tables() == released  # still the earlier batch: nothing new
        fresh = connection.cursor()
        with pytest.raises(BudgetExhaustedError):
            fresh.execute("SELECT COUNT(*) FROM t WHERE age < 3", epsilon=0.41)
        assert fresh.description is None and fresh.rowcount == -1
        with pytest.raises(ProgrammingError):
            fresh.fetchall()
        fresh.execute("SELECT COUNT(*) FROM t WHERE age < 3", epsilon=0.4)  # exactly what is left still fits
        assert connection.budget.remaining == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("sql, error_class", [
    ("SELECT COUNT(*) FROM t CROSS JOIN u", UnsupportedQueryError),
    ("SELECT COUNT(*) FROM t JOIN u ON t.a = u.a", SchemaError),  # u is not declared
    ("SELECT COUNT(*) FROM t WHERE rooms = 9 OR rooms IN (SELECT 1)", UnsupportedQueryError),
    ("SELECT COUNT(*) FROM t WHERE height > 3", SchemaError),
    ("SELECT COUNT(*) FROM t WHERE sex = 'Q'", SchemaError),
    ("SELECT COUNT(*) FROM t WHERE income >= 35", UnsupportedQueryError),  # splits the cell [30, 40)
    ("SELECT COUNT(*) FROM t WHERE", SqlSyntaxError),
    ("SELECT COUNT(*) FROM t WHERE age > ?", ProgrammingError),
])
def test_a_batch_that_cannot_be_answered_spends_nothing(data: duckdb.DuckDBPyConnection, sql: str,
                                                        error_class: type) -> None:
    with connect(data, epsilon=1.0) as connection:
        with pytest.raises(error_class):
            connection.cursor().execute("SELECT COUNT(*) FROM t WHERE age < 3;\n" + sql, epsilon=0.5)
        assert connection.budget.spent == 0.0
        with pytest.raises(SchemaError):
            connection.cursor().execute("SELECT COUNT(*) FROM nobody", epsilon=0.5)
        assert connection.budget.spent == 0.0


# ============================================================================== errors with positions
@pytest.mark.parametrize("sql, error_class, position", [
    ("SELECT COUNT(*)\nFROM t CROSS JOIN u", NotSupportedError, "line 2, col 8"),
    ("SELECT COUNT(*)\nFROM (SELECT * FROM t) AS s", NotSupportedError, "line 2, col 6"),
    ("SELECT COUNT(*) FROM t\nWHERE age IN (SELECT 1)", NotSupportedError, "line 2, col 14"),
    ("SELECT sex,\n  SUM(age) OVER (PARTITION BY sex) FROM t GROUP BY sex", NotSupportedError, "line 2, col 3"),
    ("SELECT COUNT(DISTINCT age) FROM t", NotSupportedError, "line 1, col 8"),  # only the privacy unit's
    ("SELECT sex, COUNT(*) FROM t GROUP BY sex\nHAVING sex LIKE 'F%'", NotSupportedError, "line 2, col 8"),
    ("SELECT COUNT(*) FROM t\nWHERE lower(sex) = 'f'", NotSupportedError, "line 2, col 7"),
    ("SELECT SUM(age + 1) FROM t", NotSupportedError, "line 1, col 12"),
    ("SELECT COUNT(*) FROM t\nUNION SELECT COUNT(*) FROM t", NotSupportedError, "line 2, col 1"),
    ("WITH a AS (SELECT * FROM t LIMIT 3) SELECT COUNT(*) FROM a", NotSupportedError, "line 1, col 12"),
    ("CREATE TABLE x (a INT)", NotSupportedError, "line 1, col 1"),
    ("SELECT COUNT(*) FROM t;\nDROP TABLE t", NotSupportedError, "line 2, col 1"),
    ("INSERT INTO t VALUES (1)", NotSupportedError, "line 1, col 1"),
    ("SELECT COUNT(*) FROM t\nWHERE height > 3", ProgrammingError, "line 2, col 7"),
    ("SELECT shoe, COUNT(*) FROM t GROUP BY shoe", ProgrammingError, "line 1, col 39"),
    ("SELECT COUNT(*) FROM t WHERE age >", ProgrammingError, "line 1, col 34"),
])
def test_each_unsupported_construct_raises_its_pep_249_class_with_its_position(
        data: duckdb.DuckDBPyConnection, sql: str, error_class: type, position: str) -> None:
    with connect(data) as connection:
        with pytest.raises(error_class) as caught:
            connection.cursor().execute(sql, epsilon=1.0)
        assert isinstance(caught.value, dpsql.Error) and f"({position}" in str(caught.value)
        assert connection.budget.spent == 0.0


def test_an_undeclared_table_is_located_at_its_name(data: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(SchemaError, match=r"Table 'nobody'.*line 2, col 6"):
        connect(data).cursor().execute("SELECT COUNT(*)\nFROM nobody", epsilon=1.0)


# ============================================================================== known bugs
def test_a_plain_count_star_is_answered(data: duckdb.DuckDBPyConnection) -> None:
    with connect(data, rho=1e6) as connection:
        table = connection.cursor().execute("SELECT COUNT(*) AS n FROM t", rho=1e5).fetch_arrow_table()
        assert abs(table.column("n")[0].as_py() - ROWS) <= 6 * table.column("n_stddev")[0].as_py()


# ============================================================================== ORDER BY, LIMIT, parameters
def test_order_by_noisy_values_and_limit(data: duckdb.DuckDBPyConnection) -> None:
    plain = connect(data, seed=5).cursor().execute("SELECT age, COUNT(*) AS n FROM t GROUP BY age",
                                                   epsilon=0.05).fetch_arrow_table()
    cursor = connect(data, seed=5).cursor()
    cursor.execute("SELECT age, COUNT(*) AS n FROM t GROUP BY age ORDER BY n DESC LIMIT 2;"
                   "SELECT age, COUNT(*) AS n FROM t GROUP BY age ORDER BY 1 DESC;"
                   "SELECT age, COUNT(*) AS n FROM t GROUP BY age ORDER BY n_stddev, age LIMIT 0", epsilon=0.05)
    top, by_age, empty = cursor.fetch_arrow_tables()
    rows = sorted(zip(plain.column("n").to_pylist(), plain.column("age").to_pylist()), reverse=True)
    assert top.num_rows == 2 and top.column("n").to_pylist() == [n for n, _ in rows[:2]]
    assert top.column("age").to_pylist() == [a for _, a in rows[:2]]
    assert by_age.column("age").to_pylist() == [15, 10, 5, 0]
    assert by_age.column("n").to_pylist() == plain.column("n").to_pylist()[::-1]
    assert empty.num_rows == 0 and empty.column_names == plain.column_names


def test_qmark_parameters_are_bound_like_literals(data: duckdb.DuckDBPyConnection) -> None:
    literal = ("SELECT sex, COUNT(*) AS n FROM t WHERE age >= 10 AND day < DATE '2021-01-03' AND rooms IN (1, 4) "
               "GROUP BY sex LIMIT 2")
    marked = "SELECT sex, COUNT(*) AS n FROM t WHERE age >= ? AND day < ? AND rooms IN (?, ?) GROUP BY sex LIMIT ?"
    expected = connect(data, seed=8).cursor().execute(literal, epsilon=1.0).fetch_arrow_table()
    bound = connect(data, seed=8).cursor().execute(marked, [10, dt.date(2021, 1, 3), 1, 4, 2],
                                                   epsilon=1.0).fetch_arrow_table()
    assert bound.equals(expected) and bound.num_rows == 2
    with pytest.raises(ProgrammingError, match=r"2 \? placeholders but 1 parameter"):
        connect(data).cursor().execute("SELECT COUNT(*) FROM t WHERE age >= ? AND sex = ?", [10], epsilon=1.0)


def test_a_parameter_is_a_value_never_sql(data: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(SchemaError, match=r"is not a declared value"):
        connect(data).cursor().execute("SELECT COUNT(*) FROM t WHERE sex = ?", ["F' OR '1' = '1"], epsilon=1.0)


def test_groups_a_where_clause_empties_answer_exactly_zero_and_avg_null(data: duckdb.DuckDBPyConnection) -> None:
    """The WHERE clause is public: groups it excludes get an all-zero query row (no noise), AVG NULL."""
    counts, means = connect(data).cursor().execute(
        "SELECT age, COUNT(*) AS n FROM t WHERE age >= 10 GROUP BY age; SELECT age, AVG(income) AS m FROM t "
        "WHERE age >= 10 GROUP BY age",
        epsilon=1.0).fetch_arrow_tables()
    assert counts.column("n").to_pylist()[:2] == [0.0, 0.0] and counts.column("n_stddev").to_pylist()[:2] == [0.0, 0.0]
    assert means.column("m").to_pylist()[:2] == [None,
                                                 None] and means.column("m_stddev").to_pylist()[:2] == [None, None]
    assert all(v is not None for v in means.column("m").to_pylist()[2:])


def test_order_by_a_string_column_descending_matches_sql(data: duckdb.DuckDBPyConnection) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE w AS SELECT CASE WHEN i % 3 = 0 THEN 'a' WHEN i % 3 = 1 THEN 'ab' ELSE 'b' "
                "END AS k FROM range(30) r(i)")
    schema = {"tables": {"w": {"columns": {"k": {"type": "categorical", "values": ["a", "ab", "b"]}}}}}
    with dpsql.connect(con, schema=schema, budget=Budget(epsilon=1.0), rng=SeededRandomSource(0)) as connection:
        table = connection.cursor().execute("SELECT k, COUNT(*) AS n FROM w GROUP BY k ORDER BY k DESC",
                                            epsilon=1.0).fetch_arrow_table()
    keys = con.execute("SELECT DISTINCT k FROM w ORDER BY k DESC").fetchall()
    assert table.column("k").to_pylist() == [k for (k,) in keys]


@pytest.mark.parametrize("sql, names", [
    ("SELECT COUNT(*) AS n, SUM(age) AS n_stddev FROM t", ["n", "n_stddev"]),
    ("SELECT age, COUNT(*) AS age_upper FROM t GROUP BY age", ["age", "age_upper"]),
])
def test_an_alias_never_replaces_a_generated_column(data: duckdb.DuckDBPyConnection, sql: str,
                                                    names: list[str]) -> None:
    try:
        table = connect(data).cursor().execute(sql, epsilon=1.0).fetch_arrow_table()
    except dpsql.ProgrammingError:
        return  # refusing the clash is fine too
    assert len(table.column_names) == len(set(table.column_names)) == 4, table.column_names
    assert all(name in table.column_names for name in names)


# ============================================================================== explain and metadata
@pytest.mark.slow
def test_explain_spends_nothing_and_names_candidates_and_cost(data: duckdb.DuckDBPyConnection) -> None:
    with connect(data, epsilon=2.0) as connection:
        text = connection.cursor().explain(TWELVE, epsilon=0.5)
        assert connection.budget.spent == 0.0
    assert "12 statement(s) on table 't'" in text and "Cost: ε=0.5" in text
    for name in ("identity", "H2", "H4", "wavelet", "expected RMSE", "SVD lower bound"):
        assert name in text
    assert "rho" not in text and "noise laplace" in text
    gaussian = connect(data).cursor().explain("SELECT age, COUNT(*) FROM t GROUP BY age", rho=0.1)
    assert "Cost: ρ=0.1" in gaussian and "noise gaussian" in gaussian


def test_explain_reads_no_data(tmp_path: object) -> None:
    """The plan comes from the schema alone: explaining against an empty database works."""
    with dpsql.connect(":memory:", schema=SCHEMA, budget=Budget(epsilon=1.0)) as connection:
        assert "Cost: ε=1" in connection.cursor().explain("SELECT age, COUNT(*) FROM t GROUP BY age", epsilon=1.0)
        with pytest.raises(SchemaError):
            connection.cursor().execute("SELECT age, COUNT(*) FROM t GROUP BY age", epsilon=1.0)
        assert connection.budget.spent == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("cost, mechanism_name, spent",
                         [({"epsilon": 0.5}, "Laplace", "ε=0.5"), ({"rho": 0.25}, "Gaussian", "ρ=0.25")])
def test_metadata_describes_the_release(data: duckdb.DuckDBPyConnection, cost: dict, mechanism_name: str,
                                        spent: str) -> None:
    tables = connect(data, rho=10.0).cursor().execute(TWELVE, **cost).fetch_arrow_tables()
    metadata = [json.loads(table.schema.metadata[b"dpsql"]) for table in tables]
    own = [m.pop("statement_error") for m in metadata]  # each statement's figures against answering it alone
    assert all(m == metadata[0] for m in metadata)
    assert all(set(e) >= {"expected_rmse", "alone_rmse", "ratio_to_alone", "weight"} for e in own)
    first = metadata[0]
    assert mechanism_name in first["mechanism"] and first["budget_spent"] == spent
    assert set(first["strategy"]) == set(first["expected_rmse"]) and first["strategy"]
    assert set(first["strategy"].values()) <= set(planner.FAMILIES) | {"HDMM", "HDMM-Kron", "HDMM-marginals",
                                                                       "HDMM-union", "Eigen-Design", "workload"}
    assert all(isinstance(v, float) and v > 0 for v in first["expected_rmse"].values())
    assert any(key.endswith("sum(income)") for key in first["strategy"])
    # AVG's count then comes from the shared cell counts
    shared = any("(TaMM)" in note for note in first.get("answering", []))
    assert shared or any(key.endswith("nonnull(income)") for key in first["strategy"])


# ============================================================================== the privacy unit
def test_a_person_contributes_at_most_max_rows(data: duckdb.DuckDBPyConnection) -> None:
    """With ρ = 1e5 the noise is negligible (σ < 0.01), so answers pin the number of kept rows."""
    per_person = data.execute("SELECT COUNT(*) FROM t WHERE person_id IS NOT NULL GROUP BY person_id").fetchall()
    # person 0's 40 rows count twice; the 10 rows without a person not at all
    kept = sum(min(n, 2) for (n,) in per_person)
    assert kept <= ROWS - 10 - HEAVY_ROWS + 2
    with connect(data, schema=UNIT_SCHEMA, rho=1e6) as connection:
        total, by_sex = connection.cursor().execute(
            "SELECT COUNT(*) AS n FROM t WHERE age >= 0; SELECT sex, COUNT(*) AS n FROM t GROUP BY sex",
            rho=1e5).fetch_arrow_tables()
    assert total.column("n_stddev")[0].as_py() < 0.01
    assert round(total.column("n")[0].as_py()) == kept
    assert round(sum(by_sex.column("n").to_pylist())) == kept


def test_the_privacy_unit_doubles_the_laplace_stddev(data: duckdb.DuckDBPyConnection) -> None:
    """max_rows = 2 doubles the sensitivity, so the Laplace scale t doubles; at t ≥ 30 the discrete
    variance 2t²(1 - 1/(12t²)) makes the ratio 2 to relative 1e-4."""
    batch = "SELECT sex, COUNT(*) AS n FROM t GROUP BY sex; SELECT age, SUM(income) AS total FROM t GROUP BY age"
    rows = connect(data).cursor().execute(batch, epsilon=0.02).fetch_arrow_tables()
    units = connect(data, schema=UNIT_SCHEMA).cursor().execute(batch, epsilon=0.02).fetch_arrow_tables()
    for a, b, name in zip(rows, units, ["n", "total"]):
        np.testing.assert_allclose(b.column(f"{name}_stddev").to_numpy() / a.column(f"{name}_stddev").to_numpy(), 2.0,
                                   rtol=1e-4)


def test_sums_under_the_privacy_unit_add_only_kept_rows(data: duckdb.DuckDBPyConnection) -> None:
    """Each person's kept rows are some max_rows of theirs: the sum lies between the sums of each
    person's smallest and largest two incomes (σ of the sum < 1 at ρ = 1e6)."""
    low, high, kept = data.execute("""
        SELECT SUM(lo), SUM(hi), SUM(n) FROM (
            SELECT list_sum(list_slice(list_sort(list(income)), 1, 2)) AS lo,
                   list_sum(list_slice(list_reverse_sort(list(income)), 1, 2)) AS hi, LEAST(COUNT(*), 2) AS n
            FROM t WHERE person_id IS NOT NULL GROUP BY person_id)""").fetchone()
    with connect(data, schema=UNIT_SCHEMA, rho=1e7) as connection:
        total = connection.cursor().execute("SELECT SUM(income) AS s, COUNT(income) AS c FROM t",
                                            rho=1e6).fetch_arrow_table()
    s, s_stddev, c = (total.column(name)[0].as_py() for name in ("s", "s_stddev", "c"))
    assert s_stddev < 1 and low - 6 * s_stddev - 1 <= s <= high + 6 * s_stddev + 1
    assert round(c) == kept
