"""Where releases are kept for reuse: in memory for a connection with an in-memory budget, or in
the ledger next to the charge that paid for them (``Ledger.keep_release``), MAC-chained with the
rest of the history and verified on every open.

A kept release is the public part of what a charge measured (:mod:`dpsql.releases.kept`): the
strategy, the noisy values, the noise variance and the cells, under one schema version (the
schema's fingerprint) and one data version (for a database file, its modification time and size
when the release was made: rows written since make the kept releases describe other data, so they
are no longer used; data on a server has no such version). Releases made before the dataset's
latest binding (a rebind to a new file or schema) are not used either. A release is kept only
after its charge is committed and names that charge, so nothing is kept, or answered from, without
a charge. A stored release that cannot be read fails closed (LedgerError).

Scope: a connection reuses the releases its own analyst's charges paid for (a connection without
an analyst: those made without one), unless the data owner shares every release of the dataset
with every analyst (``Ledger.set_sharing``; ``dpsql budget set --share-releases``); another
analyst's release then comes marked ``shared``, so that its number is never shown.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dpsql.budget.account import Account
from dpsql.budget.accounting import PrivacyBudget
from dpsql.budget.records import shares_releases
from dpsql.errors import LedgerError, ProgrammingError
from dpsql.releases.information import KeptInformation
from dpsql.releases.kept import KeptMeasurement, payload, read_payload


class ReleaseStore(Protocol):
    """The kept releases of one dataset under one schema, and the information of their measurements
    computed so far (:mod:`dpsql.releases.information`, ``dpsql.engine.reuse.reuse.Reuse.cache``: kept
    across the batches of a connection and the stages of each)."""

    information: KeptInformation

    def kept(self) -> list[KeptMeasurement]:
        """Every kept measurement, each knowing its release's id."""
        ...

    def keep(self, measurements: Sequence[KeptMeasurement], summary: Sequence[str], budget: PrivacyBudget) -> int:
        """Keep a release paid by ``budget``'s last charge; its id."""
        ...


@dataclass(slots=True)
class MemoryStore:
    """A connection's releases, in memory (with an in-memory budget: tests, demos)."""

    releases: list[list[KeptMeasurement]] = field(default_factory=list)
    summaries: list[list[str]] = field(default_factory=list)
    information: KeptInformation = field(default_factory=KeptInformation)

    def kept(self) -> list[KeptMeasurement]:
        return [m for release in self.releases for m in release]

    def keep(self, measurements: Sequence[KeptMeasurement], summary: Sequence[str], budget: PrivacyBudget) -> int:
        number = len(self.releases) + 1
        self.releases.append([m.with_release(number, index) for index, m in enumerate(measurements)])
        self.summaries.append(list(summary))
        return number


@dataclass(slots=True, kw_only=True)
class LedgerStore:
    """A dataset's releases in its ledger that the account's analyst may reuse, read under the schema
    version ``schema`` (a fingerprint)."""

    account: Account
    schema: str
    identity: str = ""  # the backend's identity (a database file's path and inode), for the data version
    information: KeptInformation = field(default_factory=KeptInformation)
    #: Releases already read, by id: their stored text and measurements (each measurement caches its
    #: information matrix, so a long session does not recompute every release's on every batch).
    _read: dict[int, tuple[str, list[KeptMeasurement]]] = field(default_factory=dict)

    def kept(self) -> list[KeptMeasurement]:
        found = []
        data = data_version(self.identity)
        ledger, dataset, analyst = self.account.ledger, self.account.dataset, self.account.analyst or None
        actions = ledger.actions(dataset)
        bound = max((a.id for a in actions if a.binding is not None), default=0)
        shared = shares_releases(actions)
        for release in ledger.releases(dataset):
            if release.id < bound:  # made before the owner bound the dataset (again): other data, maybe
                continue
            if release.analyst != analyst and not shared:  # another analyst's, not shared by the owner
                continue
            cached = self._read.get(release.id)
            if cached is not None and cached[0] == release.payload + data:  # the same verified text, the same data
                found.extend(cached[1])
                continue
            try:
                measurements = [m.with_release(release.id, m.index, shared=release.analyst != analyst)
                                for m in read_payload(release.payload, release.id, self.schema, data)]
            except (ValueError, KeyError, TypeError) as err:
                raise LedgerError(f"release #{release.id} in ledger '{self.account.ledger.path}' cannot be read "
                                  f"({type(err).__name__}), so what it answers is unknown. Nothing was run or charged. "
                                  "Restore the ledger from a backup.") from None
            self._read[release.id] = (release.payload + data, measurements)
            found.extend(measurements)
        return found

    def keep(self, measurements: Sequence[KeptMeasurement], summary: Sequence[str], budget: PrivacyBudget) -> int:
        charge = getattr(budget, "charge_id", None)
        if not isinstance(charge, int):
            raise ProgrammingError("a release is kept only after its charge: the budget has no charge to name.")
        return self.account.ledger.keep_release(self.account.dataset, charge,
                                                payload(list(measurements), list(summary), self.schema,
                                                        data_version(self.identity)))


def data_version(identity: str) -> str:
    """A database file's modification time (ns) and size, from a backend identity naming its path
    (file metadata, not rows); "" when there is no file or it cannot be read."""
    try:
        path = json.loads(identity)["path"] if identity else None
        found = os.stat(path) if isinstance(path, str) else None
    except (ValueError, KeyError, TypeError, OSError):
        return ""
    return "" if found is None else f"{found.st_mtime_ns}:{found.st_size}"
