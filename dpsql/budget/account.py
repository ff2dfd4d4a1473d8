"""Which budget a connection draws from in a ledger (:class:`Account`), and that budget as the
engine's ``PrivacyBudget`` (:class:`LedgerBudget`): ``check`` reads the ledger, ``charge`` is its
atomic, durable charge (:mod:`dpsql.budget.ledger`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING

from dpsql.budget.accounting import UNIT, PrivacyCost
from dpsql.budget.records import Balance, BatchRecord, Binding, KeptRelease
from dpsql.errors import ProgrammingError
from dpsql.schema import Schema

if TYPE_CHECKING:
    from dpsql.budget.ledger import Ledger


@dataclass(frozen=True, slots=True, kw_only=True)
class Account:
    """Which budget a connection draws from: a ledger, a dataset in it, optionally an analyst, and
    the connection's binding (its database file and schema), checked against the dataset's."""

    ledger: Ledger
    dataset: str
    analyst: str | None = None
    binding: Binding | None = None

    def bound(self, schema: Schema, database: object) -> Account:
        """This account with the binding of ``schema`` over ``database`` (a path, or no file)."""
        return self.bound_to(Binding.of(schema, database))

    def bound_to(self, binding: Binding) -> Account:
        """This account with ``binding`` (e.g. a schema over a Backend's ``identity``)."""
        return replace(self, binding=binding)

    def budget(self, batch: BatchRecord | None = None) -> LedgerBudget:
        """The current balance as a PrivacyBudget; with ``batch``, one whose ``charge`` records that batch."""
        balance = self.ledger.balance(self.dataset, self.analyst, binding=self.binding)
        return LedgerBudget(account=self, batch=batch, balance=balance)

    def keep_release(self, payload: str, charge: int) -> int:
        """Keep what charge ``charge`` (on this dataset) released; returns its id (``Ledger.keep_release``)."""
        return self.ledger.keep_release(self.dataset, charge, payload)

    def releases(self) -> list[KeptRelease]:
        """Every release kept for this dataset, oldest first."""
        return self.ledger.releases(self.dataset)


@dataclass(slots=True, kw_only=True)
class LedgerBudget:
    """The ledger's ``PrivacyBudget``: ``check`` reads the ledger, ``charge`` is its atomic durable charge.

    The engine calls ``check(cost)`` and then ``charge(cost)`` before it reads any data, and reads
    ``remaining`` and ``total`` afterwards: they show the balance right after this batch's charge.
    ``total``, ``spent`` and ``left`` are those of the binding level (the analyst's, if it has a total).
    ``charge_id`` is the id of the charge ``charge`` appended (None until then): what pays for the
    release kept with ``Account.keep_release``.
    """

    account: Account
    balance: Balance
    batch: BatchRecord | None = None
    charge_id: int | None = None

    @property
    def total(self) -> PrivacyCost:
        return PrivacyCost.of(self.balance.family, self.balance.binding.total)

    @property
    def spent(self) -> float:
        return float(self.balance.binding.spent)

    @property
    def left(self) -> Fraction:
        return self.balance.left

    @property
    def remaining(self) -> float:
        return float(self.left)

    @property
    def durable(self) -> bool:
        """True: the books are the ledger file."""
        return True

    def price(self, cost: PrivacyCost) -> Fraction:
        return self.balance.price(cost)

    def __repr__(self) -> str:
        """One line: the dataset, its unit, total, spent, left and the number of charges (as last read)."""
        balance, unit = self.balance, UNIT[self.balance.family]
        return (f"<LedgerBudget dataset '{balance.dataset}': total {unit}={_number(self.balance.binding.total)}, "
                f"spent {_number(self.balance.binding.spent)}, left {_number(self.left)}, "
                f"{balance.charges} charge(s)>")

    def __str__(self) -> str:
        """A few lines: where the budget is kept, and its total, spent and left (``details()`` for the rest)."""
        balance, unit, level = self.balance, UNIT[self.balance.family], self.balance.binding
        return "\n".join([f"privacy budget of {level.scope} (ledger {self.account.ledger.path})",
                          f"  total  {unit}={_number(level.total)}", f"  spent  {unit}={_number(level.spent)}",
                          f"  left   {unit}={_number(self.left)}",
                          f"  {balance.charges} charge(s); budget.details() lists them"])

    def details(self) -> str:
        """Every level (the dataset's total, an analyst's), the binding, and every charge, read from the ledger now."""
        account = self.account
        balance, unit = account.ledger.balance(account.dataset, account.analyst), UNIT[self.balance.family]
        lines = [f"ledger {account.ledger.path}, dataset '{account.dataset}', budget in {balance.family}"]
        lines += [f"{limit.scope}: total {unit}={_number(limit.total)}, spent {_number(limit.spent)}, left "
                  f"{_number(limit.left)}" for limit in balance.limits]
        if account.binding is not None:
            lines.append(f"bound to schema {account.binding.fingerprint[:12]} and {account.binding.data}")
        charges = account.ledger.history(account.dataset, account.analyst)
        lines.append(f"charges: {len(charges)}")
        lines += [f"  #{charge.id}  {charge.time}  {charge.cost.describe()}  {charge.mechanism}"
                  + (f"  analyst {charge.analyst}" if charge.analyst else "") for charge in charges]
        return "\n".join(lines)

    def check(self, cost: PrivacyCost) -> Fraction:
        """Read the ledger again (fail closed), then check the cost against it. Charges nothing."""
        account = self.account
        self.balance = account.ledger.balance(account.dataset, account.analyst, binding=account.binding)
        return self.balance.check(cost)

    def charge(self, cost: PrivacyCost) -> None:
        """The ledger's atomic check-and-insert, committed durably before this returns."""
        if self.batch is None:
            raise ProgrammingError("a ledger charge needs its batch record: use Account.budget(batch).")
        account = self.account
        self.balance = account.ledger.charge(account.dataset, cost, self.batch, analyst=account.analyst,
                                             binding=account.binding)
        self.charge_id = self.balance.last_charge


def _number(value: Fraction) -> str:
    return f"{float(value):.10g}"
