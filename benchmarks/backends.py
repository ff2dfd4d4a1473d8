"""The same private batch on DuckDB, Spark (local) and PostgreSQL: scan time, planning time, equal vectors.

For each row count (default 10⁶ and 10⁷) a people table is generated into a Parquet file (a privacy
unit of 1–8 rows per person, capped at 3; ages, sexes, regions, incomes with NULLs, and a
heavy-tailed wealth measure). Every backend reads that file's rows: DuckDB from a database file
built from it, Spark from the Parquet file itself (a local[2] session), PostgreSQL from a table
loaded into the server given with ``--postgres`` (skipped without one). The batch (GROUP BYs,
ranges, AVG, a truncated SUM whose threshold is released first) is answered through
``dpsql.connect`` on each, charged to a ledger.

Prints per backend and row count:
  scan s     seconds inside the backend's data reads (the only step that touches rows);
  plan s     seconds of everything else in ``execute`` (parse, plan, measure, answer, ledger);
  = DuckDB   whether every data vector the engine read equals DuckDB's, value for value;
and the scan-time ratio to DuckDB measured in the same run. Finally a paper estimate for 10⁹ rows on
a Spark cluster, from Spark's measured per-row cost here and linear scaling over executor cores.

With ``--census``, instead: the 50-statement census batch (``batches.census_scan_mix``: one scan of six cell
sets, two sums, two non-NULL counts) over the demo's census table, per engine (``--engines``: DuckDB,
PostgreSQL through ADBC and through psycopg 3, Spark local[2] and Spark Connect) and row count, measured in
one run: the engine answering the 50 statements exactly one by one (its own SQL, through the same driver),
dpsql's private ``execute`` end to end (plans cached by a first run over 1,000 rows, which also warms each
engine) and its scan alone, as ratios to the exact queries. DuckDB runs in this process and is timed in CPU
seconds (``time.process_time``, every thread); PostgreSQL and Spark do their work in a server or a JVM, so
they are timed in wall seconds, and also by the CPU seconds of those processes (read from ``/proc``:
PostgreSQL's postmaster and its children, parallel workers included; Spark's JVM), the fairer measure on a
shared machine. Without ``--postgres`` a throw-away server is started (``tests/_postgres_server.py``); the
Connect server is pyspark's own, started on a loopback port and stopped by its process id.

Run: python benchmarks/backends.py [--rows 1000000,10000000] [--postgres postgresql://...] [--no-spark]
     [--census [--engines duckdb,postgres-adbc,postgres-psycopg,spark-local,spark-connect]]
(needs ``pip install ".[spark,postgres]"``; a throw-away PostgreSQL server: ``initdb -D DIR`` and
``pg_ctl -D DIR -o "-p 55432 -c listen_addresses=127.0.0.1" start``, as a user other than root).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from _machine import header

import dpsql
from dpsql.backends import Backend
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger
from dpsql.schema import Schema

SCHEMA: dict[str, Any] = {"tables": {"people": {
    "privacy_unit": {"column": "person", "max_rows": 3},
    "columns": {
        "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "region": {"type": "categorical", "values": ["N", "E", "S", "W"]},
        "income": {"type": "numeric", "lower": 0, "upper": 200_000, "bin_width": 25_000, "resolution": 1},
        "wealth": {"type": "integer", "lower": 0, "upper": 10_000_000, "bin_width": 1_000_000, "truncate": "svt"},
    }}}}

BATCH = """
SELECT sex, COUNT(*) AS n FROM people GROUP BY sex;
SELECT region, sex, COUNT(*) AS n, AVG(income) AS a FROM people GROUP BY region, sex;
SELECT COUNT(*) AS n FROM people WHERE age BETWEEN 20 AND 59;
SELECT COUNT(*) AS n FROM people WHERE income >= 50000 AND age < 30;
SELECT region, SUM(wealth) AS w FROM people GROUP BY region
"""

class Timed:
    """A Backend that forwards to another, timing its data reads and keeping what they returned."""

    def __init__(self, inner: Backend, clock: Callable[[], float] = time.perf_counter) -> None:
        self.inner, self.seconds, self.results, self.clock = inner, 0.0, [], clock

    def _read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        started = self.clock()
        result = getattr(self.inner, method)(*args, **kwargs)
        self.seconds += self.clock() - started
        self.results.append(result)
        return result

    def cell_data(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("cell_data", *args, **kwargs)

    def cell_data_sets(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("cell_data_sets", *args, **kwargs)

    def marginal_counts(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("marginal_counts", *args, **kwargs)

    def measure_profile(self, *args: Any, **kwargs: Any) -> Any:
        return self._read("measure_profile", *args, **kwargs)

    @property
    def dialect(self) -> str | None:
        return self.inner.dialect

    @property
    def in_memory(self) -> bool:
        return self.inner.in_memory

    @property
    def identity(self) -> str:
        return self.inner.identity

    def check_table(self, table: Any) -> None:
        self.inner.check_table(table)

    def close(self) -> None:
        self.inner.close()


def build(folder: Path, rows: int) -> Path:
    """The rows as a Parquet file, generated inside DuckDB from a fixed seed."""
    path = folder / f"people_{rows}.parquet"
    with duckdb.connect() as connection:
        connection.execute("SELECT setseed(0.25)")
        connection.execute(f"""
            COPY (SELECT CAST(i // 4.5 AS BIGINT) AS person,
                         CAST(floor(100 * random()) AS INTEGER) AS age,
                         CASE WHEN random() < 0.49 THEN 'F' ELSE 'M' END AS sex,
                         ['N', 'E', 'S', 'W'][1 + CAST(floor(4 * pow(random(), 1.5)) AS INTEGER)] AS region,
                         CASE WHEN random() < 0.03 THEN NULL ELSE round(60000 * -ln(random()), 2) END AS income,
                         CAST(floor(20000 * pow(random(), -1.2)) AS BIGINT) AS wealth
                  FROM range({rows}) t(i)) TO '{path}' (FORMAT parquet)""")
    return path


def answer(backend: Backend, ledger: Path, dataset: str) -> tuple[Timed, float]:
    """Charge and answer the batch through ``dpsql.connect``; the backend's scan time and the total time."""
    schema = Schema.load(SCHEMA)
    Ledger(ledger).set_total(dataset, PrivacyCost(epsilon=10.0),
                             binding=Binding(schema=schema.canonical(), database=backend.identity))
    timed = Timed(backend)
    started = time.perf_counter()
    with dpsql.connect(timed, schema=schema, ledger=ledger, dataset=dataset) as connection:
        connection.cursor().execute(BATCH, epsilon=1.0)
    return timed, time.perf_counter() - started


def same_vectors(a: list[Any], b: list[Any]) -> bool:
    """Every data read returned the same exact values (CellData, marginal tables, profiles)."""
    def plain(value: Any) -> Any:
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: np.asarray(v).tolist() for k, v in value.items()}
        if hasattr(value, "index"):
            return (value.shape, value.index.tolist(), value.counts.tolist(),
                    {k: [int(x) for x in v] for k, v in value.sums.items()},
                    {k: v.tolist() for k, v in value.nonnull.items()})
        return value
    return plain(a) == plain(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000", help="comma-separated row counts")
    parser.add_argument("--postgres", help="a postgresql:// URI of a server to load the rows into (else skipped)")
    parser.add_argument("--no-spark", action="store_true", help="skip Spark")
    parser.add_argument("--census", action="store_true",
                        help="instead: the 50-statement census batch, private ÷ each engine's own exact answers")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"with --census: among {', '.join(ENGINES)}")
    arguments = parser.parse_args()
    if arguments.census:
        census((int(r) for r in arguments.rows.split(",")), arguments.engines.split(","), arguments.postgres)
        return
    print(header("backends: one private batch on DuckDB, Spark local[2] and PostgreSQL"))
    spark = None if arguments.no_spark else _spark_session()
    spark_scans: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        runs: dict[str, Callable[[Path], Backend]] = {"duckdb": lambda file: _duckdb(work, file)}
        if spark is not None:
            runs["spark local[2]"] = lambda file: _spark(spark, file)
        if arguments.postgres:
            runs["postgresql"] = lambda file: _postgres(arguments.postgres, file)
        warm_up = build(work, 100_000)  # JIT and caches warmed on every backend before anything is timed
        for name, opened in runs.items():
            answer(opened(warm_up), work / f"{name}-warm-up.ledger", "warm-up")
        for rows in (int(r) for r in arguments.rows.split(",")):
            parquet = build(work, rows)
            print(f"\n{rows:,} rows ({parquet.stat().st_size / 1e6:.0f} MB Parquet)")
            print(f"{'backend':<16}{'scan s':>9}{'plan s':>9}{'scan / DuckDB':>15}  = DuckDB")
            reference: Timed | None = None
            for name, opened in runs.items():
                timed, total = answer(opened(parquet), work / f"{name}-{rows}.ledger", f"people-{rows}")
                reference = reference or timed
                equal = same_vectors(timed.results, reference.results)
                print(f"{name:<16}{timed.seconds:>9.2f}{total - timed.seconds:>9.2f}"
                      f"{timed.seconds / reference.seconds:>15.2f}  {'yes' if equal else 'NO'}")
                if name.startswith("spark"):
                    spark_scans[rows] = timed.seconds
    if spark is not None:
        spark.stop()
    if spark_scans:
        _estimate(spark_scans)


#: The engines ``--census`` can measure, in the order printed.
ENGINES = ("duckdb", "postgres-adbc", "postgres-psycopg", "spark-local", "spark-connect")


class Engine:
    """One engine of ``--census``: the census table loaded into it, its exact answers and a dpsql backend.

    ``exact(sql)`` runs one statement exactly on the engine and fetches the whole result (Arrow where
    the driver has it, as dpsql's own reads do); ``backend()`` a dpsql backend reading the same table;
    ``clock`` the clock both are timed with: CPU seconds for the in-process DuckDB, wall seconds where
    the work is done by another process (a PostgreSQL server, Spark's JVM).
    """

    name = ""
    clock: Callable[[], float] = staticmethod(time.perf_counter)
    unit = "wall s"

    def server_cpu(self) -> float | None:
        """CPU seconds used so far by the processes doing the engine's work outside this one, if known."""
        return None

    def load(self, table: Any, folder: Path) -> None:
        raise NotImplementedError

    def exact(self, sql: str) -> Any:
        raise NotImplementedError

    def backend(self) -> Backend:
        raise NotImplementedError

    def close(self) -> None:
        """Release what :meth:`load` made (connections, the table); servers are stopped by the caller."""


class DuckDBEngine(Engine):
    name, unit = "duckdb", "CPU s"
    clock = staticmethod(time.process_time)

    def load(self, table: Any, folder: Path) -> None:
        self.data = duckdb.connect()
        self.data.register("generated", table)
        self.data.execute("CREATE TABLE census AS SELECT * FROM generated")
        self.data.unregister("generated")

    def exact(self, sql: str) -> Any:
        return self.data.sql(sql).to_arrow_table()

    def backend(self) -> Backend:
        from dpsql.backends.duckdb import DuckDBBackend

        return DuckDBBackend(self.data)

    def close(self) -> None:
        self.data.close()


class PostgresEngine(Engine):
    """The table in a PostgreSQL server (loaded by ADBC's COPY), read through ADBC or psycopg 3."""

    def __init__(self, uri: str, driver: str) -> None:
        self.uri, self.driver, self.name = uri, driver, f"postgres-{driver}"

    def load(self, table: Any, folder: Path) -> None:
        import adbc_driver_postgresql.dbapi as adbc

        with adbc.connect(self.uri, autocommit=True) as connection, connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS census")
            cursor.adbc_ingest("census", table, mode="create")
            cursor.execute("VACUUM ANALYZE census")  # visibility map and statistics, as a loaded table has them
        self.connection = self._connect()
        with self.connection.cursor() as cursor:  # the server's postmaster: the parent of this session's backend
            cursor.execute("SELECT pg_backend_pid()")
            backend = int(cursor.fetchall()[0][0])
        self.postmaster = _parent(backend) if Path(f"/proc/{backend}").exists() else None

    def server_cpu(self) -> float | None:
        return None if self.postmaster is None else _tree_cpu(self.postmaster)

    def _connect(self) -> Any:
        if self.driver == "adbc":
            import adbc_driver_postgresql.dbapi as adbc

            return adbc.connect(self.uri, autocommit=True)
        import psycopg

        return psycopg.connect(self.uri, autocommit=True)

    def exact(self, sql: str) -> Any:
        with self.connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetch_arrow_table() if self.driver == "adbc" else cursor.fetchall()

    def backend(self) -> Backend:
        from dpsql.backends.postgres import PostgresBackend

        return PostgresBackend(self.connection)

    def close(self) -> None:
        self.connection.close()


class SparkEngine(Engine):
    """The table as a temporary view over a Parquet file, on a local[2] session or a Spark Connect server's."""

    def __init__(self, session: Any, name: str, jvm: int) -> None:
        self.session, self.name, self.jvm = session, name, jvm

    def server_cpu(self) -> float | None:
        return _tree_cpu(self.jvm)

    def load(self, table: Any, folder: Path) -> None:
        import pyarrow.parquet as pq

        path = folder / f"census_{table.num_rows}.parquet"
        if not path.exists():
            pq.write_table(table, path)
        self.session.read.parquet(str(path)).createOrReplaceTempView("census")

    def exact(self, sql: str) -> Any:
        return self.session.sql(sql).toArrow()

    def backend(self) -> Backend:
        from dpsql.backends.spark import SparkBackend

        return SparkBackend(self.session, {"census": "census"})


def census(sizes: Iterable[int], engines: Iterable[str], postgres: str | None) -> None:
    """Per engine and size: the 50 statements exactly one by one on that engine, dpsql's private ``execute``
    end to end and its scan alone, in one run (see the module docstring)."""
    from batches import census_scan_mix

    from dpsql.cli.demo import SCHEMA, population

    print(header("census, 50 statements: private ÷ the same engine's exact 50 queries, and the scan alone"))
    print("# DuckDB in CPU s (process_time, every thread); PostgreSQL and Spark in wall s (their work is in the server"
          "\n# or the JVM, not this process), exact and private timed in the same run, one after the other; 'srv':"
          "\n# the CPU s of the server's processes (PostgreSQL's postmaster and its children, parallel workers"
          "\n# included; Spark's JVM) for the same two, and their ratio: on a shared machine the fairer measure")
    batch = census_scan_mix(50)
    schema = Schema.load(SCHEMA)
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if postgres is None and any(name.startswith("postgres-") for name in engines):
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests._postgres_server import server  # the tests' throw-away server (as another user under root)

            postgres = stack.enter_context(server())
        opened = [_engine(name, postgres, stack) for name in engines]
        started = time.process_time()  # plans the batch once (cold caches), so every run below plans it warm
        for engine in opened:  # and warms each engine (JIT, catalogs) on 1,000 rows
            engine.load(population(1000), folder)
            for sql in batch:
                engine.exact(sql)
            _private(engine, schema, batch, folder)
            engine.close()
        print(f"(planned and engines warmed over 1,000 rows: {time.process_time() - started:.2f} CPU s; below, warm)")
        print(f"{'rows':>12}  {'engine':<18}{'unit':>7}{'exact':>9}{'private':>9}{'scan':>8}"
              f"{'private ÷ exact':>17}{'scan ÷ exact':>14}{'srv exact':>10}{'private':>8}{'÷':>9}  = DuckDB")
        for rows in sizes:
            table = population(rows)
            reference: Timed | None = None
            for engine in opened:
                engine.load(table, folder)
                started, server = engine.clock(), engine.server_cpu()
                for sql in batch:
                    engine.exact(sql)
                exact, exact_server = engine.clock() - started, _since(engine, server)
                server = engine.server_cpu()
                timed, private = _private(engine, schema, batch, folder)
                private_server = _since(engine, server)
                reference = reference or timed
                equal = "yes" if same_vectors(timed.results, reference.results) else "NO"
                cpu = (f"{exact_server:>9.2f}{private_server:>9.2f}{private_server / exact_server:>9.2f}"
                       if exact_server and private_server else f"{'-':>9}{'-':>9}{'-':>9}")
                print(f"{rows:>12,}  {engine.name:<18}{engine.unit:>7}{exact:>9.2f}{private:>9.2f}{timed.seconds:>8.2f}"
                      f"{private / exact:>17.2f}{timed.seconds / exact:>14.2f}{cpu}  {equal}", flush=True)
                target = _target(engine.name, rows, private / exact, timed.seconds / exact)
                if target:
                    print(f"{'':>14}target: {target}", flush=True)
                engine.close()


def _target(engine: str, rows: int, private: float, scan: float) -> str:
    """Issue 32's target for an engine and row count, and whether the ratios to exact meet it ('' when none)."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    if engine == "duckdb" and rows == 10**7:
        return f"private ≤ 1.3×, scan ≤ 1.0× of exact: {verdict(private <= 1.3 and scan <= 1.0)}"
    if engine == "duckdb" and rows == 10**6:
        return f"private ≤ 2× of exact (plans warm): {verdict(private <= 2.0)}"
    if rows == 10**7:
        return f"private ≤ 1.5× of the engine's exact: {verdict(private <= 1.5)}"
    return ""


def _since(engine: Engine, before: float | None) -> float | None:
    """The engine's server CPU seconds since ``before`` (None where it is not known)."""
    after = engine.server_cpu()
    return None if before is None or after is None else after - before


def _private(engine: Engine, schema: Schema, batch: list[str], folder: Path) -> tuple[Timed, float]:
    """dpsql's private answer to ``batch`` on ``engine``, timed on the engine's clock (end to end, and the scan)."""
    timed = Timed(engine.backend(), clock=engine.clock)
    ledger = folder / f"{engine.name}-{uuid.uuid4().hex}.ledger"
    Ledger(ledger).set_total("census", PrivacyCost(epsilon=10.0),
                             binding=Binding(schema=schema.canonical(), database=timed.identity))
    started = engine.clock()
    with dpsql.connect(timed, schema=schema, ledger=ledger, dataset="census") as connection:
        connection.cursor().execute(";\n".join(batch), epsilon=1.0).fetch_arrow_tables()
    return timed, engine.clock() - started


def _engine(name: str, postgres: str | None, stack: contextlib.ExitStack) -> Engine:
    """The engine called ``name``, starting a throw-away PostgreSQL server or Spark session it needs (once)."""
    if name == "duckdb":
        return DuckDBEngine()
    if name.startswith("postgres-"):
        if postgres is None:
            raise SystemExit("a PostgreSQL engine needs a server: --postgres URI, or initdb/pg_ctl to start one")
        return PostgresEngine(postgres, name.removeprefix("postgres-"))
    if name == "spark-local":
        session = _spark_session()
        stack.callback(session.stop)
        return SparkEngine(session, name, jvm=_children(os.getpid())[-1])  # the JVM pyspark launched
    if name == "spark-connect":
        from pyspark.sql import SparkSession

        url, server = stack.enter_context(_connect_server(Path(stack.enter_context(tempfile.TemporaryDirectory()))))
        session = SparkSession.builder.remote(url).create()
        stack.callback(session.stop)
        return SparkEngine(session, name, jvm=server)
    raise SystemExit(f"unknown engine {name!r}: choose among {', '.join(ENGINES)}")


@contextlib.contextmanager
def _connect_server(folder: Path) -> Iterator[tuple[str, int]]:
    """A Spark Connect server (pyspark's ``SparkConnectServer`` through its ``spark-submit``) on 127.0.0.1,
    local[2] with the settings of ``_spark_session``; its ``sc://`` URL and process id; stopped by its
    process group id."""
    import pyspark

    home = Path(pyspark.__file__).parent
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    command = [str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
               "--master", "local[2]", "--driver-memory", "4g"]
    for key, value in {"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                       "spark.driver.bindAddress": "127.0.0.1", "spark.connect.grpc.binding.address": "127.0.0.1",
                       "spark.connect.grpc.binding.port": str(port), "spark.sql.shuffle.partitions": "8",
                       "spark.ui.showConsoleProgress": "false",
                       "spark.sql.warehouse.dir": str(folder / "warehouse")}.items():
        command += ["--conf", f"{key}={value}"]
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1"}
    with open(folder / "server.log", "wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   cwd=folder, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            with socket.socket() as probe:
                probe.settimeout(1.0)
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the Spark Connect server did not start; see {folder}/server.log")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}", process.pid
    finally:
        for sent in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sent)
            try:
                process.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                continue


def _children(pid: int) -> list[int]:
    """The process ids whose parent is ``pid`` (Linux ``/proc``), oldest first."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if _parent(int(entry.name)) == pid:
                    found.append(int(entry.name))
    return sorted(found)


def _parent(pid: int) -> int:
    return int(_stat(pid)[1])


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name: state, ppid, ... (utime is index 11)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its descendants, including children they have reaped (so PostgreSQL's
    parallel workers, which exit after each query, count), from ``/proc``."""
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        with contextlib.suppress(OSError):
            fields = _stat(pid)
            total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
            pending += _children(pid)
    return total / os.sysconf("SC_CLK_TCK")


def _estimate(scans: dict[int, float]) -> None:
    """10⁹ rows on a cluster from Spark's marginal cost per row here: the slope between the two largest runs
    (fixed job costs cancel), times the two local cores, spread over a cluster's executor cores."""
    sizes = sorted(scans)
    if len(sizes) > 1:
        small, large = sizes[-2], sizes[-1]
        per_row = (scans[large] - scans[small]) / (large - small)
        fixed = scans[large] - per_row * large
    else:
        per_row, fixed = scans[sizes[0]] / sizes[0], 0.0
    per_core_row = per_row * 2  # local[2]: two cores scanned in parallel
    print(f"\nSpark here: {per_core_row * 1e9:,.0f} ns per row per core, {fixed:.1f} s fixed per batch")
    for cores in (64, 256, 1024):
        print(f"paper estimate, 10^9 rows on {cores:>4} executor cores: {1e9 * per_core_row / cores + fixed:,.0f} s "
              "of scan (linear scaling of the scan and of the unit cap's shuffle assumed)")


def _duckdb(folder: Path, parquet: Path) -> Backend:
    from dpsql.backends.duckdb import DuckDBBackend

    path = folder / f"{parquet.stem}.duckdb"
    if not path.exists():
        with duckdb.connect(str(path)) as connection:
            connection.execute(f"CREATE TABLE people AS SELECT * FROM read_parquet('{parquet}')")
    return DuckDBBackend(path)


def _spark_session() -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName("dpsql-benchmark")
            .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
            .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "8").config("spark.ui.showConsoleProgress", "false").getOrCreate())


def _spark(session: Any, parquet: Path) -> Backend:
    from dpsql.backends.spark import SparkBackend

    return SparkBackend(session, tables={"people": session.read.parquet(str(parquet))})


def _postgres(uri: str, parquet: Path) -> Backend:
    import adbc_driver_postgresql.dbapi as adbc
    import pyarrow.parquet as pq

    from dpsql.backends.postgres import PostgresBackend

    with adbc.connect(uri) as connection, connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS people")
        cursor.adbc_ingest("people", pq.read_table(parquet), mode="create")
        connection.commit()
    return PostgresBackend.from_uri(uri)


if __name__ == "__main__":
    main()
