"""Issue 31's named cases against its targets (CPU cold and warm, peak memory); planning CPU against batch
size and domain size, cold and warm; end-to-end CPU of a 20-statement batch.

Times are CPU seconds (``time.process_time``: every thread of the process, BLAS included), each point
measured in its own Python process (one BLAS thread, as dpsql plans) so that no in-memory cache of an
earlier point helps it; peak memory is that process's ``ru_maxrss`` (Python, DuckDB and the table
included):

- cold: a fresh, empty ``DPSQL_CACHE_DIR`` (no cached strategy or plan) in a fresh process;
- warm: the same batch again in that process (or, where said, a later step of the same session);
- warm, new process: the same batch in another fresh process that reads the caches the cold run wrote.

(n) Issue 31's named cases (``benchmarks/batches.py`` defines the batches), each line with its target
    and whether it is met:
    - 20 statements over ``--rows`` (100,000) rows with a 3,213-cell age × sex × region group, executed
      cold; then on the same connection a different batch on the same columns (with reuse, and on a
      second connection without it; it shares no statement group with the first, so its target is
      the issue's ≤ 0.3 s for this named case, while "a different batch sharing its groups, ≤ 0.2 s"
      is the events-mix rows below); then the first batch again (its 3,213-cell group is over
      ``REUSE_CELLS``, so it is not kept: measured again, combined where the second's release answers);
      then ``batches.FREE_BATCH`` measured, and repeated: answered entirely free (reuse off: measured);
      and, in a process of its own, the different batch without reuse right after the first batch (the
      statement groups it does not share with the first are planned cold there, as with reuse);
    - the census mix (``batches.census_mix``) of 100 and 1,000 statements over 100,000 rows of the
      demo's census table, executed cold;
    - plain ``SELECT a, b, COUNT(*) … GROUP BY a, b`` over 10⁴, 10⁵ and 10⁶ cells (100,000 rows), cold;
    - the 30-statement Adult batch of ``adult_sums.py`` over UCI Adult (``--data``), cold and warm;
    - a different batch sharing its groups: planning (``prepare``, so no reuse) of the 20-statement
      events mix (x: 256 cells) with one statement's range changed (``batches.one_range_changed``)
      or one range added (``batches.one_statement_added``) after the mix itself, in the same process,
      and the changed batch in a new process reading the on-disk cache of one that planned the mix.
(a) Planning (``dpsql.engine.plan.prepare``: parse, compile, plan every data vector, split the budget,
    no data read) of the mix on one table ``events`` (``batches.events_mix``) at batch size 1, 5, 20,
    100 (and 1,000 with ``--sizes 1,5,20,100,1000``), x with 256 cells.
(b) The same, 20 statements, at x domain size 64, 256, 1,024, 4,096 cells.
(c) End to end: ``cursor.execute`` + fetch of those 20 statements over ``--rows`` rows in an in-memory
    DuckDB table (scan, measurement and reconstruction included), cold, warm, and warm in a new
    process; DuckDB's exact time for the same 20 statements is printed beside it. pandas, where it is
    installed, is imported before the batch and its time printed apart: pyarrow imports it on its first
    call, a cost of the environment (the core install has no pandas), not of dpsql.

A point whose process uses more than ``--max-seconds`` of CPU (default 30; RLIMIT_CPU, so a busy
machine does not skip it) is stopped, and the figures it had not printed show as "stopped"; the
warm-in-a-new-process run of a stopped point is not attempted.

Run: python benchmarks/planner.py [--sizes 1,5,20,100] [--domains 64,256,1024,4096] [--rows 100000]
                                  [--data /work/shared/data] [--max-seconds 30]
                                  [--skip-named] [--skip-sizes] [--skip-domains] [--skip-e2e]
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
import threading
import time
from pathlib import Path
from typing import Any

from _machine import header
from batches import events_mix, events_schema

EPSILON = 1.0


# ------------------------------------------------------------------------- one point (child)
def emit(name: str, value: float) -> None:
    """One figure per line, printed at once, so a point stopped later keeps what it measured."""
    print(json.dumps({name: value}), flush=True)


def plan_point(count: int, cells: int, repeat: bool) -> None:
    """CPU seconds of ``engine.prepare`` for the batch, and again if ``repeat``."""
    from dpsql import engine
    from dpsql.budget.accounting import PrivacyCost
    from dpsql.schema import Schema

    loaded, cost = Schema.load(events_schema(cells)), PrivacyCost(epsilon=EPSILON)
    text = ";\n".join(events_mix(count, cells))
    started = time.process_time()
    engine.prepare(text, loaded, cost)
    emit("first", time.process_time() - started)
    if repeat:
        started = time.process_time()
        engine.prepare(text, loaded, cost)
        emit("again", time.process_time() - started)


def shared_point(step: str) -> None:
    """Planning CPU of a batch sharing every statement group but one with the events mix planned before
    it. ``step`` "same": the mix, then one range changed and one range added, in this process; "prime":
    the mix only (its caches for a later process); "fresh": one range changed, in a new process reading
    the caches "prime" wrote."""
    from batches import one_range_changed, one_statement_added

    from dpsql import engine
    from dpsql.budget.accounting import PrivacyCost
    from dpsql.schema import Schema

    loaded, cost = Schema.load(events_schema(256)), PrivacyCost(epsilon=EPSILON)
    first = events_mix(20, 256)
    if step != "fresh":
        engine.prepare(";\n".join(first), loaded, cost)
    if step == "prime":
        return
    started = time.process_time()
    engine.prepare(";\n".join(one_range_changed(first)), loaded, cost)
    emit("fresh_changed" if step == "fresh" else "changed", time.process_time() - started)
    if step == "same":
        started = time.process_time()
        engine.prepare(";\n".join(one_statement_added(first)), loaded, cost)
        emit("added", time.process_time() - started)
    emit("rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def execute_point(count: int, cells: int, rows: int, repeat: bool) -> None:
    """CPU seconds of ``cursor.execute`` + fetch over ``rows`` generated rows (and again), and of
    DuckDB answering the same statements exactly one by one."""
    import duckdb

    import dpsql
    from dpsql.noise import SeededRandomSource

    started = time.process_time()
    try:  # pyarrow imports pandas on its first call wherever pandas is installed (dpsql's core install has none)
        import pandas  # noqa: F401
    except ImportError:
        pass
    emit("pandas", time.process_time() - started)
    connection = duckdb.connect()
    connection.execute("SELECT setseed(0.25)")
    connection.execute(f"""
        CREATE TABLE events AS
        SELECT CAST(least({cells - 1}, floor({cells} * pow(random(), 1.7))) AS INTEGER) AS x,
               CAST(floor(64 * random()) AS INTEGER) AS y,
               'g' || CAST(floor(8 * pow(random(), 2)) AS INTEGER) AS g,
               CAST(floor(100 * pow(random(), 3)) AS INTEGER) AS v
        FROM range({rows})""")
    batch = events_mix(count, cells)
    started = time.process_time()
    for sql in batch:
        connection.execute(sql).fetchall()
    emit("duckdb", time.process_time() - started)
    private = dpsql.connect(connection, schema=events_schema(cells), budget=dpsql.Budget(epsilon=10 * EPSILON),
                            rng=SeededRandomSource(0))
    cursor = private.cursor()
    started = time.process_time()
    cursor.execute(";\n".join(batch), epsilon=EPSILON).fetch_arrow_tables()
    emit("first", time.process_time() - started)
    if repeat:
        started = time.process_time()
        cursor.execute(";\n".join(batch), epsilon=EPSILON).fetch_arrow_tables()
        emit("again", time.process_time() - started)


def _timed(name: str, run: Any) -> None:
    """CPU seconds of ``run()`` as ``name``, then the process's peak resident set so far (``rss_mb``)."""
    started = time.process_time()
    run()
    emit(name, time.process_time() - started)
    emit("rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def people_point(rows: int, step: str | None = None) -> None:
    """The issue's 20 statements executed cold, a different batch after it (with reuse; and on a second
    connection, after the first batch, without), then the first batch again (measured: its group is not
    kept), then a batch whose release is kept, repeated (free) and measured again without reuse.
    ``step`` "alone": only the first batch, then the different one, both without reuse (the different
    batch's own planning, which its reuse figure includes: its new statement groups are planned cold)."""
    import duckdb
    from batches import FREE_BATCH, ISSUE_BATCH, PEOPLE, SECOND_BATCH

    import dpsql

    data = duckdb.connect()
    data.execute("SELECT setseed(0.25)")
    data.execute(f"""CREATE TABLE people AS SELECT CAST(floor(100 * pow(random(), 1.3)) AS INTEGER) AS age,
        CASE WHEN random() < 0.5 THEN 'F' ELSE 'M' END AS sex,
        'r' || lpad(CAST(CAST(floor(50 * pow(random(), 2)) AS INTEGER) AS VARCHAR), 2, '0') AS region,
        CAST(floor(500000 * pow(random(), 4)) AS DOUBLE) AS income FROM range({rows})""")
    first, second, free = ";\n".join(ISSUE_BATCH), ";\n".join(SECOND_BATCH), ";\n".join(FREE_BATCH)
    budget = dpsql.Budget(epsilon=100 * EPSILON)
    cursor = dpsql.connect(data, schema=PEOPLE, budget=budget).cursor()
    if step == "alone":
        cursor.execute(first, epsilon=EPSILON, reuse=False).fetch_arrow_tables()
        _timed("different_cold_alone",
               lambda: cursor.execute(second, epsilon=EPSILON, reuse=False).fetch_arrow_tables())
        return
    _timed("cold", lambda: cursor.execute(first, epsilon=EPSILON).fetch_arrow_tables())
    _timed("different", lambda: cursor.execute(second, epsilon=EPSILON).fetch_arrow_tables())
    _timed("repeat", lambda: cursor.execute(first, epsilon=EPSILON).fetch_arrow_tables())
    cursor.execute(free, epsilon=EPSILON).fetch_arrow_tables()  # measured and kept
    _timed("free_repeat", lambda: cursor.execute(free, epsilon=EPSILON).fetch_arrow_tables())
    other = dpsql.connect(data, schema=PEOPLE, budget=budget).cursor()
    _timed("again", lambda: other.execute(first, epsilon=EPSILON, reuse=False).fetch_arrow_tables())
    _timed("different_alone", lambda: other.execute(second, epsilon=EPSILON, reuse=False).fetch_arrow_tables())
    _timed("free_again", lambda: other.execute(free, epsilon=EPSILON, reuse=False).fetch_arrow_tables())


def census_point(count: int, rows: int) -> None:
    """``count`` statements of the census mix over ``rows`` rows of the demo's census table, cold."""
    import duckdb
    from batches import census_mix

    import dpsql
    from dpsql.cli.demo import SCHEMA, population

    data = duckdb.connect()
    data.register("generated", population(rows))
    data.execute("CREATE TABLE census AS SELECT * FROM generated")
    cursor = dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=10 * EPSILON)).cursor()
    _timed("cold", lambda: cursor.execute(";\n".join(census_mix(count)), epsilon=EPSILON).fetch_arrow_tables())


def group_by_point(cells: int, rows: int) -> None:
    """``SELECT a, b, COUNT(*) … GROUP BY a, b`` over ``cells`` cells (the outside cells included), cold."""
    import duckdb

    import dpsql

    side_a = round(math.sqrt(cells))
    side_b = cells // side_a
    columns = {"a": {"type": "integer", "lower": 0, "upper": side_a - 2},
               "b": {"type": "integer", "lower": 0, "upper": side_b - 2}}
    data = duckdb.connect()
    data.execute(f"CREATE TABLE t AS SELECT i * 7 % {side_a - 1} AS a, i * 13 % {side_b - 1} AS b "
                 f"FROM range({rows}) r(i)")
    cursor = dpsql.connect(data, schema={"tables": {"t": {"columns": columns}}},
                           budget=dpsql.Budget(epsilon=10 * EPSILON)).cursor()
    _timed("cold", lambda: cursor.execute("SELECT a, b, COUNT(*) AS n FROM t GROUP BY a, b",
                                          epsilon=EPSILON).fetchall())


def adult_point(folder: str) -> None:
    """The 30-statement Adult batch of ``adult_sums.py`` over UCI Adult, cold and again (reuse off)."""
    import duckdb
    from adult_sums import STATEMENTS, schema

    import dpsql

    domain = json.loads((Path(folder) / "adult-domain.json").read_text())
    declared = schema(domain)
    names = list(declared.table("adult").columns)
    data = duckdb.connect()
    listing = ", ".join(f'"{original}" AS {name}' for original, name in zip(domain, names))
    data.execute(f"CREATE TABLE adult AS SELECT {listing} FROM read_csv('{Path(folder) / 'adult.csv'}', header=true)")
    cursor = dpsql.connect(data, schema=declared, budget=dpsql.Budget(epsilon=10 * EPSILON)).cursor()
    batch = ";\n".join(STATEMENTS)
    _timed("cold", lambda: cursor.execute(batch, epsilon=EPSILON).fetch_arrow_tables())
    _timed("again", lambda: cursor.execute(batch, epsilon=EPSILON, reuse=False).fetch_arrow_tables())


def child(spec: dict[str, Any]) -> None:
    os.environ["DPSQL_CACHE_DIR"] = spec["cache"]
    mode = spec["mode"]
    if mode == "plan":
        plan_point(spec["count"], spec["cells"], spec["repeat"])
    elif mode == "execute":
        execute_point(spec["count"], spec["cells"], spec["rows"], spec["repeat"])
    elif mode == "people":
        people_point(spec["rows"], spec.get("step"))
    elif mode == "census":
        census_point(spec["count"], spec["rows"])
    elif mode == "group_by":
        group_by_point(spec["cells"], spec["rows"])
    elif mode == "shared":
        shared_point(spec["step"])
    else:
        adult_point(spec["data"])


# ------------------------------------------------------------------------------ the sweeps
def run_child(spec: dict[str, Any], max_seconds: float) -> dict[str, float]:
    """Runs one point in a fresh interpreter (one BLAS thread) and returns the figures it printed; one
    that used more than ``max_seconds`` of CPU (RLIMIT_CPU, so a busy machine does not skip a point; a
    wall cap of 4× is the backstop) is stopped, and the figures it had not printed are missing."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    limit = max(1, math.ceil(max_seconds))

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))

    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                               preexec_fn=cap)
    backstop = threading.Timer(4 * max_seconds + 30, process.kill)
    backstop.start()
    output, errors = process.communicate()
    backstop.cancel()
    stopped = process.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
    if process.returncode != 0 and not stopped:
        raise RuntimeError(f"point {spec} failed:\n{errors[-2000:]}")
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
    return "stopped" if value is None else f"{value:.3f}"


def sweep(title: str, points: list[tuple[int, int]], args: argparse.Namespace) -> None:
    print(f"\n## {title}")
    print("| statements | x cells | cold | warm | warm, new process |")
    print("|---:|---:|---:|---:|---:|")
    for count, cells in points:
        cold, fresh = measure({"mode": "plan", "count": count, "cells": cells}, args.max_seconds)
        print(f"| {count:,} | {cells:,} | {_s(cold.get('first'))} | {_s(cold.get('again'))} "
              f"| {_s(fresh.get('first'))} |", flush=True)


#: (label, mode, spec, figure, CPU target in s or None, memory target in MB or None) of section (n).
NAMED: list[tuple[str, str, dict[str, Any], str, float | None, float | None]] = [
    ("20 statements, 3,213-cell group: cold", "people", {}, "cold", 1.5, None),
    ("a different batch on its columns, same connection (reuse; both its statement groups are new)", "people", {},
     "different", 0.3, None),
    ("that different batch without reuse, after the first batch (its new groups planned cold)", "people",
     {"step": "alone"}, "different_cold_alone", None, None),
    ("the same different batch without reuse (warm process)", "people", {}, "different_alone", 0.2, None),
    ("the first batch repeated (its 3,213-cell group is not kept: measured, combined)", "people", {}, "repeat",
     None, None),
    ("the first batch again, measured (reuse off, warm process)", "people", {}, "again", None, None),
    ("a repeated batch answered free by reuse (batches.FREE_BATCH)", "people", {}, "free_repeat", 0.1, None),
    ("that batch measured again (reuse off, warm process)", "people", {}, "free_again", None, None),
    ("census mix, 100 statements: cold", "census", {"count": 100}, "cold", None, None),
    ("census mix, 1,000 statements: cold", "census", {"count": 1000}, "cold", 5.0, None),
    ("GROUP BY a, b over 10⁴ cells: cold", "group_by", {"cells": 10**4}, "cold", 1.5, None),
    ("GROUP BY a, b over 10⁵ cells: cold", "group_by", {"cells": 10**5}, "cold", 1.0, None),
    ("GROUP BY a, b over 10⁶ cells: cold", "group_by", {"cells": 10**6}, "cold", 5.0, 1024.0),
    ("Adult, 30 statements: cold", "adult", {}, "cold", None, None),
    ("Adult, 30 statements: again (reuse off)", "adult", {}, "again", None, None),
    ("events mix, one range changed: planned after the mix, same process", "shared", {"step": "same"}, "changed",
     0.2, None),
    ("events mix, one range added: planned after the mix, same process", "shared", {"step": "same"}, "added",
     0.2, None),
    ("events mix, one range changed: new process, the mix's on-disk cache", "shared", {"step": "fresh"},
     "fresh_changed", 0.2, None),
]


def verdict(seconds: float | None, megabytes: float | None, cpu: float | None, memory: float | None) -> str:
    """'met' / 'NOT met' against the targets (a point stopped at the CPU cap has not met a CPU target)."""
    if cpu is None and memory is None:
        return "(no target)"
    met = (cpu is None or (seconds is not None and seconds <= cpu)) and \
        (memory is None or (megabytes is not None and megabytes <= memory))
    return "met" if met else "NOT met"


def named_cases(args: argparse.Namespace) -> None:
    print(f"\n## (n) Named cases over {args.rows:,} rows (CPU s; peak resident MB of the point's process)")
    print("| case | CPU s | peak MB | target | |")
    print("|---|---:|---:|---|---|")
    runs: dict[str, dict[str, float]] = {}
    for label, mode, extra, figure, cpu, memory in NAMED:
        spec = {"mode": mode, "rows": args.rows, "data": str(args.data), **extra}
        key = json.dumps(spec, sort_keys=True)
        if key not in runs:
            cache = tempfile.mkdtemp(prefix="dpsql-planner-")
            if extra.get("step") == "fresh":  # a new process reading what an earlier one wrote
                run_child(spec | {"cache": cache, "step": "prime"}, args.max_seconds)
            runs[key] = run_child(spec | {"cache": cache}, args.max_seconds)
        figures = runs[key]
        seconds, megabytes = figures.get(figure), figures.get("rss_mb")
        target = " and ".join(t for t in (f"≤ {cpu:g} s" if cpu is not None else "",
                                          f"≤ {memory / 1024:g} GB" if memory is not None else "") if t) or "—"
        print(f"| {label} | {_s(seconds)} | {'—' if megabytes is None else f'{megabytes:,.0f}'} | {target} "
              f"| {verdict(seconds, megabytes, cpu, memory)} |", flush=True)


def end_to_end(args: argparse.Namespace) -> None:
    print(f"\n## (c) End to end: 20 statements over {args.rows:,} rows, x with 256 cells "
          "(CPU s of execute + fetch, scan included)")
    cold, fresh = measure({"mode": "execute", "count": 20, "cells": 256, "rows": args.rows}, args.max_seconds)
    print(f"cold {_s(cold.get('first'))}; warm {_s(cold.get('again'))}; warm, new process {_s(fresh.get('first'))}; "
          f"DuckDB exact, one by one: {_s(cold.get('duckdb'))}")
    print(f"(each process imported pandas before the batch, {_s(cold.get('pandas'))} s, not counted above: pyarrow "
          "imports it on its first call wherever pandas is installed, and dpsql's core install has no pandas)")
    print(f"target (≤ 20 statements, groups ≤ 10⁴ cells): cold ≤ 1.5 s: "
          f"{verdict(cold.get('first'), None, 1.5, None)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,5,20,100", help="batch sizes for sweep (a); add 1000 to include it")
    parser.add_argument("--domains", default="64,256,1024,4096", help="x domain sizes for sweep (b)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the end-to-end table (c)")
    parser.add_argument("--max-seconds", type=float, default=30.0,
                        help="CPU-time cap of one point's process (default 30)")
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"), help="folder of adult.csv (n)")
    parser.add_argument("--skip-named", action="store_true")
    parser.add_argument("--skip-sizes", action="store_true")
    parser.add_argument("--skip-domains", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    print(header(f"planning and answering CPU at ε = {EPSILON}; each point in a fresh process"))
    threads = {v: os.environ[v] for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
               if v in os.environ}
    print(f"# thread settings: {threads or 'library defaults'}, one BLAS thread per point; points over "
          f"{args.max_seconds:g} s CPU are stopped")
    if not args.skip_named:
        named_cases(args)
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
