"""Backends: where the data lives. Each computes a table's data vector from the declared schema alone.

Only :mod:`dpsql.backends.duckdb` exists so far; :class:`Backend` is the surface the rest of
dpsql relies on, so another engine can be added beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from dpsql.backends.duckdb import CellData, DuckDBBackend, arrow_table
from dpsql.schema import Column, Table


class Backend(Protocol):
    """What a backend provides: a catalog check and the one-scan data vector of a table."""

    def check_table(self, table: Table) -> None: ...

    def cell_data(self, table: Table, cell_columns: Sequence[Column], *, sum_columns: Mapping[Column, float] = ...,
                  count_columns: Sequence[Column] = ()) -> CellData: ...

    def close(self) -> None: ...


__all__ = ["Backend", "CellData", "DuckDBBackend", "arrow_table"]
