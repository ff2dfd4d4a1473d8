"""One analyst's session, whatever the wire: settings, EXPLAIN, catalog questions and private batches.

A query string is split at its semicolons. Session commands (``SET``, ``RESET``, ``SHOW``,
``BEGIN``/``COMMIT``/``ROLLBACK``, ``DISCARD``) and catalog questions (``information_schema``,
``pg_catalog``, ``SELECT version()``; answered by :mod:`dpsql.server.catalog` from the declared schema
alone) run one by one; each maximal run of the other statements is one private batch, planned
jointly and charged once (:func:`dpsql.engine.pipeline.answer`, as ``Cursor.execute`` answers it).
``EXPLAIN`` followed by a batch returns its plan and cost without spending
(:func:`dpsql.engine.pipeline.explain`). A batch, an EXPLAIN and a catalog question each take a token
of the analyst's rate limit and one of the server's workers.

The cost of a batch: ``WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = ...)`` in the SQL, else the
session's ``SET dpsql.epsilon`` (or ``dpsql.rho``, or an accuracy target ``dpsql.max_stddev``), else
the analyst's default in the owner's configuration. The analyst is the name she authenticated as:
it is fixed when the session opens and no setting changes it.

What reaches the client of a failure: the message of dpsql's own refusals (they name the SQL, the
schema and the budget, never data), with its SQLSTATE; anything else, whose text might quote the
database, is replaced by an incident number that the owner's log explains.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import sqlglot.errors

from dpsql import errors
from dpsql.budget.accounting import UNIT, PrivacyCost
from dpsql.dbapi import Connection
from dpsql.engine import pipeline
from dpsql.engine.request import Request
from dpsql.server.catalog import Catalog
from dpsql.server.config import Analyst
from dpsql.server.limits import Limits
from dpsql.sql.source import statement_ranges, tokenize

log = logging.getLogger("dpsql.server")

_TRANSACTION_WORDS = {"BEGIN": "BEGIN", "START": "BEGIN", "COMMIT": "COMMIT", "END": "COMMIT",
                      "ROLLBACK": "ROLLBACK", "ABORT": "ROLLBACK"}
_SESSION_WORDS = {"SET", "RESET", "SHOW", "DISCARD", "DEALLOCATE", *_TRANSACTION_WORDS}
_SET = re.compile(r"^\s*SET\s+(?:(?:SESSION|LOCAL)\s+)?([\w.\"]+)\s*(?:=|\s+TO\s+)\s*(.+?)\s*$", re.I | re.S)
_SET_TIME_ZONE = re.compile(r"^\s*SET\s+(?:(?:SESSION|LOCAL)\s+)?TIME\s+ZONE\s+(.+?)\s*$", re.I | re.S)
_RESET = re.compile(r"^\s*RESET\s+([\w.\"]+)\s*$", re.I)
_SHOW = re.compile(r"^\s*SHOW\s+([\w.\"]+(?:\s+\w+)*)\s*$", re.I)
_EXPLAIN = re.compile(r"\s*EXPLAIN(?:\s+VERBOSE)?\b", re.I)  # matched at a statement's start

# What a client is told about the server (psycopg, JDBC and BI tools read these at start).
SERVER_PARAMETERS = {"server_version": "15.0", "server_encoding": "UTF8", "client_encoding": "UTF8",
                     "DateStyle": "ISO, MDY", "IntervalStyle": "postgres", "TimeZone": "UTC",
                     "integer_datetimes": "on", "standard_conforming_strings": "on", "is_superuser": "off"}
_DPSQL_SETTINGS = ("epsilon", "rho", "max_stddev", "max_relative_stddev", "reuse")


class QueryError(Exception):
    """A statement's failure as the client sees it: SQLSTATE, message, optional hint."""

    def __init__(self, sqlstate: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate, self.message, self.hint = sqlstate, message, hint


@dataclass(frozen=True, slots=True)
class Outcome:
    """One statement's result: rows (an Arrow table) or none, and the command tag."""

    tag: str
    table: pa.Table | None = None


@dataclass(slots=True)
class Settings:
    """The session's dpsql settings, and the others clients set (kept and shown, not used)."""

    cost: PrivacyCost | None = None
    max_stddev: float | None = None
    max_relative_stddev: float | None = None
    reuse: bool = True
    other: dict[str, str] = field(default_factory=dict)


class Session:
    """An authenticated analyst's session over one dpsql connection (``connect(..., analyst=name)``)."""

    def __init__(self, analyst: Analyst, connection: Connection, catalog: Catalog, limits: Limits,
                 database: str) -> None:
        self.analyst, self.connection, self.catalog, self.limits = analyst, connection, catalog, limits
        self.database = database
        self.settings = Settings(cost=analyst.default_cost)
        self.in_transaction = False

    def close(self) -> None:
        self.connection.close()

    def run(self, text: str, parameters: Sequence[object] = ()) -> Iterator[Outcome]:
        """Answer a query string statement by statement; a failure (QueryError) ends it.

        ``parameters`` are the values of the ``?`` marks (the extended protocol's, one statement).
        """
        pieces = statement_offsets(text)
        index = 0
        while index < len(pieces):
            start, stop = pieces[index]
            statement = text[start:stop]
            word = _first_word(statement)
            if word == "EXPLAIN":
                explain = _EXPLAIN.match(text, start)
                if explain is None:  # (EXPLAIN ...): PostgreSQL has no EXPLAIN in parentheses either
                    raise QueryError("42601", "EXPLAIN cannot stand in parentheses: write EXPLAIN followed by the "
                                     "batch, e.g. EXPLAIN SELECT COUNT(*) FROM t. Nothing was charged.")
                rest = text[explain.end():]
                if _first_word(rest) == "ANALYZE":
                    raise QueryError("0A000", "EXPLAIN ANALYZE would run and charge the batch: use EXPLAIN to see the "
                                     "plan and cost for free, then run the batch itself.")
                # the batch as the other entry points read it: positions in the plan count from its first word
                yield self._explain(rest.lstrip(), parameters)
                return
            if word in _SESSION_WORDS:
                yield self._command(word, statement)
            elif self.catalog.is_catalog_query(statement):
                yield self._catalog(statement, parameters)
            else:
                end = index
                while end + 1 < len(pieces) and self._is_private(text[slice(*pieces[end + 1])]):
                    end += 1
                yield from self._batch(text[start:pieces[end][1]], parameters)
                index = end
            index += 1

    # ------------------------------------------------------------------------------ statements
    def _batch(self, batch: str, parameters: Sequence[object]) -> Iterator[Outcome]:
        """Answer one private batch (charged once, before any data is read)."""
        request = self._request(batch, parameters)
        if not _states_cost(request):
            raise QueryError("22023", "this batch has no privacy cost: run SET dpsql.epsilon = 0.5 (or dpsql.rho, or "
                             "dpsql.max_stddev for an accuracy target) first, or write SELECT WITH "
                             "DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5) ... Nothing was charged.")
        self._admit()
        with self.limits.worker():
            tables: list[pa.Table] = _guarded(lambda: pipeline.answer(request, self.connection), self.analyst.name)
        log.info("analyst %s: batch answered (%d statements)", self.analyst.name, len(tables))
        for table in tables:
            yield Outcome(f"SELECT {table.num_rows}", table)

    def _explain(self, batch: str, parameters: Sequence[object]) -> Outcome:
        """EXPLAIN: the plan and the cost, nothing spent."""
        self._admit()
        request = self._request(batch, parameters)
        shown = ""
        if not _states_cost(request):  # EXPLAIN without a cost still shows the plan, at a cost it names
            request = replace(request, default_cost=PrivacyCost(epsilon=1.0))
            shown = ("No cost is set in this session: the plan is shown at ε = 1 (SET dpsql.epsilon = ... to see "
                     "your own).")
        with self.limits.worker():
            text: str = _guarded(lambda: pipeline.explain(request, self.connection), self.analyst.name)
        lines = ([shown] if shown else []) + text.splitlines()
        return Outcome("EXPLAIN", pa.table({"QUERY PLAN": pa.array(lines, pa.string())}))

    def _request(self, batch: str, parameters: Sequence[object]) -> Request:
        """The batch as the pipeline reads it: the session's accuracy target, else its cost as the default (a
        WITH DIFFERENTIAL_PRIVACY OPTIONS clause in the SQL comes first), and its reuse setting."""
        target = self._target()
        return Request(operation=batch, parameters=list(parameters) or None,
                       default_cost=None if target else self.settings.cost, reuse=self.settings.reuse, **target)

    def _catalog(self, statement: str, parameters: Sequence[object]) -> Outcome:
        """A catalog question: free of privacy cost, but a rate-limit token and a worker like a batch."""
        self._admit()
        with self.limits.worker():
            table = _guarded(lambda: self.catalog.answer(statement, user=self.analyst.name, params=parameters),
                             self.analyst.name)
        return Outcome(f"SELECT {table.num_rows}", table)

    def _command(self, word: str, statement: str) -> Outcome:
        if word in _TRANSACTION_WORDS:
            tag = _TRANSACTION_WORDS[word]
            self.in_transaction = tag == "BEGIN"
            return Outcome(tag)
        if word == "SHOW":
            return self._show(statement)
        if word in ("DISCARD", "DEALLOCATE"):
            if word == "DISCARD":
                self.settings = Settings(cost=self.analyst.default_cost)
            return Outcome(word)
        if word == "RESET":
            match = _RESET.match(statement)
            if match is None:
                raise QueryError("42601", f"cannot read {statement.strip()!r}: write RESET name.")
            self._reset(match.group(1).strip('"').lower())
            return Outcome("RESET")
        zone = _SET_TIME_ZONE.match(statement)
        match = _SET.match(statement) if zone is None else None
        if zone is not None:
            self.settings.other["timezone"] = zone.group(1).strip("'")
        elif match is None:
            raise QueryError("42601", f"cannot read {statement.strip()!r}: write SET name = value.")
        else:
            self._set(match.group(1).strip('"').lower(), match.group(2).strip().strip("'"))
        return Outcome("SET")

    def _set(self, name: str, value: str) -> None:
        if not name.startswith("dpsql."):
            self.settings.other[name] = value
            return
        key = name.removeprefix("dpsql.")
        if key not in _DPSQL_SETTINGS:
            raise QueryError("42704", f"unrecognized setting {name}: dpsql's settings are "
                             f"{', '.join('dpsql.' + s for s in _DPSQL_SETTINGS)}.")
        if key == "reuse":
            if value.lower() not in ("on", "off", "true", "false"):
                raise QueryError("22023", f"SET dpsql.reuse: on or off, not {value!r}.")
            self.settings.reuse = value.lower() in ("on", "true")
            return
        number = _positive(name, value)
        if key in ("epsilon", "rho"):
            self.settings.cost = PrivacyCost(epsilon=number) if key == "epsilon" else PrivacyCost(rho=number)
        elif key == "max_stddev":
            self.settings.max_stddev = number
        else:
            self.settings.max_relative_stddev = number

    def _reset(self, name: str) -> None:
        key = name.removeprefix("dpsql.")
        if name == "all":
            self.settings = Settings(cost=self.analyst.default_cost)
        elif key in ("epsilon", "rho"):
            self.settings.cost = self.analyst.default_cost
        elif key in ("max_stddev", "max_relative_stddev"):
            setattr(self.settings, key, None)
        elif key == "reuse":
            self.settings.reuse = True
        else:
            self.settings.other.pop(name, None)

    def _show(self, statement: str) -> Outcome:
        match = _SHOW.match(statement)
        name = (match.group(1) if match else "").strip('"').lower()
        value = self._setting(name)
        return Outcome("SHOW", pa.table({name.removeprefix("dpsql.") or name: pa.array([value], pa.string())}))

    def _setting(self, name: str) -> str:
        cost = self.settings.cost
        shown: dict[str, str | None] = {
            "dpsql.epsilon": f"{cost.value:g}" if cost is not None and cost.family == "epsilon" else None,
            "dpsql.rho": f"{cost.value:g}" if cost is not None and cost.family == "rho" else None,
            "dpsql.max_stddev": None if self.settings.max_stddev is None else f"{self.settings.max_stddev:g}",
            "dpsql.max_relative_stddev": (None if self.settings.max_relative_stddev is None
                                          else f"{self.settings.max_relative_stddev:g}"),
            "dpsql.reuse": "on" if self.settings.reuse else "off", "dpsql.analyst": self.analyst.name,
        }
        if name == "dpsql.budget":
            return self._budget()
        if name in shown:
            return shown[name] or "unset"
        if name.startswith("dpsql."):
            raise QueryError("42704", f"unrecognized setting {name}: SHOW dpsql.budget, dpsql.analyst or one of "
                             f"{', '.join('dpsql.' + s for s in _DPSQL_SETTINGS)}.")
        defaults = {key.lower(): value for key, value in SERVER_PARAMETERS.items()}
        defaults.update({"transaction isolation level": "read committed", "transaction_isolation": "read committed",
                         "search_path": "public", "timezone": "UTC", "max_identifier_length": "63"})
        return self.settings.other.get(name, defaults.get(name, ""))

    def _budget(self) -> str:
        """The analyst's cap as the ledger reads now: total, spent, left; and the dataset's total too if
        the owner set ``show_dataset_budget`` for her (the dataset's spend is every analyst's)."""
        account = self.connection.account
        if account is None:  # pragma: no cover - the server always charges a ledger account
            raise QueryError("55000", "this session has no ledger account.")
        balance = _guarded(lambda: account.budget().balance, self.analyst.name)
        unit = UNIT[balance.family]
        shown = balance.limits[::-1] if self.analyst.show_dataset_budget else balance.limits[-1:]
        return "; ".join(f"{limit.scope}: {unit} total {float(limit.total):g}, spent {float(limit.spent):.6g}, "
                         f"left {float(limit.left):.6g}" for limit in shown)

    # ------------------------------------------------------------------------------- helpers
    def _is_private(self, statement: str) -> bool:
        """Whether a statement belongs to a private batch (not a session command, EXPLAIN or catalog question)."""
        word = _first_word(statement)
        return word not in _SESSION_WORDS and word != "EXPLAIN" and not self.catalog.is_catalog_query(statement)

    def _admit(self) -> None:
        wait = self.limits.take(self.analyst)
        if wait is not None:
            raise QueryError("54000", f"analyst {self.analyst.name} is over the rate limit of "
                             f"{self.analyst.batches_per_minute} batches a minute; try again in {wait:.0f} s. "
                             "Nothing was charged.")

    def _target(self) -> dict[str, Any]:
        target: dict[str, Any] = {}
        if self.settings.max_stddev is not None:
            target["max_stddev"] = self.settings.max_stddev
        if self.settings.max_relative_stddev is not None:
            target["max_relative_stddev"] = self.settings.max_relative_stddev
        if target and self.settings.cost is not None and self.settings.cost.family == "rho":
            target["family"] = "rho"
        return target


def _guarded(call: Callable[[], Any], analyst: str) -> Any:
    """Run ``call``; turn any failure into a QueryError a client may see (see the module docstring)."""
    try:
        return call()
    except QueryError:
        raise
    except Exception as err:  # every failure reaches the client only as public_error says
        raise public_error(err, analyst) from None


def public_error(err: BaseException, analyst: str) -> QueryError:
    """The failure as the client may see it: dpsql's own refusal with its SQLSTATE, or an incident number."""
    if _own_refusal(err):
        return QueryError(_sqlstate(err), str(err))
    incident = secrets.token_hex(4)
    log.error("incident %s (analyst %s): %s: %s", incident, analyst, type(err).__name__, err, exc_info=err)
    return QueryError("XX000", f"the server could not answer (incident {incident}; the data owner's log has the "
                      "details). Nothing was released to you.")


def _own_refusal(err: BaseException) -> bool:
    """A refusal dpsql raised about the SQL, the schema, the cost or the budget: its text is public.

    Database and ledger failures are not (their text is the database's or names the owner's files),
    nor is anything whose chain of causes passes through code that is not dpsql's or sqlglot's.
    """
    if not isinstance(err, (errors.ProgrammingError, errors.NotSupportedError, errors.BudgetExhaustedError)):
        return False
    if isinstance(err, (errors.BackendError, errors.LedgerError)):
        return False
    cause = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    while cause is not None:
        if not isinstance(cause, (errors.Error, sqlglot.errors.SqlglotError, ValueError, TypeError, KeyError)):
            return False
        if type(cause).__module__.split(".")[0] not in ("dpsql", "sqlglot", "builtins"):
            return False
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return True


def _sqlstate(err: BaseException) -> str:
    """PostgreSQL's SQLSTATE for dpsql's refusals (psql shows it with \\set VERBOSITY verbose)."""
    for kind, state in ((errors.BudgetExhaustedError, "53000"), (errors.SqlSyntaxError, "42601"),
                        (errors.PrivacyParameterError, "22023"), (errors.ParameterError, "22023"),
                        (errors.NotSupportedError, "0A000")):
        if isinstance(err, kind):
            return state
    return "42000"


def statement_offsets(text: str) -> list[tuple[int, int]]:
    """The (start, stop) offsets of each statement of ``text`` between semicolons (all of it if unreadable)."""
    try:
        tokens = tokenize(text)
    except errors.SqlSyntaxError:
        return [(0, len(text))] if text.strip() else []
    return [(tokens[first].start, tokens[last].end + 1) for first, last in statement_ranges(tokens)]


def _first_word(statement: str) -> str:
    match = re.match(r"\s*\(*\s*(\w+)", statement)
    return match.group(1).upper() if match else ""


def _states_cost(request: Request) -> bool:
    """Whether the batch has a cost or a target (``Request.states_cost``: the session's, or BigQuery's
    WITH DIFFERENTIAL_PRIVACY OPTIONS in the SQL)."""
    try:
        return request.states_cost()
    except errors.Error:
        return True  # let the pipeline report the clause's mistake with its position


def _positive(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise QueryError("22023", f"SET {name}: a positive number, not {value!r}.")
    return number
