"""Differential tests of the DuckDB backend: cell counts and sums against a Python reference.

The reference bins each row straight from the schema's definition of base cells (bisect over
``boundaries``, positions in ``values``), in Python, over the same rows inserted into DuckDB.
"""

from __future__ import annotations

import bisect
import collections
import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import sqlglot
from hypothesis import given
from hypothesis import strategies as st
from sqlglot import exp

from dpsql.backends.base import CellData
from dpsql.backends.duckdb import DuckDBBackend, arrow_table
from dpsql.errors import (
    DataError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    SchemaError,
    ShapeError,
)
from dpsql.schema import EPOCH, Categorical, Column, Ordered, Schema, Table, measure_quantum

# ===================================================================================== helpers


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def make_table(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, str],
               rows: Sequence[tuple[Any, ...]]) -> None:
    """CREATE TABLE name (columns) and INSERT the rows (python values; None is NULL)."""
    con.execute(f"CREATE TABLE {quote(name)} ({', '.join(f'{quote(c)} {t}' for c, t in columns.items())})")
    if rows:
        con.executemany(f"INSERT INTO {quote(name)} VALUES ({', '.join('?' for _ in columns)})",
                        [list(r) for r in rows])


def load_table(spec: dict[str, Any], name: str = "t") -> Table:
    return Schema.load({"tables": {name: spec}}).table(name)


def last_closed(domain: Ordered) -> bool:
    """Numeric domains and explicit integer edges include ``upper``; integer grids and dates end before the last
    boundary."""
    return domain.kind == "numeric" or (domain.kind == "integer" and domain.uniform_step is None)


def ref_index(column: Column, value: Any) -> int:
    """The base cell of ``value`` per the schema's definitions; ``size`` is the outside cell."""
    domain = column.domain
    if value is None:
        return domain.size
    if isinstance(domain, Categorical):
        for position, declared in enumerate(domain.values):
            if _same(declared, value):
                return position
        return domain.size
    if isinstance(value, dt.datetime):
        value = value.date()
    x = float((value - EPOCH).days) if isinstance(value, dt.date) else float(value)
    if math.isnan(x):
        return domain.size
    b = domain.boundaries
    if x < b[0]:
        return 0 if domain.clamp else domain.size
    if x > b[-1] or (x == b[-1] and not last_closed(domain)):
        return domain.size - 1 if domain.clamp else domain.size
    return min(bisect.bisect_right(b, x) - 1, domain.size - 1)


def _same(declared: str | int, value: Any) -> bool:
    if isinstance(value, bool):
        return str(declared).lower() in (("true", "1") if value else ("false", "0"))
    if isinstance(value, str):
        return str(declared) == value
    return float(declared) == float(value)


def round_half_away(x: float) -> int:
    whole = math.floor(abs(x))
    return int(math.copysign(whole + (abs(x) - whole >= 0.5), x))


def ref_measure(column: Column, value: Any, quantum: float) -> int:
    if value is None or math.isnan(float(value)):
        return 0
    assert column.measure_bounds is not None
    lo, hi = column.measure_bounds
    return round_half_away(min(max(float(value), lo), hi) / quantum)


def has_value(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def as_dict(data: CellData, values: np.ndarray | None = None) -> dict[tuple[int, ...], int]:
    """{cell as a tuple of per-column indices: value} for the listed cells."""
    values = data.counts if values is None else values
    cells = np.unravel_index(data.index, data.shape) if data.shape else ()
    return {tuple(int(c[i]) for c in cells): int(v) for i, v in enumerate(values.tolist())}


def reference(columns: Sequence[Column], positions: Sequence[int],
              rows: Sequence[tuple[Any, ...]]) -> collections.Counter:
    return collections.Counter(tuple(ref_index(c, row[p]) for c, p in zip(columns, positions)) for row in rows)


# ================================================================================ main fixture
PEOPLE_TOML = """
[tables.people]
privacy_unit = "row"

[tables.people.columns.age]
type = "integer"
lower = 0
upper = 99
bin_width = 10

[tables.people.columns.income]
type = "numeric"
lower = 0
upper = 1000
bin_width = 100
resolution = 0.1

[tables.people.columns.sex]
type = "categorical"
values = ["f", "m"]

[tables.people.columns.joined]
type = "date"
lower = 2020-01-15
upper = 2020-12-31
unit = "month"

[tables.people.columns.score]
type = "numeric"
edges = [0, 1, 5, 10]
out_of_domain = "clamp"

[tables.people.columns.seen]
type = "date"
lower = 2021-03-01
upper = 2021-03-10
"""
PEOPLE_COLUMNS = {"pid": "INTEGER", "Age": "INTEGER", "income": "DOUBLE", "sex": "VARCHAR", "joined": "DATE",
                  "score": "DECIMAL(6,2)", "seen": "TIMESTAMP"}
NAN = float("nan")
D, T = dt.date, dt.datetime
PEOPLE_ROWS = [  # pid, age, income, sex, joined, score, seen
    (1, 0, 0.3, "f", D(2020, 1, 1), -1, T(2021, 3, 1)),
    (1, 9, 0.7, "m", D(2020, 1, 31), 0, T(2021, 3, 10, 23, 59)),
    (1, 10, 999.9, "x", D(2020, 2, 1), 0.99, T(2021, 3, 11)),
    (2, 99, 1000.0, None, D(2020, 2, 29), 1, None),
    (2, 100, 1000.0001, "F", D(2020, 12, 31), 5, T(2021, 2, 28, 23, 59)),
    (2, -1, -0.5, "f", D(2021, 1, 1), 10, T(2021, 3, 5, 12)),
    (3, None, None, "m", D(2019, 12, 31), 12, T(2021, 3, 1)),
    (3, 55, NAN, "m", None, None, T(2021, 3, 2)),
    (None, 55, 250.25, "f", D(2020, 6, 15), 9.99, T(2021, 3, 3)),
    (None, 99, 0.30000000000000004, "f", D(2020, 7, 1), 4.5, T(2021, 3, 4)),
    (4, 42, 0.1, "m", D(2020, 3, 1), 2, T(2021, 3, 9)),
]


@pytest.fixture
def people() -> tuple[duckdb.DuckDBPyConnection, Table]:
    con = duckdb.connect()
    make_table(con, "People", PEOPLE_COLUMNS, PEOPLE_ROWS)
    yield con, Schema.load(PEOPLE_TOML).table("people")
    con.close()


POSITION = {name.lower(): i for i, name in enumerate(PEOPLE_COLUMNS)}


@pytest.mark.parametrize("names", [["age"], ["income"], ["sex"], ["joined"], ["score"], ["seen"], ["age", "sex"],
                                   ["joined", "income", "score"], ["age", "income", "sex", "joined", "score", "seen"]])
@pytest.mark.slow
def test_counts_match_the_reference(people: tuple[duckdb.DuckDBPyConnection, Table], names: list[str]) -> None:
    con, table = people
    columns = [table.columns[n] for n in names]
    data = DuckDBBackend(con).cell_data(table, columns)
    assert data.shape == tuple(c.domain.size + 1 for c in columns)
    assert as_dict(data) == reference(columns, [POSITION[n] for n in names], PEOPLE_ROWS)
    assert int(data.counts.sum()) == len(PEOPLE_ROWS)  # outside cells included
    assert np.all(np.diff(data.index) > 0) and np.all(data.counts > 0)


@pytest.mark.slow
def test_documented_boundary_cells(people: tuple[duckdb.DuckDBPyConnection, Table]) -> None:
    con, table = people
    backend = DuckDBBackend(con)
    cols = table.columns

    def cells(name: str) -> list[int]:
        data = backend.cell_data(table, [cols[name]])
        return [int(i) for i, n in zip(data.index, data.counts) for _ in range(int(n))]

    # age: integer grid 0..99 step 10 (10 cells); 99 is in the last cell, 100 and -1 and NULL outside (10).
    assert cells("age") == [0, 0, 1, 4, 5, 5, 9, 9, 10, 10, 10]
    # joined: months from 2020-01 (lower 2020-01-15 floors to the month start) to 2020-12; outside = 12.
    assert cells("joined") == [0, 0, 1, 1, 2, 5, 6, 11, 12, 12, 12]
    # score: edges [0,1,5,10], clamp: -1 -> 0, 10 (upper, closed) -> 2, 12 -> 2; NULL -> outside 3.
    assert cells("score") == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3]
    # income: a 0.1 grid whose boundaries are the decimals users write (0.3, 999.9), so 0.3 and 0.30000000000000004
    # are in cell 3, 0.7 in cell 7, 999.9 in cell 9999 with 1000.0 (upper, closed); 1000.0001, -0.5, NULL, NaN outside.
    income = backend.cell_data(table, [cols["income"]])
    got = dict(zip(income.index.tolist(), income.counts.tolist()))
    assert got == {1: 1, 3: 2, 7: 1, 2502: 1, 9999: 2, 10000: 4}


def test_sums_and_nonnull_counts_match_the_reference(people: tuple[duckdb.DuckDBPyConnection, Table]) -> None:
    con, table = people
    age, income, score, sex = (table.columns[n] for n in ("age", "income", "score", "sex"))
    quanta = {age: measure_quantum(age), income: measure_quantum(income), score: 0.25}
    data = DuckDBBackend(con).cell_data(table, [sex], sum_columns=quanta, count_columns=[income, sex])
    assert set(data.sums) == {"age", "income", "score"} and set(data.nonnull) == {"income", "sex"}
    listed = as_dict(data)
    for column, quantum in quanta.items():
        expected: collections.Counter = collections.Counter()
        for row in PEOPLE_ROWS:
            expected[(ref_index(sex, row[3]),)] += ref_measure(column, row[POSITION[column.name]], quantum)
        assert set(expected) <= set(listed)
        assert as_dict(data, data.sums[column.name]) == {k: expected[k] for k in listed}
    for column in (income, sex):  # NaN is not a value: COUNT(col) counts neither NULL nor NaN (issue 14, item 8)
        nonnull = collections.Counter((ref_index(sex, r[3]),) for r in PEOPLE_ROWS
                                      if has_value(r[POSITION[column.name]]))
        assert as_dict(data, data.nonnull[column.name]) == {k: nonnull[k] for k in listed}


def test_clamp_moves_out_of_range_values_to_the_end_cells_and_drop_to_outside() -> None:
    con = duckdb.connect()
    make_table(con, "t", {"x": "DOUBLE", "d": "DATE"},
               [(-5.0, D(2019, 1, 1)), (0.0, D(2020, 1, 1)), (10.0, D(2020, 12, 31)), (11.0, D(2021, 1, 1)),
                (None, None), (float("inf"), None), (float("-inf"), None)])
    for policy, expected_x, expected_d in [("drop", [5, 0, 4, 5, 5, 5, 5], [12, 0, 11, 12, 12, 12, 12]),
                                           ("clamp", [0, 0, 4, 4, 5, 4, 0], [0, 0, 11, 11, 12, 12, 12])]:
        table = load_table({"columns": {
            "x": {"type": "numeric", "lower": 0, "upper": 10, "bin_width": 2, "out_of_domain": policy},
            "d": {"type": "date", "lower": "2020-01-01", "upper": "2020-12-31", "unit": "month",
                  "out_of_domain": policy}}})
        backend = DuckDBBackend(con)
        for name, expected in (("x", expected_x), ("d", expected_d)):
            data = backend.cell_data(table, [table.columns[name]])
            assert as_dict(data) == dict(collections.Counter((i,) for i in expected)), (policy, name)


def test_exclude_filters_outside_rows_from_every_scan() -> None:
    """Rows NULL or outside an ``exclude`` column's domain leave every query, also ones not touching it."""
    con = duckdb.connect()
    make_table(con, "t", {"g": "VARCHAR", "x": "INTEGER"},
               [("a", 1), ("b", 2), (None, 1), ("z", 3), ("a", None), ("b", 9)])
    table = load_table({"columns": {"g": {"type": "categorical", "values": ["a", "b"], "out_of_domain": "exclude"},
                                    "x": {"type": "integer", "lower": 0, "upper": 3}}})
    backend = DuckDBBackend(con)
    assert as_dict(backend.cell_data(table, [])) == {(): 4}  # COUNT(*): the two rows with g NULL or 'z' are gone
    assert as_dict(backend.cell_data(table, [table.columns["x"]])) == {(1,): 1, (2,): 1, (4,): 2}
    tables = backend.marginal_counts(table, [table.columns["g"], table.columns["x"]], [(0, 1)])
    assert tables[(0, 1)][2].sum() == 0 and int(tables[(0, 1)].sum()) == 4  # g's outside cell is empty


def test_infinite_dates_and_timestamps_cast_to_date() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (d DATE, ts TIMESTAMP)")
    con.execute("INSERT INTO t VALUES ('infinity', '2020-01-31 23:59:59'), ('-infinity', '2020-02-01 00:00:00'), "
                "('2020-01-01', NULL)")
    spec = {"type": "date", "lower": "2020-01-01", "upper": "2020-02-29", "unit": "month", "out_of_domain": "clamp"}
    table = load_table({"columns": {"d": spec, "ts": spec}})
    data = DuckDBBackend(con).cell_data(table, [table.columns["d"], table.columns["ts"]])
    assert as_dict(data) == {(1, 0): 1, (0, 1): 1, (0, 2): 1}


@pytest.mark.parametrize("max_rows", [1, 2, 3, 10])
def test_privacy_unit_cap_keeps_min_rows_per_unit(max_rows: int) -> None:
    rows_per_unit = {"a": 1, "b": 2, "c": 3, "d": 7}
    rows = [(unit, i % 4, float(i)) for unit, n in rows_per_unit.items() for i in range(n)]
    rows += [(None, 1, 1.0), (None, 2, 2.0)]  # no unit: dropped
    con = duckdb.connect()
    make_table(con, "visits", {"person": "VARCHAR", "kind": "INTEGER", "amount": "DOUBLE"}, rows)
    table = load_table({"privacy_unit": {"column": "person", "max_rows": max_rows}, "columns": {
        "person": {"type": "categorical", "values": list(rows_per_unit)},
        "kind": {"type": "integer", "lower": 0, "upper": 3},
        "amount": {"type": "numeric", "lower": 0, "upper": 10}}}, name="visits")
    backend = DuckDBBackend(con)
    person, kind, amount = (table.columns[n] for n in ("person", "kind", "amount"))
    data = backend.cell_data(table, [person], count_columns=[amount])
    expected = {(i,): min(n, max_rows) for i, n in enumerate(rows_per_unit.values())}
    assert as_dict(data) == expected  # the NULL-unit rows are gone: no outside cell
    assert as_dict(data, data.nonnull["amount"]) == expected
    both = backend.cell_data(table, [person, kind], sum_columns={amount: 1.0})
    per_unit = collections.Counter()
    for (unit, _), n in as_dict(both).items():
        per_unit[(unit,)] += n
    assert dict(per_unit) == expected
    assert as_dict(backend.cell_data(table, [person, kind], sum_columns={amount: 1.0})) == as_dict(both)  # same rows
    # the cap is a ROW_NUMBER subquery (portable: no QUALIFY), also when no column is read
    assert "QUALIFY" not in backend.sql_for(table, [kind]) and "ROW_NUMBER()" in backend.sql_for(table, [])
    total = backend.cell_data(table, [])
    assert total.shape == () and total.index.tolist() == [0] and total.counts.tolist() == [sum(expected.values())]


def test_database_path_and_existing_connection(tmp_path: Any) -> None:
    path = tmp_path / "people.duckdb"
    with duckdb.connect(str(path)) as con:
        make_table(con, "people", PEOPLE_COLUMNS, PEOPLE_ROWS)
    table = Schema.load(PEOPLE_TOML).table("people")
    with DuckDBBackend(path) as backend:
        assert int(backend.cell_data(table, [table.columns["sex"]]).counts.sum()) == len(PEOPLE_ROWS)
    with pytest.raises(InterfaceError):
        backend.cell_data(table, [])
    with DuckDBBackend(str(path)) as backend:
        backend.check_table(table)
    con = duckdb.connect(str(path))
    backend = DuckDBBackend(con)
    backend.close()
    assert con.execute("SELECT count(*) FROM people").fetchone() == (len(PEOPLE_ROWS),)  # still open
    con.close()


def test_missing_table_and_columns_raise_schema_errors(people: tuple[duckdb.DuckDBPyConnection, Table]) -> None:
    con, table = people
    backend = DuckDBBackend(con)
    backend.check_table(table)
    other = load_table({"columns": {"x": {"type": "integer", "lower": 0, "upper": 1}}}, name="nowhere")
    with pytest.raises(SchemaError, match=r"Table 'nowhere'.*disagree"):
        backend.check_table(other)
    with pytest.raises(SchemaError, match="nowhere"):
        backend.cell_data(other, [other.columns["x"]])
    spec = {"columns": {"age": {"type": "integer", "lower": 0, "upper": 9}, "height": {"type": "integer", "lower": 0,
            "upper": 9}}, "privacy_unit": {"column": "household", "max_rows": 2}}
    wrong = load_table(spec, name="people")
    with pytest.raises(SchemaError, match=r"'height', 'household' \(the privacy unit\).*disagree") as info:
        backend.check_table(wrong)
    assert "Age" in str(info.value)  # lists the database's columns
    with pytest.raises(SchemaError, match="household"):
        backend.cell_data(wrong, [wrong.columns["age"]])


@pytest.mark.parametrize(("declared", "sql_type"), [
    ({"type": "integer", "lower": 0, "upper": 9}, "VARCHAR"),
    ({"type": "numeric", "lower": 0, "upper": 9}, "DATE"),
    ({"type": "date", "lower": "2020-01-01", "upper": "2020-02-01"}, "INTEGER"),
    ({"type": "categorical", "values": ["a", "b"]}, "INTEGER"),
    ({"type": "categorical", "values": ["yes", "no"]}, "BOOLEAN"),
    ({"type": "categorical", "values": [1, "1"]}, "VARCHAR"),
])
def test_type_that_cannot_hold_the_domain_is_a_schema_error(declared: dict[str, Any], sql_type: str) -> None:
    con = duckdb.connect()
    make_table(con, "people", {"age": sql_type}, [])
    table = load_table({"columns": {"age": declared}}, name="people")
    with pytest.raises(SchemaError, match=r"tables\.people\.columns\.age") as info:
        DuckDBBackend(con).check_table(table)
    assert sql_type in str(info.value)
    with pytest.raises(SchemaError):
        DuckDBBackend(con).cell_data(table, [table.columns["age"]])


def test_summing_requires_bounds_a_number_type_and_a_sane_quantum(
        people: tuple[duckdb.DuckDBPyConnection, Table]) -> None:
    con, table = people
    backend = DuckDBBackend(con)
    with pytest.raises(SchemaError, match="cannot be summed"):
        backend.cell_data(table, [], sum_columns={table.columns["sex"]: 1.0})
    with pytest.raises(SchemaError, match="cannot be summed"):
        measure_quantum(table.columns["joined"])
    for quantum in (0.0, -1.0, float("nan"), 1e-300):
        with pytest.raises(ProgrammingError, match="quantum"):
            backend.cell_data(table, [], sum_columns={table.columns["income"]: quantum})
    stranger = load_table({"columns": {"age": {"type": "integer", "lower": 0, "upper": 5}}}, name="people")
    with pytest.raises(SchemaError, match="not a column of table"):
        backend.cell_data(table, [stranger.columns["age"]])


def test_sums_beyond_int64_are_exact() -> None:
    """Issue 14 item 2: a sum past int64 is read exactly (HUGEINT), never an error after the charge."""
    con = duckdb.connect()
    make_table(con, "t", {"x": "BIGINT"}, [(2**40,)] * 2)
    con.execute("INSERT INTO t SELECT x FROM t, range(2000)")  # 4002 rows of 2^40: 2^52 quanta each
    table = load_table({"columns": {"x": {"type": "numeric", "lower": 0, "upper": 2**40, "bin_width": 2**30}}})
    data = DuckDBBackend(con).cell_data(table, [], sum_columns={table.columns["x"]: 2.0**-12})
    assert data.sums["x"].tolist() == [4002 * 2**52]
    small = DuckDBBackend(con).cell_data(table, [], sum_columns={table.columns["x"]: 2.0**10})
    assert small.sums["x"].dtype == np.int64 and small.sums["x"].tolist() == [4002 * 2**30]


def test_duckdb_failures_are_operational_errors(people: tuple[duckdb.DuckDBPyConnection, Table]) -> None:
    con, table = people
    backend = DuckDBBackend(con)
    con.close()
    with pytest.raises(OperationalError) as info:
        backend.cell_data(table, [table.columns["age"]])
    assert info.value.__cause__ is not None
    with pytest.raises(OperationalError):
        DuckDBBackend("no/such/folder/x.duckdb")


def test_sql_comes_from_the_schema_and_quotes_identifiers() -> None:
    con = duckdb.connect()
    make_table(con, "select", {"Select": "VARCHAR", "first name": "INTEGER", 'we"ird': "DOUBLE", "id": "INTEGER"},
               [("a", 1, 0.5, 1), ("b", 2, 1.5, 1), (None, 3, None, 2), ("it's", 2, 2.5, 3)])
    table = load_table({"privacy_unit": {"column": "ID", "max_rows": 1}, "columns": {
        "select": {"type": "categorical", "values": ["a", "it's"]},
        "first name": {"type": "integer", "lower": 1, "upper": 2},
        'we"ird': {"type": "numeric", "lower": 0, "upper": 2, "bin_width": 0.5}}}, name="SELECT")
    backend = DuckDBBackend(con)
    columns = list(table.columns.values())
    sql = backend.sql_for(table, columns, sum_columns={columns[2]: 0.5}, count_columns=[columns[0]])
    tree = sqlglot.parse_one(sql, read="duckdb")
    identifiers = list(tree.find_all(exp.Identifier))
    assert identifiers and all(i.quoted for i in identifiers if not i.this.startswith("dpsql_"))
    assert {t.name for t in tree.find_all(exp.Table)} == {"select"}
    built = backend._query(table, columns, {columns[2]: 0.5}, [columns[0]])
    for node in built.walk():  # every node appears once in the built tree
        for child in node.iter_expressions():
            assert child.parent is node
    real = {"Select", "first name", 'we"ird', "id"}
    assert {c.name for c in tree.find_all(exp.Column)} - real <= {f"dpsql_{s}" for s in (
        "cell_0", "cell_1", "cell_2", "sum_0", "nonnull_0", "unit", "salt", "order", "rank")}
    strings = {lit.this for lit in tree.find_all(exp.Literal) if lit.is_string}
    assert strings <= {"a", "it's", "0.0", "0.5", "1.0", "1.5", "2.0", "3.0"}
    data = backend.cell_data(table, columns, sum_columns={columns[2]: 0.5}, count_columns=[columns[0]])
    assert int(data.counts.sum()) == 3  # one row per id
    assert int(data.nonnull["select"].sum()) in (2, 3)


def test_categorical_columns_of_other_types() -> None:
    con = duckdb.connect()
    make_table(con, "t", {"n": "INTEGER", "b": "BOOLEAN", "e": "ENUM('x', 'y', 'z')", "f": "DOUBLE"},
               [(1, True, "x", 1.0), (5, False, "y", 2.5), (-3, None, "z", NAN), (7, True, None, 3.0),
                (None, False, "x", None)])
    table = load_table({"columns": {
        "n": {"type": "categorical", "values": [-3, 1, 5]},
        "b": {"type": "categorical", "values": ["false", "true"]},
        "e": {"type": "categorical", "values": ["y", "x"]},
        "f": {"type": "categorical", "values": [1, "2.5"]}}})
    backend = DuckDBBackend(con)
    assert as_dict(backend.cell_data(table, [table.columns["n"]])) == {(0,): 1, (1,): 1, (2,): 1, (3,): 2}
    assert as_dict(backend.cell_data(table, [table.columns["b"]])) == {(0,): 2, (1,): 2, (2,): 1}
    assert as_dict(backend.cell_data(table, [table.columns["e"]])) == {(0,): 1, (1,): 2, (2,): 2}
    assert as_dict(backend.cell_data(table, [table.columns["f"]])) == {(0,): 1, (1,): 1, (2,): 3}


def test_grids_whose_boundaries_are_not_lower_plus_k_step_use_the_boundaries() -> None:
    con = duckdb.connect()
    values = [0.0, 0.3, 0.30000000000000004, 0.6, 0.9, 1.0, 1.1, None]
    make_table(con, "t", {"x": "DOUBLE"}, [(v,) for v in values])
    # A domain built by hand: claims step 0.3 but its boundaries are rounded decimals.
    domain = Ordered(kind="numeric", boundaries=(0.0, 0.3, 0.6, 0.9, 1.0), bin_starts=(0, 1, 2, 3), uniform_step=0.3)
    column = Column(table="t", name="x", domain=domain, measure_bounds=(0.0, 1.0))
    table = Table(name="t", columns={"x": column})
    data = DuckDBBackend(con).cell_data(table, [column])
    assert as_dict(data) == dict(reference([column], [0], [(v,) for v in values]))
    assert as_dict(data) == {(0,): 1, (1,): 2, (2,): 1, (3,): 2, (4,): 2}


def test_measure_quantum() -> None:
    table = load_table({"columns": {
        "n": {"type": "integer", "lower": -5, "upper": 5},
        "x": {"type": "numeric", "lower": 0, "upper": 1},
        "y": {"type": "numeric", "lower": -1000, "upper": 3, "measure_lower": -1024, "measure_upper": 3},
        "z": {"type": "numeric", "lower": 0, "upper": 1, "measure_lower": 0, "measure_upper": 0}}})
    assert measure_quantum(table.columns["n"]) == 1.0
    assert measure_quantum(table.columns["x"]) == 2.0**-24
    assert measure_quantum(table.columns["y"]) == 2.0**-14  # 1024 = 2^10 exactly
    assert measure_quantum(table.columns["z"]) == 1.0


def test_cell_data_dense_views_and_validation() -> None:
    data = CellData(shape=(2, 3), index=np.array([0, 4, 5]), counts=np.array([1, 2, 3]),
                    sums={"s": np.array([7, 8, 9])},
                    nonnull={})
    assert data.size == 6
    assert data.dense_counts().tolist() == [1, 0, 0, 0, 2, 3]
    assert data.dense(data.sums["s"]).tolist() == [7, 0, 0, 0, 8, 9]
    with pytest.raises(ShapeError):
        data.dense(np.array([1, 2]))
    with pytest.raises(ShapeError):
        CellData(shape=(2,), index=np.array([1, 0]), counts=np.array([1, 1]), sums={}, nonnull={})
    with pytest.raises(ShapeError):
        CellData(shape=(2,), index=np.array([0, 1]), counts=np.array([1]), sums={}, nonnull={})


def test_backend_results_are_read_only(people: tuple[duckdb.DuckDBPyConnection, Table]) -> None:
    con, table = people
    data = DuckDBBackend(con).cell_data(table, [table.columns["age"]])
    with pytest.raises(ValueError):
        data.counts[0] = 5


def test_arrow_table_accepts_duckdb_1_and_2_result_shapes() -> None:
    table = pa.table({"a": [1, 2]})

    class New:
        def to_arrow_table(self) -> pa.Table:
            return table

    class Old:
        def fetch_arrow_table(self) -> pa.Table:
            return table

    class Reader:
        def arrow(self) -> pa.RecordBatchReader:
            return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())

    for result in (New(), Old(), Reader()):
        assert arrow_table(result).equals(table)
    with pytest.raises(InterfaceError):
        arrow_table(object())
    assert arrow_table(duckdb.connect().sql("SELECT 1 AS a")).column("a").to_pylist() == [1]


# ================================================================================== hypothesis
@st.composite
def column_cases(draw: st.DrawFn, name: str) -> tuple[dict[str, Any], str, st.SearchStrategy[Any]]:
    """(declared spec, SQL type, strategy of values including NULL and out-of-domain ones)."""
    kind = draw(st.sampled_from(["text", "intcat", "integer", "int_edges", "numeric", "num_edges", "date",
                                 "timestamp"]))
    clamp = {"out_of_domain": draw(st.sampled_from(["drop", "clamp"]))}
    if kind == "text":
        declared = draw(st.lists(st.sampled_from(["a", "b", "", "C", "it's"]), min_size=1, max_size=4, unique=True))
        return {"type": "categorical",
                "values": declared}, "VARCHAR", st.sampled_from(["a", "b", "", "C", "c", "it's", "zz", None])
    if kind == "intcat":
        declared = draw(st.lists(st.integers(-3, 3), min_size=1, max_size=4, unique=True))
        return {"type": "categorical", "values": declared}, "BIGINT", st.one_of(st.none(), st.integers(-4, 4))
    if kind in ("integer", "int_edges"):
        lower = draw(st.integers(-10, 10))
        if kind == "integer":
            step = draw(st.integers(1, 4))
            upper = lower + draw(st.integers(0, 12))
            spec = {"type": "integer", "lower": lower, "upper": upper, "bin_width": step * draw(st.integers(1, 2)),
                    "resolution": step, **clamp}
        else:
            edges = sorted(draw(st.sets(st.integers(lower, lower + 15), min_size=2, max_size=5)))
            spec = {"type": "integer", "edges": edges, **clamp}
            lower, upper = edges[0], edges[-1]
        return spec, "INTEGER", st.one_of(st.none(), st.integers(lower - 3, upper + 3))
    if kind in ("numeric", "num_edges"):
        lower = draw(st.sampled_from([-2.5, 0.0, 0.1, 3.0]))
        if kind == "numeric":
            step = draw(st.sampled_from([0.1, 0.25, 0.3, 1.0, 2.5]))
            upper = lower + step * draw(st.integers(1, 12)) - draw(st.sampled_from([0.0, step / 3]))
            spec = {"type": "numeric", "lower": lower, "upper": upper, "bin_width": step, **clamp}
        else:
            spec = {"type": "numeric", "edges": sorted(draw(st.sets(st.sampled_from(
                [lower + 0.1 * i for i in range(40)]), min_size=2, max_size=5))), **clamp}
        domain = Schema.load({"tables": {"t": {"columns": {"x": spec}}}}).table("t").columns["x"].domain
        edges = list(domain.boundaries)
        near = [v for b in edges for v in (b, round(b, 9), math.nextafter(b, -math.inf), math.nextafter(b, math.inf))]
        return spec, "DOUBLE", st.one_of(st.none(), st.just(NAN), st.sampled_from(near),
                                         st.floats(edges[0] - 2, edges[-1] + 2, allow_nan=False))
    unit = draw(st.sampled_from(["day", "month", "year"]))
    lower = draw(st.dates(D(2019, 1, 1), D(2021, 12, 31)))
    upper = lower + dt.timedelta(days=draw(st.integers(0, {"day": 20, "month": 150, "year": 900}[unit])))
    spec = {"type": "date", "lower": lower, "upper": upper, "unit": unit, **clamp}
    dates = st.dates(lower - dt.timedelta(days=400), upper + dt.timedelta(days=400))
    if kind == "timestamp":
        times = st.builds(lambda d, s: dt.datetime.combine(d, dt.time()) + dt.timedelta(seconds=s), dates,
                          st.sampled_from([0, 1, 43200, 86399]))
        return spec, "TIMESTAMP", st.one_of(st.none(), times)
    starts = st.builds(lambda d: d.replace(day=1), dates)
    return spec, "DATE", st.one_of(st.none(), dates, starts)


@st.composite
def tables(draw: st.DrawFn) -> tuple[Table, dict[str, str], list[tuple[Any, ...]]]:
    names = draw(st.lists(st.sampled_from(["a", "B", "c d", "select"]), min_size=1, max_size=3, unique=True))
    cases = [draw(column_cases(n)) for n in names]
    rows = draw(st.lists(st.tuples(*[values for _, _, values in cases]), max_size=25))
    table = load_table({"columns": {n: spec for n, (spec, _, _) in zip(names, cases)}})
    return table, {n: sql_type for n, (_, sql_type, _) in zip(names, cases)}, rows


@given(tables())
@pytest.mark.slow
def test_random_schemas_count_like_the_reference(case: tuple[Table, dict[str, str], list[tuple[Any, ...]]]) -> None:
    table, sql_types, rows = case
    with duckdb.connect() as con:
        make_table(con, "t", sql_types, rows)
        columns = [table.columns[n.lower()] for n in sql_types]
        data = DuckDBBackend(con).cell_data(table, columns)
    assert as_dict(data) == dict(reference(columns, range(len(columns)), rows))
    assert int(data.counts.sum()) == len(rows)


# ============================================================================ marginal counts
@pytest.mark.parametrize("unit", [None, 2])
def test_marginal_counts_equal_sums_of_the_full_cell_counts(unit: int | None) -> None:
    """One GROUPING SETS scan gives every marginal; each equals the full data vector summed over the
    other columns (outside cells and the privacy-unit cap included)."""
    rng = np.random.default_rng(11)
    con = duckdb.connect()
    rows = [(int(rng.integers(0, 12)) if rng.random() > 0.1 else None, str(rng.choice(["x", "y", "z"])),
             int(rng.integers(-3, 9)), int(rng.integers(0, 40))) for _ in range(400)]
    make_table(con, "t", {"a": "INTEGER", "b": "VARCHAR", "c": "INTEGER", "u": "INTEGER"}, rows)
    spec: dict[str, Any] = {"columns": {"a": {"type": "integer", "lower": 0, "upper": 9},
                                        "b": {"type": "categorical", "values": ["x", "y"]},
                                        "c": {"type": "integer", "lower": 0, "upper": 5},
                                        "u": {"type": "integer", "lower": 0, "upper": 100}}}
    if unit is not None:
        spec["privacy_unit"] = {"column": "u", "max_rows": unit}
    table = load_table(spec)
    columns = [table.columns[name] for name in ("a", "b", "c")]
    backend = DuckDBBackend(con)
    full = backend.cell_data(table, columns)
    cube = full.dense_counts().reshape(full.shape)
    wanted = [(0, 1), (1, 2), (0,), ()]
    tables = backend.marginal_counts(table, columns, wanted)
    assert list(tables) == wanted
    for marginal, counts in tables.items():
        others = tuple(i for i in range(3) if i not in marginal)
        np.testing.assert_array_equal(counts, cube.sum(axis=others))
        assert not counts.flags.writeable
    with pytest.raises(ShapeError, match="sorted tuple"):
        backend.marginal_counts(table, columns, [(1, 0)])
    with pytest.raises(ShapeError, match="without repeats"):
        backend.marginal_counts(table, columns, [(0,), (0,)])


@pytest.mark.slow
def test_one_scan_of_several_cell_sets_equals_a_scan_per_set(people: tuple[duckdb.DuckDBPyConnection, Table]) -> None:
    """cell_data_sets (GROUPING SETS) gives, for every set, exactly what cell_data gives for it
    alone: counts, sums and non-NULL counts, outside cells included; repeated and reordered sets too."""
    con, table = people
    age, income, score, sex, joined = (table.columns[n] for n in ("age", "income", "score", "sex", "joined"))
    backend = DuckDBBackend(con)
    quanta = {age: measure_quantum(age), score: 0.25}
    sets = [[sex], [age, sex], [], [sex, age], [joined, income, score], [sex]]
    together = backend.cell_data_sets(table, sets, sum_columns=quanta, count_columns=[income])
    assert len(together) == len(sets)
    for cells, data in zip(sets, together):
        alone = backend.cell_data(table, cells, sum_columns=quanta, count_columns=[income])
        assert data.shape == alone.shape
        np.testing.assert_array_equal(data.index, alone.index)
        np.testing.assert_array_equal(data.counts, alone.counts)
        for name in alone.sums:
            np.testing.assert_array_equal(data.sums[name], alone.sums[name])
        np.testing.assert_array_equal(data.nonnull["income"], alone.nonnull["income"])


def test_one_scan_caps_each_unit_once_for_every_set() -> None:
    """With a privacy unit, every set is counted over the same capped rows: per set, no unit has
    more than max_rows rows, and every set holds the same rows in all."""
    rows = [(unit, i % 4, float(i)) for unit, n in {"a": 1, "b": 2, "c": 5, "d": 9}.items() for i in range(n)]
    con = duckdb.connect()
    make_table(con, "visits", {"person": "VARCHAR", "kind": "INTEGER", "amount": "DOUBLE"}, rows)
    table = load_table({"privacy_unit": {"column": "person", "max_rows": 3}, "columns": {
        "person": {"type": "categorical", "values": ["a", "b", "c", "d"]},
        "kind": {"type": "integer", "lower": 0, "upper": 3},
        "amount": {"type": "numeric", "lower": 0, "upper": 10}}}, name="visits")
    person, kind, amount = (table.columns[n] for n in ("person", "kind", "amount"))
    by_person, by_kind, total = DuckDBBackend(con).cell_data_sets(table, [[person, kind], [kind], []],
                                                                  sum_columns={amount: 1.0})
    per_unit: collections.Counter = collections.Counter()
    for (unit, _), n in as_dict(by_person).items():
        per_unit[unit] += n
    assert dict(per_unit) == {0: 1, 1: 2, 2: 3, 3: 3}
    assert int(by_kind.counts.sum()) == int(total.counts.sum()) == 9
    assert sum(int(v) for v in by_kind.sums["amount"]) == sum(int(v) for v in total.sums["amount"])


def test_an_overflow_while_reading_is_a_data_error_without_its_message() -> None:
    """The generated SQL cannot overflow (clamped values, 128-bit sums); an engine's overflow still maps to
    DataError, with the engine's message (which may quote a value) withheld and not chained."""
    backend = DuckDBBackend(duckdb.connect())
    with pytest.raises(DataError, match="arithmetic overflow") as caught:
        backend.run("SELECT CAST(9223372036854775807 AS BIGINT) + CAST(987654321 AS BIGINT) AS x")
    assert "987654321" not in str(caught.value) and caught.value.__cause__ is None
