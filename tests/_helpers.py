"""Helpers shared by test modules: Hypothesis strategies and a DuckDB backend that scans once."""

from __future__ import annotations

import importlib.util
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.planning import mechanism

#: A mixed table's columns (counts, ranges, a numeric measure, rounded value cells, a truncated measure),
#: shared by the pinned-answers test and the second backend's test.
MIXED_COLUMNS: dict[str, dict[str, object]] = {
    "age": {"type": "integer", "lower": 0, "upper": 19},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "region": {"type": "categorical", "values": ["N", "E", "S", "W"]},
    "rooms": {"type": "integer", "lower": 1, "upper": 4},
    "income": {"type": "numeric", "lower": 0, "upper": 100, "bin_width": 25, "resolution": 1},
    "score": {"type": "numeric", "lower": 0, "upper": 3, "bin_width": 1, "resolution": 0.5, "value_cells": "rounded"},
    "wealth": {"type": "integer", "lower": 0, "upper": 1_000_000, "bin_width": 100_000, "truncate": "svt"},
}


#: UCI Adult's columns as integer codes, declared as issue 29 §5 does: four integers at resolution 1
#: (domain size, GROUP BY bin width), nine categorical codes 0..size−1; in the data set's order.
_ADULT_INTEGERS = {"age": (85, 5), "capital_gain": (100, 10), "capital_loss": (100, 10), "hours_per_week": (99, 10)}
_ADULT_CODES = {"workclass": 9, "fnlwgt": 100, "education_num": 16, "marital_status": 7, "occupation": 15,
                "relationship": 6, "race": 5, "sex": 2, "native_country": 42, "income_gt50k": 2}
ADULT_COLUMNS: dict[str, dict[str, object]] = {
    name: ({"type": "integer", "lower": 0, "upper": _ADULT_INTEGERS[name][0] - 1, "resolution": 1,
            "bin_width": _ADULT_INTEGERS[name][1]} if name in _ADULT_INTEGERS
           else {"type": "categorical", "values": list(range(_ADULT_CODES[name]))})
    for name in ["age", "workclass", "fnlwgt", "education_num", "marital_status", "occupation", "relationship",
                 "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country", "income_gt50k"]}
#: Issue 29 §5's batch: counts over five columns, an AVG apart, and two SUMs in the counts' group.
ADULT_BATCH = """
    SELECT COUNT(*) AS n FROM adult;
    SELECT sex, income_gt50k, COUNT(*) AS n FROM adult GROUP BY sex, income_gt50k;
    SELECT education_num, income_gt50k, COUNT(*) AS n FROM adult GROUP BY education_num, income_gt50k;
    SELECT marital_status, sex, COUNT(*) AS n FROM adult GROUP BY marital_status, sex;
    SELECT COUNT(*) AS n FROM adult WHERE age BETWEEN 9 AND 28;
    SELECT occupation, AVG(hours_per_week) AS a FROM adult GROUP BY occupation;
    SELECT income_gt50k, SUM(capital_gain) AS s FROM adult GROUP BY income_gt50k;
    SELECT SUM(capital_gain) AS s FROM adult WHERE age BETWEEN 29 AND 48"""


def adult_like(rows: int, seed: int) -> duckdb.DuckDBPyConnection:
    """A table ``adult`` shaped like UCI Adult (its columns and code domains; skewed categories,
    income above 50K for a quarter, capital gains mostly 0 and more often positive above 50K),
    generated: no real data."""
    rng = np.random.default_rng(seed)

    def skewed(size: int) -> np.ndarray:
        weights = 0.7 ** np.arange(size)
        return rng.choice(size, rows, p=weights / weights.sum())

    income = (rng.random(rows) < 0.24).astype(np.int64)
    columns = {name: skewed(size) for name, size in _ADULT_CODES.items()}
    columns |= {"income_gt50k": income, "sex": (rng.random(rows) < 0.67).astype(np.int64),
                "capital_gain": np.where(rng.random(rows) < 0.05 + 0.15 * income, rng.integers(1, 100, rows), 0),
                "age": np.clip(rng.normal(21, 13, rows).round(), 0, 84).astype(np.int64),
                "education_num": np.clip(rng.normal(9, 2.5, rows).round(), 0, 15).astype(np.int64),
                "capital_loss": np.where(rng.random(rows) < 0.05, rng.integers(1, 100, rows), 0),
                "hours_per_week": np.clip(rng.normal(39, 12, rows).round(), 0, 98).astype(np.int64)}
    con = duckdb.connect(":memory:")
    con.from_arrow(pa.table({name: columns[name] for name in ADULT_COLUMNS})).create("adult")
    return con


def groupings(dims: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    """Coarsenings of a domain's factorisation: (2,3,2) -> (2,3,2), (6,2), (2,6) or (12,)."""

    def merge(cuts: list[bool]) -> tuple[int, ...]:
        groups, current = [], dims[0]
        for d, cut in zip(dims[1:], cuts):
            if cut:
                groups.append(current)
                current = d
            else:
                current *= d
        return (*groups, current)

    return st.lists(st.booleans(), min_size=len(dims) - 1, max_size=len(dims) - 1).map(merge)


class ScansOnce(DuckDBBackend):
    """The real DuckDB backend, running each distinct scan once: the data do not change between
    releases, so a rescan returns the same cells (the noise is fresh every release)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        super().__init__(con)
        self._seen: dict[tuple[str, str], Any] = {}

    def _once(self, method: str, *args: Any, **kwargs: Any) -> Any:
        key = (method, repr((args, sorted(kwargs.items()))))
        if key not in self._seen:
            self._seen[key] = getattr(super(), method)(*args, **kwargs)
        return self._seen[key]

    def cell_data(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._once("cell_data", *args, **kwargs)

    def cell_data_sets(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._once("cell_data_sets", *args, **kwargs)

    def measure_profile(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._once("measure_profile", *args, **kwargs)

    def marginal_counts(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._once("marginal_counts", *args, **kwargs)


def sql_tampering(*statements: str) -> Callable[[Path], None]:
    """A change to a ledger file made with plain SQLite, without the key (tamper-evidence tests)."""
    def tamper(path: Path) -> None:
        with sqlite3.connect(path) as db:
            for statement in statements:
                db.execute(statement)
    return tamper


def assert_refused_free(data: duckdb.DuckDBPyConnection, schema: dict[str, Any], sql: str, error: type[Exception],
                        words: str) -> None:
    """``sql`` is refused with ``error`` naming ``words``, and nothing of the budget is spent."""
    import pytest

    import dpsql

    with dpsql.connect(data, schema=schema, budget=dpsql.Budget(epsilon=1.0)) as private:
        with pytest.raises(error) as caught:
            private.cursor().execute(sql, epsilon=0.5)
        assert words in str(caught.value) and private.budget.spent == 0.0


def duckdb_table(name: str, columns: str, rows: Sequence[tuple[object, ...]]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database holding table ``name`` (``columns``: its SQL column definitions) with ``rows``."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {name} ({columns})")
    con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return con


def captured_measurements(monkeypatch: Any) -> list[mechanism.Measurement]:
    """Every measurement ``mechanism.measure`` makes from now on (the test's ``monkeypatch`` undoes the wrapping)."""
    found: list[mechanism.Measurement] = []
    original = mechanism.measure

    def measure(*args: Any, **kwargs: Any) -> mechanism.Measurement:
        found.append(original(*args, **kwargs))
        return found[-1]

    monkeypatch.setattr(mechanism, "measure", measure)
    return found


def assert_matches_duckdb(con: duckdb.DuckDBPyConnection, sql: str, table: pa.Table, rounding: float = 1e-9) -> None:
    """Same rows in the same order as DuckDB's answer to ``sql`` (strings and NULLs equal, rolled-up keys
    NULL); numbers within 6 reported standard errors, which must be tiny (the test's budget is very large),
    plus ``rounding`` relatively (a measure's rounding to quanta, where the test's answers have it)."""
    names = [n for n in table.column_names if not n.endswith("_stddev")]
    rows = [list(row) for row in zip(*(table.column(n).to_pylist() for n in names))]
    truth = con.execute(sql).fetchall()
    assert len(rows) == len(truth) and len(names) == len(truth[0]), (rows, truth)
    for row_index, (got, expected) in enumerate(zip(rows, truth)):
        for name, value, true in zip(names, got, expected):
            if isinstance(true, str) or true is None:
                assert value == true, (name, got, expected)
                continue
            stddev = table.column(f"{name}_stddev")[row_index].as_py() if f"{name}_stddev" in table.column_names else 0
            assert stddev <= 1e-3 * max(1.0, abs(float(true))), (name, stddev)
            assert abs(value - float(true)) <= 6 * stddev + rounding * max(1.0, abs(float(true))), (name, value, true)


def benchmark_batches() -> Any:
    """``benchmarks/batches.py`` (the named batches shared with ``benchmarks/planner.py``), loaded by path."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "batches.py"
    spec = importlib.util.spec_from_file_location("dpsql_benchmark_batches", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_pools_agree(first: Any, second: Any, queries: np.ndarray) -> None:
    """Two GLS pools answer the same queries alike: the same answerable ones, values and covariances within
    10⁻⁷ of the largest entry (two exact factorisations differ by rounding)."""
    a, b = first.projected(queries), second.projected(queries)
    np.testing.assert_array_equal(a.answerable, b.answerable)
    scale = max(1.0, float(np.abs(b.values).max()), float(np.abs(b.covariances(b)).max()))
    np.testing.assert_allclose(a.values[a.answerable], b.values[b.answerable], rtol=0, atol=1e-7 * scale)
    np.testing.assert_allclose(a.covariances(a)[a.answerable], b.covariances(b)[b.answerable], rtol=0,
                               atol=1e-7 * scale)
