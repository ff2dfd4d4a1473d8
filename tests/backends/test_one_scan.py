"""A batch's statement groups read the table in one scan (GROUPING SETS), with the same answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np

from dpsql import engine
from dpsql.backends.base import CellData
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.noise import SeededRandomSource
from dpsql.schema import Column, Schema, Table

SCHEMA = Schema.load({"tables": {"t": {"columns": {
    "x": {"type": "integer", "lower": 0, "upper": 1023, "bin_width": 256, "resolution": 1},
    "y": {"type": "integer", "lower": 0, "upper": 1023, "bin_width": 256, "resolution": 1},
    "g": {"type": "categorical", "values": ["a", "b", "c"]},
    "v": {"type": "numeric", "lower": 0, "upper": 100, "bin_width": 10, "resolution": 1}}}}})
BATCH = """
SELECT g, COUNT(*) AS n FROM t GROUP BY g;
SELECT COUNT(*) AS n FROM t WHERE x < 10 AND y > 500;
SELECT x, COUNT(*) AS n FROM t WHERE x < 100 AND y > 7 GROUP BY x;
SELECT y, SUM(v) AS s FROM t WHERE y BETWEEN 3 AND 900 GROUP BY y;
SELECT COUNT(v) AS n FROM t WHERE x >= 20 AND y < 1000
"""


class Counting(DuckDBBackend):
    """The real backend, counting its scans."""

    def __init__(self, con: duckdb.DuckDBPyConnection, *, one_by_one: bool = False) -> None:
        super().__init__(con)
        self.scans: list[str] = []
        self.one_by_one = one_by_one

    def cell_data(self, *args: Any, **kwargs: Any) -> CellData:
        self.scans.append("cell_data")
        return super().cell_data(*args, **kwargs)

    def cell_data_sets(self, table: Table, cell_sets: Sequence[Sequence[Column]], **kwargs: Any) -> list[CellData]:
        if self.one_by_one:
            return [self.cell_data(table, cells, **kwargs) for cells in cell_sets]
        self.scans.append("cell_data_sets")
        return super().cell_data_sets(table, cell_sets, **kwargs)


def data() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    rng = np.random.default_rng(3)
    con.execute("CREATE TABLE t (x INTEGER, y INTEGER, g VARCHAR, v DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(int(rng.integers(0, 1024)), int(rng.integers(0, 1024)),
                                                           str(rng.choice(["a", "b", "c"])),
                                                        None if k % 7 == 0 else float(rng.integers(0, 101)))
                                                          for k in range(400)])
    return con


def test_groups_are_scanned_once_and_answer_as_when_scanned_apart() -> None:
    prepared = engine.prepare(BATCH, SCHEMA, PrivacyCost(epsilon=1.0))
    assert len(prepared.groups.compiled.groups) > 1
    con = data()
    once, apart = Counting(con), Counting(con, one_by_one=True)
    first = engine.run(prepared, backend=once, budget=Budget(epsilon=10), rng=SeededRandomSource(7))
    second = engine.run(prepared, backend=apart, budget=Budget(epsilon=10), rng=SeededRandomSource(7))
    assert once.scans == ["cell_data_sets"]
    assert apart.scans == ["cell_data"] * len(prepared.groups.compiled.groups)
    for a, b in zip(first, second):
        assert a.equals(b)  # the same cells, so the same noisy answers for the same seed
