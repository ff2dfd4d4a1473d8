"""A bare PostgreSQL client over a socket (pygwire's frontend codec), for what psycopg will not send:
a half-finished start-up, an oversized or malformed message, an idle authenticated session, and
the SCRAM server-first message of any user name.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
from typing import Any

from pygwire import FrontendConnection
from pygwire import messages as m

from dpsql.server.scram import MECHANISM, client_proof

#: How long the tests wait for the server to answer or close (a bound on the test, not an assertion).
WAIT = 30.0


class RawClient:
    """One connection to the server on ``port``; messages are read as pygwire decodes them."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.pg = FrontendConnection(strict=False)

    def close(self) -> None:
        self.sock.close()

    def send(self, *messages: Any) -> None:
        self.sock.sendall(b"".join(self.pg.send(message) for message in messages))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_until(self, *kinds: type) -> list[Any]:
        """Messages up to and including the first of ``kinds`` (ConnectionError if the server closes first)."""
        found: list[Any] = []
        while not found or not isinstance(found[-1], kinds):
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError(f"the server closed the connection after {found!r}")
            found.extend(self.pg.receive(data))
        return found

    def read_to_close(self) -> list[Any]:
        """Every message the server sends until it closes the connection (socket.timeout if it never does)."""
        found: list[Any] = []
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return found
            if not data:
                return found
            found.extend(self.pg.receive(data))

    def server_first(self, user: str) -> tuple[str, str]:
        """Start up as ``user`` and send SCRAM's first message: (client-first-bare, server-first)."""
        self.send(m.StartupMessage(params={"user": user, "database": "people.duckdb"}))
        self.read_until(m.AuthenticationSASL)
        bare = f"n=,r={base64.b64encode(os.urandom(18)).decode()}"
        self.send(m.SASLInitialResponse(mechanism=MECHANISM, data=f"n,,{bare}".encode()))
        reply = self.read_until(m.AuthenticationSASLContinue)[-1]
        return bare, reply.data.decode()

    def login(self, user: str, password: str) -> None:
        """The whole start-up and SCRAM exchange, up to the first ReadyForQuery."""
        bare, first = self.server_first(user)
        nonce = dict(part.split("=", 1) for part in first.split(","))["r"]
        without_proof = f"c=biws,r={nonce}"
        proof = client_proof(password, bare, first, without_proof)
        self.send(m.SASLResponse(data=f"{without_proof},p={proof}".encode()))
        self.read_until(m.ReadyForQuery)


def salt_of(server_first: str) -> tuple[str, str]:
    """The salt and iteration count of a SCRAM server-first message."""
    attributes = dict(part.split("=", 1) for part in server_first.split(","))
    return attributes["s"], attributes["i"]


def frame(kind: bytes, length: int) -> bytes:
    """A message header announcing ``length`` (PostgreSQL's length, which counts itself)."""
    return kind + struct.pack("!I", length)


def error_states(messages: list[Any]) -> list[str]:
    """The SQLSTATE of each ErrorResponse among ``messages``."""
    return [message.fields["C"] for message in messages if isinstance(message, m.ErrorResponse)]
