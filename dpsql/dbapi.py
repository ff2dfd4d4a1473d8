"""PEP 249 Connection and Cursor: the thin stateful shell around the engine's request pipeline.

``Cursor.execute`` takes one statement or a whole batch; the batch is answered jointly (one scan,
one measurement per data vector, one budget charge) and each statement's result becomes a result
set (``nextset()`` moves on). The batch's cost is given per call as ``epsilon=`` or ``rho=`` and is
drawn either from the privacy ledger (``dpsql.budget.ledger``, a durable file: always, for a database
file) or, for data in memory only, from an in-memory ``Budget`` that lasts as long as the
connection. ``explain()`` reports the plan without spending.

Both build a :class:`dpsql.engine.request.Request` and hand it to :mod:`dpsql.engine.pipeline`, as
``dpsql run`` and ``dpsql serve`` do: the connection is the pipeline's ``Context`` (the schema, the
backend, the budget, the kept releases); the cursor keeps the result sets.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import pyarrow as pa

from dpsql.backends.base import Backend
from dpsql.backends.choose import choose_backend, file_table, is_address
from dpsql.backends.duckdb import attached_files
from dpsql.budget.account import Account
from dpsql.budget.accounting import Budget, PrivacyBudget, PrivacyCost
from dpsql.budget.ledger import BatchRecord, Binding, Ledger, default_path
from dpsql.engine import pipeline
from dpsql.engine.request import Request
from dpsql.engine.reuse.release_store import LedgerStore, MemoryStore, ReleaseStore
from dpsql.errors import InterfaceError, NotSupportedError, ProgrammingError
from dpsql.noise import RandomSource
from dpsql.schema import Schema

_ARROW_TYPE_CODES = {pa.string(): "STRING", pa.int64(): "NUMBER", pa.float64(): "NUMBER", pa.date32(): "DATETIME"}


Database = str | os.PathLike[str] | duckdb.DuckDBPyConnection


def connect(
    database: Database | Backend | Any = ":memory:",
    *,
    schema: str | os.PathLike[str] | Mapping[str, Any] | Schema,
    budget: Budget | None = None,
    ledger: str | os.PathLike[str] | None = None,
    dataset: str | None = None,
    analyst: str | None = None,
    rng: RandomSource | None = None,
    tables: Mapping[str, Any] | None = None,
    dialect: str | None = None,
    epsilon_per_batch: float | None = None,
    rho_per_batch: float | None = None,
) -> Connection:
    """Open a private connection to a DuckDB database (a path, ":memory:" or a connection, the embedded
    default), to Apache Spark (a ``SparkSession``, or ``"sc://host:port"`` for Spark Connect), to
    PostgreSQL (``"postgresql://..."``, or a PEP 249 connection with ``dialect="postgres"``), or to any
    object implementing the ``dpsql.backends.Backend`` protocol (``dpsql.backends.choose``).

    A database path is always opened read-only, with DuckDB's external access and extension
    loading disabled and its configuration locked (``dpsql.backends.duckdb``): dpsql never writes,
    so any number of connections and ``dpsql run`` processes can read one file at once. An open
    DuckDB connection passed in is used as it is (it cannot be reconfigured); for it, as for
    every database, only tables and views of the database's own catalog are ever read. A Backend
    passed in is used as it is, only through its protocol; the connection closes it on ``close()``.

    Where the budget comes from:
        a database file: the ledger file next to it (``people.duckdb.dpsql-ledger``), or
        ``ledger=PATH``; its total is set by the data owner with ``dpsql budget set``.
        ``budget=Budget(...)``: an in-memory budget for this connection only, accepted only for
        data in memory (``":memory:"``, a DuckDB connection none of whose databases is a file, or
        a Backend whose ``in_memory`` is true): tests, demos, examples. Stored data's budget is
        always the ledger's. Anything but a database file needs one of ``budget=`` and
        ``ledger=`` (with ``dataset=``); the ledger binds the dataset to the backend's ``identity``.

    Args:
        database: the data; dpsql only ever runs SQL it generates from the schema against it.
        schema: the public schema (TOML path or text, dict, or Schema).
        budget: an in-memory total, ``Budget(epsilon=...)`` or ``Budget(rho=...)``; not with ``ledger``.
        ledger: the ledger file (default: next to a database file).
        dataset: the dataset's name in the ledger (default: the database file's name).
        analyst: charge this analyst's sub-budget too, if the owner set one.
        rng: a seeded random source, for tests on in-memory data only (with ``budget=``); everything
            else draws from the operating system. A chosen seed lets its holder replay the noise.
        tables: Spark and PostgreSQL only: where each declared table is, by declared name
            (``{"people": "catalog.db.people"}``; for Spark also a DataFrame); default: its declared name.
        dialect: ``"postgres"`` for a PEP 249 connection to PostgreSQL (other engines are recognised).
        epsilon_per_batch, rho_per_batch: the cost of a batch executed without ``epsilon=``/``rho=``, so that
            ``cursor.execute(sql)`` and tools that speak only PEP 249 (``pandas.read_sql``) work; each call is
            still one batch, charged before it reads data. At most one of the two.

    Raises:
        OperationalError: there is no file at the database path, DuckDB cannot open it, or the Spark or
            PostgreSQL address cannot be reached. PEP 249 puts "the data source name is not found" under
            OperationalError; nothing is created.
        ProgrammingError: ``database`` is none of the forms above (or tables=/dialect= do not fit it), budget= and
            ledger= together, a budget that is not a Budget, budget= for stored data, rng= without
            an in-memory budget on in-memory data, or no budget source for anything but a database
            file. Nothing dpsql opened stays open and nothing is charged.
    """
    default_cost = (None if epsilon_per_batch is None and rho_per_batch is None
                    else PrivacyCost(epsilon=epsilon_per_batch, rho=rho_per_batch))  # checked before anything opens
    source = schema if isinstance(schema, (str, Mapping, Schema)) else Path(os.fspath(schema))
    if is_address(database) and (ledger is None or dataset is None):  # checked before a server is contacted
        raise ProgrammingError(f"a connection to {str(database).split('://')[0]}://... reads data stored on a server: "
                               "its budget is kept in a ledger, so pass ledger=PATH and dataset='name' (the owner "
                               "sets its total with `dpsql budget set --db ADDRESS --ledger PATH --dataset NAME`).")
    loaded = Schema.load(source)
    backend = choose_backend(database, dialect=dialect, tables=tables, table=file_table(database, loaded))
    try:
        books = _books(database, backend, budget, ledger, dataset, analyst)
        if isinstance(books, Account):  # charges check the data and schema the owner bound the dataset to
            books = books.bound_to(Binding(schema=loaded.canonical(), database=backend.identity))
        return Connection(backend, loaded, books, rng, default_cost)
    except BaseException:
        if backend is not database:  # a Backend passed in stays its caller's until the connection exists
            backend.close()
        raise


def _books(database: Database | Backend, backend: Backend, budget: Budget | None,
           ledger: str | os.PathLike[str] | None, dataset: str | None, analyst: str | None) -> Budget | Account:
    """The connection's budget: the in-memory Budget (in-memory data only), or an Account in a ledger."""
    if budget is not None and ledger is not None:
        raise ProgrammingError("pass either budget= (an in-memory budget for this connection) or ledger= (a durable "
                               "ledger file), not both.")
    path = (Path(os.fspath(database)) if isinstance(database, (str, os.PathLike)) and database != ":memory:"
            and not is_address(database) else None)
    if budget is not None:
        _check_budget(budget, _stored_at(database, backend, path), dataset, analyst)
        return budget
    for name, value in (("dataset", dataset), ("analyst", analyst)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ProgrammingError(f"{name}= must be a non-empty name; got {value!r}.")
    if path is not None:
        return Account(ledger=Ledger(default_path(path) if ledger is None else ledger), dataset=dataset or path.name,
                       analyst=analyst)
    if ledger is None:
        where = ("':memory:' or to an open DuckDB connection"
                 if database == ":memory:" or isinstance(database, duckdb.DuckDBPyConnection)
                 else f"a {type(backend).__name__} backend")
        raise ProgrammingError(f"a connection to {where} needs budget=dpsql.Budget(epsilon=...) (in memory, for this "
                               "connection only) or ledger=PATH (a durable ledger file).")
    if dataset is None:
        raise ProgrammingError("with ledger= and no database file, pass dataset='name': "
                               "which budget in the ledger to use.")
    return Account(ledger=Ledger(ledger), dataset=dataset, analyst=analyst)


def _stored_at(database: Database | Backend, backend: Backend, path: Path | None) -> list[str]:
    """Where the data are stored durably (files, or a Backend's identity); empty for data in memory only."""
    if path is not None:
        return [str(path)]
    if isinstance(database, duckdb.DuckDBPyConnection):
        return attached_files(database)
    if backend.in_memory:  # ':memory:', in-memory Spark DataFrames, PostgreSQL temporary tables, ...
        return []
    return [backend.identity or f"the storage of a {type(backend).__name__}"]


def _check_budget(budget: object, stored: list[str], dataset: str | None, analyst: str | None) -> None:
    """An in-memory budget is for in-memory data only: stored data are accounted for in a ledger."""
    if not isinstance(budget, Budget):  # a durable budget comes from ledger=, never from budget=
        raise ProgrammingError(f"budget= must be dpsql.Budget(epsilon=...) or Budget(rho=...); got {budget!r}. "
                               "For a budget kept in a ledger, pass ledger=PATH and dataset= instead.")
    if dataset is not None or analyst is not None:
        raise ProgrammingError("dataset= and analyst= name a budget in a ledger; drop them, or pass ledger= instead of "
                               "budget=.")
    if stored:
        raise ProgrammingError("budget= is an in-memory budget for data in memory (tests, demos), but the data are in "
                               f"{', '.join(stored)}: a database file's budget is kept in its ledger. Drop budget=; "
                               "the data owner sets the total with "
                               "`dpsql budget set --db FILE --schema SCHEMA --epsilon ...` (or "
                               "dpsql.budget.ledger.Ledger(path).set_total(...)); pass ledger=PATH and dataset= for a "
                               "DuckDB connection. Nothing was charged.")


def _check_rng(rng: RandomSource | None, books: Budget | Account, backend: Backend) -> None:
    """A chosen random source only on in-memory test data with an in-memory budget.

    Why: with a known seed the noise is known. Answering a batch on the real data and again
    with the same seed on an empty database, then subtracting, gives exact counts; so no seeded
    or injected source may touch data that a ledger accounts for or that lives in a file.
    """
    if rng is not None and not (isinstance(books, Budget) and backend.in_memory):
        raise ProgrammingError("rng= is for tests on in-memory data: it is accepted only with budget=dpsql.Budget(...) "
                               "on in-memory data (':memory:', an in-memory DuckDB connection, or a backend whose "
                               "in_memory is true). A chosen random source would let its "
                               "holder replay and subtract the noise, so it is refused here; nothing was charged. "
                               "Drop rng= (noise then comes from the operating system).")


class Connection:
    """A PEP 249 connection holding the backend, the schema and where its budget is kept."""

    def __init__(self, backend: Backend, schema: Schema, books: Budget | Account, rng: RandomSource | None,
                 default_cost: PrivacyCost | None = None) -> None:
        _check_rng(rng, books, backend)
        self._backend, self.schema, self._books, self._rng = backend, schema, books, rng
        #: Where releases are kept for reuse: in memory with an in-memory budget, else in the ledger.
        self.releases: ReleaseStore = (MemoryStore() if isinstance(books, Budget)
                                       else LedgerStore(account=books, schema=schema.fingerprint(),
                                                        identity=backend.identity))
        #: The cost of a batch executed without epsilon= or rho= (``connect(epsilon_per_batch=...)``), or None.
        self.default_cost = default_cost
        self._closed = False

    @property
    def budget(self) -> PrivacyBudget:
        """The budget now: the in-memory Budget, or the ledger's balance (read now; LedgerError if unreadable)."""
        return self._books if isinstance(self._books, Budget) else self._books.budget()

    @property
    def backend_name(self) -> str:
        """Which backend reads the data, and in which SQL dialect (for EXPLAIN; public facts only)."""
        dialect = self._backend.dialect
        return f"Data read by: {type(self._backend).__name__}" + (f" ({dialect} SQL)" if dialect else "")

    @property
    def account(self) -> Account | None:
        """The ledger account the connection charges, or None with an in-memory budget."""
        return self._books if isinstance(self._books, Account) else None

    @property
    def backend(self) -> Backend:
        """Where the data are read (``dpsql.backends``); dpsql runs only the SQL it generates against it."""
        return self._backend

    @property
    def rng(self) -> RandomSource | None:
        """The seeded random source of ``connect(rng=...)``, or None: the operating system's randomness."""
        return self._rng

    def budget_for(self, batch: BatchRecord) -> PrivacyBudget:
        """What ``batch`` draws from: the in-memory Budget, or a ledger view whose charge records the batch."""
        if isinstance(self._books, Budget):
            return self._books
        return self._books.budget(batch)

    def cursor(self) -> Cursor:
        self._check_open()
        return Cursor(self)

    def close(self) -> None:
        if not self._closed:
            self._backend.close()
            self._closed = True

    def commit(self) -> None:
        """Nothing to commit: dpsql never writes to the database (charges commit on their own)."""
        self._check_open()

    def rollback(self) -> None:
        raise NotSupportedError("dpsql connections are read-only and have no transactions to roll back.")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
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
                progress: Callable[[str], None] | None = None, postprocess: Sequence[str] = (),
                weights: Sequence[float] | None = None, max_stddev: float | Sequence[float | None] | None = None,
                max_relative_stddev: float | Sequence[float | None] | None = None,
                family: str | None = None, reuse: bool = True) -> Cursor:
        """Answer a batch of statements privately at the given cost; the first result becomes current.

        Instead of a cost, ``max_stddev`` (one number, or one number or None per statement) asks for
        the least cost whose plan gives every COUNT/SUM answer a standard error at most that, found
        before any data is read and charged exactly (``family="rho"`` finds a ρ, default an ε);
        ``max_relative_stddev`` r asks for at most r times the most one row adds to the answer (1 for
        a COUNT, max(|lower|, |upper|) for a SUM). See ``dpsql.engine.reuse.accuracy_target``: a target the
        budget left cannot meet is refused (BudgetExhaustedError) before anything is read, and the
        results' metadata ``accuracy_target`` records the target and the cost found.

        Statements that releases this connection's analyst paid for (or the data owner shares)
        already determine are answered from them for free when that is at least as accurate as the
        batch's cost would make them without reuse (with a target: when it meets the target); the
        others are measured, and every answer combines the new and the kept measurements by
        generalized least squares, so paying always helps (``dpsql.engine.reuse.reuse``). ``reuse=False``
        measures every statement again and answers from this batch's measurements alone
        (independent replicates); its release is still kept.

        ``progress``, if given, receives a message before each long step. ``postprocess`` opts in
        to "nonnegative" and/or "isotonic" (``dpsql.engine.postprocess``; free, but biased). ``weights``
        (one positive number per statement, in statement order; default all 1) is each statement's
        weight in the planning objective (``dpsql.planning.weights``): a statement of weight 4 has its errors,
        relative to answering it alone, count four times as much as one of weight 1. The budget is
        read first (nothing is charged then; the charge itself is made atomically before any data
        is read), so a missing ledger or a spent budget is reported before the batch is planned.
        """
        self._check_open()
        request = Request(operation=operation, parameters=parameters, epsilon=epsilon, rho=rho,
                          default_cost=self.connection.default_cost, max_stddev=max_stddev,
                          max_relative_stddev=max_relative_stddev, family=family, weights=weights,
                          postprocess=postprocess, reuse=reuse, progress=progress)
        self._results, self._current, self._row = pipeline.answer(request, self.connection), 0, 0
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[object]], *,
                    epsilon: float | None = None, rho: float | None = None,
                    weights: Sequence[float] | None = None, max_stddev: float | Sequence[float | None] | None = None,
                    max_relative_stddev: float | Sequence[float | None] | None = None,
                    family: str | None = None) -> Cursor:
        """Execute ``operation`` once per parameter set; each run is its own batch and charge (an
        accuracy target: each run's own least cost)."""
        results: list[pa.Table] = []
        for parameters in seq_of_parameters:
            results.extend(self.execute(operation, parameters, epsilon=epsilon, rho=rho, weights=weights,
                                        max_stddev=max_stddev, max_relative_stddev=max_relative_stddev,
                                        family=family)._results)
        self._results, self._current, self._row = results, 0 if results else -1, 0
        return self

    def explain(self, operation: str, parameters: Sequence[object] | None = None, *,
                epsilon: float | None = None, rho: float | None = None, weights: Sequence[float] | None = None,
                max_stddev: float | Sequence[float | None] | None = None,
                max_relative_stddev: float | Sequence[float | None] | None = None, family: str | None = None,
                reuse: bool = True) -> str:
        """The plan (workload size, candidate strategies with expected RMSE, SVD bound, each statement's
        expected RMSE against answering it alone, cost); spends nothing. ``weights`` as in ``execute``.
        With ``max_stddev``/``max_relative_stddev`` (as in ``execute``), the plan at the least cost
        found, and each statement's largest predicted stddev against its target. With ``reuse``
        (default), statements earlier releases answer are listed as free, with their stddev.

        With a ledger that cannot be read (or has no total), the plan is still shown, followed by
        a line saying the budget state is unknown and why: ``execute`` fails until it is fixed.
        """
        self._check_open()
        request = Request(operation=operation, parameters=parameters, epsilon=epsilon, rho=rho,
                          default_cost=self.connection.default_cost, max_stddev=max_stddev,
                          max_relative_stddev=max_relative_stddev, family=family, weights=weights, reuse=reuse)
        return pipeline.explain(request, self.connection)

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

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
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
