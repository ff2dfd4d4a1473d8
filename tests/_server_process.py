"""A real ``dpsql serve`` process for the tests: a generated DuckDB file, a ledger, analysts, a loopback port.

The server is started as its own process (``python -m dpsql.cli serve ... --port 0``), its port read
from the line it announces, and stopped by its process id with SIGTERM.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Ledger, default_path
from dpsql.budget.records import Binding
from dpsql.schema import Schema
from dpsql.server.scram import Verifier

SCHEMA = textwrap.dedent("""
    [tables.census]
    privacy_unit = "row"
    [tables.census.columns.age]
    type = "integer"
    lower = 0
    upper = 99
    bin_width = 10
    [tables.census.columns.sex]
    type = "categorical"
    values = ["F", "M"]
    [tables.census.columns.income]
    type = "numeric"
    lower = 0
    upper = 100000
    bin_width = 25000
    """)
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
ROWS = 5000


@dataclass
class Served:
    """A running server: where it listens, its files, and its process."""

    port: int
    folder: Path
    process: subprocess.Popen[str]
    log: Path
    database: Path = field(init=False)

    def __post_init__(self) -> None:
        self.database = self.folder / "people.duckdb"

    def dsn(self, user: str, password: str | None = None, **extra: str) -> str:
        parts = {"host": "127.0.0.1", "port": str(self.port), "user": user, "dbname": "people.duckdb",
                 "password": PASSWORDS.get(user, "x") if password is None else password, "sslmode": "disable",
                 "connect_timeout": "30", **extra}
        return " ".join(f"{key}={value}" for key, value in parts.items())

    def ledger(self) -> Ledger:
        return Ledger(default_path(self.database))

    def spent(self, analyst: str) -> float:
        return float(self.ledger().balance("people.duckdb", analyst).limits[-1].spent)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()


def make_database(folder: Path, total: float = 10.0) -> None:
    """A census table of ROWS generated people, its schema, and a ledger with ε = total."""
    rng = np.random.default_rng(7)
    con = duckdb.connect(str(folder / "people.duckdb"))
    ages, sexes, incomes = (rng.integers(0, 100, ROWS), rng.choice(["F", "M"], ROWS),
                            rng.integers(0, 100_000, ROWS))
    con.register("people", pa.table({"age": ages.astype(np.int64), "sex": sexes.astype(str),
                                     "income": incomes.astype(np.float64)}))
    con.execute("CREATE TABLE census AS SELECT * FROM people")
    con.close()
    (folder / "schema.toml").write_text(SCHEMA)
    Ledger(default_path(folder / "people.duckdb")).set_total(
        "people.duckdb", PrivacyCost(epsilon=total),
        binding=Binding.of(Schema.load(SCHEMA), folder / "people.duckdb"))


def write_config(folder: Path, *, server: str = "", analysts: dict[str, str] | None = None) -> Path:
    """serve.toml with alice (cap ε=1, default ε=0.1) and bob (cap ε=0.5), plus ``analysts`` extras."""
    extra = analysts or {}
    blocks = [f"[server]\nport = 0\nworkers = 2\n{server}"]
    caps = {"alice": "budget_epsilon = 1.0\ndefault_epsilon = 0.1", "bob": "budget_epsilon = 0.5"}
    for name in ("alice", "bob"):
        verifier = Verifier.of_password(PASSWORDS[name]).text()
        blocks.append(f'[analysts.{name}]\npassword = "{verifier}"\n{caps[name]}\n{extra.get(name, "")}')
    path = folder / "serve.toml"
    path.write_text("\n".join(blocks))
    return path


def start(folder: Path, config: Path, *, database: str | None = None, options: tuple[str, ...] = ()) -> Served:
    """Start ``dpsql serve`` on a free loopback port and wait for its announcement (``database``: default
    the folder's DuckDB file; ``options``: more command-line options, e.g. ``--ledger``)."""
    log = folder / "server.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "dpsql.cli", "serve", "--db", database or str(folder / "people.duckdb"), "--schema",
         str(folder / "schema.toml"), "--config", str(config), *options],
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    if match is None:
        process.wait(timeout=30)
        raise RuntimeError(f"dpsql serve did not start: {line!r}\n{log.read_text()}")
    return Served(int(match.group(1)), folder, process, log)


def make_certificate(folder: Path) -> str:
    """A self-signed certificate and key for localhost in ``folder`` (openssl); the [server] lines naming them."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days", "1",
                    "-keyout", str(folder / "server.key"), "-out", str(folder / "server.crt")],
                   check=True, capture_output=True)
    return 'tls_certificate = "server.crt"\ntls_key = "server.key"\n'


def serving(folder: Path) -> Iterator[Served]:
    """A module's server with the default configuration in ``folder``, stopped when the module is done."""
    make_database(folder)
    server = start(folder, write_config(folder))
    try:
        yield server
    finally:
        server.stop()


def wait_until(condition, timeout: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
    """Poll ``condition`` (a callable) until true; for the state after a client left (not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False
