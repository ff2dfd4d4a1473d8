"""The privacy ledger: a durable, concurrency-safe, tamper-evident record of each dataset's budget,
of what the budget is bound to, and of every charge.

File: one SQLite database (the standard library's ``sqlite3``), by default next to the data:
``people.duckdb`` → ``people.duckdb.dpsql-ledger`` (``default_path``). Not inside the DuckDB file:
dpsql opens data read-only, and a data file is not an accounting record. SQLite gives what the
books need without a server: file locks across processes, ``BEGIN IMMEDIATE`` to serialise
writers, and ``PRAGMA synchronous = FULL`` with a rollback journal, so ``COMMIT`` returns only
once the charge is on disk (fsync) and a crash mid-transaction is rolled back on the next open.

Tables (format version 3; amounts are exact fractions written as text, e.g. ``'7/2'``, see
``dpsql.budget.accounting.exact``). ``actions``, ``charges`` and ``releases`` are append-only and share one
numbering ``id`` = 1, 2, 3, … (the order of the history):
    ledger_meta  format = 'dpsql-ledger', version = '3', key_check = HMAC(key, "dpsql-ledger key")
    actions      every owner action: time, dataset, analyst ('' = the whole dataset), action
                 ('set' | 'change' | 'bind' | 'rebind' | 'share-releases' | 'own-releases'), family
                 ('epsilon' | 'rho'), the new total, the binding it makes (database identity and the
                 schema's canonical privacy parts, '' when it binds nothing), who; a scope's total is
                 that of its latest action (the two release-sharing actions repeat the dataset's total)
    charges      time, dataset, analyst, batch hash, SQL text hash, mechanism, the batch's cost
                 (family and amount) and its price in the dataset's unit (ε, or ρ with ε²/2)
    releases     time, dataset, analyst (the charge's), charge (the id of the charge that paid for
                 it; at most one release per charge, on the same dataset) and payload: the public
                 part of what the charge released (JSON text written by ``dpsql.releases``: strategy,
                 noisy measurements, noise variances, schema version), stored and MAC'd verbatim, so
                 that later batches can be answered from it without a new charge
    head         the number of rows in the history and the last row's MAC, itself MAC'd

Reuse: an analyst's batches are answered for free only from the releases her own charges paid for
(a connection without an analyst: from those made without one), unless the data owner lets every
analyst of the dataset reuse every release (``set_sharing``, ``dpsql budget set --share-releases``:
an owner action, recorded; ``--no-share-releases`` returns to the default).

Binding: the first total of a dataset binds it (``Binding``) to its database file's identity
(``dpsql.backends.base.file_identity``: real path and inode; a CSV or Parquet file's real path and the
SHA-256 of its contents) and to the schema's privacy-relevant parts
(``Schema.canonical``: tables, privacy unit and ``max_rows``, domains, measure bounds, truncation).
Every charge, in its own transaction, compares the connection's binding with the dataset's and
refuses a difference (LedgerError naming what differs, never data). Rebinding is an explicit,
recorded owner action (``set_total(..., rebind=True)``, ``dpsql budget set --rebind``), as is binding
data another dataset is bound to (:mod:`dpsql.budget.same_data`). Once a dataset has per-analyst
totals, every charge must name an analyst with one.

Tamper evidence: every row of the history carries mac = HMAC-SHA256(key, previous mac ‖ the row
as canonical JSON), and the head row holds the count and the last mac under its own MAC, updated
in the same transaction as each append. Every open verifies the whole chain, so an edited,
deleted, inserted, reordered or truncated history (a kept release's payload or charge included)
is detected and fails closed, as is a release that names no earlier charge of its dataset or a
charge with two releases. The key is 32 random bytes in a file (``key_path``: ``--key-file``,
``$DPSQL_LEDGER_KEY_FILE``, or ``<ledger>.key`` beside the ledger, created with mode 0600 by the
first ``set_total``).
What this does NOT give: whoever can read the key can forge a consistent history, and in library
mode the analyst's own process must read it to append charges; and a whole ledger file replaced
by an older, self-consistent copy (with its head) verifies. It detects changes by anyone without
the key (other users, tools, accidents, partial restores); a service that alone holds the key and
the ledger is the real boundary.

Privacy:
    ``charge`` is one transaction: BEGIN IMMEDIATE; verify the chain and the binding; read the
    totals and the sum of the charges; ROLLBACK and raise BudgetExhaustedError if the price does
    not fit, else append the charge and COMMIT. Two processes racing for the last of a budget are
    serialised by the write lock, so at most one of them fits. The engine charges before it reads
    any data, so a crash leaves either no charge and no answer, or a charge and perhaps no answer,
    never an answer without a charge. A missing, unreadable, corrupted, foreign or unverifiable
    file, a missing key, an unbound dataset or a dataset with no total raises a LedgerError (fail
    closed): nothing is answered from an unknown budget state.
    ``keep_release`` stores a release only next to an existing charge of the same dataset that has
    none yet (nothing is released without a charge), in its own verified write transaction; a kept
    release is the public output of a charged batch, so answering later batches from it is
    post-processing and costs nothing more.

Versions: a version-2 file (no ``releases`` table) is read as it is, with no releases, and upgraded
in place (the empty table, version 3) by the first write session (``charge``, ``set_total``,
``keep_release``) after it verifies. Dropping the table and declaring version 2 again does not hide
kept releases: their numbers are missing from the history, which then fails to verify. A version-1
file is upgraded by the owner's ``set_total`` (``_migrate``).
"""

from __future__ import annotations

import functools
import getpass
import math
import os
import re
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpsql.budget import ledger_format as fmt
from dpsql.budget.accounting import UNIT, Family, PrivacyCost
from dpsql.budget.ledger_format import FORMAT, VERSION
from dpsql.budget.records import (
    OWN_RELEASES,
    SHARE_RELEASES,
    Action,
    Balance,
    BatchRecord,
    Binding,
    Charge,
    KeptRelease,
    Limit,
    shares_releases,
)
from dpsql.budget.same_data import check_same_data
from dpsql.errors import (
    BudgetNotSetError,
    LedgerError,
    PrivacyParameterError,
    ProgrammingError,
)

SUFFIX = ".dpsql-ledger"
KEY_SUFFIX = ".key"
#: Environment variable naming the ledger's key file (else ``<ledger>.key`` beside the ledger).
KEY_ENV = "DPSQL_LEDGER_KEY_FILE"
#: Seconds a charge waits for another process's transaction before it fails (closed).
LOCK_TIMEOUT = 60.0
_KEY_BYTES = 32


__all__ = ["KEY_ENV", "KEY_SUFFIX", "LOCK_TIMEOUT", "SUFFIX", "Action", "Balance", "BatchRecord", "Binding",
           "Charge", "KeptRelease", "Ledger", "Limit", "default_path", "key_path"]


def default_path(database: str | os.PathLike[str]) -> Path:
    """The ledger file next to a database file: ``people.duckdb`` → ``people.duckdb.dpsql-ledger``."""
    path = Path(database)
    return path.with_name(path.name + SUFFIX)


def key_path(ledger: str | os.PathLike[str], key_file: str | os.PathLike[str] | None = None) -> Path:
    """The ledger's key file: ``key_file``, else ``$DPSQL_LEDGER_KEY_FILE``, else ``<ledger>.key`` beside it."""
    chosen = key_file if key_file is not None else os.environ.get(KEY_ENV) or None
    path = Path(chosen) if chosen is not None else Path(ledger).with_name(Path(ledger).name + KEY_SUFFIX)
    return Path(os.path.abspath(path))


class Ledger:
    """The ledger file at ``path`` and its key file. Every method opens it, verifies it and closes it again.

    Reading or charging never creates the file: a missing ledger means no budget was set.
    """

    def __init__(self, path: str | os.PathLike[str], *, key_file: str | os.PathLike[str] | None = None) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise ProgrammingError(f"ledger= must be a file path (str or pathlib.Path); got {path!r}.")
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.key_path = key_path(self.path, key_file)

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    # ----------------------------------------------------------------------------- reading
    def balance(self, dataset: str, analyst: str | None = None, *, binding: Binding | None = None) -> Balance:
        """The dataset's (and analyst's) total, spent and left; BudgetNotSetError without a total.

        With ``binding`` (a connection's view) also what ``charge`` checks first: the binding
        matches the dataset's, and the analyst has a total if the dataset has per-analyst totals.
        """
        with self._session(write=False) as books:
            balance = self._balance(books, dataset, analyst)
            if binding is not None:
                self._admit(books, dataset, analyst, binding)
            return balance

    def history(self, dataset: str, analyst: str | None = None) -> list[Charge]:
        """Every charge on the dataset (or by one analyst), oldest first."""
        with self._session(write=False) as books:
            rows = books.rows("SELECT id, time, dataset, analyst, batch_hash, sql_hash, mechanism, cost_family, cost, "
                              "price FROM charges WHERE dataset = ? AND (? IS NULL OR analyst = ?) ORDER BY id",
                              (dataset, analyst, analyst))
            return [Charge(id=row[0], time=row[1], dataset=row[2], analyst=row[3] or None, batch_hash=row[4],
                           sql_hash=row[5], mechanism=row[6], cost=self._cost(row[7], row[8], f"charge {row[0]}"),
                           price=self._amount(row[9], f"charge {row[0]}")) for row in rows]

    def actions(self, dataset: str) -> list[Action]:
        """Every owner action on the dataset, oldest first."""
        with self._session(write=False) as books:
            rows = books.rows("SELECT id, time, dataset, analyst, action, family, total, actor, database, schema "
                              "FROM actions WHERE dataset = ? ORDER BY id", (dataset,))
            return [Action(id=row[0], time=row[1], dataset=row[2], analyst=row[3] or None, action=row[4],
                           total=self._cost(row[5], row[6], f"action {row[0]}"), actor=row[7],
                           binding=Binding(database=row[8], schema=row[9]) if row[9] else None) for row in rows]

    def releases(self, dataset: str) -> list[KeptRelease]:
        """Every release kept for the dataset, oldest first (none in a version-2 file)."""
        with self._session(write=False) as books:
            if "releases" not in fmt.tables(books.db):
                return []
            rows = books.rows("SELECT id, time, dataset, analyst, charge, payload FROM releases WHERE dataset = ? "
                              "ORDER BY id", (dataset,))
            return [KeptRelease(id=row[0], time=row[1], dataset=row[2], analyst=row[3] or None, charge=row[4],
                                payload=row[5]) for row in rows]

    # ----------------------------------------------------------------------------- writing
    def charge(self, dataset: str, cost: PrivacyCost, batch: BatchRecord, *, analyst: str | None = None,
               binding: Binding | None = None) -> Balance:
        """Charge ``cost`` durably, or raise and charge nothing. Returns the balance after the charge.

        ``binding`` is the connection's (``Binding.of(schema, database)``); it must equal the
        dataset's, checked in the same transaction as the charge.

        Raises:
            BudgetExhaustedError: the price does not fit what is left (of the dataset or the analyst).
            BudgetNotSetError, LedgerError: no total, no analyst total where the dataset has
                per-analyst totals, a binding that differs, or a file that cannot be trusted.
            PrivacyParameterError: a ρ batch on an ε budget.
            ProgrammingError: no binding.
        """
        if binding is None:
            raise ProgrammingError("a ledger charge needs the connection's binding: Binding.of(schema, database).")
        with self._session(write=True) as books:
            balance = self._balance(books, dataset, analyst)
            self._admit(books, dataset, analyst, binding)
            amount = balance.check(cost)
            number = fmt.append(books, "charges", time=_now(), dataset=dataset, analyst=analyst or "",
                             batch_hash=batch.batch_hash, sql_hash=batch.sql_hash, mechanism=batch.mechanism,
                             cost_family=cost.family, cost=str(cost.exact), price=str(amount))
            return replace(self._balance(books, dataset, analyst), last_charge=number)

    def keep_release(self, dataset: str, charge: int, payload: str) -> int:
        """Keep the public part of what charge ``charge`` released, verbatim; returns the release's id.

        One verified write transaction; the release's analyst is the charge's. Nothing is kept
        without its own charge.

        Raises:
            LedgerError: no charge ``charge`` on ``dataset`` (none with that id, or another
                dataset's), or it already has a release; or a file that cannot be trusted.
            ProgrammingError: ``payload`` is not a str (of Unicode text), or ``charge`` not an int.
        """
        if not isinstance(payload, str) or not fmt.utf8(payload):
            what = type(payload).__name__ if not isinstance(payload, str) else "a str that is not Unicode (a surrogate)"
            raise ProgrammingError(f"a kept release's payload must be a str of Unicode text (JSON); got {what}. "
                                   "Nothing was kept.")
        if not isinstance(charge, int) or isinstance(charge, bool):
            raise ProgrammingError(f"a kept release names its charge by id (an int); got {charge!r}. Nothing was kept.")
        with self._session(write=True) as books:
            analyst = self._releasable(books, dataset, charge)
            return fmt.append(books, "releases", time=_now(), dataset=dataset, analyst=analyst, charge=charge,
                           payload=payload)

    def _releasable(self, books: fmt.Books, dataset: str, charge: int) -> str:
        """The analyst ('' for none) of charge ``charge`` on ``dataset``; LedgerError unless it exists and has
        no release yet."""
        found = books.rows("SELECT dataset, analyst FROM charges WHERE id = ?", (charge,)) if 0 < charge < 2**63 else []
        if not found or found[0][0] != dataset:
            where = f"charge #{charge} is on dataset '{found[0][0]}'" if found else f"there is no charge #{charge}"
            raise LedgerError(f"ledger '{self.path}' has no charge #{charge} on dataset '{dataset}' ({where}), and "
                              "nothing is released without a charge. Nothing was kept. Keep a release with the id of "
                              "the charge that paid for it (Balance.last_charge, LedgerBudget.charge_id).")
        kept = books.rows("SELECT id FROM releases WHERE charge = ?", (charge,))
        if kept:
            raise LedgerError(f"charge #{charge} on dataset '{dataset}' already has its release (#{kept[0][0]}) in "
                              f"ledger '{self.path}'; one charge pays for one release. Nothing was kept.")
        return str(found[0][1])

    def set_sharing(self, dataset: str, share: bool) -> None:
        """The owner's action: let every analyst of ``dataset`` reuse every kept release (``share``),
        or each only the releases her own charges paid for (the default). Recorded in the history
        as an action that repeats the dataset's total (so the total is unchanged).

        Raises:
            BudgetNotSetError: the dataset has no total yet.
        """
        with self._session(write=True) as books:
            totals = self._totals(books, dataset)
            if "" not in totals:
                raise BudgetNotSetError(f"dataset '{dataset}' has no total in ledger '{self.path}'; set it first: "
                                        "dpsql budget set --db DATABASE --schema SCHEMA --epsilon E. Nothing was set.")
            family, total = totals[""]
            fmt.append(books, "actions", time=_now(), dataset=dataset, analyst="",
                       action=SHARE_RELEASES if share else OWN_RELEASES, family=family, total=total, database="",
                       schema="", actor=_actor())

    def shares_releases(self, dataset: str) -> bool:
        """Whether the owner lets every analyst of ``dataset`` reuse every kept release (``set_sharing``)."""
        return shares_releases(self.actions(dataset))

    def set_total(self, dataset: str, total: PrivacyCost, *, analyst: str | None = None, binding: Binding | None = None,
                  rebind: bool = False) -> Balance:
        """The owner's action: set or change a total (creating the file and its key if needed), and record it.

        The dataset's first total binds it to ``binding`` (required then); later a ``binding``
        must equal the dataset's unless ``rebind=True``, which records the new one. An analyst's
        total takes the dataset's binding (a ``binding`` given must equal it).

        Raises:
            PrivacyParameterError: the total is below what is already spent, or changes the unit
                of a dataset that has charges, or an analyst's unit differs from the dataset's.
            BudgetNotSetError: an analyst's total before the dataset has one.
            ProgrammingError: a ``binding`` that is not a :class:`Binding`, no binding for an unbound
                dataset, a binding that differs (or is another dataset's) without ``rebind``, or ``rebind``
                without a binding or with an analyst.
        """
        if binding is not None and not isinstance(binding, Binding):
            raise ProgrammingError(f"binding= must be a dpsql.budget.ledger.Binding, not {type(binding).__name__}: "
                                   "pass Binding.of(schema, database). Nothing was set.")
        with self._session(write=True, create=True) as books:
            self._check_family(books, dataset, total.family, analyst)
            spent = self._spent(books, dataset, analyst)
            if total.exact < spent:
                raise PrivacyParameterError(
                    f"cannot set the total of {_scope(dataset, analyst)} to {total.describe()}: {UNIT[total.family]}="
                    f"{float(spent):.6g} is already spent. A total can be lowered only down to what is spent.")
            action, bound = self._owner_binding(books, dataset, analyst, binding, rebind)
            fmt.append(books, "actions", time=_now(), dataset=dataset, analyst=analyst or "", action=action,
                    family=total.family, total=str(total.exact), database=bound.database if bound else "",
                    schema=bound.schema if bound else "", actor=_actor())
            return self._balance(books, dataset, analyst)

    def _owner_binding(self, books: fmt.Books, dataset: str, analyst: str | None, binding: Binding | None,
                       rebind: bool) -> tuple[str, Binding | None]:
        """The action's name and the binding it records (None: it binds nothing)."""
        exists = (analyst or "") in self._totals(books, dataset)
        if analyst:
            if rebind:
                raise ProgrammingError("rebind= (--rebind) binds a dataset, not an analyst's total; drop --analyst.")
            if binding is not None:
                self._check_binding(books, dataset, binding)
            return ("change" if exists else "set"), None
        current = self._binding(books, dataset)
        if current is None:
            if binding is None:
                raise ProgrammingError(
                    f"dataset '{dataset}' is not bound yet: its first total binds it to its database file and schema. "
                    "Nothing was set. Run: dpsql budget set --db DATABASE --schema SCHEMA --epsilon E (in Python: "
                    "set_total(..., binding=Binding.of(schema, database))).")
            shared = check_same_data(books, dataset, binding, rebind=rebind, ledger=self.path)
            return ("rebind" if shared else "bind" if exists else "set"), binding
        if binding is None or binding == current[0]:
            if rebind and binding is None:
                raise ProgrammingError("rebind= (--rebind) needs the new binding: pass --schema SCHEMA (and --db).")
            if rebind:
                raise ProgrammingError(f"dataset '{dataset}' is already bound to this schema and these data: there is "
                                       "nothing to rebind, and nothing was set. Leave out --rebind to change the "
                                       "total; rebind after the schema or the data change.")
            return "change", None
        if not rebind:
            raise ProgrammingError(f"{self._mismatch(dataset, binding, current)} Nothing was set. If the data or the "
                                   "schema changed on purpose, add --rebind (rebind=True).")
        return "rebind", binding

    def _check_family(self, books: fmt.Books, dataset: str, family: Family, analyst: str | None) -> None:
        """A dataset keeps one unit once it has charges or analysts; an analyst uses the dataset's unit."""
        totals = self._totals(books, dataset)
        current = totals.get("")
        if analyst and current is None:
            raise BudgetNotSetError(f"dataset '{dataset}' has no total in ledger '{self.path}'; set it before an "
                                    f"analyst's: dpsql budget set --{family} ... without --analyst.")
        if current is None or current[0] == family:
            return
        if analyst:
            raise PrivacyParameterError(f"dataset '{dataset}' counts in {UNIT[current[0]]} ({current[0]}); give "
                                        f"analyst '{analyst}' a total in {current[0]} too.")
        used = books.rows("SELECT COUNT(*) FROM charges WHERE dataset = ?", (dataset,))[0][0] + (len(totals) - 1)
        if used:
            raise PrivacyParameterError(
                f"dataset '{dataset}' already has charges or analyst totals in {UNIT[current[0]]} ({current[0]}); its "
                f"unit cannot change to {family}. Set a total in {current[0]}, or keep the new budget in another "
                "ledger (--ledger).")

    # ----------------------------------------------------------------------------- binding and analysts
    def _admit(self, books: fmt.Books, dataset: str, analyst: str | None, binding: Binding) -> None:
        """A connection may charge the dataset: its binding matches, and it names an analyst with a
        total if the dataset has per-analyst totals (an unnamed or unknown analyst would evade them)."""
        self._check_binding(books, dataset, binding)
        named = {name for name in self._totals(books, dataset) if name}
        if named and analyst not in named:
            who = f"analyst '{analyst}' has none" if analyst else "this connection names no analyst"
            raise BudgetNotSetError(
                f"dataset '{dataset}' has per-analyst totals, so every batch is charged to an analyst with a total of "
                f"their own, and {who}. Nothing was run or charged. Pass analyst='NAME' (--analyst NAME); the data "
                "owner sets a total with: dpsql budget set --db DATABASE --analyst NAME --epsilon E.")

    def _check_binding(self, books: fmt.Books, dataset: str, binding: Binding) -> None:
        current = self._binding(books, dataset)
        if current is None:
            raise LedgerError(
                f"dataset '{dataset}' in ledger '{self.path}' is not bound to a database file and schema (a ledger "
                "migrated from an earlier dpsql). Nothing was run or charged. The data owner binds it with: "
                "dpsql budget set --db DATABASE --schema SCHEMA --epsilon E (its current total).")
        if binding != current[0]:
            raise LedgerError(f"{self._mismatch(dataset, binding, current)} Nothing was run or charged. Use the "
                              "owner's database file and schema, or ask the data owner to rebind them if they "
                              "changed on purpose: dpsql budget set --db DATABASE --schema SCHEMA --epsilon E "
                              "--rebind.")

    def _mismatch(self, dataset: str, binding: Binding, current: tuple[Binding, str]) -> str:
        return (f"dataset '{dataset}' in ledger '{self.path}' is bound (by the data owner with dpsql budget set on "
                f"{current[1]}) to another database or schema: {'; '.join(binding.differences(current[0]))}.")

    def _binding(self, books: fmt.Books, dataset: str) -> tuple[Binding, str] | None:
        """The dataset's binding and when it was made: its latest action that binds, or None."""
        rows = books.rows("SELECT database, schema, time FROM actions WHERE dataset = ? AND analyst = '' AND schema != "
                          "'' "
                          "ORDER BY id DESC LIMIT 1", (dataset,))
        return (Binding(database=rows[0][0], schema=rows[0][1]), rows[0][2]) if rows else None

    # ----------------------------------------------------------------------------- the books
    def _totals(self, books: fmt.Books, dataset: str) -> dict[str, tuple[Any, Any]]:
        """Per analyst ('' = the dataset) the family and total of its latest action."""
        return {row[0]: (row[1], row[2]) for row in books.rows(
            "SELECT analyst, family, total FROM actions WHERE dataset = ? ORDER BY id", (dataset,))}

    def _balance(self, books: fmt.Books, dataset: str, analyst: str | None) -> Balance:
        totals = self._totals(books, dataset)
        if "" not in totals:
            raise BudgetNotSetError(f"no privacy budget is set for dataset '{dataset}' in ledger '{self.path}'. "
                                    "Nothing was run or charged. The data owner sets one with: dpsql budget set --db "
                                    "DATABASE --schema SCHEMA --epsilon E (or --rho R).")
        family = totals[""][0]
        limits = []
        for level in ("", analyst) if analyst and analyst in totals else ("",):
            level_family, total = totals[level]
            if level_family != family or family not in UNIT:
                raise LedgerError(self._corrupt(f"the budget of {_scope(dataset, level)} has family {level_family!r}"))
            limits.append(Limit(scope=_scope(dataset, level), total=self._amount(total, "the total of "
                                                                                        f"{_scope(dataset, level)}"),
                                spent=self._spent(books, dataset, level or None)))
        count = books.rows("SELECT COUNT(*) FROM charges WHERE dataset = ?", (dataset,))[0][0]
        return Balance(dataset=dataset, analyst=analyst, family=family, limits=tuple(limits), charges=count)

    def _spent(self, books: fmt.Books, dataset: str, analyst: str | None) -> Fraction:
        """Σ prices of the dataset's (or the analyst's) charges, exactly."""
        rows = books.rows("SELECT id, price FROM charges WHERE dataset = ? AND (? = '' OR analyst = ?)",
                          (dataset, analyst or "", analyst or ""))
        return sum((self._amount(text, f"charge {number}") for number, text in rows), Fraction(0))

    # ----------------------------------------------------------------------------- the file
    @contextmanager
    def _session(self, *, write: bool, create: bool = False) -> Iterator[fmt.Books]:
        """One verified transaction: IMMEDIATE (write lock) or DEFERRED; COMMIT on success, else ROLLBACK."""
        if not create and not self.path.exists():
            raise BudgetNotSetError(f"no ledger file at '{self.path}', so no privacy budget has been set. Nothing was "
                                    "run or charged. The data owner sets one with: dpsql budget set --db DATABASE "
                                    "--schema SCHEMA --epsilon E (add --ledger PATH for a ledger elsewhere).")
        new = create and not self.path.exists()
        made_key = False
        try:
            db = sqlite3.connect(f"{self.path.as_uri()}?mode={'rwc' if create else 'rw'}", uri=True,
                                 timeout=LOCK_TIMEOUT, isolation_level=None)
        except sqlite3.Error as err:
            raise self._unreadable(err) from err
        committed = False
        try:
            db.execute("PRAGMA synchronous = FULL")
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            if new and not fmt.tables(db):  # a file this call created: SQLite's default ("DELETE") journal
                made_key = self._make_key()
                books = fmt.Books(db, self._read_key())
                fmt.create(books)
            elif (version := self._structure(db, upgrade=create)) == "1":
                made_key = self._make_key()
                if not made_key:
                    raise LedgerError(self._corrupt(
                        f"it is a version-1 file, but its key '{self.key_path}' exists, so it was upgraded before: an "
                        "old file was put in its place. If it really is a never-upgraded ledger, move the key file "
                        "aside"))
                books = fmt.Books(db, self._read_key())
                fmt.migrate(books)
            else:
                books = fmt.Books(db, self._read_key())
                self._verified(books)
                if write and version == fmt.NO_RELEASES:
                    fmt.add_releases(books)
            yield books
            db.execute("COMMIT")
            committed = True
        except sqlite3.Error as err:
            raise self._unreadable(err) from err
        finally:
            if db.in_transaction:
                db.rollback()
            db.close()
            if new and not committed:  # this call created the file and wrote nothing to it
                self.path.unlink(missing_ok=True)
            if made_key and not committed:
                self.key_path.unlink(missing_ok=True)
        if new:
            _sync_directory(self.path.parent)

    def derived_secret(self, purpose: str) -> bytes:
        """A secret for ``purpose`` derived from the key (``ledger_format.derived``); LedgerError if unreadable."""
        return fmt.derived(self._read_key(), purpose)

    def _make_key(self) -> bool:
        """Create the key file (32 random bytes in hex, mode 0600) unless one exists; True if created."""
        try:
            descriptor = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        except OSError as err:
            raise LedgerError(f"cannot create the ledger's key file '{self.key_path}' ({err.strerror or err}). Nothing "
                              "was set.") from None
        try:
            os.write(descriptor, (secrets.token_bytes(_KEY_BYTES).hex() + "\n").encode("ascii"))
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        _sync_directory(self.key_path.parent)
        return True

    def _read_key(self) -> bytes:
        try:
            text = self.key_path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            raise LedgerError(f"the key file of ledger '{self.path}' is missing ('{self.key_path}'), so its history "
                              "cannot be verified. Nothing was run or charged. Restore the key file from a backup, or "
                              "point "
                              f"{KEY_ENV} (dpsql budget --key-file) at it.") from None
        except (OSError, UnicodeDecodeError) as err:
            raise LedgerError(f"cannot read the key file '{self.key_path}' of ledger '{self.path}' ({err}). Nothing "
                              "was run "
                              "or charged.") from None
        if not re.fullmatch(f"[0-9a-f]{{{2 * _KEY_BYTES}}}", text):
            raise LedgerError(f"'{self.key_path}' is not a dpsql ledger key ({_KEY_BYTES} bytes in hex). Nothing was "
                              "run or charged. Restore the key file from a backup.")
        return bytes.fromhex(text)

    def _structure(self, db: sqlite3.Connection, *, upgrade: bool) -> str:
        """The file's format version, failing closed unless it is an intact dpsql ledger (version 1
        only in an owner's session, which upgrades it; version 2 has no ``releases`` table)."""
        problems = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            report = "; ".join(" ".join(problem.split()) for problem in problems)
            raise LedgerError(self._corrupt(f"SQLite's integrity check reports: {report}"))
        present = fmt.tables(db)
        meta = dict(db.execute("SELECT key, value FROM ledger_meta").fetchall()) if "ledger_meta" in present else {}
        if meta.get("format") == FORMAT and meta.get("version") == "1":
            if not upgrade:
                raise LedgerError(
                    f"ledger '{self.path}' was written by an earlier dpsql (format version 1), without binding or "
                    "tamper evidence. Nothing was run or charged. The data owner upgrades it, keeping its history, "
                    "with: dpsql budget set --db DATABASE --schema SCHEMA --epsilon E (the dataset's current total).")
            return "1"
        version = meta.get("version") if meta.get("format") == FORMAT else None
        for name, columns in fmt.COLUMNS.items():
            expected = [] if version == fmt.NO_RELEASES and name == "releases" else columns
            found = [row[1] for row in db.execute(f"PRAGMA table_info({name})")]
            if found != expected:
                raise LedgerError(self._corrupt(f"table '{name}' has columns {found or 'none'}, expected "
                                                f"{expected or 'none in version ' + fmt.NO_RELEASES}"))
        if version not in (fmt.NO_RELEASES, VERSION):
            raise LedgerError(self._corrupt(f"it declares format {meta.get('format')!r} version "
                                            f"{meta.get('version')!r}, expected {FORMAT!r} version {VERSION!r}"))
        return str(version)

    def _verified(self, books: fmt.Books) -> None:
        """Fail closed unless the key is the ledger's, the history verifies and every amount is valid."""
        check = books.rows("SELECT value FROM ledger_meta WHERE key = 'key_check'")
        if not check or not fmt.equal_mac(fmt.key_check(books.key), check[0][0]):
            raise LedgerError(f"the key file '{self.key_path}' is not the key of ledger '{self.path}'. Nothing was run "
                              f"or charged. Point {KEY_ENV} (dpsql budget --key-file) at the ledger's key, or restore "
                              "it from a backup.")
        self._verify(books)
        actions = books.db.execute("SELECT id, dataset, analyst, family, total FROM actions")
        for number, dataset, analyst, family, total in actions:
            self._cost(family, total, f"action {number} ({_scope(dataset, analyst)})")
        for number, family, cost, amount in books.db.execute("SELECT id, cost_family, cost, price FROM charges"):
            self._cost(family, cost, f"charge {number}")
            self._amount(amount, f"charge {number}")
        if "releases" in fmt.tables(books.db):
            self._paid_for(books)

    def _paid_for(self, books: fmt.Books) -> None:
        """Every kept release names an earlier charge of its dataset, and no charge has two."""
        unpaid = books.rows("SELECT r.id, r.charge FROM releases r LEFT JOIN charges c ON c.id = r.charge "
                            "AND c.dataset = r.dataset AND c.id < r.id WHERE c.id IS NULL ORDER BY r.id LIMIT 1")
        if unpaid:
            raise LedgerError(self._corrupt(f"release {unpaid[0][0]} names no earlier charge of its dataset "
                                            f"(charge {unpaid[0][1]!r})"))
        twice = books.rows("SELECT charge FROM releases GROUP BY charge HAVING COUNT(*) > 1 LIMIT 1")
        if twice:
            raise LedgerError(self._corrupt(f"charge {twice[0][0]!r} has more than one release"))

    def _verify(self, books: fmt.Books) -> None:
        """The history is whole and unchanged: rows numbered 1..n, each MAC chained to the one before,
        and the MAC'd head holding n and the last MAC (so a deleted last row is seen too)."""
        present = fmt.tables(books.db)
        history = sorted((row[0], name, row) for name in fmt.HISTORY if name in present
                         for row in books.rows(f"SELECT {', '.join(fmt.COLUMNS[name])} FROM {name}"))
        last = ""
        for position, (number, name, row) in enumerate(history, start=1):
            if number != position:
                raise LedgerError(self._tampered(f"row #{position} is missing or numbered twice"))
            if not fmt.row_verifies(books.key, last, name, row):
                raise LedgerError(self._tampered(f"{name} row #{number} was changed"))
            last = row[-1]
        head = books.rows("SELECT count, last, mac FROM head")
        if (len(head) != 1 or head[0][0] != len(history) or head[0][1] != last
                or not fmt.equal_mac(fmt.head_mac(books.key, len(history), last), head[0][2])):
            raise LedgerError(self._tampered("its head does not match its last row: rows at the end were deleted, or "
                                             "the head was changed"))

    def _amount(self, text: object, where: str) -> Fraction:
        value = _positive_amount(text) if isinstance(text, str) else None
        if value is None:
            raise LedgerError(self._corrupt(f"{where} holds {text!r}, not a positive exact amount"))
        return value

    def _cost(self, family: object, text: object, where: str) -> PrivacyCost:
        if family not in UNIT:
            raise LedgerError(self._corrupt(f"{where} has family {family!r}"))
        return PrivacyCost.of(family, self._amount(text, where))  # type: ignore[arg-type]

    def _tampered(self, detail: str) -> str:
        return self._corrupt(f"its history does not verify against its key: {detail}")

    def _corrupt(self, detail: str) -> str:
        return (f"ledger '{self.path}' is not an intact dpsql ledger ({detail}). Nothing was run or charged. Restore "
                "the file from a backup; do not delete it, which would reset the budget.")

    def _unreadable(self, err: sqlite3.Error) -> LedgerError:
        if "locked" in str(err) or "busy" in str(err):
            return LedgerError(f"ledger '{self.path}' stayed locked by another process for {LOCK_TIMEOUT:g} s; nothing "
                               "was run or charged. Try again.")
        return LedgerError(self._corrupt(f"SQLite: {err}"))


@functools.lru_cache(maxsize=1 << 16)
def _positive_amount(text: str) -> Fraction | None:
    """The exact positive finite amount ``text`` writes, or None (remembered: every session reads every amount)."""
    try:
        value = Fraction(text) if math.isfinite(float(Fraction(text))) else None
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return value if value is not None and value > 0 else None


def _scope(dataset: str, analyst: str | None) -> str:
    return f"analyst '{analyst}' on dataset '{dataset}'" if analyst else f"dataset '{dataset}'"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _sync_directory(folder: Path) -> None:
    """fsync a folder so that a newly created file's name is durable too."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
