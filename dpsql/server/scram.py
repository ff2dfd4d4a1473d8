"""SCRAM-SHA-256 password authentication, the server's side (RFC 5802, RFC 7677).

PostgreSQL's clients (libpq: psql, psycopg; the JDBC driver; pg8000) all speak it. The server keeps
only a *verifier* per analyst, never the password, in PostgreSQL's own format::

    SCRAM-SHA-256$<iterations>:<salt, base64>$<StoredKey, base64>:<ServerKey, base64>

with SaltedPassword = PBKDF2-HMAC-SHA-256(password, salt, iterations), ClientKey =
HMAC(SaltedPassword, "Client Key"), StoredKey = SHA-256(ClientKey) and ServerKey =
HMAC(SaltedPassword, "Server Key"). A client proves it knows ClientKey by sending
ClientProof = ClientKey ⊕ HMAC(StoredKey, AuthMessage); the server recovers ClientKey, checks
SHA-256(ClientKey) = StoredKey, and proves its own knowledge of ServerKey with
ServerSignature = HMAC(ServerKey, AuthMessage). Neither the password nor anything that replays
it crosses the wire. Channel binding (SCRAM-SHA-256-PLUS) is not offered; with TLS configured the
channel is encrypted and the server's certificate authenticates it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096  # PostgreSQL's default, and RFC 7677's least (the JDBC driver refuses fewer)


class AuthenticationFailedError(Exception):
    """The client's proof or message was wrong (the server answers 28P01 and closes)."""


@dataclass(frozen=True, slots=True)
class Verifier:
    """What the server stores for one analyst: salt, iteration count, StoredKey and ServerKey."""

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @classmethod
    def of_password(cls, password: str, *, salt: bytes | None = None, iterations: int = ITERATIONS) -> Verifier:
        """The verifier of ``password`` (a fresh 16-byte salt unless one is given)."""
        salt = os.urandom(16) if salt is None else salt
        salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        return cls(iterations, salt, hashlib.sha256(client_key).digest(), _hmac(salted, b"Server Key"))

    @classmethod
    def parse(cls, text: str) -> Verifier:
        """Read PostgreSQL's verifier format; ValueError naming what is wrong."""
        try:
            mechanism, rest = text.split("$", 1)
            counts, keys = rest.split("$", 1)
            iterations, salt = counts.split(":", 1)
            stored, server = keys.split(":", 1)
            verifier = cls(int(iterations), _unb64(salt), _unb64(stored), _unb64(server))
        except ValueError:
            raise ValueError("a password verifier reads SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey> "
                             "(make one with `dpsql serve --hash-password`)") from None
        if mechanism != MECHANISM or len(verifier.stored_key) != 32 or len(verifier.server_key) != 32:
            raise ValueError(f"not a {MECHANISM} verifier with 32-byte keys (make one with "
                             "`dpsql serve --hash-password`)")
        if verifier.iterations < ITERATIONS:
            raise ValueError(f"{verifier.iterations} iterations, fewer than RFC 7677's least of {ITERATIONS} (which "
                             "JDBC clients refuse): make a new one with `dpsql serve --hash-password`")
        return verifier

    def text(self) -> str:
        return (f"{MECHANISM}${self.iterations}:{_b64(self.salt)}$"
                f"{_b64(self.stored_key)}:{_b64(self.server_key)}")


def mock_verifier(secret: bytes, user: str) -> Verifier:
    """The verifier an unknown name is answered with, as PostgreSQL's ``scram_mock_salt`` makes it: the
    salt is the first 16 bytes of SHA-256(name ‖ secret) and the iterations are ``ITERATIONS`` (what
    ``--hash-password`` uses), so the same name gets the same salt at every try, as a known one does,
    and no two names share one; its keys are random (no proof verifies against them)."""
    salt = hashlib.sha256(user.encode("utf-8") + secret).digest()[:16]
    return Verifier(ITERATIONS, salt, os.urandom(32), os.urandom(32))


class Exchange:
    """One SCRAM exchange: ``first`` answers the client-first message, ``final`` checks the proof.

    For an unknown user, pass ``mock_verifier(secret, name)`` and ``known=False``: the exchange then
    runs as for a known name and always fails at ``final``, so a client cannot tell unknown names
    from wrong passwords.
    """

    def __init__(self, verifier: Verifier, *, known: bool = True, server_nonce: str | None = None) -> None:
        self._verifier = verifier
        self._known = known
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._server_nonce = server_nonce or _b64(os.urandom(18))  # given only by tests (RFC 7677's example)

    def first(self, client_first: bytes) -> bytes:
        """server-first-message ``r=<nonce>,s=<salt>,i=<iterations>`` for client-first ``gs2,n=,r=<cnonce>``."""
        text = _decode(client_first)
        header, _, bare = _split_gs2(text)
        if header[0] not in "ny":  # "p=": channel binding asked, which is not offered
            raise AuthenticationFailedError("SCRAM channel binding is not offered by this server")
        attributes = _attributes(bare)
        client_nonce = attributes.get("r", "")
        if not client_nonce:
            raise AuthenticationFailedError("SCRAM client-first-message without a nonce")
        self._gs2 = header
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(self._verifier.salt)},i={self._verifier.iterations}"
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        """server-final-message ``v=<ServerSignature>`` if the proof verifies, else AuthenticationFailedError."""
        text = _decode(client_final)
        without_proof, _, proof_part = text.rpartition(",p=")
        attributes = _attributes(without_proof)
        if attributes.get("r") != self._nonce or not proof_part:
            raise AuthenticationFailedError("SCRAM client-final-message with a wrong nonce or no proof")
        if attributes.get("c") != _b64(self._gs2.encode()):
            raise AuthenticationFailedError("SCRAM channel binding data does not match the client's header")
        message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise AuthenticationFailedError("SCRAM proof is not base64") from None
        signature = _hmac(self._verifier.stored_key, message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not (self._known and len(proof) == 32
                and hmac.compare_digest(hashlib.sha256(client_key).digest(), self._verifier.stored_key)):
            raise AuthenticationFailedError("wrong password")
        return f"v={_b64(_hmac(self._verifier.server_key, message))}".encode()


def client_proof(password: str, client_first_bare: str, server_first: str, without_proof: str) -> str:
    """The client's proof (for tests of the exchange): ClientKey ⊕ HMAC(StoredKey, AuthMessage)."""
    attributes = _attributes(server_first)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), _unb64(attributes["s"]), int(attributes["i"]))
    client_key = _hmac(salted, b"Client Key")
    message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = _hmac(hashlib.sha256(client_key).digest(), message)
    return _b64(bytes(a ^ b for a, b in zip(client_key, signature)))


def _split_gs2(text: str) -> tuple[str, str, str]:
    """(gs2 header with its two commas, "", client-first-message-bare)."""
    parts = text.split(",", 2)
    if len(parts) != 3 or not parts[0]:
        raise AuthenticationFailedError("malformed SCRAM client-first-message")
    return f"{parts[0]},{parts[1]},", "", parts[2]


def _attributes(text: str) -> dict[str, str]:
    return {part[0]: part[2:] for part in text.split(",") if len(part) >= 2 and part[1] == "="}


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailedError("SCRAM message is not UTF-8") from None


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)
