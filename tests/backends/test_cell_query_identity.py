"""The lean cell query gives the vectors of the definition: integer binning on integer grids, and coarser
grouping sets summed from the finest set they lie in.

Each cell is checked against a count computed here in plain Python from the same rows and the declared
boundaries (``b_k <= v < b_{k+1}``; the last boundary included for numeric domains; below lower / above
upper to the first / last cell under clamp, else outside; NULL outside), never from SQL.
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction
from types import MappingProxyType

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dpsql.backends.base import CellData
from dpsql.backends.cell_sql import MAX_FINEST_CELLS, finest_sets, marginal_cell_data
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.domains import Ordered
from dpsql.schema import Schema

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def expected_cell(domain: Ordered, value: int | None) -> int:
    """The cell of ``value`` by the declared boundaries, in Python."""
    if value is None:
        return domain.size
    bounds = domain.boundaries
    if value < bounds[0]:
        return 0 if domain.clamp else domain.size
    if value > bounds[-1] or (value == bounds[-1] and not domain.closed_top):
        return domain.size - 1 if domain.clamp else domain.size
    return min(bisect.bisect_right(bounds, value) - 1, domain.size - 1)


@st.composite
def integer_grids(draw: st.DrawFn) -> dict[str, object]:
    lower = draw(st.integers(-60, 60))
    step = draw(st.sampled_from([1, 2, 3, 7]))
    per_bin = draw(st.sampled_from([1, 2]))
    upper = lower + draw(st.integers(1, 40))
    spec: dict[str, object] = {"type": draw(st.sampled_from(["integer", "numeric"])), "lower": lower, "upper": upper,
                               "resolution": step, "bin_width": step * per_bin}
    if draw(st.booleans()):
        spec["out_of_domain"] = "clamp"
    return spec


VALUES = st.one_of(st.none(), st.integers(-80, 120), st.sampled_from([-(2**63), 2**63 - 1, -(2**62), 2**53 + 1]))


@SETTINGS
@given(grid=integer_grids(), values=st.lists(VALUES, max_size=60), sql_type=st.sampled_from(["BIGINT", "INTEGER"]))
def test_integer_grid_cells_match_the_boundaries(grid: dict[str, object], values: list[int | None],
                                                 sql_type: str) -> None:
    if sql_type == "INTEGER":
        values = [v if v is None or -(2**31) <= v < 2**31 else None for v in values]
    schema = Schema.load({"tables": {"t": {"columns": {"x": grid}}}})
    column = schema.table("t").columns["x"]
    assert isinstance(column.domain, Ordered)
    connection = duckdb.connect()
    connection.execute(f"CREATE TABLE t (x {sql_type})")
    if values:
        connection.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
    backend = DuckDBBackend(connection)
    assert "DOUBLE" not in backend.sql_for(schema.table("t"), [column])  # integer arithmetic only
    data = backend.cell_data(schema.table("t"), [column])
    counts = np.bincount([expected_cell(column.domain, v) for v in values], minlength=column.domain.size + 1)
    assert data.dense(data.counts).tolist() == counts.tolist()


@SETTINGS
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.integers(-5, 25)), st.sampled_from([None, "a", "b", "z"]),
                               st.one_of(st.none(), st.just(math.nan), st.floats(-10, 60))), max_size=80),
       sets=st.lists(st.lists(st.sampled_from(["x", "g", "v"]), unique=True, max_size=3), min_size=1, max_size=5))
def test_grouping_sets_match_per_cell_counts_and_sums(rows: list[tuple[int | None, str | None, float | None]],
                                                       sets: list[list[str]]) -> None:
    """Every requested set, whether aggregated by the database or summed from a finer set, holds the
    exact counts, sums and non-NULL counts of its cells."""
    schema = Schema.load({"tables": {"t": {"columns": {
        "x": {"type": "integer", "lower": 0, "upper": 19, "bin_width": 5, "resolution": 1, "out_of_domain": "clamp"},
        "g": {"type": "categorical", "values": ["a", "b"]},
        "v": {"type": "numeric", "lower": 0, "upper": 50, "bin_width": 10, "resolution": 5}}}}})
    table = schema.table("t")
    connection = duckdb.connect()
    connection.register("source", pa.table({"x": pa.array([r[0] for r in rows], pa.int64()),
                                            "g": pa.array([r[1] for r in rows], pa.string()),
                                            "v": pa.array([r[2] for r in rows], pa.float64())}))
    connection.execute("CREATE TABLE t AS SELECT * FROM source")
    columns = [[table.columns[name] for name in names] for names in sets]
    v = table.columns["v"]
    quantum = 0.5
    found = DuckDBBackend(connection).cell_data_sets(table, columns, sum_columns={v: quantum}, count_columns=[v])

    def cell(name: str, value: object) -> int:
        domain = table.columns[name].domain
        if name == "g":
            return ["a", "b"].index(value) if value in ("a", "b") else 2
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return domain.size
        assert isinstance(domain, Ordered)
        return expected_cell(domain, value)  # type: ignore[arg-type]

    for names, data in zip(sets, found):
        shape = tuple(table.columns[n].domain.size + 1 for n in names)
        counts, sums, nonnull = np.zeros(shape, int), np.zeros(shape, int), np.zeros(shape, int)
        for row in rows:
            values = dict(zip("xgv", row))
            key = tuple(cell(n, values[n]) for n in names)
            counts[key] += 1
            value = values["v"]
            if value is not None and not math.isnan(value):
                sums[key] += math.floor(min(max(value, 0.0), 50.0) / quantum + 0.5)  # half away from zero (≥ 0)
                nonnull[key] += 1
        assert data.shape == shape
        assert data.dense(data.counts).reshape(shape).tolist() == counts.tolist()
        assert data.dense(data.sums["v"]).reshape(shape).tolist() == sums.tolist()
        assert data.dense(data.nonnull["v"]).reshape(shape).tolist() == nonnull.tolist()


def test_finest_sets_read_each_set_from_a_maximal_set_within_the_bound() -> None:
    sizes = [101, 101, 101, 52, 3]
    chosen = finest_sets([(0, 1), (0, 2), (1, 3), (1,), (0, 1, 2), (0, 4), (0, 1, 4)], sizes)
    assert chosen == {(0, 1): (0, 1, 4), (0, 2): (0, 1, 2), (1, 3): (1, 3), (1,): (1, 3), (0, 1, 2): (0, 1, 2),
                      (0, 4): (0, 1, 4), (0, 1, 4): (0, 1, 4)}
    big = [MAX_FINEST_CELLS, 2]
    assert finest_sets([(0,), (0, 1)], big) == {(0,): (0,), (0, 1): (0, 1)}  # (0, 1) is over the bound


def test_marginal_sums_are_exact_beyond_int64() -> None:
    wide = np.array([2**62, 2**62, 2**62, 5], dtype=np.int64)
    data = CellData(shape=(2, 2), index=np.arange(4), counts=np.ones(4, dtype=np.int64),
                    sums=MappingProxyType({"s": wide}), nonnull=MappingProxyType({}))
    out = marginal_cell_data(data, [1])
    assert out.index.tolist() == [0, 1]
    assert [int(s) for s in out.sums["s"]] == [2**63, 2**62 + 5]
    assert out.counts.tolist() == [2, 2]
    objects = np.array([2**70, -(2**70), 1, 2], dtype=object)
    out = marginal_cell_data(CellData(shape=(2, 2), index=np.arange(4), counts=np.ones(4, dtype=np.int64),
                                      sums=MappingProxyType({"s": objects}), nonnull=MappingProxyType({})), [])
    assert out.shape == () and [int(s) for s in out.sums["s"]] == [3]


def scaled(value: int | None, lower: float, upper: float, quantum: float) -> int:
    """What one row adds to a SUM by the definition: round(clamp(v, lo, hi) / quantum), halves away from
    zero, on the double the database reads (0 for NULL). The rounding is done on the exact rational."""
    if value is None:
        return 0
    ratio = Fraction(min(max(float(value), lower), upper) / quantum)
    magnitude = math.floor(abs(ratio) + Fraction(1, 2))
    return magnitude if ratio >= 0 else -magnitude


BOUND = 2**40
EDGE_VALUES = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(-BOUND - 2, BOUND + 2),
                        st.sampled_from([-(2**63), 2**63 - 1, -(2**62), 2**53 + 1, -(2**53) - 1, 0]))


@SETTINGS
@given(bounds=st.tuples(st.sampled_from([-BOUND, -(2**20) - 1, -7, 0]), st.sampled_from([BOUND, 2**31, 99, 1])),
       quantum=st.sampled_from([1.0, 3.0, 0.5, 2.0**-12, 2.0**10]),
       values=st.lists(st.tuples(st.integers(0, 2), EDGE_VALUES), max_size=25),
       copies=st.sampled_from([1, 7, 2047]))
def test_sums_are_exact_at_the_bounds_and_past_int64(bounds: tuple[int, int], quantum: float,
                                                      values: list[tuple[int, int | None]], copies: int) -> None:
    """Every cell's sum is Σ round(clamp(v)/quantum) exactly, whichever accumulator DuckDB picks: values at
    and beyond the clamp bounds, inputs near ±2^63, and each row repeated ``copies`` times (up to 2047 rows of
    2^52 quanta per cell: sums next to 2^63, in int64 or HUGEINT)."""
    lower, upper = bounds
    assume(max(abs(lower), abs(upper)) / quantum <= 2**53)
    schema = Schema.load({"tables": {"t": {"columns": {
        "g": {"type": "integer", "lower": 0, "upper": 2},
        "x": {"type": "numeric", "lower": lower, "upper": upper, "bin_width": (upper - lower) / 4}}}}})
    table = schema.table("t")
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t (g BIGINT, x BIGINT)")
    if values:
        connection.executemany("INSERT INTO t VALUES (?, ?)", values)
        connection.execute(f"INSERT INTO t SELECT g, x FROM t, range({copies - 1})")
    g, x = table.columns["g"], table.columns["x"]
    data = DuckDBBackend(connection).cell_data(table, [g], sum_columns={x: quantum}, count_columns=[x])
    sums, nonnull = [0, 0, 0, 0], [0, 0, 0, 0]
    for cell, value in values:
        sums[cell] += copies * scaled(value, lower, upper, quantum)
        nonnull[cell] += copies * (value is not None)
    assert [int(v) for v in data.dense(data.sums["x"])] == sums
    assert data.dense(data.nonnull["x"]).tolist() == nonnull


@pytest.mark.parametrize(("rows", "narrow"), [(2047, True), (2048, False)])
def test_duckdb_sums_in_int64_only_where_its_statistics_prove_it_exact(rows: int, narrow: bool) -> None:
    """A row without a value adds 0 (not NULL) to an uncapped sum, so DuckDB knows the summed column's
    min/max and sums in int64 (``sum_no_overflow``) when max · rows < 2^63: 2047 rows of 2^52 quanta, not 2048
    (2^63, read exactly as a Python integer from HUGEINT)."""
    connection = duckdb.connect()
    connection.execute(f"CREATE TABLE t AS SELECT CAST({2**40} AS BIGINT) AS x FROM range({rows - 1})")
    connection.execute("INSERT INTO t VALUES (NULL)")  # a row without a value: 0 quanta
    table = Schema.load({"tables": {"t": {"columns": {"x": {"type": "numeric", "lower": 0, "upper": 2**40,
                                                                 "bin_width": 2**30}}}}}).table("t")
    x = table.columns["x"]
    backend = DuckDBBackend(connection)
    plan = "\n".join(str(row[1]) for row in
                     connection.execute("EXPLAIN " + backend.sql_for(table, [], sum_columns={x: 2.0**-12})).fetchall())
    assert ("sum_no_overflow" in plan) == narrow
    assert [int(v) for v in backend.cell_data(table, [], sum_columns={x: 2.0**-12}).sums["x"]] == [(rows - 1) * 2**52]
