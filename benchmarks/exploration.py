"""An analyst's exploration session, 30 batches on census-like data: the ε spent to meet one
accuracy target with reuse of earlier releases, without it, and answering each statement alone.

The session (``SESSION``) follows a usual workflow: one-way histograms, then drill-downs into
ranges and groups, sums of income, and repeats of earlier questions. Every batch is asked with
``max_stddev`` (``--count-target`` for COUNT answers, ``--sum-target`` for SUM(income) answers):
dpsql finds the least ε whose plan meets it and charges exactly that.

Three ways to answer the same session at the same targets:
  reuse      one connection; statements that kept releases already answer within the target
             are free, the rest are measured at the least ε that, combined with the kept
             measurements by generalized least squares, meets the target;
  no reuse   each batch planned jointly and charged on its own (``reuse=False`` on a fresh
             connection each time);
  alone      each statement its own batch (the per-query accounting of SmartNoise, Tumult, ...).
Prints, per batch, the ε each way spends and how many statements were free, then the totals and
their ratios, measured in one run. Also the empirical check: over the reuse session, the share of
answers whose error is within 1.96 reported standard errors.

With ``--epsilon E`` every batch is asked at that ε instead (a cost, not a target): a statement is
free only where the kept releases answer it at least as accurately as ε would without reuse, and
the benchmark prints the ε spent each way and how the reported stddevs of the reuse session
compare with the same batches measured without reuse (the contract: never above 1).

Run: python benchmarks/exploration.py [--people 200000] [--count-target 50] [--sum-target 2e6] [--epsilon E]
"""

from __future__ import annotations

import argparse
import json
import time

import duckdb
import pyarrow as pa
from _machine import header

import dpsql
from dpsql.budget.accounting import Budget
from dpsql.cli.demo import SCHEMA, population
from dpsql.schema import Schema

#: The session: one batch per entry, each a list of statements (census: age in 5-year bands at a
#: resolution of one year, sex, race, education, state, hours, income).
SESSION: list[list[str]] = [
    ["SELECT age, COUNT(*) FROM census GROUP BY age"],
    ["SELECT sex, COUNT(*) FROM census GROUP BY sex"],
    ["SELECT education, COUNT(*) FROM census GROUP BY education"],
    ["SELECT race, COUNT(*) FROM census GROUP BY race"],
    ["SELECT age, sex, COUNT(*) FROM census GROUP BY age, sex"],
    ["SELECT COUNT(*) FROM census WHERE age BETWEEN 25 AND 34"],
    ["SELECT COUNT(*) FROM census WHERE age BETWEEN 18 AND 64"],
    ["SELECT education, sex, COUNT(*) FROM census GROUP BY education, sex"],
    ["SELECT SUM(income) FROM census WHERE age BETWEEN 25 AND 64",
     "SELECT sex, SUM(income) FROM census GROUP BY sex"],
    ["SELECT age, COUNT(*) FROM census GROUP BY age"],
    ["SELECT COUNT(*) FROM census WHERE sex = 'F' AND age >= 65"],
    ["SELECT education, COUNT(*) FROM census WHERE age BETWEEN 25 AND 34 GROUP BY education"],
    ["SELECT education, COUNT(*) FROM census WHERE age BETWEEN 35 AND 44 GROUP BY education"],
    ["SELECT race, sex, COUNT(*) FROM census GROUP BY race, sex"],
    ["SELECT age, sex, COUNT(*) FROM census GROUP BY age, sex"],
    ["SELECT COUNT(*) FROM census WHERE education IN ('bachelors', 'masters', 'doctorate')"],
    ["SELECT sex, COUNT(*) FROM census WHERE education IN ('bachelors', 'masters', 'doctorate') GROUP BY sex"],
    ["SELECT COUNT(*) FROM census WHERE hours >= 40", "SELECT COUNT(*) FROM census WHERE hours BETWEEN 1 AND 39"],
    ["SELECT age, SUM(income) FROM census GROUP BY age"],
    ["SELECT SUM(income) FROM census WHERE age BETWEEN 30 AND 39"],
    ["SELECT education, COUNT(*) FROM census GROUP BY education"],
    ["SELECT state, COUNT(*) FROM census GROUP BY state"],
    ["SELECT COUNT(*) FROM census WHERE state IN ('CA', 'NY', 'TX')"],
    ["SELECT age, COUNT(*) FROM census WHERE sex = 'M' GROUP BY age"],
    ["SELECT COUNT(*) FROM census WHERE age < 18"],
    ["SELECT education, COUNT(*) FROM census WHERE age BETWEEN 25 AND 44 GROUP BY education"],
    ["SELECT SUM(income) FROM census WHERE age BETWEEN 25 AND 64",
     "SELECT sex, SUM(income) FROM census GROUP BY sex"],
    ["SELECT race, COUNT(*) FROM census WHERE sex = 'F' GROUP BY race"],
    ["SELECT sex, COUNT(*) FROM census GROUP BY sex", "SELECT race, COUNT(*) FROM census GROUP BY race"],
    ["SELECT COUNT(*) FROM census WHERE age >= 65"],
]


def targets(statements: list[str], count: float, total: float) -> list[float]:
    return [total if "SUM(" in s else count for s in statements]


def spent(connection: dpsql.Connection) -> float:
    return float(connection.budget.spent)


def run_session(data: pa.Table, schema: Schema, count: float, total: float, *, reuse: bool,
                alone: bool) -> tuple[list[float], list[int], list[pa.Table], list[list[str]]]:
    """ε spent per batch, free statements per batch, every result table and its statement."""
    per_batch, free, tables, asked = [], [], [], []
    connection = _connect(data, schema)
    for batch in SESSION:
        cost, freed = 0.0, 0
        for part in ([[s] for s in batch] if alone else [batch]):
            if not reuse:
                connection = _connect(data, schema)
            before = spent(connection)
            cursor = connection.cursor()
            cursor.execute("; ".join(part), max_stddev=targets(part, count, total), reuse=reuse)
            cost += spent(connection) - before
            results = list(cursor._results)
            freed += sum(json.loads(t.schema.metadata[b"dpsql"])["budget_spent"].startswith("nothing") for t in results)
            tables.extend(results)
            asked.extend([[s] for s in part])
        per_batch.append(cost)
        free.append(freed)
    return per_batch, free, tables, asked


def run_at_cost(data: pa.Table, schema: Schema, epsilon: float, *,
                reuse: bool) -> tuple[list[float], list[int], list[list[float]]]:
    """At one ε per batch: ε spent per batch, free statements per batch, every answer's stddevs per statement."""
    per_batch, free, stddevs = [], [], []
    connection = _connect(data, schema)
    for batch in SESSION:
        if not reuse:
            connection = _connect(data, schema)
        before = spent(connection)
        cursor = connection.cursor()
        cursor.execute("; ".join(batch), epsilon=epsilon, reuse=reuse)
        per_batch.append(spent(connection) - before)
        results = list(cursor._results)
        free.append(sum(json.loads(t.schema.metadata[b"dpsql"])["budget_spent"].startswith("nothing")
                        for t in results))
        stddevs.extend([x for n in t.column_names if n.endswith("_stddev") for x in t[n].to_pylist()]
                       for t in results)
    return per_batch, free, stddevs


def at_cost(data: pa.Table, schema: Schema, epsilon: float) -> None:
    """The fixed-ε comparison (``--epsilon``)."""
    runs = {}
    for name, reuse in (("reuse", True), ("no reuse", False)):
        started = time.process_time()
        runs[name] = run_at_cost(data, schema, epsilon, reuse=reuse)
        print(f"# {name}: {time.process_time() - started:.1f} s CPU")
    ratios = [a / b for mine, theirs in zip(runs["reuse"][2], runs["no reuse"][2]) for a, b in zip(mine, theirs)
              if b > 0]
    print(f"{'batch':>5} {'statements':>10} {'free':>5} {'ε reuse':>10} {'ε no reuse':>11}")
    for b, batch in enumerate(SESSION):
        print(f"{b + 1:>5} {len(batch):>10} {runs['reuse'][1][b]:>5} {runs['reuse'][0][b]:>10.4f} "
              f"{runs['no reuse'][0][b]:>11.4f}")
    print(f"total ε: reuse {sum(runs['reuse'][0]):.4f}, no reuse {sum(runs['no reuse'][0]):.4f}; free statements "
          f"with reuse: {sum(runs['reuse'][1])} of {sum(len(b) for b in SESSION)}")
    print(f"reported stddev, reuse / no reuse, over {len(ratios)} answers: max {max(ratios):.4f}, "
          f"mean {sum(ratios) / len(ratios):.4f}, min {min(ratios):.4f}")


def _connect(data: pa.Table, schema: Schema) -> dpsql.Connection:
    con = duckdb.connect()
    con.register("generated", data)
    con.execute("CREATE TABLE census AS SELECT * FROM generated")
    return dpsql.connect(con, schema=schema, budget=Budget(epsilon=1e6))


def coverage(data: pa.Table, tables: list[pa.Table], asked: list[list[str]]) -> tuple[int, int]:
    """(answers within 1.96 reported standard errors of DuckDB's exact answer, answers)."""
    con = duckdb.connect()
    con.register("census", data)
    inside = total = 0
    for table, (sql,) in zip(tables, asked):
        value = "count" if "COUNT(*)" in sql else "sum_income"
        names = [n for n in table.column_names if n != value and not n.endswith("_stddev") and not n.endswith("_upper")]
        truth = {tuple(row[:-1]): row[-1] for row in con.execute(_exact_sql(sql, names)).fetchall()}
        for row in table.to_pylist():
            key = tuple(row[n] for n in names)
            if key in truth:
                total += 1
                inside += abs(row[value] - truth[key]) <= 1.96 * row[f"{value}_stddev"]
    return inside, total


def _exact_sql(sql: str, names: list[str]) -> str:
    """The statement as exact SQL on the raw table (age grouped into the schema's 5-year bands)."""
    aggregate = "COUNT(*)" if "COUNT(*)" in sql else "SUM(income)"
    keys = [("age // 5 * 5 AS age" if n == "age" else n) for n in names]
    where = sql.split(" WHERE ", 1)[1].split(" GROUP BY ")[0] if " WHERE " in sql else "TRUE"
    group = f" GROUP BY {', '.join(str(i + 1) for i in range(len(keys)))}" if keys else ""
    return f"SELECT {', '.join([*keys, f'{aggregate} AS exact'])} FROM census WHERE {where}{group}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--people", type=int, default=200_000)
    parser.add_argument("--count-target", type=float, default=50.0, help="largest stddev of a COUNT answer")
    parser.add_argument("--sum-target", type=float, default=2e6, help="largest stddev of a SUM(income) answer")
    parser.add_argument("--epsilon", type=float, help="ask every batch at this ε instead of the targets")
    arguments = parser.parse_args()
    data = population(arguments.people)
    schema = Schema.load(SCHEMA)
    if arguments.epsilon is not None:
        print(header(f"exploration: 30 batches at ε = {arguments.epsilon:g} each, with and without reuse"))
        print(f"# {arguments.people:,} people; {len(SESSION)} batches, {sum(len(b) for b in SESSION)} statements")
        at_cost(data, schema, arguments.epsilon)
        return
    print(header("exploration: 30 batches at one accuracy target, ε with and without reuse"))
    print(f"# {arguments.people:,} people; targets: COUNT stddev ≤ {arguments.count_target:g}, "
          f"SUM(income) stddev ≤ {arguments.sum_target:g}; {len(SESSION)} batches, "
          f"{sum(len(b) for b in SESSION)} statements")
    runs = {}
    for name, reuse, alone in (("reuse", True, False), ("no reuse", False, False), ("alone", False, True)):
        started = time.process_time()
        runs[name] = run_session(data, schema, arguments.count_target, arguments.sum_target, reuse=reuse, alone=alone)
        print(f"# {name}: {time.process_time() - started:.1f} s CPU")
    print(f"{'batch':>5} {'statements':>10} {'free':>5} {'ε reuse':>10} {'ε no reuse':>11} {'ε alone':>10}")
    for b, batch in enumerate(SESSION):
        print(f"{b + 1:>5} {len(batch):>10} {runs['reuse'][1][b]:>5} {runs['reuse'][0][b]:>10.4f} "
              f"{runs['no reuse'][0][b]:>11.4f} {runs['alone'][0][b]:>10.4f}")
    totals = {name: sum(found[0]) for name, found in runs.items()}
    print(f"total ε: reuse {totals['reuse']:.4f}, no reuse {totals['no reuse']:.4f}, alone {totals['alone']:.4f}")
    print(f"no reuse / reuse = {totals['no reuse'] / totals['reuse']:.2f}×, "
          f"alone / reuse = {totals['alone'] / totals['reuse']:.2f}×; "
          f"free statements with reuse: {sum(runs['reuse'][1])} of {sum(len(b) for b in SESSION)}")
    _, _, tables, asked = runs["reuse"]
    inside, total = coverage(data, tables, asked)
    print(f"reuse session: {inside} of {total} answers ({inside / total:.1%}) within 1.96 reported stddevs of the "
          "exact answer")


if __name__ == "__main__":
    main()
