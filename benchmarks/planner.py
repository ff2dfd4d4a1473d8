"""Planning CPU against batch size and domain size, cold and warm; end-to-end CPU of a 20-statement batch.

Planning is ``dpsql.engine.plan.prepare`` (parse, compile, plan every data vector, split the budget: no
data read), the step ``cursor.execute`` and ``cursor.explain`` both start with. Times are CPU
seconds (``time.process_time``: every thread of the process, BLAS included), each point measured in
its own Python process so that no in-memory cache of an earlier point helps it:

- cold: a fresh, empty ``DPSQL_CACHE_DIR`` (no cached strategy) in a fresh process;
- warm: the same batch planned again in that process;
- warm, new process: the same batch in another fresh process that reads the strategy cache the
  cold run wrote (what a second ``dpsql run`` of the batch costs).

The batches mix what analysts send on one table ``events`` (x integer 0..n-1 at resolution 1 in
16 bins, y integer 0..63 in bins of 8, g categorical with 8 values, v integer 0..99 as the AVG
measure; the schema's defaults otherwise): per 10 statements, four 1-D ranges on x, one 2-D range
on x and y, GROUP BY g under a range, AVG(v) by g under a range, GROUP BY y under a range, an AVG
of v under a range and GROUP BY g, y. Sweeps:

  (a) batch size 1, 5, 20, 100 (and 1,000 with ``--sizes 1,5,20,100,1000``) at n = 256;
  (b) domain size n = 64, 256, 1,024, 4,096 cells of x, 20 statements;
  (c) end to end: ``cursor.execute`` + fetch of 20 statements over ``--rows`` (100,000) rows in an
      in-memory DuckDB table (scan, measurement and reconstruction included), cold, warm, and warm
      in a new process; DuckDB's exact time for the same 20 statements is printed beside it.

A point whose process uses more than ``--max-seconds`` of CPU (default 30; RLIMIT_CPU, so a busy
machine does not skip it) is stopped, and the figures it had not printed show as "skipped";
the warm-in-a-new-process run of a skipped point is not attempted. With today's planner the
default run skips the larger points and finishes in a few minutes.

Run: python benchmarks/planner.py [--sizes 1,5,20,100] [--domains 64,256,1024,4096] [--rows 100000]
                                  [--max-seconds 30] [--skip-sizes] [--skip-domains] [--skip-e2e]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _machine import header

EPSILON = 1.0


def schema(cells: int) -> dict[str, Any]:
    """The events table with an x domain of ``cells`` integer cells (16 GROUP BY bins)."""
    return {"tables": {"events": {"columns": {
        "x": {"type": "integer", "lower": 0, "upper": cells - 1, "bin_width": max(1, cells // 16), "resolution": 1},
        "y": {"type": "integer", "lower": 0, "upper": 63, "bin_width": 8, "resolution": 1},
        "g": {"type": "categorical", "values": [f"g{i}" for i in range(8)]},
        "v": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1},
    }}}}


def statements(count: int, cells: int, seed: int = 3) -> list[str]:
    """``count`` statements of the mix described in the module docstring (fixed by ``seed``)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        lo, hi = sorted(int(v) for v in rng.integers(0, cells, size=2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, 64, size=2))
        out.append([
            f"SELECT COUNT(*) AS n FROM events WHERE x BETWEEN {lo} AND {hi}",
            f"SELECT COUNT(*) AS n FROM events WHERE x BETWEEN {lo} AND {hi}",
            f"SELECT COUNT(*) AS n FROM events WHERE x >= {lo}",
            f"SELECT COUNT(*) AS n FROM events WHERE x < {hi + 1}",
            f"SELECT COUNT(*) AS n FROM events WHERE x BETWEEN {lo} AND {hi} AND y BETWEEN {y0} AND {y1}",
            f"SELECT g, COUNT(*) AS n FROM events WHERE x >= {lo} GROUP BY g ORDER BY g",
            f"SELECT g, AVG(v) AS a FROM events WHERE x BETWEEN {lo} AND {hi} GROUP BY g ORDER BY g",
            f"SELECT y, COUNT(*) AS n FROM events WHERE x < {hi + 1} GROUP BY y ORDER BY y",
            f"SELECT AVG(v) AS a FROM events WHERE y BETWEEN {y0} AND {y1}",
            "SELECT g, y, COUNT(*) AS n FROM events GROUP BY g, y ORDER BY g, y",
        ][k % 10])
    return out


# ------------------------------------------------------------------------- one point (child)
def emit(name: str, value: float) -> None:
    """One figure per line, printed at once, so a point stopped later keeps what it measured."""
    print(json.dumps({name: value}), flush=True)


def plan_point(count: int, cells: int, repeat: bool) -> None:
    """CPU seconds of ``engine.prepare`` for the batch, and again if ``repeat``."""
    from dpsql import engine
    from dpsql.budget.accounting import PrivacyCost
    from dpsql.schema import Schema

    loaded, text, cost = Schema.load(schema(cells)), ";\n".join(statements(count, cells)), PrivacyCost(epsilon=EPSILON)
    started = time.process_time()
    engine.prepare(text, loaded, cost)
    emit("first", time.process_time() - started)
    if repeat:
        started = time.process_time()
        engine.prepare(text, loaded, cost)
        emit("again", time.process_time() - started)


def execute_point(count: int, cells: int, rows: int, repeat: bool) -> None:
    """CPU seconds of ``cursor.execute`` + fetch over ``rows`` generated rows (and again), and of
    DuckDB answering the same statements exactly one by one."""
    import duckdb

    import dpsql
    from dpsql.noise import SeededRandomSource

    connection = duckdb.connect()
    connection.execute("SELECT setseed(0.25)")
    connection.execute(f"""
        CREATE TABLE events AS
        SELECT CAST(least({cells - 1}, floor({cells} * pow(random(), 1.7))) AS INTEGER) AS x,
               CAST(floor(64 * random()) AS INTEGER) AS y,
               'g' || CAST(floor(8 * pow(random(), 2)) AS INTEGER) AS g,
               CAST(floor(100 * pow(random(), 3)) AS INTEGER) AS v
        FROM range({rows})""")
    batch = statements(count, cells)
    started = time.process_time()
    for sql in batch:
        connection.execute(sql).fetchall()
    emit("duckdb", time.process_time() - started)
    private = dpsql.connect(connection, schema=schema(cells), budget=dpsql.Budget(epsilon=10 * EPSILON),
                            rng=SeededRandomSource(0))
    cursor = private.cursor()
    started = time.process_time()
    cursor.execute(";\n".join(batch), epsilon=EPSILON).fetch_arrow_tables()
    emit("first", time.process_time() - started)
    if repeat:
        started = time.process_time()
        cursor.execute(";\n".join(batch), epsilon=EPSILON).fetch_arrow_tables()
        emit("again", time.process_time() - started)


def child(spec: dict[str, Any]) -> None:
    os.environ["DPSQL_CACHE_DIR"] = spec["cache"]
    if spec["mode"] == "plan":
        plan_point(spec["count"], spec["cells"], spec["repeat"])
    else:
        execute_point(spec["count"], spec["cells"], spec["rows"], spec["repeat"])


# ------------------------------------------------------------------------------ the sweeps
def run_child(spec: dict[str, Any], max_seconds: float) -> dict[str, float]:
    """Runs one point in a fresh interpreter and returns the figures it printed; one that used
    more than ``max_seconds`` of CPU (RLIMIT_CPU, so a busy machine does not skip a point; a wall
    cap of 4× is the backstop) is stopped, and the figures it had not printed are missing."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    limit = max(1, math.ceil(max_seconds))

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=4 * max_seconds + 30, check=False,
                              preexec_fn=cap)
        output, stopped = done.stdout, done.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
        if done.returncode != 0 and not stopped:
            raise RuntimeError(f"point {spec} failed:\n{done.stderr[-2000:]}")
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
    figures: dict[str, float] = {}
    for line in output.splitlines():
        if line.startswith("{"):
            figures.update(json.loads(line))
    return figures


def measure(spec: dict[str, Any], max_seconds: float) -> tuple[dict[str, float], dict[str, float]]:
    """Cold then warm in one process (fresh cache folder), then warm in a new process."""
    cache = tempfile.mkdtemp(prefix="dpsql-planner-")
    cold = run_child(spec | {"cache": cache, "repeat": True}, max_seconds)
    fresh = run_child(spec | {"cache": cache, "repeat": False}, max_seconds) if "first" in cold else {}
    return cold, fresh


def _s(value: float | None) -> str:
    return "skipped" if value is None else f"{value:.3f}"


def sweep(title: str, points: list[tuple[int, int]], args: argparse.Namespace) -> None:
    print(f"\n## {title}")
    print("| statements | x cells | cold | warm | warm, new process |")
    print("|---:|---:|---:|---:|---:|")
    for count, cells in points:
        cold, fresh = measure({"mode": "plan", "count": count, "cells": cells}, args.max_seconds)
        print(f"| {count:,} | {cells:,} | {_s(cold.get('first'))} | {_s(cold.get('again'))} "
              f"| {_s(fresh.get('first'))} |", flush=True)


def end_to_end(args: argparse.Namespace) -> None:
    print(f"\n## (c) End to end: 20 statements over {args.rows:,} rows, x with 256 cells "
          "(CPU s of execute + fetch, scan included)")
    cold, fresh = measure({"mode": "execute", "count": 20, "cells": 256, "rows": args.rows}, args.max_seconds)
    print(f"cold {_s(cold.get('first'))}; warm {_s(cold.get('again'))}; warm, new process {_s(fresh.get('first'))}; "
          f"DuckDB exact, one by one: {_s(cold.get('duckdb'))}")
    print("target (issue 15): ≤ 0.3 s warm and ≤ 2 s cold")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,5,20,100", help="batch sizes for sweep (a); add 1000 to include it")
    parser.add_argument("--domains", default="64,256,1024,4096", help="x domain sizes for sweep (b)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the end-to-end table (c)")
    parser.add_argument("--max-seconds", type=float, default=30.0,
                        help="CPU-time cap of one point's process (default 30)")
    parser.add_argument("--skip-sizes", action="store_true")
    parser.add_argument("--skip-domains", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    print(header(f"planning CPU (engine.prepare) at ε = {EPSILON}; each point in a fresh process"))
    threads = {v: os.environ[v] for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
               if v in os.environ}
    print(f"# thread settings: {threads or 'library defaults'}; points over {args.max_seconds:g} s CPU are skipped")
    if not args.skip_sizes:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        sweep("(a) Planning CPU s against batch size (x: 256 cells)", [(n, 256) for n in sizes], args)
    if not args.skip_domains:
        domains = [int(d) for d in args.domains.split(",") if d.strip()]
        sweep("(b) Planning CPU s against domain size (20 statements)", [(20, n) for n in domains], args)
    if not args.skip_e2e:
        end_to_end(args)


if __name__ == "__main__":
    main()
