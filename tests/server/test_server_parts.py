"""The parts of ``dpsql serve`` without a socket: SCRAM, the configuration, limits, errors, wire values."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import struct

import duckdb
import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given

from dpsql import errors
from dpsql.server import pgtypes
from dpsql.server.config import ServeConfig
from dpsql.server.limits import Connections, Limits
from dpsql.server.scram import AuthenticationFailedError, Exchange, Verifier, client_proof, mock_verifier
from dpsql.server.session import QueryError, public_error, statement_offsets
from dpsql.server.wire import decode_parameter, dollar_parameters

# RFC 7677, section 3: the SCRAM-SHA-256 exchange for user "user", password "pencil".
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_verifier(password: str = "pencil") -> Verifier:
    return Verifier.of_password(password, salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), iterations=4096)


def test_scram_reproduces_rfc_7677s_exchange() -> None:
    exchange = Exchange(rfc_verifier(), server_nonce=RFC_SERVER_NONCE)
    assert exchange.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert exchange.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL


def test_scram_refuses_a_wrong_password_an_unknown_user_and_a_replayed_nonce() -> None:
    wrong = Exchange(rfc_verifier("not pencil"), server_nonce=RFC_SERVER_NONCE)
    wrong.first(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailedError, match="wrong password"):
        wrong.final(RFC_CLIENT_FINAL)
    unknown = Exchange(mock_verifier(b"secret", "user"), known=False, server_nonce=RFC_SERVER_NONCE)
    unknown.first(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailedError, match="wrong password"):
        unknown.final(RFC_CLIENT_FINAL)
    fresh = Exchange(rfc_verifier())  # a new server nonce: the recorded final message no longer fits
    fresh.first(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailedError, match="nonce"):
        fresh.final(RFC_CLIENT_FINAL)


def test_scram_client_proof_helper_agrees_with_the_rfc() -> None:
    without_proof = RFC_CLIENT_FINAL.decode().rsplit(",p=", 1)[0]
    proof = client_proof("pencil", "n=user,r=rOprNGfwEbeRWgbNEkqO", RFC_SERVER_FIRST.decode(), without_proof)
    assert proof == "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="


def test_an_unknown_names_salt_is_postgresqls_mock_salt() -> None:
    """SHA-256(name ‖ secret), cut to a verifier's 16-byte salt, at the iterations --hash-password uses."""
    mock = mock_verifier(b"nonce", "mallory")
    assert mock.salt == hashlib.sha256(b"mallory" + b"nonce").digest()[:16]
    assert mock.iterations == Verifier.of_password("pw").iterations
    assert mock_verifier(b"nonce", "mallory").salt == mock.salt
    assert mock_verifier(b"other", "mallory").salt != mock.salt != mock_verifier(b"nonce", "trudy").salt


def test_a_verifier_round_trips_and_never_holds_the_password() -> None:
    verifier = Verifier.of_password("correct horse")
    assert Verifier.parse(verifier.text()) == verifier
    assert "correct horse" not in verifier.text()
    weak = Verifier.of_password("correct horse", iterations=64).text()
    for bad in ("md5abc", "SCRAM-SHA-256$x:y$z:w", "SCRAM-SHA-1$4096:c2FsdA==$a2V5:a2V5", weak):
        with pytest.raises(ValueError, match="hash-password"):
            Verifier.parse(bad)


def config(**analyst: object) -> dict[str, object]:
    return {"analysts": {"ana": {"password": Verifier.of_password("pw").text(), **analyst}}}


def test_configuration_reads_caps_defaults_and_limits() -> None:
    loaded = ServeConfig.of(config(budget_epsilon=1, default_rho=0.01, batches_per_minute=5, max_sessions=2))
    ana = loaded.analysts["ana"]
    assert (ana.cap.epsilon, ana.default_cost.rho, ana.batches_per_minute, ana.max_sessions) == (1.0, 0.01, 5, 2)
    assert (loaded.host, loaded.port, loaded.workers, loaded.tls_certificate) == ("127.0.0.1", 5433, 2, None)


@pytest.mark.parametrize(("change", "message"), [
    ({"budget_epsilon": -1}, "positive"),
    ({"budget_epsilon": 1, "budget_rho": 1}, "not both"),
    ({"password": "hunter2"}, "verifier"),
    ({"colour": "red"}, "unknown key"),
    ({"batches_per_minute": 0}, "whole number"),
])
def test_configuration_mistakes_name_the_key(change: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ProgrammingError, match=message) as raised:
        ServeConfig.of(config(**change), where="serve.toml")
    assert "serve.toml [analysts.ana]" in str(raised.value)


def test_configuration_mistakes_at_the_server_level() -> None:
    with pytest.raises(errors.ProgrammingError, match="no analyst"):
        ServeConfig.of({"server": {}})
    with pytest.raises(errors.ProgrammingError, match="go together"):
        ServeConfig.of({**config(), "server": {"tls_certificate": "a.pem"}})
    with pytest.raises(errors.ProgrammingError, match="require_tls"):
        ServeConfig.of({**config(), "server": {"require_tls": True}})


@pytest.mark.parametrize(("server", "message"), [
    ({"startup_timeout": 0}, "startup_timeout = 0: a number of seconds above 0"),
    ({"idle_timeout": "1 h"}, "idle_timeout = '1 h': a number of seconds"),
    ({"max_connections": 0}, "max_connections = 0: a whole number"),
    ({"max_connections": 4, "max_unauthenticated": 5}, "max_unauthenticated = 5: a whole number from 1 to 4"),
])
def test_connection_limits_are_checked(server: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ProgrammingError, match=message):
        ServeConfig.of({**config(), "server": server})
    with pytest.raises(errors.ProgrammingError, match="show_dataset_budget = 'yes': true or false"):
        ServeConfig.of(config(show_dataset_budget="yes"))


def test_connections_are_capped_in_total_and_while_authenticating() -> None:
    connections = Connections(most=3, unauthenticated=2)
    assert connections.enter() is None and connections.enter() is None
    assert "max_unauthenticated = 2" in (connections.enter() or "")
    connections.authenticated()
    assert connections.enter() is None
    assert "max_connections = 3" in (connections.enter() or "")
    connections.leave(authenticated=True)
    assert "max_unauthenticated = 2" in (connections.enter() or "")  # two still authenticating
    connections.leave(authenticated=False)
    assert connections.enter() is None


def test_rate_limit_is_a_token_bucket_per_analyst() -> None:
    now = [0.0]
    limits = Limits(workers=1, clock=lambda: now[0])
    ana = ServeConfig.of(config(batches_per_minute=2)).analysts["ana"]
    assert limits.take(ana) is None and limits.take(ana) is None  # a burst up to the limit
    assert limits.take(ana) == pytest.approx(30.0)  # then one token every 30 s
    now[0] = 29.0
    assert limits.take(ana) == pytest.approx(1.0)
    now[0] = 30.0
    assert limits.take(ana) is None


def test_session_limit_counts_open_sessions() -> None:
    limits = Limits(workers=1)
    ana = ServeConfig.of(config(max_sessions=1)).analysts["ana"]
    assert limits.open_session(ana) and not limits.open_session(ana)
    limits.close_session(ana)
    assert limits.open_session(ana)


def test_dpsqls_own_refusals_pass_and_everything_else_becomes_an_incident() -> None:
    refusal = public_error(errors.UnsupportedQueryError("ORDER BY (line 1, col 40) is not supported"), "ana")
    assert (refusal.sqlstate, refusal.message) == ("0A000", "ORDER BY (line 1, col 40) is not supported")
    assert public_error(errors.BudgetExhaustedError("over"), "ana").sqlstate == "53000"
    try:
        duckdb.connect().execute("SELECT CAST('Bob Smith' AS INTEGER)")
    except duckdb.Error as err:
        database_failure = err
    for failure in (database_failure, errors.BackendError(str(database_failure)),
                    errors.LedgerError("ledger '/srv/owner/secret.ledger' is locked"), RuntimeError("boom")):
        shown = public_error(failure, "ana")
        assert shown.sqlstate == "XX000" and "incident" in shown.message
        assert "Bob" not in shown.message and "secret" not in shown.message
    wrapped = errors.ProgrammingError("a refusal raised while handling a database error")
    wrapped.__cause__ = database_failure
    assert public_error(wrapped, "ana").sqlstate == "XX000"  # its chain passes through the database


def test_query_error_carries_its_state() -> None:
    assert QueryError("42601", "m", "h").hint == "h"


def test_statement_offsets_split_at_semicolons_outside_strings() -> None:
    text = "SET a = 'x;y'; SELECT 1 ;  ; SELECT ';'"
    assert [text[a:b] for a, b in statement_offsets(text)] == ["SET a = 'x;y'", "SELECT 1", "SELECT ';'"]
    assert statement_offsets("   ") == []
    assert statement_offsets("SELECT 'unterminated") == [(0, 20)]


def test_dollar_parameters_become_question_marks_in_text_order() -> None:
    text, order = dollar_parameters("SELECT COUNT(*) FROM t WHERE b = $2 AND c = '$1' AND a > $1")
    assert text == "SELECT COUNT(*) FROM t WHERE b = ? AND c = '$1' AND a > ?"
    assert order == [2, 1]


def test_bind_values_decode_by_type_and_format() -> None:
    assert decode_parameter(b"42", 0, 23) == 42
    assert decode_parameter(b"2.5", 0, 701) == 2.5
    assert decode_parameter(b"7", 0, 0) == 7 and decode_parameter(b"F", 0, 0) == "F"
    assert decode_parameter(struct.pack("!q", -3), 1, 20) == -3
    assert decode_parameter(struct.pack("!d", 0.5), 1, 701) == 0.5
    assert decode_parameter(None, 0, 23) is None
    for value, form, oid in ((b"forty", 0, 23), (b"\xff", 0, 25), (b"\x00", 1, 20)):
        with pytest.raises(QueryError, match="not a value of its type") as raised:
            decode_parameter(value, form, oid)
        assert raised.value.sqlstate == "22P02"


def test_arrow_values_travel_as_postgresql_text_and_binary() -> None:
    table = pa.table({"n": pa.array([3, None], pa.int64()), "x": [0.1, float("nan")], "s": ["F", "M"],
                      "d": [dt.date(2000, 1, 2), dt.date(1999, 12, 31)], "b": [True, False]})
    assert pgtypes.rows(table) == [[b"3", b"0.1", b"F", b"2000-01-02", b"t"], [None, b"NaN", b"M", b"1999-12-31", b"f"]]
    binary = pgtypes.rows(table, [1])
    assert binary[0] == [struct.pack("!q", 3), struct.pack("!d", 0.1), b"F", struct.pack("!i", 1), b"\x01"]
    assert binary[1][3] == struct.pack("!i", -1)
    assert [pgtypes.column_of(f.type).oid for f in table.schema] == [20, 701, 25, 1082, 16]


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_text_reads_back_to_the_same_double(value: float) -> None:
    assert float(pgtypes.rows(pa.table({"x": [value]}))[0][0]) == value  # type: ignore[arg-type]
