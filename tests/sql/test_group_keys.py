"""GROUP BY keys that re-bin one declared column (dpsql.sql.group_keys): ordinals, SELECT aliases,
CASE WHEN on one column, EXTRACT/year/month/date_trunc on dates.

Each construct is compared with DuckDB's exact answer to the same question, written here as plain
SQL, at ρ = 1e6 (σ of a count about 1e-3): within 6 of dpsql's reported standard errors plus 1e-6,
which fails for any wrong cell. Groups DuckDB does not show (no rows) must be about 0.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import dpsql
from _helpers import ScansOnce
from dpsql import engine
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.errors import SchemaError, SqlSyntaxError, UnsupportedQueryError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema
from dpsql.sql import group_keys

SCHEMA = Schema.load({"tables": {"t": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 1},
    "sex": {"type": "categorical", "values": ["F", "M"], "other": True},
    "income": {"type": "numeric", "lower": 0, "upper": 100, "bin_width": 10},
    "d": {"type": "date", "lower": "2019-01-01", "upper": "2021-12-31"},
    "m": {"type": "date", "lower": "2019-01-01", "upper": "2021-12-31", "unit": "month"},
    "y": {"type": "date", "lower": "2015-01-01", "upper": "2024-12-31", "unit": "year"},
}}}})
ROWS = 3000


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    """In-domain values; age and sex are NULL in some rows."""
    rng = np.random.default_rng(18)
    rows = []
    for _ in range(ROWS):
        day = dt.date(2019, 1, 1) + dt.timedelta(days=int(rng.integers(0, 1095)))
        rows.append((None if rng.random() < 0.05 else int(rng.integers(0, 100)),
                     None if rng.random() < 0.05 else str(rng.choice(["F", "M"])),
                     float(rng.integers(0, 100)), day, day.replace(day=1),
                     dt.date(int(rng.integers(2015, 2025)), 1, 1)))
    con = duckdb.connect()
    con.execute("CREATE TABLE t (age INTEGER, sex VARCHAR, income DOUBLE, d DATE, m DATE, y DATE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", rows)
    yield con
    con.close()


def connect(data: duckdb.DuckDBPyConnection, seed: int = 0, rho: float = 1e9) -> dpsql.Connection:
    return dpsql.connect(data, schema=SCHEMA, budget=Budget(rho=rho), rng=SeededRandomSource(seed))


def answer(data: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    with connect(data) as connection:
        return connection.cursor().execute(sql, rho=1e6).fetch_arrow_table()


def check(table: pa.Table, truth_sql: str, data: duckdb.DuckDBPyConnection, keys: int = 1) -> None:
    """Every dpsql row (value ± stddev) against DuckDB's rows keyed by the first ``keys`` columns."""
    truth = {tuple(row[:keys]): row[keys] for row in data.execute(truth_sql).fetchall()}
    names = [n for n in table.column_names if not n.endswith("_stddev")]
    value_name = names[keys]
    got = {tuple(table.column(n)[i].as_py() for n in names[:keys]): i for i in range(table.num_rows)}
    assert set(truth) <= set(got), f"DuckDB groups {set(truth) - set(got)} missing from dpsql's output"
    values, stddevs = table.column(value_name).to_pylist(), table.column(f"{value_name}_stddev").to_pylist()
    for label, i in got.items():
        expected = truth.get(label) or 0.0
        assert stddevs[i] < 1.0  # a count's σ is about 1e-3, a sum's about 0.1
        assert abs(values[i] - expected) <= 6 * stddevs[i] + 1e-6, (label, values[i], expected)


# ============================================================================== ordinals and aliases
@pytest.mark.parametrize("sql", [
    "SELECT sex AS s, COUNT(*) FROM t GROUP BY s",
    "SELECT sex, COUNT(*) FROM t GROUP BY 1",
    "SELECT COUNT(*) AS n, sex FROM t GROUP BY 2",
])
def test_group_by_a_position_or_alias_of_a_column(sql: str, data: duckdb.DuckDBPyConnection) -> None:
    table = answer(data, sql)
    assert table.column(0 if table.column_names[0] != "n" else 2).to_pylist() == ["F", "M", None]
    reordered = table.select([c for c in table.column_names if not c.startswith(("n", "count"))]
                             + [c for c in table.column_names if c.startswith(("n", "count"))])
    check(reordered, "SELECT sex, COUNT(*) FROM t GROUP BY sex", data)


def test_group_by_an_alias_names_no_missing_column(data: duckdb.DuckDBPyConnection) -> None:
    """Regression: GROUP BY an alias used to be read as an undeclared column 'b' (SchemaError)."""
    table = answer(data, "SELECT age AS b, SUM(income) AS total FROM t GROUP BY b ORDER BY b")
    assert table.column_names[:2] == ["b", "b_upper"]
    check(table.drop_columns(["b_upper"]), "SELECT age // 10 * 10, SUM(income) FROM t WHERE age IS NOT NULL "
                                           "GROUP BY 1", data)


# ============================================================================== CASE
BAND = "CASE WHEN age < 30 THEN 'young' WHEN age >= 60 THEN 'old' ELSE 'mid' END"


@pytest.mark.parametrize("sql", [
    f"SELECT {BAND} AS band, COUNT(*) FROM t GROUP BY band",
    f"SELECT {BAND} AS band, COUNT(*) FROM t GROUP BY 1",
    f"SELECT {BAND}, COUNT(*) FROM t GROUP BY {BAND}",
])
def test_case_key_by_alias_position_or_repeated_expression(sql: str, data: duckdb.DuckDBPyConnection) -> None:
    table = answer(data, sql)
    assert table.schema.field(0).type == pa.string()
    assert table.column(0).to_pylist() == ["young", "old", "mid"]  # first appearance, NULL ages in ELSE
    check(table, f"SELECT {BAND}, COUNT(*) FROM t GROUP BY 1", data)


@pytest.mark.parametrize("key, aggregate, where", [
    ("CASE WHEN age < 30 THEN 'young' WHEN age >= 60 THEN 'old' END", "COUNT(*)", ""),  # NULL group
    ("CASE WHEN age BETWEEN 20 AND 39 OR age >= 80 THEN 1 WHEN NOT age IN (0, 1, 2) THEN 2 ELSE 3 END",
     "COUNT(*)", ""),
    ("CASE WHEN age < 50 AND age >= 10 THEN 10 ELSE NULL END", "SUM(income)", " WHERE sex = 'F'"),
    ("CASE WHEN sex = 'F' THEN 'woman' ELSE 'other' END", "AVG(income)", " WHERE age >= 20"),
    ("CASE sex WHEN 'M' THEN 0 WHEN 'F' THEN 1 END", "COUNT(income)", ""),
    ("CASE WHEN d < DATE '2020-03-01' THEN 'before' ELSE 'after' END", "COUNT(*)", " WHERE age < 70"),
    # IS NULL is TRUE on the outside cell, so NULL ages reach its WHEN, not ELSE (Kleene logic for the rest)
    ("CASE WHEN age IS NULL THEN 'missing' WHEN age < 50 THEN 'young' ELSE 'old' END", "COUNT(*)", ""),
    ("CASE WHEN age < 50 OR age IS NULL THEN 'young or missing' ELSE 'old' END", "COUNT(*)", ""),
    ("CASE WHEN NOT (age IS NOT NULL AND age >= 50) THEN 'a' ELSE 'b' END", "COUNT(*)", ""),
])
def test_case_key_matches_duckdb(key: str, aggregate: str, where: str, data: duckdb.DuckDBPyConnection) -> None:
    table = answer(data, f"SELECT {key} AS k, {aggregate} AS v FROM t{where} GROUP BY k")
    check(table, f"SELECT {key}, {aggregate} FROM t{where} GROUP BY 1", data)


def test_case_labels_are_typed_and_the_null_group_comes_last(data: duckdb.DuckDBPyConnection) -> None:
    table = answer(data, "SELECT CASE WHEN age < 30 THEN 2 WHEN age < 60 THEN 1 END AS k, COUNT(*) FROM t GROUP BY 1")
    assert table.schema.field("k").type == pa.int64() and table.column("k").to_pylist() == [2, 1, None]


def test_a_case_key_beside_a_plain_column(data: duckdb.DuckDBPyConnection) -> None:
    table = answer(data, f"SELECT sex, {BAND} AS band, COUNT(*) AS n FROM t GROUP BY sex, band")
    assert table.num_rows == 9
    check(table, f"SELECT sex, {BAND}, COUNT(*) FROM t GROUP BY 1, 2", data, keys=2)


def test_a_case_key_and_a_plain_group_by_on_the_same_column_in_one_batch(data: duckdb.DuckDBPyConnection) -> None:
    with connect(data) as connection:
        plain, keyed = connection.cursor().execute(
            f"SELECT age, COUNT(*) FROM t GROUP BY age; SELECT {BAND} AS band, COUNT(*) FROM t GROUP BY band",
            rho=1e6).fetch_arrow_tables()
    check(keyed, f"SELECT {BAND}, COUNT(*) FROM t GROUP BY 1", data)
    check(plain.drop_columns(["age_upper"]), "SELECT age // 10 * 10, COUNT(*) FROM t WHERE age IS NOT NULL "
                                             "GROUP BY 1", data)


# ============================================================================== dates
@pytest.mark.parametrize("key, truth, kind", [
    ("EXTRACT(YEAR FROM d)", "year(d)", pa.int64()),
    ("year(d)", "year(d)", pa.int64()),
    ("month(d)", "month(d)", pa.int64()),
    ("EXTRACT(MONTH FROM m)", "month(m)", pa.int64()),
    ("date_trunc('year', d)", "CAST(date_trunc('year', d) AS DATE)", pa.date32()),
    ("date_trunc('month', m)", "CAST(date_trunc('month', m) AS DATE)", pa.date32()),
    ("year(y)", "year(y)", pa.int64()),
])
def test_date_part_keys_match_duckdb(key: str, truth: str, kind: pa.DataType, data: duckdb.DuckDBPyConnection) -> None:
    table = answer(data, f"SELECT {key} AS k, COUNT(*) AS n FROM t GROUP BY k ORDER BY k")
    assert table.schema.field("k").type == kind
    check(table, f"SELECT {truth}, COUNT(*) FROM t GROUP BY 1", data)


def test_date_part_groups_are_every_unit_of_the_declared_domain(data: duckdb.DuckDBPyConnection) -> None:
    assert answer(data, "SELECT month(d), COUNT(*) FROM t GROUP BY 1").column(0).to_pylist() == list(range(1, 13))
    assert answer(data, "SELECT year(y), COUNT(*) FROM t GROUP BY 1").column(0).to_pylist() == list(range(2015, 2025))


# ============================================================================== exact rewrite: same cost
def test_a_key_that_is_the_columns_own_bins_costs_and_answers_as_the_plain_group_by(
        data: duckdb.DuckDBPyConnection) -> None:
    """year(y) on a unit-year column is GROUP BY y itself: same charge, same noise, same error bars."""
    tables = []
    for sql in ("SELECT y, COUNT(*) FROM t GROUP BY y", "SELECT year(y), COUNT(*) FROM t GROUP BY 1"):
        with connect(data, seed=5, rho=2.0) as connection:
            tables.append(connection.cursor().execute(sql, rho=1.0).fetch_arrow_table())
            assert connection.budget.spent == 1.0
    plain, keyed = tables
    assert keyed.column("count").to_pylist() == plain.column("count").to_pylist()
    assert keyed.column("count_stddev").to_pylist() == plain.column("count_stddev").to_pylist()


# ============================================================================== refusals
@pytest.mark.parametrize("sql, error, message", [
    ("SELECT CASE WHEN age < 30 THEN 'a' WHEN sex = 'F' THEN 'b' END AS k, COUNT(*) FROM t GROUP BY k",
     UnsupportedQueryError, r"a CASE over two columns \('age' and 'sex'\) is not supported \(line 1, col 8: .*"
                            r"one statement per combination .* or GROUP BY both columns"),
    ("SELECT CASE WHEN income < 35 THEN 'a' END AS k, COUNT(*) FROM t GROUP BY k",
     UnsupportedQueryError, r"range endpoint 35 on 'income' \(line 1, col 27\) splits the cell \[30.0, 40.0\)"),
    ("SELECT CASE WHEN age < 30 THEN 'a' ELSE 1 END AS k, COUNT(*) FROM t GROUP BY k",
     UnsupportedQueryError, r"CASE labels of different types is not supported \(line 1, col 8"),
    ("SELECT month(y), COUNT(*) FROM t GROUP BY 1",
     UnsupportedQueryError, r"EXTRACT\(MONTH \.\.\.\) at line 1, col 8: the base cells of tables\.t\.columns\.y are "
                            r"whole years \(unit = \"year\"\).*Declare unit = \"month\""),
    ("SELECT year(age), COUNT(*) FROM t GROUP BY 1",
     UnsupportedQueryError, r"needs a date column; tables\.t\.columns\.age is integer"),
    ("SELECT EXTRACT(DAY FROM d), COUNT(*) FROM t GROUP BY 1",
     UnsupportedQueryError, r"a date part other than YEAR or MONTH \(DAY\) is not supported \(line 1, col 8"),
    ("SELECT COUNT(*) AS n FROM t GROUP BY n",
     UnsupportedQueryError, r"GROUP BY an aggregate \(by position or alias\) is not supported \(line 1, col 38"),
    ("SELECT sex, COUNT(*) FROM t GROUP BY 3", SqlSyntaxError, r"GROUP BY position 3 is out of range"),
    (f"SELECT {BAND}, COUNT(*) FROM t", UnsupportedQueryError,
     r"a CASE, date-part or arithmetic key in SELECT that is not in GROUP BY is not supported \(line 1, col 8"),
    ("SELECT age, COUNT(*) FROM t GROUP BY CASE WHEN age < 30 THEN 1 END",
     UnsupportedQueryError, r"selecting column 'age' without grouping by it"),
    (f"SELECT {BAND} AS band, age, COUNT(*) FROM t GROUP BY band, age",
     UnsupportedQueryError, r"two GROUP BY keys on column 'age' is not supported"),
])
def test_refusals_name_the_construct_and_position_and_charge_nothing(
        sql: str, error: type[Exception], message: str, data: duckdb.DuckDBPyConnection) -> None:
    with connect(data) as connection:
        with pytest.raises(error, match=message):
            connection.cursor().execute(sql, rho=1.0)
        assert connection.budget.spent == 0.0


# ============================================================================== public dimension tables
REGIONS = [[1, "North", "A"], [2, "South", "A"], [3, "North", "B"], [4, "East", "B"], [9, "West", "B"]]
REGIONS_SQL = ("(VALUES " + ", ".join(f"({i}, '{n}', '{a}')" for i, n, a in REGIONS)
               + ") AS regions(region_id, name, area)")
PEOPLE = {"age": {"type": "integer", "lower": 0, "upper": 99},
          "region_id": {"type": "categorical", "values": [1, 2, 3, 4, 5, 6], "references": "regions.region_id"}}


def public_schema(regions: object = None, **key: object) -> dict[str, object]:
    return {"tables": {"regions": {"public": True, "columns": ["region_id", "name", "area"],
                                   "rows": REGIONS if regions is None else regions},
                       "people": {"columns": {**PEOPLE, "region_id": {**PEOPLE["region_id"], **key}}}}}


@pytest.fixture(scope="module")
def people() -> Iterator[duckdb.DuckDBPyConnection]:
    """Region ids 1..6 (5 and 6 have no public row) and NULL; no `regions` table in the database."""
    rng = np.random.default_rng(4)
    con = duckdb.connect()
    con.execute("CREATE TABLE people (age INTEGER, region_id INTEGER)")
    con.executemany("INSERT INTO people VALUES (?, ?)",
                    [(int(rng.integers(0, 100)), None if rng.random() < 0.05 else int(rng.integers(1, 7)))
                     for _ in range(ROWS)])
    yield con
    con.close()


def public_answer(con: duckdb.DuckDBPyConnection, sql: str, rho: float = 1e6) -> pa.Table:
    with dpsql.connect(con, schema=Schema.load(public_schema()), budget=Budget(rho=1e9),
                       rng=SeededRandomSource(3)) as connection:
        return connection.cursor().execute(sql, rho=rho).fetch_arrow_table()


@pytest.mark.parametrize("sql, truth, keys", [
    ("SELECT r.name, COUNT(*) AS n FROM people JOIN regions r USING (region_id) GROUP BY r.name",
     "SELECT name, COUNT(*) FROM people JOIN {R} USING (region_id) GROUP BY 1", 1),
    ("SELECT name, COUNT(*) AS n FROM people p LEFT JOIN regions r ON p.region_id = r.region_id GROUP BY name",
     "SELECT name, COUNT(*) FROM people LEFT JOIN {R} USING (region_id) GROUP BY 1", 1),
    ("SELECT area, SUM(age) AS s FROM people INNER JOIN regions ON people.region_id = regions.region_id "
     "GROUP BY 1", "SELECT area, SUM(age) FROM people JOIN {R} USING (region_id) GROUP BY 1", 1),
    ("SELECT CASE WHEN age < 50 THEN 'young' ELSE 'old' END AS band, COUNT(*) AS n FROM people "
     "JOIN regions r USING (region_id) WHERE r.area = 'A' OR r.name IN ('East') GROUP BY band",
     "SELECT CASE WHEN age < 50 THEN 'young' ELSE 'old' END, COUNT(*) FROM people JOIN {R} USING (region_id) "
     "WHERE area = 'A' OR name IN ('East') GROUP BY 1", 1),
    ("SELECT COUNT(*) AS n FROM people LEFT JOIN regions USING (region_id) WHERE name <> 'North' AND age >= 20",
     "SELECT 0, COUNT(*) FROM people LEFT JOIN {R} USING (region_id) WHERE name <> 'North' AND age >= 20", 0),
    ("SELECT r.region_id, COUNT(*) AS n FROM people JOIN regions r USING (region_id) GROUP BY 1",
     "SELECT region_id, COUNT(*) FROM people JOIN {R} USING (region_id) GROUP BY 1", 1),
    # derived outputs and HAVING over a public column's groups (dpsql.sql.derived lists the group columns again)
    ("SELECT r.name, SUM(age) / COUNT(*) AS mean FROM people JOIN regions r USING (region_id) GROUP BY r.name "
     "HAVING COUNT(*) > 10", "SELECT name, SUM(age) / COUNT(*) FROM people JOIN {R} USING (region_id) GROUP BY 1 "
     "HAVING COUNT(*) > 10", 1),
])
def test_public_join_matches_duckdbs_join(sql: str, truth: str, keys: int, people: duckdb.DuckDBPyConnection) -> None:
    table = public_answer(people, sql)
    if keys == 0:
        table = table.add_column(0, "k", pa.array([0]))
        keys = 1
    check(table, truth.format(R=REGIONS_SQL), people, keys=keys)


def test_public_join_groups_come_from_the_schema(people: duckdb.DuckDBPyConnection) -> None:
    inner = public_answer(people, "SELECT name, COUNT(*) FROM people JOIN regions USING (region_id) GROUP BY name")
    left = public_answer(people, "SELECT name, COUNT(*) FROM people LEFT JOIN regions USING (region_id) GROUP BY 1")
    assert inner.column("name").to_pylist() == ["North", "South", "East"]  # West's key 9 is not a declared value
    assert left.column("name").to_pylist() == ["North", "South", "East", None]


def test_a_public_join_is_charged_what_the_plain_group_by_is(people: duckdb.DuckDBPyConnection) -> None:
    for sql in ("SELECT name, COUNT(*) FROM people JOIN regions USING (region_id) GROUP BY name",
                "SELECT region_id, COUNT(*) FROM people GROUP BY region_id"):
        with dpsql.connect(people, schema=Schema.load(public_schema()), budget=Budget(rho=1.0),
                           rng=SeededRandomSource(0)) as connection:
            connection.cursor().execute(sql, rho=0.25)
            assert connection.budget.spent == 0.25


@pytest.mark.parametrize("sql, error, message", [
    ("SELECT COUNT(*) FROM people JOIN visits USING (region_id)", SchemaError,
     r"JOIN visits \(line 1, col 29\): 'visits' is neither a table of the schema nor a public table"),
    ("SELECT COUNT(*) FROM people RIGHT JOIN regions USING (region_id)", UnsupportedQueryError,
     r"JOIN is not supported \(line 1, col 29"),
    ("SELECT COUNT(*) FROM people LEFT JOIN regions USING (region_id) WHERE NOT name = 'North'",
     UnsupportedQueryError, r"NOT around a condition on the public column 'name' of a LEFT JOIN \(line 1, col 75\)"),
    ("SELECT SUM(r.region_id) FROM people JOIN regions r USING (region_id)", UnsupportedQueryError,
     r"aggregates a column of a public table"),
    ("SELECT area, name, COUNT(*) FROM people JOIN regions USING (region_id) GROUP BY 1, 2", UnsupportedQueryError,
     r"GROUP BY 'area' and 'name' are both read from people\.region_id through the join \(line 1, col 14\)"),
    ("SELECT region_id, r.name, COUNT(*) FROM people JOIN regions r USING (region_id) GROUP BY 1, 2",
     UnsupportedQueryError, r"GROUP BY 'region_id' and 'name' are both read from people\.region_id"),
    ("SELECT COUNT(*) FROM people JOIN regions USING (age)", SchemaError,
     r"the public table 'regions' has no column 'age'"),
    ("SELECT r.size, COUNT(*) FROM people JOIN regions r USING (region_id) GROUP BY 1", SchemaError,
     r"column 'size' \(line 1, col 8\) is not in the public table 'regions'"),
])
def test_public_join_refusals(sql: str, error: type[Exception], message: str,
                              people: duckdb.DuckDBPyConnection) -> None:
    with dpsql.connect(people, schema=Schema.load(public_schema()), budget=Budget(rho=1.0),
                       rng=SeededRandomSource(0)) as connection:
        with pytest.raises(error, match=message):
            connection.cursor().execute(sql, rho=0.5)
        assert connection.budget.spent == 0.0


@pytest.mark.parametrize("regions, key, message", [
    (None, {"references": "zones.region_id"}, r"tables\.people\.columns\.region_id\.references must name a public"),
    (None, {"references": "regions.code"}, r"references: the public table 'regions' has no column 'code'"),
    ([[1, "North", "A"], [1, "South", "A"]], {}, r"regions\.region_id holds a value twice"),
    ([["1", "North", "A"]], {}, r"the values of regions\.region_id must be integers"),
    (None, {"type": "integer", "lower": 0, "upper": 9, "bin_width": 5, "values": None},
     r"a foreign key must be categorical, or integer with one value per base cell"),
    ([[1, "North"]], {}, r"tables\.regions\.rows row 1 must be a list of 3"),
])
def test_public_table_declarations_are_checked(regions: object, key: dict[str, object], message: str) -> None:
    spec = public_schema(regions, **key)
    column = spec["tables"]["people"]["columns"]["region_id"]  # type: ignore[index]
    if column.get("values", 0) is None:
        del column["values"]
    with pytest.raises(SchemaError, match=message):
        Schema.load(spec)


# ============================================================================== calibration at ε = 1
@pytest.mark.slow
def test_joined_and_case_groups_are_unbiased_with_calibrated_standard_errors(
        people: duckdb.DuckDBPyConnection) -> None:
    """300 releases at ε = 1 of a LEFT JOIN group count and a CASE-band SUM: z = (answer − truth) / stddev
    has mean 0 per group (within q/√R, q the normal quantile at 1e-4 split over the groups) and the mean
    of each release's mean z² is within 3.89 standard errors of 1; the same check fails with the
    stddev reported twice or half as large."""
    sql = ("SELECT name, COUNT(*) AS n FROM people LEFT JOIN regions USING (region_id) GROUP BY name;\n"
           "SELECT CASE WHEN age < 30 THEN 'a' WHEN age < 70 THEN 'b' END AS band, SUM(age) AS n FROM people "
           "GROUP BY band")
    truths = [dict(people.execute(f"SELECT name, COUNT(*) FROM people LEFT JOIN {REGIONS_SQL} USING (region_id) "
                                  "GROUP BY 1").fetchall()),
              dict(people.execute("SELECT CASE WHEN age < 30 THEN 'a' WHEN age < 70 THEN 'b' END, SUM(age) "
                                  "FROM people GROUP BY 1").fetchall())]
    prepared = engine.prepare(sql, Schema.load(public_schema()), PrivacyCost(epsilon=1.0))
    backend, rng = ScansOnce(people), SeededRandomSource(11)
    z = []
    for _ in range(300):
        tables = engine.run(prepared, backend=backend, budget=Budget(epsilon=1e6), rng=rng)
        row = []
        for table, truth in zip(tables, truths):
            labels, values = table.column(0).to_pylist(), table.column("n").to_pylist()
            stddevs = table.column("n_stddev").to_pylist()
            row += [(v - (truth.get(label) or 0)) / s for label, v, s in zip(labels, values, stddevs)]
        z.append(row)
    scores = np.asarray(z)
    assert scores.shape == (300, 7)

    def calibrated(z: np.ndarray) -> bool:
        q = stats.norm.isf(1e-4 / (2 * z.shape[1]))
        per_run = (z**2).mean(axis=1)
        spread = per_run.std(ddof=1) / np.sqrt(z.shape[0])
        return bool(np.all(np.abs(z.mean(axis=0)) <= q / np.sqrt(z.shape[0]))) and \
            abs(per_run.mean() - 1.0) <= stats.norm.isf(1e-4 / 2) * spread

    assert calibrated(scores), (scores.mean(axis=0), (scores**2).mean())
    assert not calibrated(scores / 2) and not calibrated(scores * 2)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_weighted_membership_is_the_sparse_product_entry_for_entry(data: st.DataObject) -> None:
    """The dense builder gives bit for bit what membership · diag(weights) gives through scipy.sparse:
    w_c in group g's row where cell c is in g, +0.0 elsewhere (a −0.0 or 0 weight included)."""
    base = data.draw(st.integers(1, 12))
    cells = data.draw(st.integers(1, 8))
    labels = data.draw(st.integers(1, 5))
    group_of_base = np.array(data.draw(st.lists(st.integers(-1, labels - 1), min_size=base + 1, max_size=base + 1)))
    cell_of_base = np.array(data.draw(st.lists(st.integers(-1, cells - 1), min_size=base + 1, max_size=base + 1)))
    weights = np.array(data.draw(st.lists(st.sampled_from([0.0, -0.0, 1.0, -2.5, 3e-310, 7.0]),
                                          min_size=cells, max_size=cells)))
    groups = group_keys.KeyGroups(labels=list(range(labels)), group_of_base=group_of_base)
    sparse = (group_keys.membership(groups, cell_of_base, cells) @ sp.diags_array(weights)).toarray()
    dense = group_keys.weighted_membership(groups, cell_of_base, weights)
    assert dense.tobytes() == np.ascontiguousarray(sparse).tobytes()
