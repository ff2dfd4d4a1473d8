"""The server process: one listening socket, one thread per client, the ledger shared by all.

At start the server checks, before it accepts anyone, that the dataset has a total in the ledger
and that every configured analyst has a cap in it: a ``budget_epsilon`` (or ``budget_rho``) in the
configuration is written to the ledger as the owner's action when the ledger holds another value,
and an analyst with neither is refused. Each session then opens its own dpsql connection with the
authenticated name as its analyst (``dpsql.connect(..., analyst=name)``), so every charge checks
both the analyst's cap and the dataset's total atomically in the ledger, across sessions and
processes alike.

Connections are counted as they are accepted, before a thread is started for them: over
``max_connections``, or with ``max_unauthenticated`` still authenticating, a new one is told
53300 and closed at once. An unknown name's SCRAM salt is derived from a secret of the server's,
itself derived from the ledger's key (``Ledger.derived_secret``): the owner's process already holds
that key and keeps it across restarts, so the salt is the same at every try and after a restart,
as a known name's is, and nobody without the key can compute it.
"""

from __future__ import annotations

import functools
import logging
import signal
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dpsql
from dpsql.dbapi import Connection
from dpsql.errors import BudgetNotSetError, OperationalError, ProgrammingError
from dpsql.schema import Schema
from dpsql.server.catalog import Catalog
from dpsql.server.config import ServeConfig
from dpsql.server.limits import Connections, Limits
from dpsql.server.session import QueryError, Session, public_error
from dpsql.server.wire import WireHandler, error_response

log = logging.getLogger("dpsql.server")


class DpsqlServer(socketserver.ThreadingTCPServer):
    """``dpsql serve``: the PostgreSQL wire protocol in front of one dataset."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, config: ServeConfig, *, database: str, schema: Schema, ledger: Path | None = None,
                 dataset: str | None = None, tables: Mapping[str, str] | None = None) -> None:
        self.config, self.schema = config, schema
        self._connect: Callable[[str | None], Connection] = lambda analyst: dpsql.connect(
            database, schema=schema, ledger=ledger, dataset=dataset, analyst=analyst, tables=tables)
        self.dataset, self.mock_secret = self._prepare_ledger()
        self.catalog = Catalog(schema, self.dataset)
        self.limits = Limits(config.workers)
        self.connections = Connections(config.max_connections, config.max_unauthenticated)
        self.tls = _tls(config)
        try:
            super().__init__((config.host, config.port), functools.partial(WireHandler, host=self))
        except OSError as err:
            raise OperationalError(f"cannot listen on {config.host}:{config.port}: {err.strerror or err}. Pick "
                                   "another port (--port, or port = ... under [server]).") from None

    def _prepare_ledger(self) -> tuple[str, bytes]:
        """Check the dataset's total and write each analyst's configured cap and the release sharing to the
        ledger; the dataset's name, and the secret unknown names' SCRAM salts are derived from."""
        with self._connect(None) as connection:
            account = connection.account
            if account is None:  # pragma: no cover - connect always gives stored data a ledger account
                raise ProgrammingError("dpsql serve needs a ledger: serve a database file or pass --ledger.")
            for analyst in self.config.analysts.values():
                try:
                    balance = account.ledger.balance(account.dataset, analyst.name, binding=account.binding)
                    cap = balance.limits[-1].total if len(balance.limits) > 1 else None
                    same = analyst.cap is not None and cap == balance.price(analyst.cap)
                except BudgetNotSetError:  # the dataset has analysts' caps, and none for this one
                    cap, same = None, False
                has_cap = cap is not None
                if analyst.cap is not None and not same:
                    account.ledger.set_total(account.dataset, analyst.cap, analyst=analyst.name,
                                             binding=account.binding)
                    log.info("analyst %s: cap set to %s in the ledger", analyst.name, analyst.cap.describe())
                elif analyst.cap is None and not has_cap:
                    raise ProgrammingError(
                        f"analyst '{analyst.name}' has no cap: add budget_epsilon = ... under [analysts."
                        f"{analyst.name}] in the configuration, or run dpsql budget set --analyst {analyst.name}. "
                        "An analyst's cap keeps one analyst from spending the whole dataset's budget.")
            share = self.config.share_releases
            if share is not None and share != account.ledger.shares_releases(account.dataset):
                account.ledger.set_sharing(account.dataset, share)
                log.info("kept releases: %s (share_releases in the configuration, written to the ledger)",
                         "shared by every analyst" if share else "each analyst reuses only her own")
            return account.dataset, account.ledger.derived_secret("serve mock SCRAM nonce")

    def process_request(self, request: Any, client_address: Any) -> None:
        """Start a thread for the connection if it is within the caps; else tell it 53300 and close it."""
        refusal = self.connections.enter()
        if refusal is not None:
            log.warning("connection from %s refused: %s", client_address[0], refusal)
            _refuse(request, refusal)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.leave(authenticated=False)
            raise

    def open_session(self, user: str) -> Session:
        """The authenticated analyst's session; QueryError if she has too many open or it cannot open."""
        analyst = self.config.analysts[user]
        if not self.limits.open_session(analyst):
            raise QueryError("53300", f"analyst {user} already has {analyst.max_sessions} sessions open, the most "
                             "the owner allows: close one first.")
        try:
            return Session(analyst, self._connect(user), self.catalog, self.limits, self.dataset)
        except Exception as err:
            self.limits.close_session(analyst)
            raise public_error(err, user) from None

    def end_session(self, session: Session) -> None:
        session.close()
        self.limits.close_session(session.analyst)
        log.info("analyst %s disconnected", session.analyst.name)

    def address(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)


def _refuse(sock: socket.socket, message: str) -> None:
    """Send a FATAL 53300 without waiting (PostgreSQL's postmaster does so when it cannot start a backend)."""
    try:
        sock.setblocking(False)
        sock.send(error_response("53300", message, fatal=True).to_wire())
    except OSError:
        pass


def _tls(config: ServeConfig) -> ssl.SSLContext | None:
    """The server's TLS context (TLS 1.2 or newer) from the configured PEM files, or None."""
    if config.tls_certificate is None or config.tls_key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.tls_certificate, config.tls_key)
    except (OSError, ssl.SSLError) as err:
        raise ProgrammingError(f"cannot load the TLS certificate {config.tls_certificate} and key "
                               f"{config.tls_key}: {err}.") from None
    return context


def serve_forever(server: DpsqlServer, announce: Callable[[str], Any] = print) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting, let running batches end, and close."""
    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    host, port = server.address()
    announce(f"dpsql serve: listening on {host}:{port} for dataset '{server.dataset}' "
             f"({len(server.config.analysts)} analysts, TLS {'on' if server.tls else 'off'}); stop with SIGTERM")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
