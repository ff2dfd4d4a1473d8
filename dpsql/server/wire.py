"""The PostgreSQL wire protocol (version 3), over pygwire's codec, for one client connection.

pygwire (a sans-I/O codec: message framing, encoding and decoding) reads and writes the messages;
this module does the I/O and the conversation:

* start-up: TLS when the client asks and the owner configured it (``SSLRequest`` → ``S``, then the
  socket is wrapped), refused when ``require_tls`` and the client did not ask; GSS encryption is
  declined; a cancel request is ignored (a batch, once charged, runs to its end);
* authentication: SCRAM-SHA-256 against the owner's verifier (:mod:`dpsql.server.scram`), the same
  exchange for unknown names (a salt derived from the name and the server's secret), then the
  analyst's session count is checked; start-up and authentication end within ``startup_timeout``
  (else 08006), and every message is read whole only within the limits of
  :mod:`dpsql.server.framing` (else 08P01); a session that sends nothing, or reads nothing, for
  ``idle_timeout`` is closed (57P05). A message pygwire cannot decode is answered with 08P01 and the
  session goes on;
* the simple query protocol (psql, ``psycopg`` without parameters, pandas): a query string of
  one or more statements, each result sent as it is ready;
* the extended query protocol (JDBC, ``psycopg`` with parameters): Parse/Bind/Describe/Execute/
  Sync, one statement each, ``$n`` parameters. Describing a portal runs it (its rows' shape depends
  on the plan), and its Execute then sends the rows already charged for. Describing a statement
  before Bind tells its parameters, and no row shape for a private statement (none is known
  without planning it at a cost).

Every release a client receives was charged before the rows were written; a client that leaves
while rows are sent has them charged all the same, and nothing is ever sent uncharged.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import socket
import socketserver
import ssl
import struct
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from pygwire import BackendConnection, ConnectionPhase, PygwireError, TransactionStatus
from pygwire import messages as m

from dpsql import errors
from dpsql.server import pgtypes
from dpsql.server.config import ServeConfig
from dpsql.server.framing import MAX_MESSAGE, ClientGoneError, FrameError, Frames
from dpsql.server.limits import Connections
from dpsql.server.scram import MECHANISM, AuthenticationFailedError, Exchange, mock_verifier
from dpsql.server.session import SERVER_PARAMETERS, Outcome, QueryError, Session, public_error, statement_offsets
from dpsql.sql.source import tokenize

log = logging.getLogger("dpsql.server")
logging.getLogger("pygwire").setLevel(logging.ERROR)  # its non-strict warnings are about pipelined clients


class MalformedMessageError(Exception):
    """A whole message that pygwire could not decode; ``kind`` is its type byte (b"" in start-up framing)."""

    def __init__(self, kind: bytes, problem: BaseException) -> None:
        name = f"{kind.decode('latin-1')!r}" if kind else "start-up"
        super().__init__(f"a malformed {name} message ({type(problem).__name__}): the client broke the PostgreSQL "
                         "protocol")
        self.kind = kind


@dataclass(slots=True)
class Portal:
    """A bound statement: its text with ``?`` marks, its parameters, result formats and, once run, its
    outcome, its rows as wire values (encoded once, however many Execute messages fetch them) and how
    many of those were sent."""

    text: str
    parameters: list[object]
    formats: list[int]
    outcome: Outcome | None = None
    rows: list[list[bytes | None]] | None = None
    sent: int = 0


@dataclass(slots=True)
class Prepared:
    """A parsed statement: its text with ``?`` marks, the ``$n`` of each mark, and each ``$n``'s type OID."""

    text: str
    order: list[int] = field(default_factory=list)
    types: list[int] = field(default_factory=list)


class Host(Protocol):
    """What a connection uses of the server that accepted it (:class:`dpsql.server.server.DpsqlServer`):
    the configuration, the dataset's name, the secret unknown names' SCRAM salts come from, the TLS
    context, the connection count, and the analysts' sessions."""

    config: ServeConfig
    dataset: str
    mock_secret: bytes
    tls: ssl.SSLContext | None
    connections: Connections

    def open_session(self, user: str) -> Session: ...

    def end_session(self, session: Session) -> None: ...


class WireHandler(socketserver.BaseRequestHandler):
    """One client connection, from start-up to Terminate, for ``host`` (the ``server`` that accepted it)."""

    def __init__(self, request: socket.socket, client_address: Any, server: socketserver.BaseServer, *,
                 host: Host) -> None:
        self.host = host
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        config = self.host.config
        self.sock: socket.socket = self.request
        self.frames = Frames(self.sock, deadline=time.monotonic() + config.startup_timeout, idle=config.idle_timeout)
        self.pg = BackendConnection(strict=False)
        self.pending: deque[Any] = deque()
        self.statements: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.session: Session | None = None
        self.tls = False
        self.authenticated = False

    def handle(self) -> None:
        config = self.host.config
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.session = self._start()
            if self.session is not None:
                self._serve(self.session)
        except (FrameError, MalformedMessageError) as err:
            self._farewell("08P01", f"{err}; the connection is closed.")
        except TimeoutError:
            if self.authenticated:
                self._farewell("57P05", f"terminating connection: nothing was sent or read for idle_timeout = "
                               f"{config.idle_timeout:g} s.")
            else:
                self._farewell("08006", f"start-up and authentication took longer than startup_timeout = "
                               f"{config.startup_timeout:g} s.")
        except (ClientGoneError, ConnectionError, ssl.SSLError, OSError, PygwireError) as err:
            log.info("client %s left: %s", self.client_address[0], type(err).__name__)

    def finish(self) -> None:
        if self.session is not None:
            self.host.end_session(self.session)
        self.host.connections.leave(authenticated=self.authenticated)
        try:
            self.sock.close()
        except OSError:
            pass

    # ---------------------------------------------------------------------------------- I/O
    def _next(self) -> Any:
        """The client's next message (FrameError, MalformedMessageError, TimeoutError, ClientGoneError)."""
        while not self.pending:
            startup = self.pg.phase is ConnectionPhase.STARTUP
            data = self.frames.next(startup=startup)
            try:
                self.pending.extend(self.pg.receive(data))
            except Exception as err:  # pygwire's decoding of one whole frame failed (IndexError too): drop it
                self.pg = BackendConnection(initial_phase=self.pg.phase, strict=False)
                raise MalformedMessageError(b"" if startup else data[:1], err) from None
        return self.pending.popleft()

    def _send(self, *messages: Any) -> None:
        self.frames.arm()
        self.sock.sendall(b"".join(self.pg.send(message) for message in messages))

    def _farewell(self, sqlstate: str, message: str) -> None:
        """A FATAL error sent without waiting (the client may not be reading), before the connection closes."""
        log.info("client %s: %s %s", self.client_address[0], sqlstate, message)
        try:
            self.sock.setblocking(False)
            self.sock.send(self.pg.send(error_response(sqlstate, message, fatal=True)))
        except OSError:
            pass

    def _fail(self, sqlstate: str, message: str, hint: str | None = None, *, fatal: bool = False) -> None:
        self._send(error_response(sqlstate, message, hint, fatal=fatal))

    # ----------------------------------------------------------------------------- start-up
    def _start(self) -> Session | None:
        message = self._next()
        while isinstance(message, (m.SSLRequest, m.GSSEncRequest)):
            if isinstance(message, m.SSLRequest) and self.host.tls is not None and not self.tls:
                if self.frames.buffered:  # bytes sent before the handshake would be read as if under TLS
                    raise FrameError("the client sent data after SSLRequest, before the TLS handshake")
                self._send(m.SSLResponse(accepted=True))
                self.sock = self.frames.sock = self.host.tls.wrap_socket(self.sock, server_side=True)
                self.tls = True
            else:
                self._send(m.SSLResponse(accepted=False) if isinstance(message, m.SSLRequest)
                           else m.GSSResponse(accepted=False))
            message = self._next()
        if isinstance(message, m.CancelRequest):
            return None
        if not isinstance(message, m.StartupMessage):
            return None
        user, database = message.params.get("user", ""), message.params.get("database", "")
        if self.host.config.require_tls and not self.tls:
            self._fail("28000", "this server accepts only TLS connections: connect with sslmode=require.", fatal=True)
            return None
        if not self._authenticate(user):
            return None
        self.authenticated, self.frames.limit, self.frames.deadline = True, MAX_MESSAGE, None
        self.host.connections.authenticated()
        if database and database != self.host.dataset:
            self._fail("3D000", f'database "{database}" does not exist: this server answers for '
                       f'"{self.host.dataset}".', fatal=True)
            return None
        try:
            session = self.host.open_session(user)
        except QueryError as err:
            self._fail(err.sqlstate, err.message, fatal=True)
            return None
        self._send(m.AuthenticationOk(),
                   *(m.ParameterStatus(name=k, value=v) for k, v in
                     {**SERVER_PARAMETERS, "application_name": message.params.get("application_name", ""),
                      "session_authorization": user}.items()),
                   m.BackendKeyData(process_id=secrets.randbits(31), secret_key=secrets.token_bytes(4)),
                   m.ReadyForQuery(status=TransactionStatus.IDLE))
        log.info("analyst %s connected from %s%s", user, self.client_address[0], " over TLS" if self.tls else "")
        return session

    def _authenticate(self, user: str) -> bool:
        analyst = self.host.config.analysts.get(user)
        exchange = (Exchange(analyst.verifier) if analyst is not None
                    else Exchange(mock_verifier(self.host.mock_secret, user), known=False))
        self._send(m.AuthenticationSASL(mechanisms=[MECHANISM]))
        try:
            first = self._next()
            if not isinstance(first, m.SASLInitialResponse) or first.mechanism != MECHANISM:
                raise AuthenticationFailedError("the client did not start SCRAM-SHA-256")
            self._send(m.AuthenticationSASLContinue(data=exchange.first(first.data)))
            final = self._next()
            if not isinstance(final, m.SASLResponse):
                raise AuthenticationFailedError("the client did not finish SCRAM-SHA-256")
            self._send(m.AuthenticationSASLFinal(data=exchange.final(final.data)))
            return True
        except AuthenticationFailedError as err:
            log.warning("authentication failed for %r from %s: %s", user, self.client_address[0], err)
            self._fail("28P01", f'password authentication failed for user "{user}"', fatal=True)
            return False

    # ------------------------------------------------------------------------------ queries
    def _serve(self, session: Session) -> None:
        failed = False  # in the extended protocol, after an error everything up to Sync is skipped
        while True:
            try:
                message = self._next()
            except MalformedMessageError as err:
                self._fail("08P01", str(err))
                if err.kind == b"Q":  # a simple query's answer ends with ReadyForQuery
                    self._send(self._ready(session))
                failed = err.kind != b"Q"
                continue
            if isinstance(message, m.Terminate):
                return
            if isinstance(message, m.Query):
                self._simple(session, message.query_string)
                failed = False
            elif isinstance(message, m.Sync):
                failed = False
                self._send(self._ready(session))
            elif isinstance(message, m.Flush):
                continue
            elif not failed:
                try:
                    self._extended(session, message)
                except QueryError as err:
                    self._fail(err.sqlstate, err.message, err.hint)
                    failed = True
                except (ClientGoneError, OSError):
                    raise
                except Exception as err:  # anything else is an incident, never a stack trace on the wire
                    shown = public_error(err, session.analyst.name)
                    self._fail(shown.sqlstate, shown.message)
                    failed = True

    def _ready(self, session: Session) -> Any:
        return m.ReadyForQuery(status=TransactionStatus.IN_TRANSACTION if session.in_transaction
                               else TransactionStatus.IDLE)

    def _simple(self, session: Session, text: str) -> None:
        if not text.strip():
            self._send(m.EmptyQueryResponse(), self._ready(session))
            return
        try:
            for outcome in _outcomes(session, text, []):  # each result is sent as soon as it is ready
                self._send(*self._result(outcome, []))
        except QueryError as err:
            self._fail(err.sqlstate, err.message, err.hint)
        self._send(self._ready(session))

    def _extended(self, session: Session, message: Any) -> None:
        if isinstance(message, m.Parse):
            text, order = dollar_parameters(message.query)
            if len(statement_offsets(text)) > 1:
                raise QueryError("42601", "cannot insert multiple commands into a prepared statement: send a batch "
                                 "of several statements as one simple query (psql -c, psycopg's ClientCursor or "
                                 "execute() without parameters).")
            types = list(message.param_types)
            types += [0] * (max(order, default=0) - len(types))
            self.statements[message.statement] = Prepared(text, order, types)
            self._send(m.ParseComplete())
        elif isinstance(message, m.Bind):
            prepared = self._statement(message.statement)
            if len(message.param_values) != len(prepared.types):
                raise QueryError("08P01", f"bind message supplies {len(message.param_values)} parameters, but the "
                                 f"prepared statement requires {len(prepared.types)}.")
            values = [decode_parameter(v, f, t) for v, f, t in
                      zip(message.param_values, pgtypes.formats_for(len(message.param_values), message.param_formats),
                          prepared.types)]
            self.portals[message.portal] = Portal(prepared.text, [values[n - 1] for n in prepared.order],
                                                  list(message.result_formats))
            self._send(m.BindComplete())
        elif isinstance(message, m.Describe):
            if message.kind == "S":
                prepared = self._statement(message.name)
                self._send(m.ParameterDescription(type_oids=[t or pgtypes.TEXT for t in prepared.types]), m.NoData())
            else:
                portal = self._portal(message.name)
                outcome = self._run_portal(session, portal)
                self._send(self._description(outcome, portal.formats))
        elif isinstance(message, m.Execute):
            portal = self._portal(message.portal)
            outcome = self._run_portal(session, portal)
            self._send(*self._rows(outcome, portal, message.max_rows))
        elif isinstance(message, m.Close):
            (self.statements if message.kind == "S" else self.portals).pop(message.name, None)
            self._send(m.CloseComplete())
        else:
            raise QueryError("0A000", f"{type(message).__name__} is not supported by this server.")

    def _run_portal(self, session: Session, portal: Portal) -> Outcome:
        if portal.outcome is None:
            outcomes = list(_outcomes(session, portal.text, portal.parameters)) if portal.text.strip() else []
            portal.outcome = outcomes[-1] if outcomes else Outcome("EMPTY")
        return portal.outcome

    def _statement(self, name: str) -> Prepared:
        if name not in self.statements:
            raise QueryError("26000", f'prepared statement "{name}" does not exist.')
        return self.statements[name]

    def _portal(self, name: str) -> Portal:
        if name not in self.portals:
            raise QueryError("34000", f'portal "{name}" does not exist.')
        return self.portals[name]

    # ------------------------------------------------------------------------------ results
    def _description(self, outcome: Outcome, formats: list[int]) -> Any:
        if outcome.table is None:
            return m.NoData()
        chosen = pgtypes.formats_for(outcome.table.num_columns, formats)
        fields = []
        for field_, form in zip(outcome.table.schema, chosen):
            column = pgtypes.column_of(field_.type)
            fields.append(m.FieldDescription(name=field_.name, type_oid=column.oid, type_size=column.size,
                                             type_modifier=-1, format_code=form))
        return m.RowDescription(fields=fields)

    def _result(self, outcome: Outcome, formats: list[int]) -> list[Any]:
        """A simple query's messages for one outcome: its row description and rows, then its tag."""
        if outcome.tag == "EMPTY":
            return [m.EmptyQueryResponse()]
        if outcome.table is None:
            return [m.CommandComplete(tag=outcome.tag)]
        return [self._description(outcome, formats),
                *(m.DataRow(columns=row) for row in pgtypes.rows(outcome.table, formats)),
                m.CommandComplete(tag=outcome.tag)]

    def _rows(self, outcome: Outcome, portal: Portal, limit: int) -> list[Any]:
        """An Execute's messages: the next ``limit`` rows (all if 0), then PortalSuspended or the tag."""
        if outcome.table is None:
            return self._result(outcome, portal.formats)
        if portal.rows is None:
            portal.rows = pgtypes.rows(outcome.table, portal.formats)
        rows = portal.rows[portal.sent:]
        if 0 < limit < len(rows):
            portal.sent += limit
            return [*(m.DataRow(columns=row) for row in rows[:limit]), m.PortalSuspended()]
        portal.sent += len(rows)
        return [*(m.DataRow(columns=row) for row in rows), m.CommandComplete(tag=outcome.tag)]


def error_response(sqlstate: str, message: str, hint: str | None = None, *, fatal: bool = False) -> m.ErrorResponse:
    """PostgreSQL's ErrorResponse: severity (ERROR, or FATAL before the server closes), SQLSTATE, message, hint."""
    severity = "FATAL" if fatal else "ERROR"
    fields = {"S": severity, "V": severity, "C": sqlstate, "M": message}
    if hint:
        fields["H"] = hint
    return m.ErrorResponse(fields=fields)


def _outcomes(session: Session, text: str, parameters: list[object]) -> Iterator[Outcome]:
    """Each outcome of ``text`` as it is ready; a failure that is not a QueryError becomes one (public_error)."""
    try:
        yield from session.run(text, parameters)
    except QueryError:
        raise
    except Exception as err:  # the session guards the engine; this is the last line for anything else
        raise public_error(err, session.analyst.name) from None


def dollar_parameters(text: str) -> tuple[str, list[int]]:
    """PostgreSQL's ``$n`` parameters as dpsql's ``?`` marks, and the ``n`` of each mark in text order.

    Bind's values (``$1``, ``$2``, ...) are then passed in mark order: ``[values[n - 1] for n in order]``.
    Text that does not tokenize is returned as it is (executing it reports the syntax error).
    """
    try:
        tokens = tokenize(text)
    except errors.SqlSyntaxError:
        return text, []
    pieces, last, order = [], 0, []
    for token, following in itertools.pairwise(tokens):
        if token.text == "$" and following.start == token.end + 1 and following.text.isdigit():
            pieces += [text[last:token.start], "?"]
            last = following.end + 1
            order.append(int(following.text))
    pieces.append(text[last:])
    return "".join(pieces), order


def decode_parameter(value: bytes | None, form: int, oid: int) -> object:
    """A Bind value as a Python value: int, float or str (None for NULL, which only catalog questions accept)."""
    if value is None:
        return None
    try:
        return _decoded(value, form, oid)
    except (ValueError, struct.error):  # UnicodeDecodeError too
        raise QueryError("22P02", f"a parameter of type OID {oid} in {'binary' if form == 1 else 'text'} format is "
                         "not a value of its type.") from None


def _decoded(value: bytes, form: int, oid: int) -> object:
    if form == 1:
        binary = {21: "!h", 23: "!i", 20: "!q", 700: "!f", 701: "!d"}
        if oid in binary:
            return struct.unpack(binary[oid], value)[0]
        if oid == 1700:  # JDBC sends a BigDecimal as a binary NUMERIC
            return binary_numeric(value)
        if oid in (25, 1043, 0, 705):
            return value.decode("utf-8")
        raise QueryError("0A000", f"a binary parameter of type OID {oid} is not supported: send it as text.")
    text = value.decode("utf-8")
    if oid in (20, 21, 23, 26):
        return int(text)
    if oid in (700, 701, 1700):
        return int(text) if oid == 1700 and text.lstrip("-").isdigit() else float(text)
    if oid in (0, 705):  # untyped: PostgreSQL infers from context; a number written as text is a number
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
    return text


def binary_numeric(value: bytes) -> int | float:
    """PostgreSQL's binary NUMERIC (``numeric_send``) as a number: an int without decimals (dscale 0), else a float.

    The layout: ndigits, weight (int16), sign (0 or 0x4000 for negative), dscale (uint16), then ndigits
    base-10,000 digits (int16), the first one worth 10,000^weight.
    """
    try:
        count, weight, sign, scale = struct.unpack_from("!hhHH", value)
        digits = struct.unpack_from(f"!{count}h", value, 8)
    except struct.error:
        raise QueryError("08P01", "a binary NUMERIC parameter is malformed.") from None
    if sign not in (0, 0x4000):
        raise QueryError("22023", "a NUMERIC parameter that is NaN or infinite cannot be bound: dpsql's parameters "
                         "are finite numbers, text or dates.")
    magnitude = sum((Decimal(digit).scaleb(4 * (weight - place)) for place, digit in enumerate(digits)), Decimal(0))
    number = -magnitude if sign else magnitude
    return int(number) if scale == 0 else float(number)
