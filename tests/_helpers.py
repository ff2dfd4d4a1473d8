"""Helpers shared by test modules: Hypothesis strategies and a DuckDB backend that scans once."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
from hypothesis import strategies as st

from dpsql.backends.duckdb import DuckDBBackend

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
