"""CPU seconds and peak memory of EXPLAIN and execute for large statement groups (issue 29 §2).

Each point runs in its own Python process (no cache or memory of an earlier point helps it, and
the peak resident size is that point's) with a fresh, empty ``DPSQL_CACHE_DIR``, under
RLIMIT_AS = ``--memory`` GiB (default 2) and one BLAS thread. Figures: CPU seconds
(``time.process_time``: every thread of the process) of EXPLAIN and of execute + fetch, and the
process's peak resident set (``ru_maxrss``, including Python, DuckDB and the table).

Points, over a table t of 20,000 rows with one integer column d of n cells:

- ``SELECT d, COUNT(*) FROM t GROUP BY d`` at n = 10³, 10⁴, 10⁵, 10⁶ (a partition: closed form);
- ``SELECT COUNT(*) FROM t WHERE d IN (999 values)`` at n = 10⁵;
- ``SELECT a, b, COUNT(*) FROM t GROUP BY a, b`` over MAX_CELLS = 2²⁴ cells (EXPLAIN only);
- the worst batches the planning limits admit (``dpsql.engine.plan.planning_size``): a GROUP BY and a
  range over each of 1, 2 and MAX_DENSE_VECTORS columns, each column as wide as MAX_DENSE_CELLS and
  MAX_DENSE_WORK then allow (one densely planned group per column); EXPLAIN only, under ε and ρ.

Run: python benchmarks/large_groups.py [--memory 2] [--skip-worst]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from _machine import header

POINT = """
import json, resource, sys, time
settings = json.loads(sys.argv[1])
limit = int(settings["memory"] * 2**30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import duckdb, dpsql
from dpsql.schema import Schema
data = duckdb.connect()
data.execute(settings["table"])
schema = Schema.load({"tables": {"t": {"columns": settings["columns"]}}})
cost = {settings["cost"]: 0.5}
report = {}
with dpsql.connect(data, schema=schema, budget=dpsql.Budget(**{settings["cost"]: 1.0})) as connection:
    cursor = connection.cursor()
    try:
        start = time.process_time()
        cursor.explain(settings["sql"], **cost)
        report["explain"] = time.process_time() - start
        if settings["execute"]:
            start = time.process_time()
            cursor.execute(settings["sql"], **cost)
            report["rows"] = len(cursor.fetchall())
            report["execute"] = time.process_time() - start
    except Exception as err:
        report["error"] = f"{type(err).__name__}: {str(err)[:200]}"
report["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(report))
"""


def point(sql: str, columns: dict[str, Any], table: str, *, memory: float, execute: bool,
          cost: str = "epsilon") -> dict[str, Any]:
    """One point's report, from its own process with an empty cache."""
    settings = {"sql": sql, "columns": columns, "table": table, "memory": memory, "execute": execute, "cost": cost}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "DPSQL_CACHE_DIR": cache, "OPENBLAS_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, "-c", POINT, json.dumps(settings)], capture_output=True, text=True,
                              env=env, check=False)
    if done.returncode != 0:
        return {"error": f"process ended with {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def one_column(cells: int) -> tuple[dict[str, Any], str]:
    return ({"d": {"type": "integer", "lower": 0, "upper": cells - 1}},
            f"CREATE TABLE t AS SELECT i * 7 % {cells} AS d FROM range(20000) r(i)")


def worst_batches() -> list[tuple[int, int]]:
    """(columns, cells per column) of the worst batches the planning limits admit: one, two and
    MAX_DENSE_VECTORS groups, each over the widest axis MAX_DENSE_CELLS and MAX_DENSE_WORK then allow."""
    from dpsql.engine.plan import planning_size

    counts = (1, 2, planning_size.MAX_DENSE_VECTORS)
    return [(k, min(planning_size.MAX_DENSE_CELLS, int((planning_size.MAX_DENSE_WORK / k) ** (1 / 3) + 1e-9)))
            for k in counts]


def show(label: str, report: dict[str, Any]) -> None:
    if "error" in report:
        print(f"{label:<64} {report['error']}")
        return
    run = f"{report['execute']:8.2f}" if "execute" in report else f"{'-':>8}"
    print(f"{label:<64} {report['explain']:8.2f} {run} {report['rss_mb']:10.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", type=float, default=2.0, help="RLIMIT_AS of each point, GiB")
    parser.add_argument("--skip-worst", action="store_true")
    args = parser.parse_args()
    print(header("large statement groups: CPU seconds and peak RSS"))
    print(f"{'point':<64} {'explain':>8} {'execute':>8} {'peak MB':>10}")
    for cells in (10**3, 10**4, 10**5, 10**6):
        columns, table = one_column(cells)
        show(f"GROUP BY d, {cells:,} cells", point("SELECT d, COUNT(*) FROM t GROUP BY d", columns, table,
                                                  memory=args.memory, execute=True))
    columns, table = one_column(10**5)
    values = ", ".join(str(3 * i) for i in range(999))
    show("IN list of 999 values, 100,000 cells", point(f"SELECT COUNT(*) FROM t WHERE d IN ({values})", columns,
                                                       table, memory=args.memory, execute=True))
    side = 4096  # MAX_CELLS = 2²⁴ = 4,096² cells over two columns (explain only: 16.7M result rows)
    show(f"GROUP BY a, b, {side * side:,} cells (MAX_CELLS)", point(
        "SELECT a, b, COUNT(*) FROM t GROUP BY a, b",
        {c: {"type": "integer", "lower": 0, "upper": side - 2} for c in "ab"},
        f"CREATE TABLE t AS SELECT i % {side - 1} AS a, i * 7 % {side - 1} AS b FROM range(20000) r(i)",
        memory=args.memory, execute=False))
    if args.skip_worst:
        return
    for count, cells in worst_batches():
        names = [f"c{i}" for i in range(count)]
        columns = {c: {"type": "integer", "lower": 0, "upper": cells - 2} for c in names}
        table = ("CREATE TABLE t AS SELECT " + ", ".join(f"i * {k + 1} % {cells - 1} AS {c}"
                                                         for k, c in enumerate(names)) + " FROM range(2000) r(i)")
        sql = "; ".join(f"SELECT {c}, COUNT(*) FROM t GROUP BY {c}; "
                        f"SELECT COUNT(*) FROM t WHERE {c} BETWEEN 10 AND {cells // 2 + 7 * k}"
                        for k, c in enumerate(names))
        for cost in ("epsilon", "rho"):
            show(f"worst admitted: {count} × (GROUP BY + range), {cells:,} cells, {cost}",
                 point(sql, columns, table, memory=args.memory, execute=False, cost=cost))

if __name__ == "__main__":
    main()
