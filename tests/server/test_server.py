"""``dpsql serve`` against real clients: psql and psycopg over the PostgreSQL wire protocol.

Each test module's server is a real process on a loopback port, started here and stopped by its
process id; the budget checks read the server's ledger file directly.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psycopg
import pytest
from _server_process import PASSWORDS, Served, make_certificate, make_database, start, wait_until, write_config


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("serve")
    make_database(folder)
    server = start(folder, write_config(folder))
    yield server
    server.stop()


def connect(served: Served, user: str = "alice", **extra: object) -> psycopg.Connection:
    return psycopg.connect(served.dsn(user), autocommit=True, **extra)  # type: ignore[arg-type]


def test_a_batch_over_psycopg_returns_noisy_answers_with_standard_errors(served: Served) -> None:
    before = served.spent("alice")
    with connect(served) as conn:
        cur = conn.cursor()
        cur.execute("SELECT sex, COUNT(*) AS n FROM census GROUP BY sex; "
                    "SELECT SUM(income) AS total FROM census WHERE age >= 30")
        assert [c.name for c in cur.description] == ["sex", "n", "n_stddev"]
        rows = cur.fetchall()
        assert sorted(r[0] for r in rows) == ["F", "M"]
        assert all(r[2] > 0 for r in rows)  # a standard error next to every number
        assert abs(sum(r[1] for r in rows) - 5000) < 10 * max(r[2] for r in rows) * 2
        assert cur.nextset()
        assert [c.name for c in cur.description] == ["total", "total_stddev"]
    # the whole string was one batch, charged once at the analyst's default ε = 0.1
    assert served.spent("alice") == pytest.approx(before + 0.1)


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (PostgreSQL's client) is not installed")
def test_psql_runs_a_batch_and_prints_the_stddev_columns(served: Served) -> None:
    result = subprocess.run(["psql", served.dsn("bob"), "-c", "SET dpsql.epsilon = 0.05",
                             "-c", "SELECT age, COUNT(*) AS people FROM census GROUP BY age"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "people_stddev" in result.stdout and "(10 rows)" in result.stdout


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (PostgreSQL's client) is not installed")
def test_a_charged_batch_is_sent_before_a_later_statement_of_the_string_fails(served: Served) -> None:
    before = served.spent("bob")
    text = ("SET dpsql.epsilon = 0.01; SET dpsql.reuse = off; SELECT COUNT(*) AS n FROM census WHERE age < 50; "
            "SHOW dpsql.nothing")
    result = subprocess.run(["psql", served.dsn("bob"), "-c", text], capture_output=True, text=True, timeout=120)
    assert "n_stddev" in result.stdout and "(1 row)" in result.stdout  # the charged batch reached the client
    assert "unrecognized setting dpsql.nothing" in result.stderr
    assert served.spent("bob") == pytest.approx(before + 0.01)


def test_unauthenticated_clients_are_refused_and_charge_nothing(served: Served) -> None:
    before = (served.spent("alice"), len(served.ledger().history("people.duckdb")))
    for user, password in (("alice", "wrong"), ("mallory", "anything"), ("carol", PASSWORDS["carol"])):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(served.dsn(user, password))
    assert (served.spent("alice"), len(served.ledger().history("people.duckdb"))) == before


def test_two_analysts_have_separate_caps_and_the_identity_comes_from_authentication(served: Served) -> None:
    alice, bob = served.spent("alice"), served.spent("bob")
    with connect(served, "bob") as conn:
        conn.execute("SET dpsql.epsilon = 0.02")
        with pytest.raises(psycopg.errors.UndefinedObject, match=r"unrecognized setting dpsql\.analyst"):
            conn.execute("SET dpsql.analyst = 'alice'")  # no setting changes who is charged
        conn.execute("SET dpsql.reuse = off")
        conn.execute("SELECT COUNT(*) AS n FROM census WHERE sex = 'F'")
        shown = conn.execute("SHOW dpsql.budget").fetchone()
    assert served.spent("bob") == pytest.approx(bob + 0.02)
    assert served.spent("alice") == alice
    assert shown is not None and shown[0].startswith("analyst 'bob' on dataset 'people.duckdb': ε total 0.5")
    charges = served.ledger().history("people.duckdb", "bob")
    assert charges[-1].analyst == "bob"


def test_an_analyst_over_her_cap_is_refused_before_any_data_is_read(served: Served) -> None:
    before = served.spent("bob")
    with connect(served, "bob") as conn:
        conn.execute("SET dpsql.epsilon = 0.6")  # bob's cap is ε = 0.5
        with pytest.raises(psycopg.errors.InsufficientResources, match="Nothing was run or charged"):
            conn.execute("SELECT income, COUNT(*) AS n FROM census GROUP BY income")
        # the session goes on after the refusal
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.6",)
    assert served.spent("bob") == before


def test_explain_spends_nothing_and_a_batch_without_a_cost_is_refused(served: Served) -> None:
    before = served.spent("bob")
    with connect(served, "bob") as conn:
        conn.execute("SET dpsql.reuse = off")  # a plan, even if earlier tests' releases answer the batch
        plan = [row[0] for row in conn.execute("EXPLAIN SELECT age, COUNT(*) FROM census GROUP BY age").fetchall()]
        assert any(line.startswith("Cost: ε=1") for line in plan)
        assert plan[0].startswith("No cost is set in this session")  # bob has no default cost
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"SET dpsql\.epsilon"):
            conn.execute("SELECT COUNT(*) FROM census WHERE age < 50")
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="EXPLAIN ANALYZE"):
            conn.execute("EXPLAIN ANALYZE SELECT COUNT(*) FROM census")
    assert served.spent("bob") == before


def test_bigquery_clause_sets_the_cost_of_the_batch(served: Served) -> None:
    before = served.spent("bob")
    with connect(served, "bob") as conn:
        conn.execute("SET dpsql.reuse = off")
        row = conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.03) COUNT(*) AS n "
                           "FROM census WHERE age >= 20").fetchone()
    assert row is not None and len(row) == 2
    assert served.spent("bob") == pytest.approx(before + 0.03)


def test_parameters_travel_in_the_extended_protocol(served: Served) -> None:
    with connect(served, "bob") as conn:
        conn.execute("SET dpsql.epsilon = 0.01")
        conn.execute("SET dpsql.reuse = off")
        cur = conn.execute("SELECT COUNT(*) AS n FROM census WHERE age >= %s AND sex = %s", (40, "F"))
        assert [c.name for c in cur.description] == ["n", "n_stddev"]
        assert len(cur.fetchall()) == 1
        with pytest.raises(psycopg.errors.SyntaxError, match="multiple commands"):
            conn.execute("SELECT COUNT(*) FROM census WHERE age >= %s; SELECT 1", (40,))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"parameters\[0\] has type NoneType"):
            conn.execute("SELECT COUNT(*) AS n FROM census WHERE age >= %s", (None,))
        # a catalog question with a parameter (psycopg's own type lookup sends one like it)
        info = psycopg.types.TypeInfo.fetch(conn, "text")
        assert info is not None and info.oid == 25


def test_an_accuracy_target_set_in_the_session_is_met_at_its_least_cost(served: Served) -> None:
    before = served.spent("bob")
    with connect(served, "bob") as conn:
        conn.execute("SET dpsql.max_stddev = 40")
        conn.execute("SET dpsql.reuse = off")
        rows = conn.execute("SELECT sex, COUNT(*) AS n FROM census WHERE age >= 50 GROUP BY sex").fetchall()
    assert rows and all(0 < row[2] <= 40 for row in rows)
    assert 0 < served.spent("bob") - before < 0.5  # the least cost meeting the target, not a default


@pytest.mark.filterwarnings("ignore:pandas only supports SQLAlchemy")
def test_pandas_reads_a_private_query_into_a_dataframe(served: Served) -> None:
    with connect(served) as conn:
        frame = pd.read_sql("SELECT sex, AVG(income) AS mean_income FROM census GROUP BY sex", conn)
    assert list(frame.columns) == ["sex", "mean_income", "mean_income_stddev"]
    assert set(frame["sex"]) == {"F", "M"}


def test_session_settings(served: Served) -> None:
    with connect(served, "bob") as conn:
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("unset",)
        conn.execute("SET dpsql.epsilon TO 0.25")
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.25",)
        conn.execute("RESET dpsql.epsilon")
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("unset",)
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SET dpsql.epsilon = -1")
        conn.execute("SET application_name = 'notebook'")  # settings of other tools are accepted
        assert conn.execute("SHOW application_name").fetchone() == ("notebook",)
        assert conn.execute("SHOW dpsql.analyst").fetchone() == ("bob",)


def test_errors_name_the_sql_position_and_never_quote_data(served: Served) -> None:
    with connect(served, "bob") as conn:
        conn.execute("SET dpsql.epsilon = 0.01")
        with pytest.raises(psycopg.errors.FeatureNotSupported, match=r"line 1, col \d+"):
            conn.execute("SELECT COUNT(*) FROM census WHERE age > 43")


def test_a_client_that_leaves_after_its_batch_is_charged_has_it_charged_and_nothing_lost(served: Served) -> None:
    history = len(served.ledger().history("people.duckdb", "bob"))
    conn = connect(served, "bob")
    conn.execute("SET dpsql.epsilon = 0.01")
    conn.execute("SET dpsql.reuse = off")
    conn.pgconn.send_query(b"SELECT age, COUNT(*) AS n FROM census GROUP BY age")
    conn.pgconn.finish()  # gone before the answer
    assert wait_until(lambda: len(served.ledger().history("people.duckdb", "bob")) == history + 1)
    with connect(served, "bob") as again:  # the server goes on
        assert again.execute("SHOW dpsql.analyst").fetchone() == ("bob",)


def test_concurrent_sessions_racing_for_a_budget_never_overspend_and_lose_nothing(tmp_path: Path) -> None:
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path, analysts={"alice": "max_sessions = 16\nbatches_per_minute = 1000"}))
    answered: list[int] = []
    refused: list[str] = []
    lock = threading.Lock()

    def analyst(number: int) -> None:
        with connect(served) as conn:
            conn.execute("SET dpsql.epsilon = 0.05")
            conn.execute("SET dpsql.reuse = off")
            for round_ in range(6):
                try:
                    conn.execute(f"SELECT COUNT(*) AS n FROM census WHERE age >= {10 * ((number + round_) % 9 + 1)}")
                    with lock:
                        answered.append(number)
                except psycopg.errors.InsufficientResources as err:
                    with lock:
                        refused.append(str(err))

    try:
        threads = [threading.Thread(target=analyst, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        charges = served.ledger().history("people.duckdb", "alice")
    finally:
        served.stop()
    # 48 batches of ε = 0.05 asked against alice's cap of ε = 1: exactly 20 fit
    assert len(answered) == 20 and len(refused) == 28
    assert len(charges) == 20 and sum(float(c.cost.value) for c in charges) == pytest.approx(1.0)


def test_rate_limits_and_session_limits(tmp_path: Path) -> None:
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path, analysts={"bob": "batches_per_minute = 2\nmax_sessions = 1"}))
    try:
        with connect(served, "bob") as conn:
            with pytest.raises(psycopg.OperationalError, match="sessions open"):
                connect(served, "bob")
            conn.execute("SET dpsql.epsilon = 0.01")
            conn.execute("EXPLAIN SELECT COUNT(*) FROM census")
            conn.execute("SELECT COUNT(*) AS n FROM census")
            with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="rate limit of 2 batches a minute"):
                conn.execute("SELECT SUM(income) AS s FROM census")
        assert served.spent("bob") == pytest.approx(0.01)
    finally:
        served.stop()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a test certificate")
def test_tls_when_configured_and_required(tmp_path: Path) -> None:
    make_database(tmp_path)
    tls = make_certificate(tmp_path) + "require_tls = true\n"
    config = write_config(tmp_path, server=tls)
    served = start(tmp_path, config)
    try:
        with psycopg.connect(served.dsn("alice", sslmode="require"), autocommit=True) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SHOW dpsql.analyst").fetchone() == ("alice",)
        with pytest.raises(psycopg.OperationalError, match="only TLS"):
            psycopg.connect(served.dsn("alice", sslmode="disable"))
    finally:
        served.stop()


def test_a_failure_reaches_the_client_as_an_incident_number_and_the_owners_log_has_the_details(
        tmp_path: Path) -> None:
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path))
    try:
        with connect(served, "bob") as conn:
            conn.execute("SET dpsql.epsilon = 0.01")
            ledger = served.ledger().path
            ledger.write_bytes(b"not a ledger" * 100)  # the owner's file is damaged while the server runs
            with pytest.raises(psycopg.errors.InternalError_) as raised:
                conn.execute("SELECT COUNT(*) AS n FROM census")
        shown = str(raised.value)
        incident = re.search(r"incident ([0-9a-f]{8})", shown)
        assert incident is not None and str(tmp_path) not in shown and "ledger" not in shown
    finally:
        served.stop()
    log = served.log.read_text()
    assert f"incident {incident.group(1)}" in log and str(ledger) in log
    assert PASSWORDS["bob"] not in log  # passwords never reach the log


def test_a_port_in_use_is_reported(served: Served, tmp_path: Path) -> None:
    make_database(tmp_path)
    config = write_config(tmp_path, server="")
    config.write_text(config.read_text().replace("port = 0", f"port = {served.port}"))
    with pytest.raises(RuntimeError, match="already in use"):
        start(tmp_path, config)
    with socket.create_connection(("127.0.0.1", served.port), timeout=5):
        pass  # the first server still listens


def test_releases_stay_with_the_analyst_who_paid_unless_serve_toml_shares_them(tmp_path: Path) -> None:
    """Over the wire, bob is not answered from alice's release (he pays, or is refused) until the owner's
    share_releases = true is written to the ledger at start; then he is, without alice's release number."""
    make_database(tmp_path)
    sql = "SELECT sex, COUNT(*) AS n FROM census GROUP BY sex"
    served = start(tmp_path, write_config(tmp_path))
    try:
        with psycopg.connect(served.dsn("alice"), autocommit=True) as conn:
            conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5) sex, COUNT(*) AS n FROM census "
                         "GROUP BY sex")
        with psycopg.connect(served.dsn("bob"), autocommit=True) as conn:
            conn.execute("SET dpsql.epsilon = 0.001")
            conn.execute(sql)
        assert served.spent("bob") == pytest.approx(0.001)
    finally:
        served.stop()
    assert not served.ledger().shares_releases("people.duckdb")
    served = start(tmp_path, write_config(tmp_path, server="share_releases = true"))
    try:
        assert served.ledger().shares_releases("people.duckdb")
        with psycopg.connect(served.dsn("bob"), autocommit=True) as conn:
            conn.execute("SET dpsql.epsilon = 0.001")
            rows = conn.execute(sql).fetchall()
        assert len(rows) == 2 and served.spent("bob") == pytest.approx(0.001)  # free: from alice's, shared
        log = served.log.read_text()
        assert "share_releases in the configuration, written to the ledger" in log
    finally:
        served.stop()
