"""Every refusal of everyday SQL names the construct, where it is, and what to write instead (issue 33, item 8):
the message carries a ``line L, col C`` position and a rewrite of its own, never only the generic summary of
the grammar, and the refused batch charges nothing."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

import dpsql
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.sql.source import SUPPORTED

SCHEMA = {"tables": {
    "people": {"privacy_unit": {"column": "id", "max_rows": 1}, "columns": {
        "age": {"type": "integer", "lower": 0, "upper": 99},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "income": {"type": "numeric", "lower": 0, "upper": 100000, "bin_width": 10000},
        "joined": {"type": "date", "lower": "2020-01-01", "upper": "2021-12-31"}}},
}}

REFUSED = [
    "SELECT * FROM people",
    "SELECT age FROM people",
    "SELECT DISTINCT sex FROM people",
    "SELECT SUM(DISTINCT age) FROM people",
    "SELECT COUNT(DISTINCT sex) FROM people",
    "SELECT COUNT(*) FROM people p JOIN people q ON p.id = q.id",
    "SELECT COUNT(*) FROM people CROSS JOIN other",
    "SELECT COUNT(*) FROM (SELECT * FROM people)",
    "SELECT COUNT(*) FROM people WHERE EXISTS (SELECT 1 FROM other)",
    "SELECT COUNT(*) FROM people WHERE age IN (SELECT id FROM other)",
    "SELECT sex, COUNT(*) FROM people GROUP BY sex UNION SELECT sex, COUNT(*) FROM people GROUP BY sex",
    "SELECT sex, COUNT(*) FROM people GROUP BY sex INTERSECT SELECT sex, COUNT(*) FROM people GROUP BY sex",
    "SELECT COUNT(*) FROM people TABLESAMPLE 10%",
    "SELECT lower(sex), COUNT(*) FROM people GROUP BY 1",
    "SELECT COUNT(*) FROM people WHERE age + income > 3",
    "SELECT SUM(age * 2) FROM people",
    "SELECT COUNT(*) FROM people WHERE age % 2 = 0",
    "SELECT STRING_AGG(sex, ',') FROM people",
    "SELECT CORR(age, income) FROM people",
    "SELECT MEDIAN(age) + 1 FROM people",
    "SELECT COUNT(*) FROM people WHERE joined > NOW()",
    'SELECT COUNT(*) FROM people WHERE sex = "F"',
    "SELECT COUNT(*) FROM people WHERE age LIKE '1%'",
    "SELECT COUNT(*) FROM people WHERE sex > 'F'",
    "SELECT COUNT(*) FROM people WHERE income > 15000",
    "SELECT CASE WHEN age < 30 AND income > 10000 THEN 'a' END, COUNT(*) FROM people GROUP BY 1",
    "SELECT COUNT(NULL) FROM people",
    "DELETE FROM people",
    "SELECT 1",
    "SELECT age FROM people GROUP BY age",
    "SELECT sex, ROW_NUMBER() OVER () FROM people GROUP BY sex",
    "SELECT sex, COUNT(*) OVER () FROM people GROUP BY sex",
    "SELECT COUNT(*) FROM people QUALIFY COUNT(*) > 1",
    "SELECT COUNT(*) FROM people WHERE age BETWEEN SYMMETRIC 3 AND 1",
    "SELECT COUNT(*) FROM people LIMIT -1",
    "SELECT COUNT(*) FROM people, other",
    "SELECT MAX(sex) FROM people",
    "SELECT COUNT(*) FROM people WHERE nosuch = 1",
    "SELECT COUNT(*) FROM people WHERE sex = 'X'",
    "SELECT COUNT(*) FROM people WHERE age IS TRUE",
    "SELECT COUNT(*) FROM people WHERE age::VARCHAR = '3'",
    "SELECT COUNT(*) FROM people WHERE FLOOR(age / 5) * 5 = 32",
    "SELECT sex, COUNT(*) / SUM(COUNT(*)) OVER () FROM people GROUP BY ROLLUP (sex)",
]


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("CREATE TABLE people AS SELECT range % 90 AS age, CASE WHEN range % 2 = 0 THEN 'F' ELSE 'M' END AS "
                "sex, CAST(range * 37 % 100000 AS DOUBLE) AS income, range AS id, "
                "DATE '2020-01-01' + CAST(range % 700 AS INTEGER) AS joined FROM range(1000)")
    con.execute("CREATE TABLE other AS SELECT range AS id FROM range(10)")
    yield con
    con.close()


@pytest.mark.parametrize("sql", REFUSED)
def test_a_refusal_names_its_position_and_a_rewrite_and_charges_nothing(data: duckdb.DuckDBPyConnection,
                                                                       sql: str) -> None:
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0)) as private:
        with pytest.raises((NotSupportedError, ProgrammingError)) as caught:
            private.cursor().execute(sql, epsilon=0.5)
        assert private.budget.spent == 0.0
    message = str(caught.value)
    assert "(line 1, col " in message, message
    assert SUPPORTED not in message, f"only the generic summary of the grammar: {message}"
    assert len(message.split(". ", 1)) == 2, f"no advice after the problem: {message}"
