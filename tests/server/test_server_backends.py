"""``dpsql serve`` in front of another backend: a real PostgreSQL server holding the data.

The backend stage of CI runs this file (PostgreSQL installed, DPSQL_REQUIRE_POSTGRES=1); elsewhere
the fixture skips, saying why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import psycopg
import pytest
from _server_process import ROWS, SCHEMA, start, write_config

from tests._postgres_server import postgres_uri, require_driver  # noqa: F401  (a session-scoped fixture)


def test_serve_answers_from_a_postgresql_database(postgres_uri: str, tmp_path: Path) -> None:  # noqa: F811
    require_driver("adbc_driver_postgresql")
    rng = np.random.default_rng(3)
    with psycopg.connect(postgres_uri, autocommit=True) as owner:
        owner.execute("DROP TABLE IF EXISTS census_served")
        owner.execute("CREATE TABLE census_served (age bigint, sex text, income double precision)")
        with owner.cursor().copy("COPY census_served FROM STDIN") as copy:
            for age, sex, income in zip(rng.integers(0, 100, ROWS), rng.choice(["F", "M"], ROWS),
                                        rng.integers(0, 100_000, ROWS)):
                copy.write_row((int(age), str(sex), float(income)))
    (tmp_path / "schema.toml").write_text(SCHEMA)
    ledger = tmp_path / "census.ledger"
    where = ("--db", postgres_uri, "--tables", "census=census_served", "--ledger", str(ledger), "--dataset", "census")
    subprocess.run([sys.executable, "-m", "dpsql.cli", "budget", "set", *where, "--schema",
                    str(tmp_path / "schema.toml"), "--epsilon", "5"], check=True, capture_output=True, text=True)
    served = start(tmp_path, write_config(tmp_path), database=postgres_uri, options=where[2:])
    try:
        dsn = served.dsn("alice").replace("dbname=people.duckdb", "dbname=census")
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute("SELECT sex, COUNT(*) AS n FROM census GROUP BY sex")
            rows = cur.fetchall()
        assert [c.name for c in cur.description] == ["sex", "n", "n_stddev"]
        assert sum(row[1] for row in rows) == pytest.approx(ROWS, abs=10 * max(row[2] for row in rows))
    finally:
        served.stop()
