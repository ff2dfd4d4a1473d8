"""The privacy-unit cap keeps rows without favouring values: each unit's rows are ordered by a hash
salted with the unit, so which k of a unit's n rows are kept behaves like a uniform choice.

Unsalted (one order of values for every unit, as ``HASH(values)`` gave), the same values were
kept first in every unit; the tests below then fail by dozens of standard errors. The data are
fixed, so the tests are deterministic; their tolerances come from the variance of a uniform choice
of k rows out of n without replacement.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.schema import Schema

UNITS = 3000
KINDS = 8
MAX_ROWS = 2


def _backend(unit_type: str, rows: list[tuple[object, int]]) -> DuckDBBackend:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE visits (unit {unit_type}, value INTEGER)")
    con.executemany("INSERT INTO visits VALUES (?, ?)", rows)
    return DuckDBBackend(con)


def _table(unit: str, upper: int):  # type: ignore[no-untyped-def]
    schema = Schema.load({"tables": {"visits": {
        "privacy_unit": {"column": "unit", "max_rows": MAX_ROWS},
        "columns": {"value": {"type": "integer", "lower": 0, "upper": upper}}}}})
    return schema.table("visits")


@pytest.mark.parametrize("unit_type", ["BIGINT", "VARCHAR"])
def test_every_value_is_kept_at_its_share(unit_type: str) -> None:
    """Every unit holds one row of each of 8 values and keeps 2: each value is kept in about a quarter
    of the units, Binomial(3000, 1/4) under a uniform choice (sd 23.7)."""
    rows = [(u if unit_type == "BIGINT" else f"person-{u}", kind) for u in range(UNITS) for kind in range(KINDS)]
    table = _table("unit", KINDS - 1)
    data = _backend(unit_type, rows).cell_data(table, [table.columns["value"]])
    kept = data.dense_counts()[:KINDS]
    assert kept.sum() == UNITS * MAX_ROWS
    share = MAX_ROWS / KINDS
    z = (kept - UNITS * share) / np.sqrt(UNITS * share * (1 - share))
    assert np.max(np.abs(z)) < 4.5, z  # Bonferroni over 8 values at about 5e-5 in all


def test_the_mean_of_kept_values_is_unbiased() -> None:
    """Units of 3 to 9 rows with uneven values keep 2 rows each: the total of the kept values matches its
    expectation under a uniform choice, Σ_u k·mean_u, within 4.5 standard errors, where a uniform
    choice of k of n rows without replacement has Var = k(n−k)/(n−1)·σ_u² per unit."""
    rows, expected, variance = [], 0.0, 0.0
    for u in range(UNITS):
        n = 3 + (u * 7) % 7
        values = np.array([(29 * i * i + 11 * i) % 90 for i in range(n)], dtype=float)  # the same in every unit
        rows += [(u, int(v)) for v in values]
        expected += MAX_ROWS * values.mean()
        variance += MAX_ROWS * (n - MAX_ROWS) / (n - 1) * values.var()
    table = _table("unit", 89)
    data = _backend("BIGINT", rows).cell_data(table, [table.columns["value"]])
    counts = data.dense_counts()[:90]
    total = float(counts @ np.arange(90))
    assert counts.sum() == UNITS * MAX_ROWS
    assert abs(total - expected) < 4.5 * np.sqrt(variance), (total, expected, np.sqrt(variance))
