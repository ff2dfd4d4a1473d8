"""A throw-away PostgreSQL server for the backend tests, on a free loopback port in a temporary directory.

:func:`postgres_uri` (a session-scoped pytest fixture) yields a ``postgresql://`` URI:

- ``DPSQL_TEST_POSTGRES_URI`` set: that server is used as it is (nothing is started or stopped);
- else a server is started with the PostgreSQL binaries (``initdb``, ``pg_ctl``; found on PATH or in
  ``/usr/lib/postgresql/*/bin``), as the ``postgres`` OS user when running as root (``initdb``
  refuses root), listening on 127.0.0.1 only, with its socket in the temporary directory; teardown
  stops it by its process id (``pg_ctl stop -m immediate``, then SIGKILL to that pid if it is still
  alive) and removes the directory.

Missing binaries or a missing Python driver skip the tests that use the fixture, with the reason,
except when ``DPSQL_REQUIRE_POSTGRES=1`` (CI), where they fail.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

URI_ENV = "DPSQL_TEST_POSTGRES_URI"
REQUIRE_ENV = "DPSQL_REQUIRE_POSTGRES"
#: The Python drivers the tests use (``pip install 'dpsql[postgres]' psycopg[binary]``).
DRIVERS = ("adbc_driver_postgresql", "psycopg")
_USER = "postgres"


def unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail when the environment requires PostgreSQL (CI)."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: the PostgreSQL tests must run here)")
    pytest.skip(reason)


def require_driver(module: str) -> None:
    """Skip (or fail under ``DPSQL_REQUIRE_POSTGRES=1``) when the Python module is not installed."""
    if importlib.util.find_spec(module) is None:
        unavailable(f"the Python package {module} is not installed (pip install 'dpsql[postgres]' 'psycopg[binary]')")


def binaries() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH first, then the newest ``/usr/lib/postgresql/N/bin``."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def server() -> Iterator[str]:
    """Start a server, yield its URI, stop it by process id (see the module docstring)."""
    bin_dir = binaries()
    if bin_dir is None:
        unavailable("the PostgreSQL server binaries (initdb, pg_ctl) are not installed (apt-get install postgresql)")
    assert bin_dir is not None
    root = Path(tempfile.mkdtemp(prefix="dpsql-pg-"))
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", _USER, "--"] if as_root else []
    data = root / "data"
    try:
        if as_root:
            os.chmod(root, 0o755)
            shutil.chown(root, user=_USER)
        _run([*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", _USER, "--auth=trust", "--no-sync",
              "-E", "UTF8", "--locale=C"])
        port = free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off -c full_page_writes=off"
        _run([*prefix, str(bin_dir / "pg_ctl"), "start", "-D", str(data), "-w", "-t", "60",
              "-l", str(root / "server.log"), "-o", options])
        pid = int((data / "postmaster.pid").read_text().split()[0])
        try:
            yield f"postgresql://{_USER}@127.0.0.1:{port}/postgres"
        finally:
            _stop(prefix, bin_dir, data, pid)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _stop(prefix: list[str], bin_dir: Path, data: Path, pid: int) -> None:
    """``pg_ctl stop -m immediate``; if the postmaster (``pid``) is still alive after 10 s, SIGKILL it."""
    subprocess.run([*prefix, str(bin_dir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w", "-t", "10"],
                   capture_output=True, timeout=60, check=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def postgres_uri() -> Iterator[str]:
    """The URI of a PostgreSQL server for this test session (``DPSQL_TEST_POSTGRES_URI``, or a throw-away one)."""
    given = os.environ.get(URI_ENV)
    if given:
        yield given
        return
    require_driver(DRIVERS[0])  # no server is started for tests that would skip without the driver
    with server() as uri:
        yield uri
