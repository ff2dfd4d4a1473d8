"""``dpsql serve`` under load: small batches from 1, 4 and 16 concurrent analysts over the PostgreSQL wire.

Builds the demo's census-like table (``--rows`` people, generated with a fixed seed) in a temporary
folder with its schema, a ledger total big enough for the whole run, and a ``serve.toml`` with 16
analysts (analyst01 ... analyst16, each with their own SCRAM-SHA-256 verifier and cap); starts the
real server process (``python -m dpsql.cli serve ... --port 0``) and stops it by its process id
(SIGTERM) at the end, even after an error.

For each number N of concurrent analysts, N analysts connect (one psycopg connection each, all
authenticated), wait at a barrier, then each sends ``--batches`` small batches one after the other:
2 or 3 statements in one query string (a COUNT grouped by a column, a SUM with a range predicate on
age, and every other batch a COUNT with a range predicate on hours), the predicates drawn at random
so no two batches are alike. Two modes:

* ``reuse off`` (``SET dpsql.epsilon = 0.001; SET dpsql.reuse = off``): every batch is planned,
  charged in the ledger and measured: the server's full work per batch. The ledger's charges made
  during the phase must equal the batches answered; both are printed.
* ``reuse on`` (a dashboard refreshed): a second server on a fresh copy of the data and ledger;
  ``--dashboard`` batches are answered once (charged, not timed), then the analysts send those
  same batches again and again, and the server answers them from the kept releases for free (no
  charge, no data read). The charges made during the phase are printed (0 when every repeat was
  free). A fresh ledger, because a statement's answer from kept releases pools every release over
  its columns (generalized least squares over up to ``dpsql.engine.reuse.reuse.REUSE_CELLS`` joint cells),
  so after the hundreds of releases of the reuse-off phase each repeat would cost seconds.

Each batch's latency is taken by the client (``time.perf_counter`` around execute and fetching every
result set). The clients are threads of this process: a psycopg call releases the GIL while it
waits on the socket, the client's own work per batch (formatting a string, decoding a few rows) is
small beside the server's, and threads keep 16 clients from taking 16 interpreters' memory and
start-up on a 2-core machine. The server process and the clients share the machine's cores, so
the figures include the clients' CPU; on a busy machine they vary from run to run.

Prints, per mode and N: batches, statements per second, batches per second, latency p50/p90/p99/max
in ms, and the ledger's charges against the batches answered.

Run: python benchmarks/serve_load.py [--rows 200000] [--batches 12] [--dashboard 4] [--analysts 1,4,16] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg
from _machine import header

from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.cli.demo import EDUCATION, write_files
from dpsql.schema import Schema
from dpsql.server.scram import Verifier

ANALYSTS = [f"analyst{n:02d}" for n in range(1, 17)]
EPSILON = 0.001
GROUPED = ("sex", "race", "education", "age", "hours")


@dataclass
class Server:
    """The running ``dpsql serve`` process and the files it serves."""

    process: subprocess.Popen[str]
    port: int
    database: Path
    log: Path

    def charges(self) -> int:
        return len(Ledger(default_path(self.database)).history(self.database.name))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()


@dataclass
class Phase:
    """One mode at one concurrency: every batch's latency (s), statements answered, wall time, charges."""

    mode: str
    analysts: int
    latencies: list[float]
    statements: int
    seconds: float
    charges: int


def password(analyst: str) -> str:
    return f"{analyst}-benchmark-password"


def prepare(folder: Path, rows: int, workers: int, analysts: int, cap: float) -> tuple[Path, Path]:
    """The demo census table, its schema, a ledger total and serve.toml; (database, config)."""
    database = write_files(folder, rows)
    schema = Schema.load(folder / "schema.toml")
    Ledger(default_path(database)).set_total(database.name, PrivacyCost(epsilon=cap * analysts + 1.0),
                                             binding=Binding.of(schema, database))
    blocks = [f"[server]\nport = 0\nworkers = {workers}\n"]
    for name in ANALYSTS[:analysts]:
        verifier = Verifier.of_password(password(name), iterations=4096).text()
        blocks.append(f'[analysts.{name}]\npassword = "{verifier}"\nbudget_epsilon = {cap}\n'
                      "batches_per_minute = 1000000\nmax_sessions = 4\n")
    config = folder / "serve.toml"
    config.write_text("\n".join(blocks))
    return database, config


def start(folder: Path, database: Path, config: Path) -> Server:
    """Start the server process on a free loopback port and read the port it announces."""
    log = folder / "server.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "dpsql.cli", "serve", "--db", str(database), "--schema", str(folder / "schema.toml"),
         "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    server = Server(process, int(match.group(1)) if match else 0, database, log)
    if match is None:
        server.stop()
        raise RuntimeError(f"dpsql serve did not start: {line!r}\n{log.read_text()}")
    return server


def batch(rng: np.random.Generator, number: int) -> str:
    """2 or 3 statements: a grouped COUNT, a SUM over an age range, and every other batch a COUNT over hours."""
    column = GROUPED[int(rng.integers(len(GROUPED)))]
    low, high = sorted(int(v) for v in rng.integers(0, 100, size=2))
    statements = [f"SELECT {column}, COUNT(*) AS n FROM census GROUP BY {column}",
                  f"SELECT SUM(income) AS total FROM census WHERE age BETWEEN {low} AND {high}"]
    if number % 2:
        level = EDUCATION[int(rng.integers(len(EDUCATION)))]
        statements.append(f"SELECT COUNT(*) AS n FROM census WHERE hours >= {int(rng.integers(1, 99))} "
                          f"AND education = '{level}'")
    return ";\n".join(statements)


def connect(server: Server, analyst: str, reuse: bool) -> psycopg.Connection:
    conn = psycopg.connect(host="127.0.0.1", port=server.port, user=analyst, password=password(analyst),
                           dbname=server.database.name, sslmode="disable", autocommit=True)
    conn.execute(f"SET dpsql.epsilon = {EPSILON}")
    conn.execute(f"SET dpsql.reuse = {'on' if reuse else 'off'}")
    return conn


def timed(conn: psycopg.Connection, text: str) -> tuple[float, int]:
    """Send one batch and read every result set: (seconds, statements answered)."""
    started = time.perf_counter()
    cursor = conn.execute(text)
    results = 1
    cursor.fetchall()
    while cursor.nextset():
        cursor.fetchall()
        results += 1
    return time.perf_counter() - started, results


def phase(server: Server, mode: str, batches: dict[str, list[str]]) -> Phase:
    """Every analyst of ``batches`` sends hers at once, each on her own connection in her own thread."""
    reuse = mode == "reuse on"
    connections = {name: connect(server, name, reuse) for name in batches}
    barrier = threading.Barrier(len(batches) + 1)
    latencies: list[float] = []
    statements = [0]
    failures: list[BaseException] = []
    lock = threading.Lock()

    def analyst(name: str) -> None:
        barrier.wait()
        try:
            for text in batches[name]:
                seconds, answered = timed(connections[name], text)
                with lock:
                    latencies.append(seconds)
                    statements[0] += answered
        except BaseException as err:  # reported after the phase
            failures.append(err)

    before = server.charges()
    threads = [threading.Thread(target=analyst, args=(name,)) for name in batches]
    try:
        for thread in threads:
            thread.start()
        barrier.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
    finally:
        for conn in connections.values():
            conn.close()
    if failures:
        raise RuntimeError(f"{len(failures)} analysts failed in the {mode} phase: {failures[0]!r}")
    return Phase(mode, len(batches), latencies, statements[0], seconds, server.charges() - before)


def row(result: Phase) -> str:
    ms = np.array(result.latencies) * 1000.0
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return (f"{result.mode:9} {result.analysts:8d} {len(ms):7d} {result.statements / result.seconds:10.1f} "
            f"{len(ms) / result.seconds:9.1f} {p50:8.1f} {p90:8.1f} {p99:8.1f} {ms.max():8.1f} "
            f"{result.charges:8d}/{len(ms)}")


def reuse_off(folder: Path, arguments: argparse.Namespace, levels: list[int], rng: np.random.Generator) -> None:
    """Every batch new, planned, charged and measured."""
    server = start(folder, *prepare(folder, arguments.rows, arguments.workers, max(levels), cap(arguments)))
    try:
        with connect(server, ANALYSTS[0], reuse=False) as warm:  # the server's first batch loads its code
            timed(warm, batch(rng, 0))
        for n in levels:
            result = phase(server, "reuse off", {name: [batch(rng, k) for k in range(arguments.batches)]
                                                 for name in ANALYSTS[:n]})
            print(row(result), flush=True)
            if result.charges != len(result.latencies):
                print(f"  !! {result.charges} charges for {len(result.latencies)} batches answered")
    finally:
        server.stop()


def reuse_on(folder: Path, arguments: argparse.Namespace, levels: list[int], rng: np.random.Generator) -> None:
    """A dashboard: the same few batches answered once, then again and again from the kept releases."""
    server = start(folder, *prepare(folder, arguments.rows, arguments.workers, max(levels), cap(arguments)))
    try:
        dashboard = [batch(rng, k) for k in range(arguments.dashboard)]
        with connect(server, ANALYSTS[0], reuse=True) as owner:
            for text in dashboard:
                timed(owner, text)
        for n in levels:
            result = phase(server, "reuse on", {name: [dashboard[(a + k) % len(dashboard)]
                                                       for k in range(arguments.batches)]
                                                for a, name in enumerate(ANALYSTS[:n])})
            print(row(result), flush=True)
    finally:
        server.stop()


def cap(arguments: argparse.Namespace) -> float:
    """Each analyst's cap: every batch she may send, with room to spare."""
    return EPSILON * (3 * arguments.batches + arguments.dashboard + 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="people in the generated census table")
    parser.add_argument("--batches", type=int, default=12, help="batches each analyst sends, per phase")
    parser.add_argument("--dashboard", type=int, default=4, help="distinct batches repeated in the reuse-on mode")
    parser.add_argument("--analysts", default="1,4,16", help="concurrent analysts, comma-separated (at most 16)")
    parser.add_argument("--workers", type=int, default=2, help="[server] workers: batches answered at once")
    arguments = parser.parse_args()
    levels = [int(n) for n in arguments.analysts.split(",")]
    if not all(1 <= n <= len(ANALYSTS) for n in levels):
        parser.error(f"--analysts: numbers from 1 to {len(ANALYSTS)}")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))  # so the servers are stopped on SIGTERM too
    print(header(f"dpsql serve: small batches at ε = {EPSILON} each from {arguments.analysts} concurrent analysts, "
                 f"{arguments.rows:,} rows"))
    folder = Path(tempfile.mkdtemp(prefix="dpsql-serve-bench-"))
    print(f"files in {folder}; [server] workers = {arguments.workers}; clients: threads of this process, one "
          f"connection each; {arguments.batches} batches per analyst per phase; latency measured by the client; "
          f"load average before the run {os.getloadavg()[0]:.2f} (other processes share the cores)\n")
    print(f"{'mode':9} {'analysts':>8} {'batches':>7} {'queries/s':>10} {'batches/s':>9} {'p50 ms':>8} "
          f"{'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'charges/batches':>15}")
    rng = np.random.default_rng(20)
    reuse_off(folder / "reuse-off", arguments, levels, rng)
    reuse_on(folder / "reuse-on", arguments, levels, rng)
    print(f"\nreuse off: every batch planned, charged (one ledger charge each) and measured; reuse on: "
          f"{arguments.dashboard} batches answered once, then repeated and answered from the kept releases")


if __name__ == "__main__":
    main()
