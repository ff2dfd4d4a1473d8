"""The Backend protocol (``dpsql.backends.base``): what it declares, and that DuckDBBackend implements it."""

from __future__ import annotations

import collections
import inspect
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest

import dpsql
from _helpers import MIXED_COLUMNS
from dpsql.backends import Backend, file_identity
from dpsql.backends.base import BACKEND_MEMBERS, CellData, IntArray, MeasureProfile, missing_members
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger
from dpsql.errors import InterfaceError, LedgerError, SchemaError, ShapeError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Categorical, Column, Ordered, Schema, Table

NO_SUMS: Mapping[Column, float] = MappingProxyType({})


def test_duckdb_backend_implements_the_protocol(tmp_path: Path) -> None:
    database = tmp_path / "d.duckdb"
    duckdb.connect(str(database)).close()
    with DuckDBBackend(":memory:") as memory, DuckDBBackend(database) as on_file:
        assert isinstance(memory, Backend) and isinstance(on_file, Backend)
        assert missing_members(memory) == [] and memory.dialect == "duckdb"
        assert memory.in_memory and memory.identity == ""
        assert not on_file.in_memory and on_file.identity == file_identity(database)
    connection = duckdb.connect()
    with DuckDBBackend(connection) as handed_in:  # a connection handed in binds no file (as Binding.of did)
        assert handed_in.identity == ""


def test_the_member_list_is_the_protocol() -> None:
    declared = {name for name, value in vars(Backend).items()
                if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}
    assert set(BACKEND_MEMBERS) == declared
    assert missing_members(object()) == list(BACKEND_MEMBERS)


def test_importing_the_protocol_imports_no_database_package() -> None:
    code = "import sys, dpsql.backends, dpsql.backends.base; assert 'duckdb' not in sys.modules, 'duckdb imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# ============================================================================ dpsql.connect(backend)
SCHEMA = {"tables": {"people": {"columns": {"sex": {"type": "categorical", "values": ["F", "M"]}}}}}
BATCH = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
FILL = "CREATE TABLE people AS SELECT CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex FROM range(300) AS r(i)"


class Forwarding:
    """A Backend by delegation (not a DuckDBBackend subclass) whose public facts the test chooses."""

    dialect = "duckdb"

    def __init__(self, inner: DuckDBBackend, *, in_memory: bool, identity: str) -> None:
        self.inner, self.in_memory, self.identity, self.closed = inner, in_memory, identity, False
        self.check_table, self.cell_data, self.cell_data_sets = inner.check_table, inner.cell_data, inner.cell_data_sets
        self.marginal_counts, self.measure_profile = inner.marginal_counts, inner.measure_profile

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def _filled() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(FILL)
    return con


def _answers(database: object, seed: int, **books: object) -> list[tuple[object, ...]]:
    with dpsql.connect(database, schema=SCHEMA, rng=SeededRandomSource(seed), **books) as connection:  # type: ignore[arg-type]
        return connection.cursor().execute(BATCH, epsilon=1.0).fetchall()


def test_connect_takes_a_backend_object_and_answers_as_with_the_database() -> None:
    by_database = _answers(_filled(), 3, budget=dpsql.Budget(epsilon=2.0))
    backend = Forwarding(DuckDBBackend(_filled()), in_memory=True, identity="")
    assert _answers(backend, 3, budget=dpsql.Budget(epsilon=2.0)) == by_database
    assert backend.closed  # the connection closed the backend it was given
    assert _answers(DuckDBBackend(_filled()), 3, budget=dpsql.Budget(epsilon=2.0)) == by_database


def test_connect_refuses_an_object_that_is_not_a_backend() -> None:
    with pytest.raises(dpsql.ProgrammingError, match="a dict lacks dialect, in_memory, identity, check_table"):
        dpsql.connect({}, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0))  # type: ignore[arg-type]


def test_stored_data_behind_a_backend_need_a_ledger_bound_to_its_identity(tmp_path: Path) -> None:
    stored = Forwarding(DuckDBBackend(_filled()), in_memory=False, identity="cluster://people@v1")
    with pytest.raises(dpsql.ProgrammingError, match=r"in-memory budget for data in memory.*cluster://people@v1"):
        dpsql.connect(stored, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0))
    assert not stored.closed  # a refused connect leaves the caller's backend open
    with pytest.raises(dpsql.ProgrammingError, match="a Forwarding backend needs budget="):
        dpsql.connect(stored, schema=SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match="rng= is for tests"):
        dpsql.connect(stored, schema=SCHEMA, ledger=tmp_path / "l", dataset="people", rng=SeededRandomSource(1))
    ledger = Ledger(tmp_path / "people.dpsql-ledger")
    ledger.set_total("people", PrivacyCost(epsilon=1.0),
                     binding=Binding(schema=Schema.load(SCHEMA).canonical(), database=stored.identity))
    with dpsql.connect(stored, schema=SCHEMA, ledger=ledger.path, dataset="people") as connection:
        assert len(connection.cursor().execute(BATCH, epsilon=0.25).fetchall()) == 2
    assert ledger.balance("people").left == Fraction(3, 4)
    moved = Forwarding(DuckDBBackend(_filled()), in_memory=False, identity="cluster://people@v2")
    with dpsql.connect(moved, schema=SCHEMA, ledger=ledger.path, dataset="people") as connection, \
            pytest.raises(LedgerError, match="cluster://people@v2"):
        connection.cursor().execute(BATCH, epsilon=0.25)
    assert ledger.balance("people").left == Fraction(3, 4)


# ==================================================================== an independent second backend
class ArrayBackend:
    """A second Backend, independent of DuckDBBackend: the table copied into Python lists, binned from the
    schema's definitions (positions in ``values``; base cells [b_k, b_{k+1}) by bisection over
    ``boundaries``, closed at the top for numeric domains and explicit integer edges), summed with
    numpy. No privacy unit (it refuses one in ``check_table``, before the charge), no SQL."""

    dialect = None
    in_memory = True
    identity = ""

    def __init__(self, connection: duckdb.DuckDBPyConnection, name: str) -> None:
        result = connection.execute(f'SELECT * FROM "{name}"')
        names = [d[0].lower() for d in result.description]
        rows = result.fetchall()
        self.name, self.data = name, {n: [row[i] for row in rows] for i, n in enumerate(names)}
        self.calls: collections.Counter[str] = collections.Counter()
        self.closed = False

    # ------------------------------------------------------------------------------ protocol
    def check_table(self, table: Table) -> None:
        self._open("check_table")
        missing = [name for name in table.columns if name.lower() not in self.data]
        if table.name != self.name or missing:
            raise SchemaError(f"table '{table.name}' or its columns {missing} are not in this ArrayBackend.")
        if table.privacy_unit.column is not None:
            raise SchemaError("this ArrayBackend caps no rows per privacy unit; declare none.")

    def cell_data(self, table: Table, cell_columns: Sequence[Column], *, sum_columns: Mapping[Column, float] = NO_SUMS,
                  count_columns: Sequence[Column] = ()) -> CellData:
        self._open("cell_data")
        return self._cell_data(table, cell_columns, sum_columns, count_columns)

    def cell_data_sets(self, table: Table, cell_sets: Sequence[Sequence[Column]], *,
                       sum_columns: Mapping[Column, float] = NO_SUMS,
                       count_columns: Sequence[Column] = ()) -> list[CellData]:
        self._open("cell_data_sets")  # no cap, so every set is over the same rows
        return [self._cell_data(table, cells, sum_columns, count_columns) for cells in cell_sets]

    def marginal_counts(self, table: Table, cell_columns: Sequence[Column],
                        marginals: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], IntArray]:
        self._open("marginal_counts")
        keys = [tuple(m) for m in marginals]
        if not keys or len(set(keys)) != len(keys) or any(
                list(m) != sorted(set(m)) or not all(0 <= i < len(cell_columns) for i in m) for m in keys):
            raise ShapeError(f"bad marginals {keys!r}")
        kept = self._kept(table)
        cells = [self._cells(c)[kept] for c in cell_columns]
        tables = {}
        for marginal in keys:
            counts = np.zeros(tuple(cell_columns[i].domain.size + 1 for i in marginal), dtype=np.int64)
            np.add.at(counts, tuple(cells[i] for i in marginal), 1)
            counts.setflags(write=False)
            tables[marginal] = counts
        return tables

    def measure_profile(self, table: Table, column: Column, quantum: float, below: Sequence[float],
                        clip: Sequence[int]) -> MeasureProfile:
        self._open("measure_profile")
        scaled, present = self._measure(column, quantum)
        kept = self._kept(table) & present
        magnitude = np.abs(scaled[kept])
        return MeasureProfile(rows=int(kept.sum()), below=tuple(int((magnitude <= u / quantum).sum()) for u in below),
                              clipped_sums=tuple(int(np.minimum(magnitude, int(t)).sum()) for t in clip))

    def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------------------------ internals
    def _open(self, method: str) -> None:
        if self.closed:
            raise InterfaceError("this ArrayBackend is closed")
        self.calls[method] += 1

    def _cell_data(self, table: Table, cell_columns: Sequence[Column], sums: Mapping[Column, float],
                   counts: Sequence[Column]) -> CellData:
        kept = self._kept(table)
        shape = tuple(c.domain.size + 1 for c in cell_columns)
        flat = np.ravel_multi_index(tuple(self._cells(c)[kept] for c in cell_columns), shape) if shape \
            else np.zeros(int(kept.sum()), dtype=np.int64)
        index, inverse = np.unique(flat, return_inverse=True)

        def per_cell(values: IntArray) -> IntArray:
            out = np.zeros(index.size, dtype=np.int64)
            np.add.at(out, inverse, values)
            out.setflags(write=False)
            return out

        measured = {c.name: per_cell(np.where(p, v, 0)[kept]) for c, (v, p) in
                    ((c, self._measure(c, q)) for c, q in sums.items())}
        nonnull = {c.name: per_cell(self._present(c)[kept].astype(np.int64)) for c in counts}
        index.setflags(write=False)
        return CellData(shape=shape, index=index.astype(np.int64), counts=per_cell(np.ones(flat.size, dtype=np.int64)),
                        sums=measured, nonnull=nonnull)

    def _values(self, column: Column) -> list[object]:
        return self.data[column.name.lower()]

    def _present(self, column: Column) -> npt.NDArray[np.bool_]:
        return np.array([v is not None and not (isinstance(v, float) and math.isnan(v)) for v in self._values(column)])

    def _cells(self, column: Column) -> IntArray:
        """Each row's base cell for ``column`` (``domain.size``: outside)."""
        domain, values, present = column.domain, self._values(column), self._present(column)
        if isinstance(domain, Categorical):
            position = {str(v): k for k, v in enumerate(domain.values)}
            return np.array([position.get(str(v), domain.size) if p else domain.size for v, p in zip(values, present)],
                            dtype=np.int64)
        assert isinstance(domain, Ordered) and domain.kind != "date"  # this test backend reads numbers only
        bounds, last = np.asarray(domain.boundaries), domain.size - 1
        numbers = np.array([float(v) if p else math.nan for v, p in zip(values, present)])  # type: ignore[arg-type]
        closed = domain.kind == "numeric" or (domain.kind == "integer" and domain.uniform_step is None)
        cells = np.minimum(np.searchsorted(bounds, numbers, side="right") - 1, last)
        cells[numbers < bounds[0]] = 0 if domain.clamp else domain.size
        cells[(numbers > bounds[-1]) if closed else (numbers >= bounds[-1])] = last if domain.clamp else domain.size
        cells[~present] = domain.size
        return cells.astype(np.int64)

    def _measure(self, column: Column, quantum: float) -> tuple[IntArray, npt.NDArray[np.bool_]]:
        """round(clamp(v, lo, hi) / quantum) per row, half away from zero (0 where the row has no value)."""
        assert column.measure_bounds is not None
        low, high = column.measure_bounds
        present = self._present(column)
        scaled = []
        for value, p in zip(self._values(column), present):
            x = min(max(float(value), low), high) / quantum if p else 0.0  # type: ignore[arg-type]
            whole = math.floor(abs(x))
            scaled.append(int(math.copysign(whole + (abs(x) - whole >= 0.5), x)))
        return np.array(scaled, dtype=np.int64), present

    def _kept(self, table: Table) -> npt.NDArray[np.bool_]:
        """Rows not dropped by an ``out_of_domain = "exclude"`` column."""
        kept = np.ones(len(next(iter(self.data.values()))), dtype=bool)
        for column in table.columns.values():
            if column.outside_excluded:
                kept &= self._cells(column) != column.domain.size
        return kept


ROWS = 2000
COLUMNS = MIXED_COLUMNS
BATCHES: dict[str, tuple[str, dict[str, float], set[str]]] = {
    "statement groups": ("""
        SELECT sex, COUNT(*) AS n FROM t GROUP BY sex;
        SELECT region, sex, COUNT(*) AS n FROM t GROUP BY region, sex;
        SELECT COUNT(*) AS n FROM t WHERE age BETWEEN 3 AND 11;
        SELECT sex, SUM(income) AS s, AVG(income) AS a, COUNT(income) AS c FROM t GROUP BY sex;
        SELECT rooms, COUNT(*) AS n, AVG(income) AS a FROM t WHERE age < 10 GROUP BY rooms
        """, {"epsilon": 1.0}, {"cell_data_sets"}),
    "residual planner": ("""
        SELECT sex, region, COUNT(*) AS n FROM t GROUP BY sex, region;
        SELECT region, rooms, COUNT(*) AS n FROM t GROUP BY region, rooms;
        SELECT sex, rooms, COUNT(*) AS n FROM t GROUP BY sex, rooms;
        SELECT COUNT(*) AS n FROM t
        """, {"rho": 0.5}, {"marginal_counts"}),
    "truncated sum": ("SELECT region, SUM(wealth) AS w, COUNT(*) AS n FROM t GROUP BY region",
                      {"epsilon": 2.0}, {"measure_profile"}),
    "rounded value cells": ("SELECT sex, SUM(score) AS s, AVG(score) AS a FROM t GROUP BY sex", {"rho": 0.25},
                            {"cell_data"}),
}


def _rows() -> list[tuple[object, ...]]:
    """A fixed, uneven pattern with NULLs and values outside the domains (no generator whose stream could change)."""
    return [((i * 7) % 23 if i % 31 else None, "FMX"[(i * 5 // 3) % 3] if i % 11 else "F", "NESW"[(i * 3) % 4],
             1 + (i * 11) % 4, float((i * 37) % 107) if i % 13 else math.nan, (i * 13 % 7) / 2,
             (i * 7919) % 50_000 + (900_000 if i % 97 == 0 else 0)) for i in range(ROWS)]


def _people() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (age INTEGER, sex VARCHAR, region VARCHAR, rooms INTEGER, income DOUBLE, "
                "score DOUBLE, wealth BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)", _rows())
    return con


def _release(database: object, sql: str, cost: dict[str, float], rng: SeededRandomSource) -> list[pa.Table]:
    family = "epsilon" if "epsilon" in cost else "rho"
    with dpsql.connect(database, schema={"tables": {"t": {"columns": COLUMNS}}},  # type: ignore[arg-type]
                       budget=dpsql.Budget(**{family: 1e6}), rng=rng) as connection:
        return connection.cursor().execute(sql, **cost).fetch_arrow_tables()


@pytest.mark.parametrize("name", list(BATCHES))
def test_an_independent_backend_gives_the_answers_of_duckdb(name: str) -> None:
    """Same data, same seed: the same plan reads the same exact aggregates, so every answer is identical."""
    sql, cost, methods = BATCHES[name]
    arrays = ArrayBackend(_people(), "t")
    assert isinstance(arrays, Backend) and not isinstance(arrays, DuckDBBackend)
    found = _release(arrays, sql, cost, SeededRandomSource(7))
    expected = _release(_people(), sql, cost, SeededRandomSource(7))
    assert [t.to_pydict() for t in found] == [t.to_pydict() for t in expected]
    assert methods <= set(arrays.calls) and arrays.calls["check_table"] == 1 and arrays.closed


@pytest.mark.slow
def test_answers_through_the_independent_backend_are_calibrated() -> None:
    """z = (answer − truth) / reported stddev over repeated seeded releases of counts and a SUM has mean 0
    and mean square 1. Tolerances: 4σ of the mean of N z-values (σ² = 1/N) and of their mean square
    (σ² ≤ Var(z²)/N ≤ 5/N: a unit-variance Laplace has E z⁴ = 6; sums of noise terms have less)."""
    rows = _rows()
    truth = {("n", s): sum(1 for r in rows if r[1] == s) for s in "FM"}
    truth |= {("r", s): sum(int(r[3]) for r in rows if r[1] == s) for s in "FM"}  # type: ignore[call-overload]
    sql = "SELECT sex, COUNT(*) AS n, SUM(rooms) AS r FROM t GROUP BY sex"
    arrays, rng = ArrayBackend(_people(), "t"), SeededRandomSource(2026)
    z: dict[str, list[float]] = {"n": [], "r": []}
    with dpsql.connect(arrays, schema={"tables": {"t": {"columns": COLUMNS}}}, budget=dpsql.Budget(epsilon=1e6),
                       rng=rng) as connection:
        cursor = connection.cursor()
        for _ in range(150):
            for row in cursor.execute(sql, epsilon=0.5, reuse=False).fetch_arrow_table().to_pylist():  # replicates
                for a, scores in z.items():
                    scores.append((row[a] - truth[a, row["sex"]]) / row[f"{a}_stddev"])
    for aggregate, found in z.items():
        scores = np.asarray(found)
        assert abs(scores.mean()) < 4 / math.sqrt(scores.size), aggregate
        assert abs(np.mean(scores**2) - 1) < 4 * math.sqrt(5 / scores.size), aggregate
