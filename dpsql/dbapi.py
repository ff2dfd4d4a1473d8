"""PEP 249 Connection and Cursor: the thin stateful shell around the engine.

``Cursor.execute`` takes one statement or a whole batch; the batch is answered jointly (one scan,
one measurement per data vector, one budget charge) and each statement's result becomes a result
set (``nextset()`` moves on). The batch's cost is given per call as ``epsilon=`` or ``rho=`` and is
drawn from the connection's ``Budget``. ``explain()`` reports the plan without spending.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import duckdb
import pyarrow as pa

from dpsql import engine
from dpsql.accounting import Budget, PrivacyCost
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import InterfaceError, NotSupportedError, ProgrammingError
from dpsql.noise import RandomSource
from dpsql.schema import Schema

_ARROW_TYPE_CODES = {pa.string(): "STRING", pa.int64(): "NUMBER", pa.float64(): "NUMBER", pa.date32(): "DATETIME"}


def connect(
    database: str | os.PathLike[str] | duckdb.DuckDBPyConnection = ":memory:",
    *,
    schema: str | os.PathLike[str] | Mapping[str, Any] | Schema,
    budget: Budget,
    read_only: bool = False,
    rng: RandomSource | None = None,
) -> Connection:
    """Open a private connection to a DuckDB database (a path, ":memory:" or a connection).

    Args:
        database: the data; dpsql only ever runs SQL it generates from the schema against it.
        schema: the public schema (TOML path or text, dict, or Schema).
        budget: the connection's total privacy budget, ``Budget(epsilon=...)`` or ``Budget(rho=...)``.
        read_only: open a database path read-only.
        rng: a seeded random source, for tests only; production uses OS randomness.
    """
    if not isinstance(budget, Budget):
        raise ProgrammingError("connect() needs budget=dpsql.Budget(epsilon=...) or Budget(rho=...): the total privacy budget.")
    source = schema if isinstance(schema, (str, Mapping, Schema)) else Path(os.fspath(schema))
    return Connection(DuckDBBackend(database, read_only=read_only), Schema.load(source), budget, rng)


class Connection:
    """A PEP 249 connection holding the backend, the schema and the privacy budget."""

    def __init__(self, backend: DuckDBBackend, schema: Schema, budget: Budget, rng: RandomSource | None) -> None:
        self._backend, self.schema, self.budget, self._rng = backend, schema, budget, rng
        self._closed = False

    def cursor(self) -> Cursor:
        self._check_open()
        return Cursor(self)

    def close(self) -> None:
        if not self._closed:
            self._backend.close()
            self._closed = True

    def commit(self) -> None:
        """Nothing to commit: dpsql never writes to the database."""
        self._check_open()

    def rollback(self) -> None:
        raise NotSupportedError("dpsql connections are read-only and have no transactions to roll back.")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the connection is closed; open a new one with dpsql.connect(...).")

    @property
    def closed(self) -> bool:
        return self._closed


class Cursor:
    """A PEP 249 cursor over the result sets of the last executed batch."""

    arraysize: int = 1

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._results: list[pa.Table] = []
        self._current = -1
        self._row = 0
        self._closed = False

    # ------------------------------------------------------------------------------- execution
    def execute(self, operation: str, parameters: Sequence[object] | None = None, *,
                epsilon: float | None = None, rho: float | None = None,
                progress: Callable[[str], None] | None = None, postprocess: Sequence[str] = ()) -> Cursor:
        """Answer a batch of statements privately at the given cost; the first result becomes current.

        ``progress``, if given, receives a message before each long step. ``postprocess`` opts in
        to "nonnegative" and/or "isotonic" (``dpsql.postprocess``; free, but biased).
        """
        self._check_open()
        prepared = engine.prepare(operation, self.connection.schema, PrivacyCost(epsilon=epsilon, rho=rho), parameters,
                                  progress=progress)
        results = engine.run(prepared, backend=self.connection._backend, budget=self.connection.budget,
                             rng=self.connection._rng, progress=progress, postprocess=postprocess)
        self._results, self._current, self._row = results, 0, 0
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[object]], *,
                    epsilon: float | None = None, rho: float | None = None) -> Cursor:
        """Execute ``operation`` once per parameter set; each run is its own batch and charge."""
        results: list[pa.Table] = []
        for parameters in seq_of_parameters:
            results.extend(self.execute(operation, parameters, epsilon=epsilon, rho=rho)._results)
        self._results, self._current, self._row = results, 0 if results else -1, 0
        return self

    def explain(self, operation: str, parameters: Sequence[object] | None = None, *,
                epsilon: float | None = None, rho: float | None = None) -> str:
        """The plan (workload size, candidate strategies with expected RMSE, SVD bound, cost); spends nothing."""
        self._check_open()
        prepared = engine.prepare(operation, self.connection.schema, PrivacyCost(epsilon=epsilon, rho=rho), parameters)
        return engine.explain(prepared, self.connection.budget)

    def callproc(self, procname: str, parameters: Sequence[object] = ()) -> None:
        raise NotSupportedError("dpsql has no stored procedures; send SELECT statements to execute().")

    # ------------------------------------------------------------------------------- results
    @property
    def description(self) -> tuple[tuple[str, str, None, None, None, None, bool], ...] | None:
        """Per column (name, type_code, None, None, None, None, null_ok) of the current result."""
        table = self._table()
        if table is None:
            return None
        return tuple((field.name, _ARROW_TYPE_CODES.get(field.type, str(field.type)), None, None, None, None, True)
                     for field in table.schema)

    @property
    def rowcount(self) -> int:
        table = self._table()
        return -1 if table is None else table.num_rows

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        table = self._require_table()
        count = self.arraysize if size is None else size
        chunk = table.slice(self._row, count)
        self._row += chunk.num_rows
        return list(zip(*(column.to_pylist() for column in chunk.columns))) if chunk.num_rows else []

    def fetchall(self) -> list[tuple[Any, ...]]:
        table = self._require_table()
        return self.fetchmany(table.num_rows - self._row)

    def fetch_arrow_table(self) -> pa.Table:
        """The current statement's whole result as a pyarrow.Table (rows not yet fetched and the rest)."""
        table = self._require_table()
        rest = table.slice(self._row)
        self._row = table.num_rows
        return rest

    def fetch_arrow_tables(self) -> list[pa.Table]:
        """Every statement's result, in statement order."""
        self._check_open()
        if self._current < 0:
            raise ProgrammingError("no results: call execute() first.")
        return list(self._results)

    def nextset(self) -> bool | None:
        """Move to the next statement's result; None when there is none."""
        self._check_open()
        if self._current < 0:
            raise ProgrammingError("no results: call execute() first.")
        if self._current + 1 >= len(self._results):
            return None
        self._current, self._row = self._current + 1, 0
        return True

    def setinputsizes(self, sizes: object) -> None:
        """Accepted and ignored (PEP 249)."""

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        """Accepted and ignored (PEP 249)."""

    def close(self) -> None:
        self._closed = True
        self._results = []

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while (row := self.fetchone()) is not None:
            yield row

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------------------- helpers
    def _table(self) -> pa.Table | None:
        return self._results[self._current] if 0 <= self._current < len(self._results) else None

    def _require_table(self) -> pa.Table:
        self._check_open()
        table = self._table()
        if table is None:
            raise ProgrammingError("no result set: call execute() first.")
        return table

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the cursor is closed; open a new one with connection.cursor().")
        self.connection._check_open()
