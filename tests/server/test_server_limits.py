"""``dpsql serve`` before and around authentication, against the real server (issue 29, section 3):
message sizes, start-up and idle timeouts, connection caps, catalog questions under the rate
limit, SCRAM's answer for unknown names, what ``SHOW dpsql.budget`` shows, and dpsql's own errors
for inputs that used to fail inside the server.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from _raw_client import RawClient, error_states, frame, salt_of
from _server_process import (
    PASSWORDS,
    Served,
    make_certificate,
    make_database,
    serving,
    start,
    wait_until,
    write_config,
)
from pygwire import messages as m

from dpsql.sql.parse import MAX_SQL_LENGTH

#: PostgreSQL's MAX_STARTUP_PACKET_LENGTH: the most any message before authentication may hold.
POSTGRESQL_STARTUP_LIMIT = 10_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serving(tmp_path_factory.mktemp("limits"))


def connect(served: Served, user: str = "bob") -> psycopg.Connection:
    return psycopg.connect(served.dsn(user), autocommit=True)


# ------------------------------------------------------------------------------------------ message sizes
def test_a_start_up_message_over_postgresqls_limit_is_refused_before_its_body_is_read(served: Served) -> None:
    client = RawClient(served.port)
    try:
        client.send_bytes(struct.pack("!II", POSTGRESQL_STARTUP_LIMIT + 1, 196608) + b"user\x00")
        assert error_states(client.read_to_close()) == ["08P01"]
    finally:
        client.close()


def test_a_scram_message_over_postgresqls_limit_is_refused(served: Served) -> None:
    client = RawClient(served.port)
    try:
        client.send(m.StartupMessage(params={"user": "alice", "database": "people.duckdb"}))
        client.read_until(m.AuthenticationSASL)
        client.send_bytes(frame(b"p", POSTGRESQL_STARTUP_LIMIT + 1) + b"SCRAM-SHA-256\x00")
        assert error_states(client.read_to_close()) == ["08P01"]
    finally:
        client.close()


def test_after_authentication_a_batch_of_max_sql_length_is_read_and_a_larger_message_refused(served: Served) -> None:
    client = RawClient(served.port)
    try:
        client.login("bob", PASSWORDS["bob"])
        # MAX_SQL_LENGTH + 1 characters of four bytes each: read whole, then refused by dpsql's own limit
        text = ("SET dpsql.epsilon = 0.01; SELECT COUNT(*) FROM census WHERE sex = '"
                + "\U0001F600" * MAX_SQL_LENGTH + "'")
        client.send(m.Query(query_string=text))
        answer = client.read_until(m.ReadyForQuery)
        assert error_states(answer) == ["42000"]
        assert "MAX_SQL_LENGTH" in next(a for a in answer if isinstance(a, m.ErrorResponse)).fields["M"]
        client.send_bytes(frame(b"Q", 8 * MAX_SQL_LENGTH) + b"SELECT ")
        assert error_states(client.read_to_close()) == ["08P01"]
    finally:
        client.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a test certificate")
def test_bytes_sent_after_an_ssl_request_before_the_handshake_are_refused(tmp_path: Path) -> None:
    """They would be read as if they had come under TLS (PostgreSQL's CVE-2021-23214)."""
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path, server=make_certificate(tmp_path)))
    client = RawClient(served.port)
    try:
        client.send_bytes(m.SSLRequest().to_wire() + m.StartupMessage(params={"user": "alice"}).to_wire())
        assert error_states(client.read_to_close()) == ["08P01"]
    finally:
        client.close()
        served.stop()


# ------------------------------------------------------------------------------------------ timeouts
def test_a_client_that_does_not_finish_its_start_up_in_time_is_disconnected(tmp_path: Path) -> None:
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path, server="startup_timeout = 1.0\n"))
    silent, slow = RawClient(served.port), RawClient(served.port)
    try:
        slow.send_bytes(struct.pack("!I", 40))  # half a start-up message, then nothing
        assert error_states(silent.read_to_close()) == ["08006"]
        assert error_states(slow.read_to_close()) == ["08006"]
        with psycopg.connect(served.dsn("alice"), autocommit=True) as conn:  # others still get in
            assert conn.execute("SHOW dpsql.analyst").fetchone() == ("alice",)
    finally:
        silent.close()
        slow.close()
        served.stop()


def test_an_idle_session_is_closed_after_the_idle_timeout(tmp_path: Path) -> None:
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path, server="idle_timeout = 0.5\n"))
    client = RawClient(served.port)
    try:
        client.login("alice", PASSWORDS["alice"])
        assert error_states(client.read_to_close()) == ["57P05"]
    finally:
        client.close()
        served.stop()


# ------------------------------------------------------------------------------------------ connection caps
def test_unauthenticated_and_total_connections_are_capped(tmp_path: Path) -> None:
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path, server="max_connections = 3\nmax_unauthenticated = 2\n"))
    waiting = [RawClient(served.port), RawClient(served.port)]
    clients: list[RawClient] = []
    try:
        for client in waiting:  # each is accepted and asked to authenticate
            client.send(m.StartupMessage(params={"user": "alice", "database": "people.duckdb"}))
            client.read_until(m.AuthenticationSASL)
        refused = RawClient(served.port)
        clients.append(refused)
        assert error_states(refused.read_to_close()) == ["53300"]  # a third one still authenticating
        waiting.pop().close()
        assert wait_until(lambda: _logs_in(served, clients))  # its slot is free again
        assert _logs_in(served, clients)  # 1 authenticating + 2 sessions = max_connections
        over = RawClient(served.port)
        clients.append(over)
        assert error_states(over.read_to_close()) == ["53300"]
    finally:
        for client in waiting + clients:
            client.close()
        served.stop()


def _logs_in(served: Served, clients: list[RawClient]) -> bool:
    client = RawClient(served.port)
    clients.append(client)
    try:
        client.login("alice", PASSWORDS["alice"])
    except ConnectionError:
        return False
    return True


# ------------------------------------------------------------------------------------------ catalog questions
def test_catalog_questions_take_from_the_rate_limit(tmp_path: Path) -> None:
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path, analysts={"bob": "batches_per_minute = 2"}))
    try:
        with connect(served) as conn:
            conn.execute("SET dpsql.epsilon = 0.01")
            conn.execute("SELECT version()")
            conn.execute("SELECT relname FROM pg_catalog.pg_class")
            with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="rate limit of 2 batches a minute"):
                conn.execute("SELECT typname FROM pg_catalog.pg_type")
            with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="rate limit"):
                conn.execute("SELECT COUNT(*) AS n FROM census")
        assert served.spent("bob") == 0
    finally:
        served.stop()


# ------------------------------------------------------------------------------------------ SCRAM
def _salt(served: Served, user: str) -> tuple[str, str]:
    client = RawClient(served.port)
    try:
        return salt_of(client.server_first(user)[1])
    finally:
        client.close()


def test_an_unknown_name_gets_a_salt_as_stable_as_a_known_one(served: Served) -> None:
    assert _salt(served, "mallory") == _salt(served, "mallory")
    assert _salt(served, "alice") == _salt(served, "alice")
    assert _salt(served, "mallory")[0] != _salt(served, "trudy")[0]
    assert _salt(served, "mallory")[1] == _salt(served, "alice")[1]  # the iteration count of --hash-password


def test_an_unknown_names_salt_survives_a_restart(tmp_path: Path) -> None:
    make_database(tmp_path)
    config = write_config(tmp_path)
    served = start(tmp_path, config)
    try:
        before = _salt(served, "mallory")
    finally:
        served.stop()
    again = start(tmp_path, config)
    try:
        assert _salt(again, "mallory") == before
    finally:
        again.stop()


# ------------------------------------------------------------------------------------------ SHOW dpsql.budget
def test_show_budget_shows_an_analyst_her_own_cap_only_by_default(served: Served) -> None:
    with connect(served) as conn:
        shown = conn.execute("SHOW dpsql.budget").fetchone()
    assert shown is not None and shown[0].startswith("analyst 'bob' on dataset 'people.duckdb': ε total 0.5")
    assert "dataset 'people.duckdb': ε total 10" not in shown[0]


def test_the_owner_may_show_an_analyst_the_datasets_total(tmp_path: Path) -> None:
    make_database(tmp_path)
    served = start(tmp_path, write_config(tmp_path, analysts={"alice": "show_dataset_budget = true"}))
    try:
        with connect(served, "alice") as conn:
            shown = conn.execute("SHOW dpsql.budget").fetchone()
        assert shown is not None and shown[0].startswith("analyst 'alice' on dataset 'people.duckdb': ε total 1")
        assert "; dataset 'people.duckdb': ε total 10" in shown[0]
    finally:
        served.stop()


# ------------------------------------------------------------------------------------------ robustness
def test_explain_in_parentheses_is_a_syntax_error(served: Served) -> None:
    with connect(served) as conn:
        conn.execute("SET dpsql.epsilon = 0.01")
        with pytest.raises(psycopg.errors.SyntaxError, match="EXPLAIN"):
            conn.execute("(EXPLAIN SELECT COUNT(*) FROM census)")


def test_a_cost_too_large_to_plan_is_refused_with_its_sqlstate(served: Served) -> None:
    with connect(served) as conn:
        conn.execute("SET dpsql.epsilon = 1e300")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="MAX_BATCH_COST"):
            conn.execute("EXPLAIN SELECT COUNT(*) FROM census")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="MAX_BATCH_COST"):
            conn.execute("EXPLAIN SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1e300) COUNT(*) FROM census")


def test_a_malformed_describe_is_a_protocol_error_and_the_session_goes_on(served: Served) -> None:
    client = RawClient(served.port)
    try:
        client.login("bob", PASSWORDS["bob"])
        client.send_bytes(frame(b"D", 4))  # a Describe without its kind or name
        client.send(m.Sync())
        assert error_states(client.read_until(m.ReadyForQuery)) == ["08P01"]
        client.send(m.Query(query_string="SHOW dpsql.analyst"))
        rows = [a for a in client.read_until(m.ReadyForQuery) if isinstance(a, m.DataRow)]
        assert [row.columns for row in rows] == [[b"bob"]]
    finally:
        client.close()


def test_a_privacy_option_given_twice_is_refused_and_nothing_is_charged(served: Served) -> None:
    before = served.spent("bob")
    with connect(served) as conn, pytest.raises(psycopg.errors.SyntaxError, match="epsilon is given twice"):
        conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.3, epsilon = 0.001) COUNT(*) AS n "
                     "FROM census")
    assert served.spent("bob") == before
