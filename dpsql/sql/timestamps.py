"""Timestamps compared with date columns: at midnight a timestamp is its date (a day boundary, so the
comparison is the same); inside a day it is refused, naming the day boundaries around it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

from dpsql import schema as sch
from dpsql.errors import UnsupportedQueryError
from dpsql.sql import ir

_TIMESTAMP = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?\s*")


def parse_timestamp(text: str) -> dt.datetime | None:
    """``yyyy-mm-dd hh:mm[:ss[.ffffff]]`` as a datetime, else None.

    >>> parse_timestamp("2021-01-01 00:00:00"), parse_timestamp("2021-01-01")
    (datetime.datetime(2021, 1, 1, 0, 0), None)
    """
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        return dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0),
                           int((fraction or "0").ljust(6, "0")))
    except ValueError:
        return None


def day_boundaries(day: dt.date) -> str:
    """The advice for a timestamp inside ``day``: the day boundaries around it.

    >>> day_boundaries(dt.date(2021, 1, 1)).split(": ")[1]
    "use DATE '2021-01-01' or DATE '2021-01-02' (a midnight TIMESTAMP is the same)."
    """
    return (f"Date columns are compared at day boundaries: use DATE '{day}' or DATE '{day + dt.timedelta(days=1)}' "
            "(a midnight TIMESTAMP is the same).")


def date_literal(domain: sch.Ordered, literal: ir.Literal, column: str) -> ir.Literal:
    """A timestamp string compared with a date column as its date (see :func:`timestamp_as_date`)."""
    if domain.kind != "date" or not isinstance(literal.value, str):
        return literal
    day = timestamp_as_date(literal.value, literal.span, column)
    return literal if day is None else replace(literal, value=day)


def timestamp_as_date(text: str, where: ir.Span, column: str) -> dt.date | None:
    """A timestamp string compared with a date column: at midnight, its date (a day boundary: the
    comparison is the same); inside a day, refused naming the day boundaries around it; None if
    ``text`` is not a timestamp."""
    moment = parse_timestamp(text)
    if moment is None:
        return None
    if moment.time() != dt.time(0):
        raise UnsupportedQueryError(
            f"the timestamp '{text.strip()}' compared with the date column '{column}' is not supported "
            f"({where.describe()}): it falls inside the day {moment.date()}. {day_boundaries(moment.date())}"
        )
    return moment.date()
