"""Dates written with the clock and intervals: CURRENT_DATE (and ``today()``) is read as this machine's date
when the batch is parsed; a date ± INTERVAL n DAY|WEEK|MONTH|QUARTER|YEAR (or ± n days) moves it as DuckDB
does (a month step keeps the day of the month or takes the month's last day). The conditions keep the rows
DuckDB keeps, checked against its exact counts at an ε where the noise cannot move a count; a time of day
and other intervals are refused, charging nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsql
from _helpers import assert_refused_free
from dpsql.errors import NotSupportedError
from dpsql.noise import SeededRandomSource
from dpsql.sql import ir
from dpsql.sql.parse import parse_batch

SCHEMA = {"tables": {"t": {"columns": {"day": {"type": "date", "lower": "2016-01-01", "upper": "2031-12-31",
                                               "bin_width": 1}}}}}


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT DATE '2016-01-01' + CAST(7 * range AS INTEGER) AS day FROM range(0, 830)")
    yield con
    con.close()


SHIFTS = st.tuples(st.sampled_from(["+", "-"]), st.integers(0, 40),
                   st.sampled_from(["DAY", "DAYS", "WEEK", "MONTH", "MONTHS", "QUARTER", "YEAR", "YEARS"]))
STARTS = st.one_of(st.just("CURRENT_DATE"), st.dates(dt.date(2017, 1, 1), dt.date(2030, 12, 31))
                   .map(lambda d: f"DATE '{d.isoformat()}'"))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(STARTS, SHIFTS, st.sampled_from(["<", "<=", ">", ">=", "="])), min_size=1, max_size=6))
def test_shifted_dates_keep_the_rows_duckdb_keeps(data: duckdb.DuckDBPyConnection,
                                                  conditions: list[tuple[str, tuple[str, int, str], str]]) -> None:
    batch = [f"SELECT COUNT(*) AS n FROM t WHERE day {op} {start} {sign} INTERVAL {count} {unit}"
             for start, (sign, count, unit), op in conditions]
    with dpsql.connect(data, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e7), rng=SeededRandomSource(2)) as private:
        tables = private.cursor().execute(";\n".join(batch), epsilon=1e6).fetch_arrow_tables()
    for sql, table in zip(batch, tables, strict=True):
        assert table.column("n_stddev")[0].as_py() < 1e-3
        assert round(table.column("n")[0].as_py()) == data.execute(sql).fetchone()[0], sql  # type: ignore[index]


def test_a_month_step_takes_the_last_day_of_a_shorter_month_and_current_date_is_today() -> None:
    statements = parse_batch("SELECT COUNT(*) FROM t WHERE day = DATE '2020-01-31' + INTERVAL 1 MONTH;\n"
                             "SELECT COUNT(*) FROM t WHERE day = DATE '2024-02-29' - INTERVAL 1 YEAR;\n"
                             "SELECT COUNT(*) FROM t WHERE day >= today() - 30").statements
    values = []
    for statement in statements:
        assert isinstance(statement.where, ir.Comparison)
        values.append(statement.where.value.value)
    before, after = dt.date.today(), None
    assert values[:2] == [dt.date(2020, 2, 29), dt.date(2023, 2, 28)]
    after = dt.date.today()
    assert values[2] in {before - dt.timedelta(days=30), after - dt.timedelta(days=30)}


@pytest.mark.parametrize("condition, words", [
    ("day > NOW()", "NOW is not supported"),
    ("day > CURRENT_TIMESTAMP", "CURRENT_TIMESTAMP is not supported"),
    ("day > CURRENT_DATE - INTERVAL 1 HOUR", "the interval in"),
    ("day > CURRENT_DATE + 1.5", "adding 1.5 to a date"),
])
def test_a_time_of_day_and_other_intervals_are_refused(data: duckdb.DuckDBPyConnection, condition: str,
                                                       words: str) -> None:
    assert_refused_free(data, SCHEMA, f"SELECT COUNT(*) FROM t WHERE {condition}", NotSupportedError, words)
