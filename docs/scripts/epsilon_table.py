"""The tables of docs/choosing-epsilon.md: the standard error dpsql reports for typical queries, by cost and size.

Each query is asked alone (a batch of one statement, or the batch shown) on the demo's synthetic census
(``dpsql.cli.demo.population(n)`` with the demo's schema) through ``dpsql.connect`` on an
in-memory DuckDB table with an in-memory budget and a seeded noise source, and the table shows the
median of its ``<alias>_stddev`` column: what dpsql itself reports. Counts and sums have
standard errors fixed by the plan and the cost alone (the same at every n); an average's depends
on the noisy count, so it is shown at several n.

Run ``python docs/scripts/epsilon_table.py`` to print the tables, ``--write`` to put them into the
page between its markers; ``tests/docs/test_generated_pages.py`` checks that the page is current.
"""

from __future__ import annotations

import re
import statistics
import sys
import warnings
from pathlib import Path

import duckdb

import dpsql
from dpsql.cli import demo
from dpsql.noise import SeededRandomSource

PAGE = Path(__file__).resolve().parents[1] / "choosing-epsilon.md"
START, END = "<!-- epsilon-table:start -->", "<!-- epsilon-table:end -->"
COSTS = [("epsilon", 0.1), ("epsilon", 1.0), ("epsilon", 10.0), ("rho", 0.01), ("rho", 0.1), ("rho", 1.0)]
#: Queries whose standard error does not depend on the data (counts and clamped sums).
FIXED = [
    ("`COUNT(*)` of the table", "SELECT COUNT(*) AS v FROM census"),
    ("`COUNT(*) … GROUP BY sex` (2 groups), each group", "SELECT sex, COUNT(*) AS v FROM census GROUP BY sex"),
    ("`COUNT(*) … GROUP BY age` (20 bands), each band", "SELECT age, COUNT(*) AS v FROM census GROUP BY age"),
    ("`COUNT(*) … WHERE age BETWEEN 25 AND 34`", "SELECT COUNT(*) AS v FROM census WHERE age BETWEEN 25 AND 34"),
    ("10 overlapping counts `WHERE age >= 0`, `>= 10`, …, `>= 90` in one batch, each (median)",
     ";\n".join(f"SELECT COUNT(*) AS v FROM census WHERE age >= {low}" for low in range(0, 100, 10))),
    ("`SUM(hours)`, hours in [0, 99]", "SELECT SUM(hours) AS v FROM census"),
    ("`SUM(income)`, income in [0, 500,000]", "SELECT SUM(income) AS v FROM census"),
]
#: Queries whose standard error depends on the (noisy) count: shown at each size.
AVERAGES = [("`AVG(hours)`", "SELECT AVG(hours) AS v FROM census"),
            ("`AVG(income)`", "SELECT AVG(income) AS v FROM census")]
SIZES = [1_000, 10_000, 100_000]
SEED = 34


def reported_stddev(table: duckdb.DuckDBPyConnection, sql: str, family: str, cost: float) -> float:
    """The median ``v_stddev`` dpsql reports for the batch ``sql`` (alone on a new connection) at this cost."""
    budget = dpsql.Budget(**{family: cost})
    with dpsql.connect(table, schema=demo.SCHEMA, budget=budget, rng=SeededRandomSource(SEED)) as connection:
        results = connection.cursor().execute(sql, **{family: cost}).fetch_arrow_tables()
    return float(statistics.median(value for result in results for value in result.column("v_stddev").to_pylist()))


def figure(value: float) -> str:
    """Three significant figures, thousands separated."""
    rounded = float(f"{value:.3g}")
    return f"{rounded:,.0f}" if rounded >= 100 else f"{rounded:.3g}"


def census(people: int) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.register("generated", demo.population(people))
    connection.execute("CREATE TABLE census AS SELECT * FROM generated")
    return connection


def tables() -> str:
    """Both tables as Markdown."""
    header = "| query | " + " | ".join(f"{'ε' if family == 'epsilon' else 'ρ'} = {cost:g}"
                                         for family, cost in COSTS) + " |"
    rule = "|---|" + "---:|" * len(COSTS)
    small = census(SIZES[0])
    fixed = [f"| {label} | " + " | ".join(figure(reported_stddev(small, sql, family, cost))
                                          for family, cost in COSTS) + " |" for label, sql in FIXED]
    averages = []
    for people in SIZES:
        data = census(people)
        averages += [f"| {label}, n = {people:,} | " + " | ".join(figure(reported_stddev(data, sql, family, cost))
                                                                  for family, cost in COSTS) + " |"
                     for label, sql in AVERAGES]
    return "\n".join([header, rule, *fixed, "", header, rule, *averages]) + "\n"


def page_with(text: str, generated: str) -> str:
    """The page with ``generated`` between its markers."""
    pattern = re.compile(re.escape(START) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{PAGE} has no {START} … {END} markers")
    return pattern.sub(lambda _: f"{START}\n{generated}{END}", text)


if __name__ == "__main__":
    warnings.simplefilter("ignore", dpsql.DpsqlWarning)  # ε = 10 is above 5: the table shows it on purpose
    generated = tables()
    if sys.argv[1:] == ["--write"]:
        PAGE.write_text(page_with(PAGE.read_text(encoding="utf-8"), generated), encoding="utf-8")
    else:
        print(generated, end="")
