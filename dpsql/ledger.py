"""The privacy ledger: a durable, concurrency-safe record of each dataset's budget and of every charge.

File: one SQLite database (the standard library's ``sqlite3``), by default next to the data:
``people.duckdb`` → ``people.duckdb.dpsql-ledger`` (``default_path``). Not inside the DuckDB file:
dpsql opens data read-only, and a data file is not an accounting record. SQLite gives what the
books need without a server: file locks across processes, ``BEGIN IMMEDIATE`` to serialise
writers, and ``PRAGMA synchronous = FULL`` with a rollback journal, so ``COMMIT`` returns only
once the charge is on disk (fsync) and a crash mid-transaction is rolled back on the next open.

Tables (amounts are exact fractions written as text, e.g. ``'7/2'``, see ``dpsql.accounting.exact``):
    ledger_meta  format = 'dpsql-ledger', version = '1'
    budgets      (dataset, analyst) → family ('epsilon' | 'rho') and total; analyst '' is the whole dataset
    charges      id, time (UTC), dataset, analyst, batch hash, SQL text hash, mechanism, the batch's
                 cost (family and amount) and its price in the dataset's unit (ε, or ρ with ε²/2)
    actions      every owner action (``set_total``): time, dataset, analyst, family, new total, who

Privacy:
    ``charge`` is one transaction: BEGIN IMMEDIATE; read the totals and the sum of the charges;
    ROLLBACK and raise BudgetExhaustedError if the price does not fit, else INSERT and COMMIT.
    Two processes racing for the last of a budget are serialised by the write lock, so at most
    one of them fits. The engine charges before it reads any data, so a crash leaves either no
    charge and no answer, or a charge and perhaps no answer, never an answer without a charge.
    A missing, unreadable, corrupted or foreign file, or a dataset with no total, raises a
    LedgerError (fail closed): nothing is answered from an unknown budget state.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import math
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

from dpsql.accounting import UNIT, Budget, Family, PrivacyCost, price, refusal
from dpsql.errors import BudgetExhaustedError, BudgetNotSetError, LedgerError, PrivacyParameterError, ProgrammingError

SUFFIX = ".dpsql-ledger"
FORMAT, VERSION = "dpsql-ledger", "1"
#: Seconds a charge waits for another process's transaction before it fails (closed).
LOCK_TIMEOUT = 60.0

_TABLES = {
    "ledger_meta": "key TEXT PRIMARY KEY, value TEXT NOT NULL",
    "budgets": "dataset TEXT NOT NULL, analyst TEXT NOT NULL, family TEXT NOT NULL, total TEXT NOT NULL, "
               "PRIMARY KEY (dataset, analyst)",
    "charges": "id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
               "batch_hash TEXT NOT NULL, sql_hash TEXT NOT NULL, mechanism TEXT NOT NULL, cost_family TEXT NOT NULL, "
               "cost TEXT NOT NULL, price TEXT NOT NULL",
    "actions": "id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
               "action TEXT NOT NULL, family TEXT NOT NULL, total TEXT NOT NULL, actor TEXT NOT NULL",
}
_COLUMNS = {name: re.findall(r"(\w+) (?:TEXT|INTEGER)", spec) for name, spec in _TABLES.items()}


def default_path(database: str | os.PathLike[str]) -> Path:
    """The ledger file next to a database file: ``people.duckdb`` → ``people.duckdb.dpsql-ledger``."""
    path = Path(database)
    return path.with_name(path.name + SUFFIX)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRecord:
    """What the ledger keeps about a batch: hashes of its text and of the whole batch, and its mechanism."""

    sql_hash: str
    batch_hash: str
    mechanism: str

    @classmethod
    def of(cls, text: str, parameters: Sequence[object] | None, cost: PrivacyCost, mechanism: str) -> BatchRecord:
        """SHA-256 of the SQL text, and of (text, parameters, cost, mechanism) for the batch."""
        whole = json.dumps({"sql": text, "parameters": [repr(p) for p in parameters or ()], "cost": cost.describe(),
                            "mechanism": mechanism}, sort_keys=True)
        return cls(sql_hash=_sha256(text), batch_hash=_sha256(whole), mechanism=mechanism)


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """One budget level: the dataset's, or an analyst's within it; amounts in the dataset's unit."""

    scope: str          # "dataset 'people.duckdb'" or "analyst 'ana' on dataset 'people.duckdb'"
    total: Fraction
    spent: Fraction

    @property
    def left(self) -> Fraction:
        return max(self.total - self.spent, Fraction(0))


@dataclass(frozen=True, slots=True, kw_only=True)
class Balance:
    """The books of one dataset (and analyst) as read in one transaction."""

    dataset: str
    analyst: str | None
    family: Family
    limits: tuple[Limit, ...]   # the dataset's, then the analyst's if it has one
    charges: int                # on the dataset, by every analyst

    @property
    def binding(self) -> Limit:
        """The level with the least left (the analyst's on a tie)."""
        return min(reversed(self.limits), key=lambda limit: limit.left)

    @property
    def left(self) -> Fraction:
        return self.binding.left

    def price(self, cost: PrivacyCost) -> Fraction:
        """``cost`` in this budget's unit; PrivacyParameterError for a ρ batch on an ε budget."""
        if self.family == "epsilon" and cost.family == "rho":
            raise PrivacyParameterError(
                f"the budget of dataset '{self.dataset}' is pure ε-DP; a ρ-zCDP batch ({cost.describe()}) has no pure "
                "ε-DP cost. Pass epsilon= for the batch, or ask the owner for a ρ budget (dpsql budget set --rho)."
            )
        return price(cost, self.family)

    def check(self, cost: PrivacyCost) -> Fraction:
        """The price of ``cost``; BudgetExhaustedError naming the binding level if it does not fit."""
        amount = self.price(cost)
        if amount > self.left:
            binding = self.binding
            raise BudgetExhaustedError(refusal(amount, binding.left, PrivacyCost.of(self.family, binding.total),
                                               f"the ledger's {binding.scope}"))
        return amount


@dataclass(frozen=True, slots=True, kw_only=True)
class Charge:
    """One row of the ledger's history."""

    id: int
    time: str
    dataset: str
    analyst: str | None
    batch_hash: str
    sql_hash: str
    mechanism: str
    cost: PrivacyCost
    price: Fraction


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One owner action: a total set or changed."""

    id: int
    time: str
    dataset: str
    analyst: str | None
    action: str
    total: PrivacyCost
    actor: str


class Ledger:
    """The ledger file at ``path``. Every method opens it, checks it and closes it again.

    Reading or charging never creates the file: a missing ledger means no budget was set.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise ProgrammingError(f"ledger= must be a file path (str or pathlib.Path); got {path!r}.")
        self.path = Path(os.path.abspath(os.fspath(path)))

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    # ----------------------------------------------------------------------------- reading
    def balance(self, dataset: str, analyst: str | None = None) -> Balance:
        """The dataset's (and analyst's) total, spent and left; BudgetNotSetError without a total."""
        with self._session(write=False) as db:
            return self._balance(db, dataset, analyst)

    def history(self, dataset: str, analyst: str | None = None) -> list[Charge]:
        """Every charge on the dataset (or by one analyst), oldest first."""
        with self._session(write=False) as db:
            rows = db.execute("SELECT id, time, dataset, analyst, batch_hash, sql_hash, mechanism, cost_family, cost, price "
                              "FROM charges WHERE dataset = ? AND (? IS NULL OR analyst = ?) ORDER BY id",
                              (dataset, analyst, analyst)).fetchall()
            return [Charge(id=row[0], time=row[1], dataset=row[2], analyst=row[3] or None, batch_hash=row[4],
                           sql_hash=row[5], mechanism=row[6], cost=self._cost(row[7], row[8], f"charge {row[0]}"),
                           price=self._amount(row[9], f"charge {row[0]}")) for row in rows]

    def actions(self, dataset: str) -> list[Action]:
        """Every owner action on the dataset, oldest first."""
        with self._session(write=False) as db:
            rows = db.execute("SELECT id, time, dataset, analyst, action, family, total, actor FROM actions "
                              "WHERE dataset = ? ORDER BY id", (dataset,)).fetchall()
            return [Action(id=row[0], time=row[1], dataset=row[2], analyst=row[3] or None, action=row[4],
                           total=self._cost(row[5], row[6], f"action {row[0]}"), actor=row[7]) for row in rows]

    # ----------------------------------------------------------------------------- writing
    def charge(self, dataset: str, cost: PrivacyCost, batch: BatchRecord, *, analyst: str | None = None) -> Balance:
        """Charge ``cost`` durably, or raise and charge nothing. Returns the balance after the charge.

        Raises:
            BudgetExhaustedError: the price does not fit what is left (of the dataset or the analyst).
            BudgetNotSetError, LedgerError: no total, or the file cannot be trusted.
            PrivacyParameterError: a ρ batch on an ε budget.
        """
        with self._session(write=True) as db:
            amount = self._balance(db, dataset, analyst).check(cost)
            db.execute("INSERT INTO charges (time, dataset, analyst, batch_hash, sql_hash, mechanism, cost_family, cost, price) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (_now(), dataset, analyst or "", batch.batch_hash, batch.sql_hash, batch.mechanism, cost.family,
                        str(cost.exact), str(amount)))
            return self._balance(db, dataset, analyst)

    def set_total(self, dataset: str, total: PrivacyCost, *, analyst: str | None = None) -> Balance:
        """The owner's action: set or change a total (creating the file if needed), and record it.

        Raises:
            PrivacyParameterError: the total is below what is already spent, or changes the unit
                of a dataset that has charges, or an analyst's unit differs from the dataset's.
            BudgetNotSetError: an analyst's total before the dataset has one.
        """
        with self._session(write=True, create=True) as db:
            self._check_family(db, dataset, total.family, analyst)
            spent = self._spent(db, dataset, analyst)
            if total.exact < spent:
                raise PrivacyParameterError(
                    f"cannot set the total of {_scope(dataset, analyst)} to {total.describe()}: {UNIT[total.family]}="
                    f"{float(spent):.6g} is already spent. A total can be lowered only down to what is spent.")
            existing = db.execute("SELECT total FROM budgets WHERE dataset = ? AND analyst = ?",
                                  (dataset, analyst or "")).fetchone()
            db.execute("INSERT OR REPLACE INTO budgets (dataset, analyst, family, total) VALUES (?, ?, ?, ?)",
                       (dataset, analyst or "", total.family, str(total.exact)))
            db.execute("INSERT INTO actions (time, dataset, analyst, action, family, total, actor) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (_now(), dataset, analyst or "", "set" if existing is None else "change", total.family,
                        str(total.exact), _actor()))
            return self._balance(db, dataset, analyst)

    def _check_family(self, db: sqlite3.Connection, dataset: str, family: Family, analyst: str | None) -> None:
        """A dataset keeps one unit once it has charges or analysts; an analyst uses the dataset's unit."""
        current = db.execute("SELECT family FROM budgets WHERE dataset = ? AND analyst = ''", (dataset,)).fetchone()
        if analyst and current is None:
            raise BudgetNotSetError(f"dataset '{dataset}' has no total in ledger '{self.path}'; set it before an "
                                    f"analyst's: dpsql budget set --{family} ... without --analyst.")
        if current is None or current[0] == family:
            return
        if analyst:
            raise PrivacyParameterError(f"dataset '{dataset}' counts in {UNIT[current[0]]} ({current[0]}); give analyst "
                                        f"'{analyst}' a total in {current[0]} too.")
        used = db.execute("SELECT (SELECT COUNT(*) FROM charges WHERE dataset = ?) + "
                          "(SELECT COUNT(*) FROM budgets WHERE dataset = ? AND analyst != '')", (dataset, dataset)).fetchone()[0]
        if used:
            raise PrivacyParameterError(
                f"dataset '{dataset}' already has charges or analyst totals in {UNIT[current[0]]} ({current[0]}); its unit "
                f"cannot change to {family}. Set a total in {current[0]}, or keep the new budget in another ledger (--ledger).")

    # ----------------------------------------------------------------------------- the file
    @contextmanager
    def _session(self, *, write: bool, create: bool = False) -> Iterator[sqlite3.Connection]:
        """One checked transaction: IMMEDIATE (write lock) or DEFERRED; COMMIT on success, else ROLLBACK."""
        if not create and not self.path.exists():
            raise BudgetNotSetError(f"no ledger file at '{self.path}', so no privacy budget has been set. Nothing was run "
                                    "or charged. The data owner sets one with: dpsql budget set --db DATABASE --epsilon E "
                                    "(add --ledger PATH for a ledger elsewhere).")
        new = create and not self.path.exists()
        try:
            db = sqlite3.connect(f"{self.path.as_uri()}?mode={'rwc' if create else 'rw'}", uri=True,
                                 timeout=LOCK_TIMEOUT, isolation_level=None)
        except sqlite3.Error as err:
            raise self._unreadable(err) from err
        committed = False
        try:
            db.execute("PRAGMA synchronous = FULL")
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            self._check(db, new=new)
            yield db
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
        if new:
            _sync_directory(self.path.parent)

    def _check(self, db: sqlite3.Connection, *, new: bool) -> None:
        """Fail closed unless the file is an intact dpsql ledger with valid amounts (or was just created)."""
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} - {"sqlite_sequence"}
        if new and not tables:  # a file this call created: SQLite's default rollback journal ("DELETE" mode)
            for name, spec in _TABLES.items():
                db.execute(f"CREATE TABLE {name} ({spec})")
            db.execute("CREATE INDEX charges_by_dataset ON charges (dataset, analyst)")
            db.executemany("INSERT INTO ledger_meta VALUES (?, ?)", [("format", FORMAT), ("version", VERSION)])
            return
        problems = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            report = "; ".join(" ".join(problem.split()) for problem in problems)
            raise LedgerError(self._corrupt(f"SQLite's integrity check reports: {report}"))
        for name, columns in _COLUMNS.items():
            found = [row[1] for row in db.execute(f"PRAGMA table_info({name})")]
            if found != columns:
                raise LedgerError(self._corrupt(f"table '{name}' has columns {found or 'none'}, expected {columns}"))
        meta = dict(db.execute("SELECT key, value FROM ledger_meta").fetchall())
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise LedgerError(self._corrupt(f"it declares format {meta.get('format')!r} version {meta.get('version')!r}, "
                                            f"expected {FORMAT!r} version {VERSION!r}"))
        for dataset, analyst, family, total in db.execute("SELECT dataset, analyst, family, total FROM budgets"):
            self._cost(family, total, f"the total of {_scope(dataset, analyst)}")
        for number, family, cost, amount in db.execute("SELECT id, cost_family, cost, price FROM charges"):
            self._cost(family, cost, f"charge {number}")
            self._amount(amount, f"charge {number}")

    def _balance(self, db: sqlite3.Connection, dataset: str, analyst: str | None) -> Balance:
        rows = dict(((row[0], (row[1], row[2])) for row in db.execute(
            "SELECT analyst, family, total FROM budgets WHERE dataset = ? AND analyst IN ('', ?)", (dataset, analyst or ""))))
        if "" not in rows:
            raise BudgetNotSetError(f"no privacy budget is set for dataset '{dataset}' in ledger '{self.path}'. Nothing was "
                                    "run or charged. The data owner sets one with: dpsql budget set --db DATABASE --epsilon E "
                                    "(or --rho R).")
        family = rows[""][0]
        limits = []
        for level in ("", analyst) if analyst and analyst in rows else ("",):
            level_family, total = rows[level]
            if level_family != family or family not in UNIT:
                raise LedgerError(self._corrupt(f"the budget of {_scope(dataset, level)} has family {level_family!r}"))
            limits.append(Limit(scope=_scope(dataset, level), total=self._amount(total, f"the total of {_scope(dataset, level)}"),
                                spent=self._spent(db, dataset, level or None)))
        count = db.execute("SELECT COUNT(*) FROM charges WHERE dataset = ?", (dataset,)).fetchone()[0]
        return Balance(dataset=dataset, analyst=analyst, family=family, limits=tuple(limits), charges=count)

    def _spent(self, db: sqlite3.Connection, dataset: str, analyst: str | None) -> Fraction:
        """Σ prices of the dataset's (or the analyst's) charges, exactly."""
        rows = db.execute("SELECT id, price FROM charges WHERE dataset = ? AND (? = '' OR analyst = ?)",
                          (dataset, analyst or "", analyst or ""))
        return sum((self._amount(text, f"charge {number}") for number, text in rows), Fraction(0))

    def _amount(self, text: object, where: str) -> Fraction:
        try:
            value = Fraction(text) if isinstance(text, str) and math.isfinite(float(Fraction(text))) else None
        except (ValueError, ZeroDivisionError, OverflowError):
            value = None
        if value is None or value <= 0:
            raise LedgerError(self._corrupt(f"{where} holds {text!r}, not a positive exact amount"))
        return value

    def _cost(self, family: object, text: object, where: str) -> PrivacyCost:
        if family not in UNIT:
            raise LedgerError(self._corrupt(f"{where} has family {family!r}"))
        return PrivacyCost.of(family, self._amount(text, where))  # type: ignore[arg-type]

    def _corrupt(self, detail: str) -> str:
        return (f"ledger '{self.path}' is not an intact dpsql ledger ({detail}). Nothing was run or charged. Restore the "
                "file from a backup; do not delete it, which would reset the budget.")

    def _unreadable(self, err: sqlite3.Error) -> LedgerError:
        if "locked" in str(err) or "busy" in str(err):
            return LedgerError(f"ledger '{self.path}' stayed locked by another process for {LOCK_TIMEOUT:g} s; nothing was "
                               "run or charged. Try again.")
        return LedgerError(self._corrupt(f"SQLite: {err}"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Account:
    """Which budget a connection draws from: a ledger, a dataset in it, and optionally an analyst."""

    ledger: Ledger
    dataset: str
    analyst: str | None = None

    def budget(self, batch: BatchRecord | None = None) -> LedgerBudget:
        """The current balance as a Budget; with ``batch``, one whose ``charge`` records that batch."""
        balance = self.ledger.balance(self.dataset, self.analyst)
        epsilon, rho, spent = _mirror(balance)
        return LedgerBudget(epsilon=epsilon, rho=rho, spent=float(spent), account=self, batch=batch, balance=balance)


@dataclass(slots=True, kw_only=True)
class LedgerBudget(Budget):
    """A Budget whose books are the ledger: ``check`` reads it, ``charge`` is its atomic durable charge.

    The engine calls ``check(cost)`` and then ``charge(cost)`` before it reads any data, and reads
    ``remaining`` and ``total`` afterwards: they show the balance right after this batch's charge.
    ``total`` and ``spent`` are those of the binding level (the analyst's, if it has a total).
    """

    account: Account
    balance: Balance
    batch: BatchRecord | None = None

    def __post_init__(self) -> None:
        Budget.__post_init__(self)
        self._update(self.balance)

    @property
    def left(self) -> Fraction:
        return self.balance.left

    def price(self, cost: PrivacyCost) -> Fraction:
        return self.balance.price(cost)

    def check(self, cost: PrivacyCost) -> Fraction:
        """Read the ledger again (fail closed), then check as a Budget does. Charges nothing."""
        self._update(self.account.ledger.balance(self.account.dataset, self.account.analyst))
        return self.balance.check(cost)

    def charge(self, cost: PrivacyCost) -> None:
        """The ledger's atomic check-and-insert, committed durably before this returns."""
        if self.batch is None:
            raise ProgrammingError("a ledger charge needs its batch record: use Account.budget(batch).")
        self._update(self.account.ledger.charge(self.account.dataset, cost, self.batch, analyst=self.account.analyst))

    def _update(self, balance: Balance) -> None:
        self.balance = balance
        self.epsilon, self.rho, self.exact_spent = _mirror(balance)
        self.spent = float(self.exact_spent)


def _mirror(balance: Balance) -> tuple[float | None, float | None, Fraction]:
    """The Budget fields (epsilon, rho, spent) showing the balance's binding level."""
    binding = balance.binding
    total = float(binding.total)
    return (total, None, binding.spent) if balance.family == "epsilon" else (None, total, binding.spent)


def _scope(dataset: str, analyst: str | None) -> str:
    return f"analyst '{analyst}' on dataset '{dataset}'" if analyst else f"dataset '{dataset}'"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _sync_directory(folder: Path) -> None:
    """fsync a folder so that a newly created ledger file's name is durable too."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
