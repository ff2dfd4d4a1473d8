"""PEP 249 type objects and constructors.

``Cursor.description`` reports a type code per column ("STRING", "NUMBER", "DATETIME"); each type
object compares equal to the codes of its family, as the specification asks.
"""

from __future__ import annotations

import datetime as dt
import time


class DBAPITypeObject:
    """A PEP 249 type object: equal to every type code of its family."""

    def __init__(self, *codes: str) -> None:
        self.codes = frozenset(codes)

    def __eq__(self, other: object) -> bool:
        return other in self.codes if isinstance(other, str) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.codes)

    def __repr__(self) -> str:
        return f"DBAPITypeObject({', '.join(sorted(self.codes))})"


STRING = DBAPITypeObject("STRING")
BINARY = DBAPITypeObject("BINARY")
NUMBER = DBAPITypeObject("NUMBER")
DATETIME = DBAPITypeObject("DATETIME")
ROWID = DBAPITypeObject("ROWID")

Date = dt.date
Time = dt.time
Timestamp = dt.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> dt.date:  # the name PEP 249 requires
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> dt.time:
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> dt.datetime:
    return Timestamp(*time.localtime(ticks)[:6])
