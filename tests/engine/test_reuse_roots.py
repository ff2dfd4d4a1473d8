"""End to end: a kept release whose measurements have fewer rows than cells, over the cells a later
statement group meets them in (``benchmarks/batches.py``'s ISSUE_BATCH, then SECOND_BATCH on the same
connection), is reduced with the measurements as their own roots: no eigendecomposition of their
information (``dpsql.releases.reduce.psd_root``) runs for them. (That the pools' answers are those of the
eigendecomposition's roots: ``tests/releases/test_roots.py``.)
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import dpsql
from _helpers import benchmark_batches
from dpsql.budget.accounting import Budget
from dpsql.engine.reuse import reuse
from dpsql.noise import SeededRandomSource
from dpsql.releases import reduce


def _cursor(named: Any) -> dpsql.Cursor:
    rows = 3000
    rng = np.random.default_rng(4)
    data = duckdb.connect()
    data.register("source", pa.table({"age": rng.integers(0, 100, rows), "sex": rng.choice(["F", "M"], rows),
                                      "region": rng.choice([f"r{i:02d}" for i in range(50)], rows),
                                      "income": np.floor(rng.uniform(0, 500000, rows))}))
    data.execute("CREATE TABLE people AS SELECT * FROM source")
    return dpsql.connect(data, schema=named.PEOPLE, budget=Budget(epsilon=100.0),
                         rng=SeededRandomSource(9)).cursor()


def test_measurements_of_few_rows_over_the_classes_are_their_own_roots(monkeypatch: pytest.MonkeyPatch) -> None:
    named = benchmark_batches()
    cursor = _cursor(named)
    cursor.execute(";\n".join(named.ISSUE_BATCH), epsilon=1.0).fetch_arrow_tables()
    decomposed: list[tuple[int, int]] = []
    few_rows = []
    original_root, original_reduction = reduce.psd_root, reuse.on_classes_of_root

    def counted_root(S: np.ndarray) -> np.ndarray:
        decomposed.append(S.shape)
        return original_root(S)

    def reduction(X: np.ndarray, b: np.ndarray, found: reduce.Meet) -> reduce.Reduced:
        before = len(decomposed)
        reduced = original_reduction(X, b, found)
        if found.refines and X.shape[0] < found.of_measured.size:
            few_rows.append(len(decomposed) - before)
        return reduced

    monkeypatch.setattr(reduce, "psd_root", counted_root)
    monkeypatch.setattr(reuse, "on_classes_of_root", reduction)
    tables = cursor.execute(";\n".join(named.SECOND_BATCH), epsilon=1.0).fetch_arrow_tables()
    assert few_rows and all(count == 0 for count in few_rows)  # such classes met, none decomposed
    assert all(rows < 100 for rows, _ in decomposed)  # only small reductions' classes are decomposed
    assert all(np.all(np.isfinite(t[name].to_numpy())) for t in tables for name in t.column_names
               if pa.types.is_floating(t.schema.field(name).type))
