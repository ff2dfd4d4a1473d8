"""EXPLAIN as a person reads it: the headline gives each statement's expected error in its own units
(no RMSE averaged over counts and sums), before the statement groups and their candidates."""

from __future__ import annotations

import duckdb

import dpsql

SCHEMA = {"tables": {"people": {"columns": {
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "income": {"type": "numeric", "lower": 0, "upper": 100000, "bin_width": 25000}}}}}
BATCH = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex; SELECT SUM(income) AS total FROM people"


def test_the_headline_gives_each_statements_error_in_its_units() -> None:
    with duckdb.connect() as data, dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=2.0)) as private:
        data.execute("CREATE TABLE people (sex VARCHAR, income DOUBLE)")
        text = private.cursor().explain(BATCH, epsilon=1.0)
    lines = text.splitlines()
    route = next(line for line in lines if line.startswith("Route: "))
    assert "RMSE" not in route  # one figure averaging people with income sums says nothing
    def first(start: str) -> int:
        return lines.index(next(line for line in lines if line.startswith(start)))

    headline = first("Statements: the expected standard error")
    assert first("Route: ") < headline < first("Statement groups")
    count, total = (line.split() for line in lines[headline + 1:headline + 3])
    assert count[:3] == ["statement", "1:", "n"] and total[:3] == ["statement", "2:", "total"]
    assert float(total[3]) > 1000 * float(count[3])  # income sums in income's units, counts in rows: apart
