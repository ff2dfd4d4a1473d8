"""What the privacy ledger records and what a budget is bound to: public records only.

:class:`Binding` is the schema's privacy-relevant parts and the database file's identity a dataset's
budget is bound to (and how two bindings differ, in words); :class:`BatchRecord`, :class:`Limit`,
:class:`Balance`, :class:`Charge`, :class:`Action` and :class:`KeptRelease` are the rows :mod:`dpsql.budget.ledger`
writes and reads. None of them holds data values (a kept release's payload is the public part of a
release: noisy values and public plan facts).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpsql.backends.base import file_identity
from dpsql.budget.accounting import Family, PrivacyCost, price, refusal
from dpsql.errors import BudgetExhaustedError, PrivacyParameterError
from dpsql.schema import Schema


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """What a dataset's budget is bound to: the schema's privacy-relevant parts (``Schema.canonical``)
    and the database file's identity (``file_identity``; '' without a database file, e.g. a
    DuckDB connection object or ``:memory:``)."""

    schema: str
    database: str = ""

    @classmethod
    def of(cls, schema: Schema, database: object = None) -> Binding:
        """The binding of ``schema`` over ``database`` (a path; anything else binds no file)."""
        path = database if isinstance(database, (str, os.PathLike)) and os.fspath(database) != ":memory:" else None
        return cls(schema=schema.canonical(), database="" if path is None else file_identity(path))

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the schema's canonical privacy parts (``Schema.fingerprint``)."""
        return sha256_hex(self.schema)

    @property
    def data(self) -> str:
        """The bound data in words: ``file '<path>' (inode N)``, ``file '<path>' (SHA-256 …)``, or a backend's
        identity."""
        return _describe_file(self.database)

    def differences(self, bound: Binding) -> list[str]:
        """What differs from ``bound``, by schema keys and file identity (public facts, never data)."""
        problems = []
        if self.database != bound.database:
            problems.append(_database_difference(self.database, bound.database))
        if self.schema != bound.schema:
            paths = _diff(_parts(self.schema), _parts(bound.schema), "tables")
            shown = ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")
            problems.append(f"the schema's privacy-relevant parts differ at {shown or 'its format'}")
        return problems


def _parts(schema: str) -> dict[str, Any]:
    try:
        tables = json.loads(schema).get("tables") if schema else {}
    except (ValueError, AttributeError):
        tables = None
    return tables if isinstance(tables, dict) else {}


def _diff(mine: Any, bound: Any, where: str) -> list[str]:
    """Key paths at which two JSON values differ, e.g. ``tables.people.privacy_unit.max_rows``."""
    if mine == bound:
        return []
    if not (isinstance(mine, dict) and isinstance(bound, dict)):
        return [where]
    paths = []
    for key in sorted(set(mine) | set(bound)):
        if key not in bound:
            paths.append(f"{where}.{key} (not in the bound schema)")
        elif key not in mine:
            paths.append(f"{where}.{key} (missing)")
        else:
            paths.extend(_diff(mine[key], bound[key], f"{where}.{key}"))
    return paths


def _database_difference(mine: str, bound: str) -> str:
    if not bound:
        return f"the dataset is bound to no database file, and this connection reads {_describe_file(mine)}"
    if not mine:
        return (f"the dataset is bound to {_describe_file(bound)}, and this connection has no database file (pass the "
                "database's path, not a DuckDB connection)")
    if _field(mine, "sha256") and _field(mine, "path") == _field(bound, "path"):
        return (f"the contents of file '{_field(mine, 'path')}' changed since the dataset was bound (SHA-256 "
                f"{_field(mine, 'sha256')[:12]}…, bound {_field(bound, 'sha256')[:12]}…): a CSV or Parquet file is "
                "bound by its contents")
    return (f"this connection reads {_describe_file(mine)}, not the bound {_describe_file(bound)} (a copy, a replaced "
            "or a moved file)")


def _field(identity: str, key: str) -> str:
    """One field of a file identity's JSON (``path``, ``inode``, ``sha256``), or ''."""
    try:
        found = json.loads(identity)
    except ValueError:
        return ""
    return str(found.get(key, "")) if isinstance(found, dict) else ""


def _describe_file(identity: str) -> str:
    path, inode, digest = (_field(identity, key) for key in ("path", "inode", "sha256"))
    if path and digest:
        return f"file '{path}' (SHA-256 {digest[:12]}…)"
    if path and inode:
        return f"file '{path}' (inode {inode})"
    return f"the data {identity!r}"


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
        return cls(sql_hash=sha256_hex(text), batch_hash=sha256_hex(whole), mechanism=mechanism)


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
    last_charge: int | None = None  # the id of the charge this transaction appended (Ledger.charge), else None

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
    """One charge in the ledger's history."""

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
    """One owner action: a total set or changed, and the binding it made (None if it bound nothing)."""

    id: int
    time: str
    dataset: str
    analyst: str | None
    action: str
    total: PrivacyCost
    actor: str
    binding: Binding | None = None


#: The owner actions that let every analyst reuse every release of a dataset, or only her own (the default).
SHARE_RELEASES, OWN_RELEASES = "share-releases", "own-releases"


def shares_releases(actions: list[Action]) -> bool:
    """Whether the owner's latest release-sharing action lets every analyst reuse every release."""
    for action in reversed(actions):
        if action.action in (SHARE_RELEASES, OWN_RELEASES):
            return action.action == SHARE_RELEASES
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptRelease:
    """The public part of one release, kept next to the charge that paid for it.

    ``payload`` is the text ``Ledger.keep_release`` was given, verbatim (``dpsql.releases`` writes
    and reads it); ``analyst`` is the charge's.
    """

    id: int
    time: str
    dataset: str
    analyst: str | None
    charge: int
    payload: str


def sha256_hex(text: str) -> str:
    """SHA-256 of ``text`` (UTF-8), as hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
