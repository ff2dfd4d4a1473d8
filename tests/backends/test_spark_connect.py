"""Smoke test of Spark Connect: a loopback Connect server, ``SparkBackend.remote("sc://...")``, and answers
bit-identical to DuckDB's under the same seeded source.

The server is the ``SparkConnectServer`` class that pyspark (the full package, with its jars)
ships, started with its ``bin/spark-submit`` on 127.0.0.1 and a free port, and stopped by its
process id. The client needs pyspark's ``connect`` dependencies (grpcio, grpcio-status,
googleapis-common-protos, pandas, zstandard).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _required import module, unavailable

import dpsql
from dpsql.backends.spark import SparkBackend, is_spark_session
from tests import _portable

pyspark = module("pyspark", "the Spark Connect server needs pyspark >= 4 with its jars "
                 "(pip install \"pyspark[connect]\")")
for name in ("grpc", "grpc_status", "google.rpc", "pandas", "zstandard"):
    module(name, f"the Spark Connect client needs {name} "
           "(pip install \"dpsql[spark-connect]\" or \"pyspark[connect]\")")
SPARK_HOME = Path(pyspark.__file__).parent
CONNECT_JARS = glob.glob(str(SPARK_HOME / "jars" / "spark-connect_*.jar"))
if not (SPARK_HOME / "bin" / "spark-submit").exists() or not CONNECT_JARS:
    unavailable("this pyspark has no jars or spark-submit (pyspark-client?): no local Connect server can start")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    unavailable("the Spark Connect server needs a Java runtime >= 17 (e.g. apt-get install -y "
                "openjdk-17-jre-headless); none is on PATH or in JAVA_HOME")

#: Seconds to wait for the server to listen (the JVM and Spark start in 10-40 s on 2 cores).
START_TIMEOUT = 240.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 (local[2], small heap, no UI), its URL; stopped by process id."""
    port, work = free_port(), tmp_path_factory.mktemp("spark-connect")
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--class",
               "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
               "--driver-memory", "768m"]
    for key, value in {"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                       "spark.driver.bindAddress": "127.0.0.1", "spark.connect.grpc.binding.address": "127.0.0.1",
                       "spark.connect.grpc.binding.port": str(port), "spark.sql.shuffle.partitions": "2",
                       "spark.sql.warehouse.dir": str(work / "warehouse")}.items():
        command += ["--conf", f"{key}={value}"]
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    with open(work / "server.log", "wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   cwd=work, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not start (exit {process.poll()}); see {work}/server.log")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server's process group (its own session, started above) by its id: TERM, then KILL."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sent)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


def test_answers_over_spark_connect_equal_duckdb(server: str) -> None:
    data = _portable.arrow_table()
    opened: list[SparkBackend] = []

    def on_connect(**options: Any) -> dpsql.Connection:
        backend = SparkBackend.remote(server, {"people": data, "visits": data})
        opened.append(backend)
        assert backend.in_memory and backend.identity == ""
        return dpsql.connect(backend, **options)

    def on_duckdb(**options: Any) -> dpsql.Connection:
        return dpsql.connect(_portable.duckdb_database(), **options)

    found, expected = _portable.answers(on_connect), _portable.answers(on_duckdb)
    assert len(found) == len(expected) == 9
    assert _portable.same(found, expected)
    with pytest.raises(dpsql.InterfaceError, match="closed"):  # the connection closed its backend
        assert opened[0].session is None


def test_remote_session_forces_ansi_and_is_stopped(server: str) -> None:
    """Over Connect too, an ANSI-off session's overflow is a DataError and the setting is restored; the
    session remote() opened is stopped by close()."""
    backend = SparkBackend.remote(server)
    session = backend.session
    assert is_spark_session(session) and not backend.in_memory
    assert backend.identity == "spark:current=spark_catalog.default"
    session.conf.set("spark.sql.ansi.enabled", "false")
    with pytest.raises(dpsql.DataError, match="overflow"):
        backend.run("SELECT SUM(`x`) AS `s` FROM VALUES (9223372036854775807L), (1L) AS `v`(`x`)")
    assert session.conf.get("spark.sql.ansi.enabled") == "false"
    backend.close()
    with pytest.raises(Exception):  # noqa: B017 - pyspark's own error for a stopped session
        session.sql("SELECT 1").collect()


def test_remote_needs_an_sc_url() -> None:
    with pytest.raises(dpsql.ProgrammingError, match="sc://"):
        SparkBackend.remote("http://127.0.0.1:15002")
