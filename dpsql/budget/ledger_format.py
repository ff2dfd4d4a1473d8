"""The ledger file's format: its tables and their columns, creating them, appending a row to the
MAC-chained history, and the MACs themselves (HMAC-SHA256 under the owner's key). ``dpsql.budget.ledger``
opens, verifies and writes the file with these; see its docstring for what the chain guarantees."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpsql.errors import LedgerError

FORMAT, VERSION = "dpsql-ledger", "3"
#: The version before ``releases``: read as it is, upgraded in place by a write session.
NO_RELEASES = "2"
KEY_CHECK = b"dpsql-ledger key"
HISTORY = ("actions", "charges", "releases")

TABLES = {
    "ledger_meta": "key TEXT PRIMARY KEY, value TEXT NOT NULL",
    "actions": "id INTEGER PRIMARY KEY, time TEXT NOT NULL, dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
               "action TEXT NOT NULL, family TEXT NOT NULL, total TEXT NOT NULL, database TEXT NOT NULL, "
               "schema TEXT NOT NULL, actor TEXT NOT NULL, mac TEXT NOT NULL",
    "charges": "id INTEGER PRIMARY KEY, time TEXT NOT NULL, dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
               "batch_hash TEXT NOT NULL, sql_hash TEXT NOT NULL, mechanism TEXT NOT NULL, cost_family TEXT NOT NULL, "
               "cost TEXT NOT NULL, price TEXT NOT NULL, mac TEXT NOT NULL",
    "releases": "id INTEGER PRIMARY KEY, time TEXT NOT NULL, dataset TEXT NOT NULL, analyst TEXT NOT NULL, "
                "charge INTEGER NOT NULL, payload TEXT NOT NULL, mac TEXT NOT NULL",
    "head": "id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL, last TEXT NOT NULL, mac TEXT NOT NULL",
}
COLUMNS = {name: re.findall(r"(\w+) (?:TEXT|INTEGER)", spec) for name, spec in TABLES.items()}


@dataclass(frozen=True, slots=True)
class Books:
    """An open, verified ledger transaction and the key that signs what it appends."""

    db: sqlite3.Connection
    key: bytes

    def rows(self, sql: str, parameters: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, parameters).fetchall()


def create(books: Books) -> None:
    """The current version's tables, an empty history and the key check, in a file that has none."""
    for name, spec in TABLES.items():
        if name != "releases":
            books.db.execute(f"CREATE TABLE {name} ({spec})")
    books.db.execute("CREATE INDEX charges_by_dataset ON charges (dataset, analyst)")
    books.db.execute("CREATE INDEX actions_by_dataset ON actions (dataset, analyst)")
    books.db.executemany("INSERT INTO ledger_meta VALUES (?, ?)",
                         [("format", FORMAT), ("version", VERSION), ("key_check", key_check(books.key))])
    books.db.execute("INSERT INTO head VALUES (1, 0, '', ?)", (head_mac(books.key, 0, ""),))
    add_releases(books)


def add_releases(books: Books) -> None:
    """The empty ``releases`` table (one release per charge) and the current version: the last step of
    ``_create``, and version 2 → 3 in place in a write session's transaction (the history is
    unchanged, so it verifies as before)."""
    books.db.execute(f"CREATE TABLE releases ({TABLES['releases']})")
    books.db.execute("CREATE INDEX releases_by_dataset ON releases (dataset)")
    books.db.execute("CREATE UNIQUE INDEX releases_by_charge ON releases (charge)")
    books.db.execute("INSERT OR REPLACE INTO ledger_meta VALUES ('version', ?)", (VERSION,))


def append(books: Books, table: str, **values: object) -> int:
    """Append a row to the history: the next number, its MAC chained to the last, and the new head.
    Returns the row's number."""
    count, last = books.rows("SELECT count, last FROM head")[0]
    row = [count + 1, *(values[name] for name in COLUMNS[table][1:-1])]
    mac = row_mac(books.key, last, table, row)
    books.db.execute(f"INSERT INTO {table} ({', '.join(COLUMNS[table])}) VALUES ({', '.join('?' * (len(row) + 1))})",
                     (*row, mac))
    books.db.execute("UPDATE head SET count = ?, last = ?, mac = ?",
                     (count + 1, mac, head_mac(books.key, count + 1, mac)))
    return int(count + 1)


def tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} - {"sqlite_sequence"}


def row_mac(key: bytes, previous: str, table: str, row: list[Any]) -> str:
    """HMAC-SHA256(key, previous mac ‖ the row as canonical JSON, its table first)."""
    text = json.dumps([table, *row], separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, f"{previous}\n{text}".encode("ascii"), hashlib.sha256).hexdigest()


@functools.lru_cache(maxsize=1 << 16)
def row_verifies(key: bytes, previous: str, table: str, row: tuple[Any, ...]) -> bool:
    """The row's last column is its MAC; False too for a value dpsql never writes (a BLOB has no JSON).

    Remembered by the exact (key, previous MAC, table, row) verified: every session verifies the whole
    history, and a row already verified, unchanged, is not hashed again (a changed row is another key).
    """
    try:
        expected = row_mac(key, previous, table, list(row[:-1]))
    except (TypeError, ValueError):
        return False
    return equal_mac(expected, row[-1])


def utf8(text: str) -> bool:
    """SQLite stores text as UTF-8: a lone surrogate has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def head_mac(key: bytes, count: int, last: str) -> str:
    return hmac.new(key, f"head\n{count}\n{last}".encode("ascii"), hashlib.sha256).hexdigest()


def derived(key: bytes, purpose: str) -> bytes:
    """HMAC-SHA256(key, "dpsql " ‖ purpose): a secret for another use, stable with the key, telling nothing of it."""
    return hmac.new(key, f"dpsql {purpose}".encode(), hashlib.sha256).digest()


def key_check(key: bytes) -> str:
    return hmac.new(key, KEY_CHECK, hashlib.sha256).hexdigest()


def equal_mac(expected: str, found: object) -> bool:
    """Constant-time comparison; anything but the expected text (another type, non-ASCII) differs."""
    return isinstance(found, str) and hmac.compare_digest(expected.encode("ascii"), found.encode("utf-8"))


def migrate(books: Books) -> None:
    """Rewrite a version-1 ledger as the current version in the owner's transaction: its actions
    and charges, in time order, become the MAC-chained history (their datasets unbound until the
    owner binds them). A version-1 file is not authenticated, so this trusts it as it is; it runs only where no
    key exists yet (a file whose key exists was upgraded before), and fails closed on other tables
    or a version-1 total that disagrees with its latest action."""
    db = books.db
    if tables(db) != {"ledger_meta", "budgets", "charges", "actions"}:
        raise LedgerError(f"a version-1 ledger has the tables ledger_meta, budgets, charges and actions; this file has "
                          f"{sorted(tables(db))}. Nothing was set. Restore the file from a backup.")
    actions = db.execute("SELECT time, dataset, analyst, action, family, total, actor FROM actions "
                         "ORDER BY id").fetchall()
    charges = db.execute("SELECT time, dataset, analyst, batch_hash, sql_hash, mechanism, cost_family, cost, price "
                         "FROM charges ORDER BY id").fetchall()
    latest = {(row[1], row[2]): (row[4], row[5]) for row in actions}
    for dataset, analyst, family, total in db.execute("SELECT dataset, analyst, family, total FROM budgets"):
        if latest.get((dataset, analyst)) != (family, total):
            scope = f"analyst '{analyst}' on dataset '{dataset}'" if analyst else f"dataset '{dataset}'"
            raise LedgerError(f"the version-1 ledger's total of {scope} disagrees with its actions; "
                              "it cannot be upgraded. Nothing was set. Restore the file from a backup.")
    for name in ("budgets", "charges", "actions", "ledger_meta"):
        db.execute(f"DROP TABLE {name}")
    create(books)
    history = sorted([(row[0], 0, number, "actions", row) for number, row in enumerate(actions)]
                     + [(row[0], 1, number, "charges", row) for number, row in enumerate(charges)])
    for _, _, _, table, row in history:
        if table == "actions":
            values = dict(zip(("time", "dataset", "analyst", "action", "family", "total", "actor"), row))
            append(books, "actions", **values, database="", schema="")
        else:
            append(books, "charges", **dict(zip(COLUMNS["charges"][1:-1], row)))
