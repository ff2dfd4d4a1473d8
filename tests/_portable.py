"""One table, schema and batch that every backend must answer exactly as DuckDB does.

The table is an Arrow table built from a fixed arithmetic pattern (no random stream that could
change between library versions) with everything that differs between engines: NULL and NaN,
undeclared categories, values beyond the bounds, dates, a DECIMAL column, a heavy-tailed
measure, and privacy units (an integer one and a text one) with more rows than ``max_rows``.
A backend under test loads it (Spark from Arrow, so NaN survives; PostgreSQL by COPY or
INSERT), and :func:`data_vectors` reads every kind of exact aggregate the engine asks for, so
two backends can be compared value for value; :func:`answers` runs :data:`BATCHES` through
``dpsql.connect`` with a seeded source, whose answers must then be identical too.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

import dpsql
from dpsql.backends import Backend
from dpsql.budget.accounting import Budget
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema, Table

ROWS = 4000
MAX_ROWS = 3

COLUMNS: dict[str, dict[str, object]] = {
    "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "region": {"type": "categorical", "values": ["N", "E", "S", "W"]},
    "rooms": {"type": "integer", "lower": 1, "upper": 6, "out_of_domain": "clamp"},
    "income": {"type": "numeric", "lower": 0, "upper": 200_000, "bin_width": 50_000, "resolution": 1},
    "wealth": {"type": "integer", "lower": 0, "upper": 1_000_000, "bin_width": 250_000, "truncate": "svt"},
    "day": {"type": "date", "lower": "2020-01-01", "upper": "2023-12-31", "unit": "month", "bin_width": 6},
    "score": {"type": "numeric", "lower": 0, "upper": 10, "bin_width": 2.5, "resolution": 0.25},
    "member": {"type": "categorical", "values": ["true", "false"]},
}

SCHEMA: dict[str, Any] = {"tables": {
    "people": {"privacy_unit": {"column": "person", "max_rows": MAX_ROWS}, "columns": COLUMNS},
    "visits": {"privacy_unit": {"column": "visitor", "max_rows": MAX_ROWS}, "columns": COLUMNS},
}}

#: GROUP BYs, ranges, a date GROUP BY, COUNT(col), SUM and AVG, a clamped column and a truncated SUM
#: (its threshold released first), under the integer unit; and a batch under the text unit.
BATCHES = {"people": """
SELECT sex, COUNT(*) AS n FROM people GROUP BY sex;
SELECT region, sex, COUNT(*) AS n, SUM(income) AS s, AVG(income) AS a FROM people GROUP BY region, sex;
SELECT COUNT(*) AS n FROM people WHERE age BETWEEN 20 AND 59;
SELECT COUNT(*) AS n FROM people WHERE income >= 50000 AND rooms <= 3;
SELECT day, COUNT(*) AS n FROM people GROUP BY day;
SELECT region, SUM(wealth) AS w, AVG(wealth) AS aw FROM people GROUP BY region;
SELECT member, COUNT(score) AS k, SUM(score) AS s FROM people GROUP BY member
""", "visits": """
SELECT rooms, COUNT(*) AS n FROM visits GROUP BY rooms;
SELECT sex, SUM(income) AS s FROM visits WHERE age < 40 GROUP BY sex
"""}


def arrow_table() -> pa.Table:
    """The rows: every column cycles with its own stride; units own 1 to 8 rows each."""
    person, visitor, age, sex, region, rooms, income, wealth, day, score, member = ([] for _ in range(11))
    unit, left = 0, 0
    for i in range(ROWS):
        if left == 0:
            unit, left = unit + 1, 1 + (unit * 5) % 8
        left -= 1
        person.append(None if i % 211 == 0 else unit)
        visitor.append(None if i % 223 == 0 else f"v-{unit % 700:04d}é")
        age.append(None if i % 61 == 0 else (i * 7) % 105 - 2)
        sex.append(None if i % 53 == 0 else "X" if i % 41 == 0 else "FM"[(i * 5 // 3) % 2])
        region.append("NESW"[(i * 3) % 4 if i % 5 else 0])
        rooms.append((i * 11) % 9)
        income.append(float("nan") if i % 37 == 0 else None if i % 43 == 0
                      else ((i * 7919) % 260_000) - 20_000 + 0.5 * (i % 3))
        wealth.append((i * 7919) % 50_000 + (3_000_000 if i % 97 == 0 else 0) - (100 if i % 89 == 0 else 0))
        day.append(None if i % 59 == 0 else dt.date(2019, 6, 1) + dt.timedelta(days=(i * 13) % 1800))
        score.append(None if i % 31 == 0 else decimal.Decimal((i * 17) % 47) / 4 - 1)
        member.append(None if i % 29 == 0 else bool(i % 3))
    return pa.table({
        "person": pa.array(person, pa.int64()), "visitor": pa.array(visitor, pa.string()),
        "age": pa.array(age, pa.int32()), "sex": pa.array(sex, pa.string()), "region": pa.array(region, pa.string()),
        "rooms": pa.array(rooms, pa.int64()), "income": pa.array(income, pa.float64()),
        "wealth": pa.array(wealth, pa.int64()), "day": pa.array(day, pa.date32()),
        "score": pa.array(score, pa.decimal128(10, 2)), "member": pa.array(member, pa.bool_()),
    })


def duckdb_database() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database holding the table as ``people`` and ``visits``."""
    con = duckdb.connect()
    data = arrow_table()
    for name in ("people", "visits"):
        con.from_arrow(data).create(name)
    return con


def tables() -> dict[str, Table]:
    schema = Schema.load(SCHEMA)
    return {name: schema.table(name) for name in ("people", "visits")}


def data_vectors(backend: Backend) -> dict[str, Any]:
    """Every exact aggregate the engine asks a backend for, over both tables, as plain Python values."""
    found: dict[str, Any] = {}
    for name, table in tables().items():
        columns = table.columns
        cells = [columns["sex"], columns["region"], columns["age"], columns["day"], columns["rooms"],
                 columns["member"], columns["income"], columns["score"]]
        sums = {columns["income"]: 1.0, columns["wealth"]: 1.0, columns["score"]: 0.25}
        one = backend.cell_data(table, cells, sum_columns=sums, count_columns=[columns["income"], columns["score"]])
        found[f"{name} cells"] = _plain(one)
        found[f"{name} total"] = _plain(backend.cell_data(table, []))  # COUNT(*) alone reads no column
        sets = backend.cell_data_sets(table, [[columns["sex"]], [columns["region"], columns["day"]], []],
                                      sum_columns={columns["wealth"]: 1.0}, count_columns=[columns["score"]])
        found[f"{name} sets"] = [_plain(data) for data in sets]
        marginals = backend.marginal_counts(table, [columns["sex"], columns["age"], columns["member"]],
                                            [(), (0,), (1, 2), (0, 1, 2)])
        found[f"{name} marginals"] = {key: value.tolist() for key, value in marginals.items()}
        profile = backend.measure_profile(table, columns["wealth"], 1.0, [10.0, 1000.0, 60_000.0], [1, 50_000])
        found[f"{name} profile"] = (profile.rows, profile.below, profile.clipped_sums)
    return found


def _plain(data: Any) -> dict[str, Any]:
    return {"shape": data.shape, "index": data.index.tolist(), "counts": data.counts.tolist(),
            "sums": {k: [int(v) for v in s] for k, s in data.sums.items()},
            "nonnull": {k: v.tolist() for k, v in data.nonnull.items()}}


def answers(connect: Callable[..., dpsql.Connection], seed: int = 17) -> list[dict[str, list[object]]]:
    """Each of :data:`BATCHES` answered at ε = 2 with a seeded source, through one
    ``connect(schema=, budget=, rng=)``: every statement's table as column lists."""
    connection = connect(schema=SCHEMA, budget=Budget(epsilon=100.0), rng=SeededRandomSource(seed))
    try:
        cursor = connection.cursor()
        found = []
        for batch in BATCHES.values():
            cursor.execute(batch, epsilon=2.0)
            found += [table.to_pydict() for table in cursor.fetch_arrow_tables()]
        return found
    finally:
        connection.close()


def same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN (answers are compared bit for bit otherwise)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (np.isnan(a) and np.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b
