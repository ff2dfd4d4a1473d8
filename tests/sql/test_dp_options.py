"""The cost given in the SQL (BigQuery's ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (...)``) and by the
connection (``connect(epsilon_per_batch=...)``), so PEP 249 tools such as pandas.read_sql can run queries."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import duckdb
import pytest

import dpsql
from dpsql.budget.accounting import epsilon_from_rho, rho_for_epsilon_delta
from dpsql.noise import SeededRandomSource
from dpsql.sql.dp_options import read_options

SCHEMA = {"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10},
    "sex": {"type": "categorical", "values": ["F", "M"]},
}, "privacy_unit": {"column": "person", "max_rows": 2}}}}
PLAIN = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
CLAUSE = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5) sex, COUNT(*) AS n FROM people GROUP BY sex"


@pytest.fixture()
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("CREATE TABLE people AS SELECT CAST(i % 100 AS INTEGER) AS age, CASE WHEN i % 2 = 0 THEN 'F' "
                "ELSE 'M' END AS sex, i // 2 AS person FROM range(300) AS r(i)")
    yield con
    con.close()


def _connect(data: duckdb.DuckDBPyConnection, seed: int = 5, **options: float) -> dpsql.Connection:
    return dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=4.0), rng=SeededRandomSource(seed), **options)


def test_the_clause_is_the_statements_cost_and_answers_as_the_plain_statement(data: duckdb.DuckDBPyConnection) -> None:
    with _connect(data) as connection:
        clause = connection.cursor().execute(CLAUSE).fetch_arrow_table()
        assert connection.budget.spent == 0.5
    with _connect(data) as connection:
        plain = connection.cursor().execute(PLAIN, epsilon=0.5).fetch_arrow_table()
    assert clause.column("n").to_pylist() == plain.column("n").to_pylist()  # same cost and seed: the same release


def test_epsilon_and_delta_become_the_largest_rho_that_implies_them(data: duckdb.DuckDBPyConnection) -> None:
    rho = rho_for_epsilon_delta(1.0, delta=1e-6)
    assert epsilon_from_rho(rho, delta=1e-6) <= 1.0 < epsilon_from_rho(rho * 1.001, delta=1e-6)
    sql = ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-6, privacy_unit_column = person) "
           "COUNT(*) AS n FROM people")
    connection = dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(rho=1.0), rng=SeededRandomSource(1))
    connection.cursor().execute(sql)
    assert connection.budget.spent == pytest.approx(rho, rel=1e-12)
    assert "Cost: ρ=" in connection.cursor().explain(sql)


def test_a_batch_costs_the_sum_of_its_statements_clauses(data: duckdb.DuckDBPyConnection) -> None:
    with _connect(data) as connection:
        connection.cursor().execute(f"{CLAUSE}; SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.25) COUNT(*) "
                                    "FROM people")
        assert connection.budget.spent == 0.75


@pytest.mark.parametrize(("sql", "error", "message"), [
    (f"{CLAUSE}; {PLAIN}", dpsql.ProgrammingError, "on every statement"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (delta = 1e-6) COUNT(*) FROM people", dpsql.PrivacyParameterError,
     "has no epsilon"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = -1) COUNT(*) FROM people", dpsql.PrivacyParameterError,
     "is not a cost"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 2) COUNT(*) FROM people",
     dpsql.PrivacyParameterError, "delta in"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = one) COUNT(*) FROM people", dpsql.PrivacyParameterError,
     "not a number"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, max_groups_contributed = 2) COUNT(*) FROM people",
     dpsql.ProgrammingError,
     r"max_groups_contributed is not supported \(line 1, col 56: \"max_groups_contributed = 2\"\).*max_rows"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 5, epsilon = 0.001) COUNT(*) FROM people",
     dpsql.SqlSyntaxError, r"epsilon is given twice \(line 1, col 56: \"epsilon = 0.001\"\)"),
    ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, privacy_unit_column = age) COUNT(*) FROM people",
     dpsql.ProgrammingError, "is not the table's declared privacy unit, which is 'person'"),
])
def test_a_wrong_clause_is_refused_before_anything_is_charged(data: duckdb.DuckDBPyConnection, sql: str,
                                                              error: type[Exception], message: str) -> None:
    with _connect(data) as connection:
        with pytest.raises(error, match=message):
            connection.cursor().execute(sql)
        assert connection.budget.spent == 0.0


def test_a_cost_given_twice_is_refused(data: duckdb.DuckDBPyConnection) -> None:
    with _connect(data, epsilon_per_batch=0.1) as connection:
        with pytest.raises(dpsql.ProgrammingError, match="gives its cost twice"):
            connection.cursor().execute(CLAUSE, epsilon=0.5)
        connection.cursor().execute(CLAUSE)  # the clause wins over the connection's default
        assert connection.budget.spent == 0.5


def test_the_clause_is_blanked_so_positions_still_point_into_the_written_text() -> None:
    text, options = read_options(CLAUSE + " ORDER BY n")
    assert len(text) == len(CLAUSE) + len(" ORDER BY n") and text.index("sex") == CLAUSE.index(" sex,") + 1
    assert options[0].where == "line 1, col 8"
    assert read_options(PLAIN) == (PLAIN, [])


def test_pandas_read_sql_charges_the_connection_default_once_per_call(data: duckdb.DuckDBPyConnection) -> None:
    pandas = pytest.importorskip("pandas")
    with _connect(data, epsilon_per_batch=0.5) as connection:
        with warnings.catch_warnings():  # pandas warns that it only tests SQLAlchemy and sqlite3 connections
            warnings.simplefilter("ignore", UserWarning)
            frame = pandas.read_sql("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex ORDER BY sex", connection)
            assert connection.budget.spent == 0.5
            pandas.read_sql("SELECT COUNT(*) AS n FROM people", connection)
        assert connection.budget.spent == 1.0
    assert list(frame.columns) == ["sex", "n", "n_stddev"]
    assert frame["sex"].tolist() == ["F", "M"]
    assert frame["n"].sub(150).abs().lt(6 * frame["n_stddev"]).all()  # 150 rows each, within 6 standard errors
