"""The data owner's ``serve.toml``: where to listen, TLS, and each analyst's credentials, cap and limits.

::

    [server]
    host = "127.0.0.1"          # default; "0.0.0.0" listens on every interface (then configure TLS)
    port = 5433                  # default
    tls_certificate = "server.crt"   # optional, with tls_key: PEM files; clients then may use sslmode=require
    tls_key = "server.key"
    require_tls = false          # true refuses clients that do not ask for TLS (needs the two files)
    workers = 2                  # batches planned and answered at once (the rest wait their turn)
    startup_timeout = 10         # seconds from connecting to the end of authentication (default 10)
    idle_timeout = 900           # seconds a session may send nothing (or read nothing) before it is closed
    max_connections = 64         # connections at once, authenticated or not (default 64)
    max_unauthenticated = 16     # of those, still in start-up or authentication (default 16)
    share_releases = false       # optional: true lets every analyst reuse every kept release for free, false
                                 # each only her own (the default); written to the ledger at start, left out: as is

    [analysts.alice]
    password = "SCRAM-SHA-256$4096:...$...:..."   # a verifier from `dpsql serve --hash-password`, never the password
    budget_epsilon = 1.0         # alice's cap within the dataset's total (or budget_rho); written to the ledger
    default_epsilon = 0.1        # optional: a batch's cost when the session set none (or default_rho)
    batches_per_minute = 30      # optional (default 60): batches and EXPLAINs a minute, over all her sessions
    max_sessions = 4             # optional (default 8): her sessions open at once
    show_dataset_budget = false  # optional (default false): SHOW dpsql.budget also shows the dataset's total

An analyst's identity is the name she authenticated as; no parameter of a session can change it.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsql.budget.accounting import PrivacyCost
from dpsql.errors import ProgrammingError
from dpsql.server.scram import Verifier

DEFAULT_PORT = 5433
DEFAULT_RATE = 60
DEFAULT_SESSIONS = 8
#: Seconds from connecting to the end of authentication (PostgreSQL's authentication_timeout is 60).
DEFAULT_STARTUP_TIMEOUT = 10.0
#: Seconds a session may wait for the client's next message, or for it to read an answer.
DEFAULT_IDLE_TIMEOUT = 900.0
#: Connections at once (PostgreSQL's max_connections is 100), and of those, not yet authenticated.
DEFAULT_CONNECTIONS = 64
DEFAULT_UNAUTHENTICATED = 16
_LONGEST = 86_400.0  # the longest timeout, in seconds


@dataclass(frozen=True, slots=True)
class Analyst:
    """One analyst as the owner configured them."""

    name: str
    verifier: Verifier
    cap: PrivacyCost | None = None
    default_cost: PrivacyCost | None = None
    batches_per_minute: int = DEFAULT_RATE
    max_sessions: int = DEFAULT_SESSIONS
    show_dataset_budget: bool = False


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Where the server listens, its TLS files, its concurrency and its analysts."""

    analysts: Mapping[str, Analyst]
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    tls_certificate: Path | None = None
    tls_key: Path | None = None
    require_tls: bool = False
    workers: int = 2
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_connections: int = DEFAULT_CONNECTIONS
    max_unauthenticated: int = DEFAULT_UNAUTHENTICATED
    share_releases: bool | None = None  # None: the ledger's setting as it is

    @classmethod
    def load(cls, path: Path) -> ServeConfig:
        """Read ``serve.toml``; ProgrammingError naming the file and key of any mistake."""
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ProgrammingError(f"no server configuration at {path}: write one (docs/serve.md, 'Serving "
                                   "analysts').") from None
        except tomllib.TOMLDecodeError as err:
            raise ProgrammingError(f"{path} is not valid TOML: {err}.") from None
        return cls.of(data, where=str(path), base=path.parent)

    @classmethod
    def of(cls, data: Mapping[str, Any], *, where: str = "serve.toml", base: Path = Path(".")) -> ServeConfig:
        """The configuration in ``data`` (a parsed TOML document); relative TLS paths are read from ``base``."""
        _only(data, {"server", "analysts"}, where)
        server = _table(data.get("server", {}), f"{where} [server]")
        _only(server, {"host", "port", "tls_certificate", "tls_key", "require_tls", "workers", "startup_timeout",
                       "idle_timeout", "max_connections", "max_unauthenticated", "share_releases"}, f"{where} [server]")
        analysts_table = _table(data.get("analysts", {}), f"{where} [analysts]")
        if not analysts_table:
            raise ProgrammingError(f"{where} declares no analyst: add [analysts.NAME] with a password verifier "
                                   "(`dpsql serve --hash-password`) and budget_epsilon.")
        analysts = {name: _analyst(name, spec, f"{where} [analysts.{name}]") for name, spec in analysts_table.items()}
        certificate, key = server.get("tls_certificate"), server.get("tls_key")
        if (certificate is None) != (key is None):
            raise ProgrammingError(f"{where} [server]: tls_certificate and tls_key go together (PEM files).")
        require_tls = server.get("require_tls", False)
        if require_tls is not False and (require_tls is not True or certificate is None):
            raise ProgrammingError(f"{where} [server] require_tls: true or false; true needs tls_certificate and "
                                   "tls_key.")
        share = server.get("share_releases")
        if share is not None and not isinstance(share, bool):
            raise ProgrammingError(f"{where} [server] share_releases: true or false (or leave it out to keep the "
                                   "ledger's setting).")
        connections = _count(server.get("max_connections", DEFAULT_CONNECTIONS),
                             f"{where} [server] max_connections", upper=10_000)
        return cls(analysts=analysts, host=_text(server.get("host", "127.0.0.1"), f"{where} [server] host"),
                   port=_count(server.get("port", DEFAULT_PORT), f"{where} [server] port", upper=65535, lower=0),
                   tls_certificate=None if certificate is None else base / _text(certificate, "tls_certificate"),
                   tls_key=None if key is None else base / _text(key, "tls_key"), require_tls=require_tls,
                   workers=_count(server.get("workers", 2), f"{where} [server] workers", upper=256),
                   startup_timeout=_seconds(server.get("startup_timeout", DEFAULT_STARTUP_TIMEOUT),
                                            f"{where} [server] startup_timeout"),
                   idle_timeout=_seconds(server.get("idle_timeout", DEFAULT_IDLE_TIMEOUT),
                                         f"{where} [server] idle_timeout"),
                   max_connections=connections, share_releases=share,
                   max_unauthenticated=_count(server.get("max_unauthenticated", min(DEFAULT_UNAUTHENTICATED,
                                                                                    connections)),
                                              f"{where} [server] max_unauthenticated", upper=connections))


def _analyst(name: str, spec: Any, where: str) -> Analyst:
    spec = _table(spec, where)
    _only(spec, {"password", "budget_epsilon", "budget_rho", "default_epsilon", "default_rho", "batches_per_minute",
                 "max_sessions", "show_dataset_budget"}, where)
    if not name.strip() or name != name.strip():
        raise ProgrammingError(f"{where}: an analyst's name must be a non-empty word without surrounding blanks.")
    if "password" not in spec:
        raise ProgrammingError(f"{where} has no password: add password = \"SCRAM-SHA-256$...\" from "
                               "`dpsql serve --hash-password`.")
    try:
        verifier = Verifier.parse(_text(spec["password"], f"{where} password"))
    except ValueError as err:
        raise ProgrammingError(f"{where} password: {err}.") from None
    return Analyst(name=name, verifier=verifier, cap=_cost(spec, "budget", where),
                   default_cost=_cost(spec, "default", where),
                   batches_per_minute=_count(spec.get("batches_per_minute", DEFAULT_RATE),
                                             f"{where} batches_per_minute", upper=10**6),
                   max_sessions=_count(spec.get("max_sessions", DEFAULT_SESSIONS), f"{where} max_sessions",
                                       upper=10**4),
                   show_dataset_budget=_flag(spec.get("show_dataset_budget", False), f"{where} show_dataset_budget"))


def _cost(spec: Mapping[str, Any], prefix: str, where: str) -> PrivacyCost | None:
    epsilon, rho = spec.get(f"{prefix}_epsilon"), spec.get(f"{prefix}_rho")
    if epsilon is None and rho is None:
        return None
    if epsilon is not None and rho is not None:
        raise ProgrammingError(f"{where}: give {prefix}_epsilon or {prefix}_rho, not both.")
    value = epsilon if epsilon is not None else rho
    key = f"{prefix}_{'epsilon' if epsilon is not None else 'rho'}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ProgrammingError(f"{where} {key} = {value!r}: a positive finite number.")
    return PrivacyCost(epsilon=float(value)) if epsilon is not None else PrivacyCost(rho=float(value))


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ProgrammingError(f"{where} must be a table.")
    return value


def _only(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ProgrammingError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are "
                               f"{', '.join(sorted(allowed))}.")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ProgrammingError(f"{where} must be a non-empty string.")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ProgrammingError(f"{where} = {value!r}: true or false.")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= _LONGEST:
        raise ProgrammingError(f"{where} = {value!r}: a number of seconds above 0 and at most {_LONGEST:g}.")
    return float(value)


def _count(value: Any, where: str, *, upper: int, lower: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lower <= value <= upper:
        raise ProgrammingError(f"{where} = {value!r}: a whole number from {lower} to {upper}.")
    return value
