"""Arrow columns as PostgreSQL wire values: type OIDs, text format and binary format.

Text format is what psql and most drivers ask for: integers in decimal, floats as the shortest
decimal that reads back to the same double (PostgreSQL 12+ prints float8 that way), booleans
``t``/``f``, dates ISO 8601. Binary format (format code 1) is network-order int8/int4/float8,
a byte for bool, days since 2000-01-01 for a date and microseconds since 2000-01-01 for a
timestamp; other types are sent as text with the ``text`` OID.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

BOOL, INT8, INT4, FLOAT8, TEXT, DATE, TIMESTAMP = 16, 20, 23, 701, 25, 1082, 1114
_EPOCH = dt.date(2000, 1, 1)
_EPOCH_TIME = dt.datetime(2000, 1, 1)


@dataclass(frozen=True, slots=True)
class Column:
    """How one Arrow column travels: its OID and size, and its encoders for each format."""

    oid: int
    size: int
    text: Callable[[Any], bytes]
    binary: Callable[[Any], bytes]


def column_of(kind: pa.DataType) -> Column:
    """The wire form of an Arrow type."""
    if pa.types.is_boolean(kind):
        return Column(BOOL, 1, lambda v: b"t" if v else b"f", lambda v: b"\x01" if v else b"\x00")
    if pa.types.is_integer(kind):
        return Column(INT8, 8, lambda v: str(int(v)).encode(), lambda v: struct.pack("!q", int(v)))
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return Column(FLOAT8, 8, _float_text, lambda v: struct.pack("!d", float(v)))
    if pa.types.is_date(kind):
        return Column(DATE, 4, lambda v: v.isoformat().encode(), lambda v: struct.pack("!i", (v - _EPOCH).days))
    if pa.types.is_timestamp(kind):
        return Column(TIMESTAMP, 8, lambda v: v.isoformat(sep=" ").encode(),
                      lambda v: struct.pack("!q", _micros(v)))
    return Column(TEXT, -1, lambda v: str(v).encode(), lambda v: str(v).encode())


def rows(table: pa.Table, formats: list[int] | None = None) -> list[list[bytes | None]]:
    """Each row of ``table`` as wire values, in the format asked per column (0 text, 1 binary)."""
    columns = [column_of(field.type) for field in table.schema]
    chosen = formats_for(len(columns), formats)
    encoders = [c.binary if f == 1 else c.text for c, f in zip(columns, chosen)]
    values = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return [[None if v is None else encode(v) for encode, v in zip(encoders, row)] for row in zip(*values)]


def formats_for(count: int, formats: list[int] | None) -> list[int]:
    """A Bind message's result formats expanded: none → all text; one → for every column."""
    if not formats:
        return [0] * count
    if len(formats) == 1:
        return formats * count
    return list(formats)


def _float_text(value: Any) -> bytes:
    number = float(value)
    if math.isnan(number):
        return b"NaN"
    if math.isinf(number):
        return b"Infinity" if number > 0 else b"-Infinity"
    return repr(number).encode()


def _micros(value: dt.datetime) -> int:
    delta = value.replace(tzinfo=None) - _EPOCH_TIME
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
