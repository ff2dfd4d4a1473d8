"""A private table joined to its privacy unit's table (``visits JOIN people``), end to end.

The per-unit cap applies after the join: at most ``max_rows`` joined rows per person. Exact
answers at a very large budget are compared with DuckDB running the joined-and-capped question as
plain SQL; the sensitivity argument of :mod:`dpsql.sql.relations` is checked on neighbouring
databases (one person removed: the cell data change by at most ``max_rows`` rows); refusals carry
their reason and position and charge nothing; a joined batch is charged once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.sql_backend import SqlBackend
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.budget.ledger import Binding, Ledger
from dpsql.errors import InvalidQueryError, SchemaError, UnsupportedQueryError
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema, Table, measure_quantum
from dpsql.sql.compile import batch_table, compile_batch
from dpsql.sql.parse import parse_batch
from tests._postgres_server import postgres_uri  # noqa: F401  (a session-scoped fixture)

MAX_ROWS = 3
PEOPLE = {"privacy_unit": {"column": "person_id", "max_rows": 1},
          "columns": {"sex": {"type": "categorical", "values": ["F", "M"], "other": True},
                      "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 25}}}
VISITS = {"privacy_unit": {"column": "person_id", "max_rows": MAX_ROWS, "table": "people"},
          "columns": {"ward": {"type": "categorical", "values": ["a", "b", "c"], "other": True},
                      "cost": {"type": "numeric", "lower": 0, "upper": 500, "bin_width": 100}}}
SCHEMA = Schema.load({"tables": {"people": PEOPLE, "visits": VISITS}})
RHO = 1e5  # σ of a count ≈ 0.003: answers are exact to a few σ


def _data(seed: int = 3) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """People 1..40 (person 7's sex is NULL; 31..40 have no visit) and their visits: 1 to 8 each, so
    the cap of 3 matters. A person with more than 3 visits has identical ones (so which 3 the cap keeps
    does not change any answer and plain SQL can state the truth); persons 100 and 101 have visits but
    no people row, and 4 visits have no person at all."""
    rng = np.random.default_rng(seed)
    people = [(i, None if i == 7 else str(rng.choice(["F", "M"])), int(rng.integers(0, 100))) for i in range(1, 41)]
    visits: list[tuple[object, ...]] = []
    for person in range(1, 31):
        count = int(rng.integers(1, 9))
        same = (str(rng.choice(["a", "b", "c"])), float(rng.integers(0, 500)))
        for _ in range(count):
            ward, cost = same if count > MAX_ROWS else (str(rng.choice(["a", "b", "c"])), float(rng.integers(0, 500)))
            visits.append((person, ward, cost))
    visits += [(100, "a", 10.0), (100, "b", 20.0), (101, "c", 30.0), (101, "c", 40.0), (101, "a", 50.0)]
    visits += [(None, "a", 60.0)] * 4
    return people, visits


def _load(con: duckdb.DuckDBPyConnection, people: list[tuple[object, ...]],
          visits: list[tuple[object, ...]]) -> duckdb.DuckDBPyConnection:
    con.execute("CREATE OR REPLACE TABLE people (person_id INTEGER, sex VARCHAR, age INTEGER)")
    con.execute("CREATE OR REPLACE TABLE visits (person_id INTEGER, ward VARCHAR, cost DOUBLE)")
    if people:
        con.executemany("INSERT INTO people VALUES (?, ?, ?)", people)
    if visits:
        con.executemany("INSERT INTO visits VALUES (?, ?, ?)", visits)
    return con


@pytest.fixture(scope="module")
def data() -> Iterator[duckdb.DuckDBPyConnection]:
    con = _load(duckdb.connect(), *_data())
    yield con
    con.close()


def _capped(join: str) -> str:
    """The joined-and-capped relation as plain DuckDB SQL: at most MAX_ROWS rows per person, after the join."""
    return (f"WITH j AS (SELECT v.person_id, v.ward, v.cost, p.sex, p.age FROM visits v {join} people p "
            "ON v.person_id = p.person_id WHERE v.person_id IS NOT NULL), "
            "c AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY person_id ORDER BY ward, cost) AS r FROM j) "
            f"SELECT * FROM c WHERE r <= {MAX_ROWS}")


def _truth(con: duckdb.DuckDBPyConnection, sql: str) -> dict[object, tuple[float, ...]]:
    """Rows of plain SQL as {first column: the other columns} (NULL sums as 0, as dpsql answers empty groups)."""
    return {row[0]: tuple(0.0 if v is None else float(v) for v in row[1:]) for row in con.execute(sql).fetchall()}


def _answers(con: duckdb.DuckDBPyConnection, batch: str, **cost: float) -> list[dict[str, list[object]]]:
    with dpsql.connect(con, schema=SCHEMA, budget=Budget(rho=2 * RHO), rng=SeededRandomSource(11)) as connection:
        tables = connection.cursor().execute(batch, **(cost or {"rho": RHO})).fetch_arrow_tables()
    return [table.to_pydict() for table in tables]


def _close(found: list[object], errors: list[object], expected: list[float]) -> None:
    """Each answer within 5 of its reported standard errors of the exact value, and the errors small."""
    for value, error, want in zip(found, errors, expected, strict=True):
        assert isinstance(value, float) and isinstance(error, float) and error < 0.05 * max(1.0, abs(want))
        assert abs(value - want) <= 5 * error + 1e-6, (value, want, error)


# ============================================================================== exact answers
def test_inner_join_answers_match_duckdb_on_the_capped_joined_rows(data: duckdb.DuckDBPyConnection) -> None:
    batch = """SELECT p.sex, COUNT(*) AS n, SUM(v.cost) AS total FROM visits v JOIN people p USING (person_id)
                 GROUP BY p.sex;
               SELECT ward, COUNT(*) AS n FROM visits v JOIN people p ON v.person_id = p.person_id
                 WHERE p.age >= 50 GROUP BY ward;
               SELECT AVG(cost) AS mean FROM people JOIN visits ON people.person_id = visits.person_id
                 WHERE sex = 'F'"""
    by_sex, by_ward, mean = _answers(data, batch)
    capped = _capped("JOIN")
    truth = _truth(data, f"SELECT sex, COUNT(*), SUM(cost) FROM ({capped}) GROUP BY sex")
    assert by_sex["sex"] == ["F", "M", None]
    _close(by_sex["n"], by_sex["n_stddev"], [truth[s][0] for s in ("F", "M", None)])
    _close(by_sex["total"], by_sex["total_stddev"], [truth[s][1] for s in ("F", "M", None)])
    wards = _truth(data, f"SELECT ward, COUNT(*) FROM ({capped}) WHERE age >= 50 GROUP BY ward")
    assert by_ward["ward"] == ["a", "b", "c", None]
    _close(by_ward["n"], by_ward["n_stddev"], [wards.get(w, (0.0,))[0] for w in ("a", "b", "c", None)])
    (want,) = data.execute(f"SELECT AVG(cost) FROM ({capped}) WHERE sex = 'F'").fetchone() or (None,)
    _close(mean["mean"], mean["mean_stddev"], [float(want)])
    uncapped = _truth(data, "SELECT sex, COUNT(*) FROM visits JOIN people USING (person_id) GROUP BY sex")
    assert sum(v[0] for v in uncapped.values()) - sum(v[0] for v in truth.values()) >= 20  # the cap matters


def test_left_join_keeps_visits_without_a_person_in_the_outside_group(data: duckdb.DuckDBPyConnection) -> None:
    batch = ("SELECT sex, COUNT(*) AS n, SUM(cost) AS total FROM visits v LEFT JOIN people p USING (person_id) "
             "GROUP BY sex")
    (found,) = _answers(data, batch)
    truth = _truth(data, f"SELECT sex, COUNT(*), SUM(cost) FROM ({_capped('LEFT JOIN')}) GROUP BY sex")
    assert found["sex"] == ["F", "M", None]
    _close(found["n"], found["n_stddev"], [truth[s][0] for s in ("F", "M", None)])
    _close(found["total"], found["total_stddev"], [truth[s][1] for s in ("F", "M", None)])
    inner = _truth(data, f"SELECT sex, COUNT(*) FROM ({_capped('JOIN')}) GROUP BY sex")
    assert truth[None][0] - inner[None][0] == 5  # the 5 visits of persons 100 and 101 (the 4 without one are dropped)


def test_a_joined_batch_is_charged_once_to_the_ledger(data: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "books.ledger")
    ledger.set_total("hospital", PrivacyCost(epsilon=2.0), binding=Binding.of(SCHEMA))
    batch = ("SELECT p.sex, COUNT(*) FROM visits v JOIN people p USING (person_id) GROUP BY p.sex; "
             "SELECT SUM(v.cost) FROM visits v JOIN people p USING (person_id)")
    with dpsql.connect(data, schema=SCHEMA, ledger=ledger.path, dataset="hospital") as connection:
        cursor = connection.cursor()
        with pytest.raises(UnsupportedQueryError):  # refused before anything is charged
            cursor.execute("SELECT COUNT(*) FROM visits v JOIN people p ON v.ward = p.sex", epsilon=0.5)
        assert len(ledger.history("hospital")) == 0
        tables = cursor.execute(batch, epsilon=0.5).fetch_arrow_tables()
    assert len(tables) == 2
    assert len(ledger.history("hospital")) == 1 and ledger.balance("hospital").left == Fraction(3, 2)


def test_the_sql_sent_is_the_declared_join_never_the_users_text(data: duckdb.DuckDBPyConnection) -> None:
    batch = parse_batch("SELECT p.sex, COUNT(*) FROM visits AS v LEFT JOIN people AS p USING (person_id) "
                        "GROUP BY p.sex")
    relation = batch_table(batch, SCHEMA)
    sql = DuckDBBackend(data).sql_for(relation, [relation.columns["sex"]])
    assert 'FROM "visits" AS "dpsql_fact"' in sql and 'LEFT JOIN "people" AS "dpsql_unit_table"' in sql
    assert '"dpsql_fact"."person_id" = "dpsql_unit_table"."person_id"' in sql
    assert "PARTITION BY" in sql and f'"dpsql_rank" <= {MAX_ROWS}' in sql and " v." not in sql


def test_postgresql_reads_the_same_joined_and_capped_cells_as_duckdb(data: duckdb.DuckDBPyConnection,
                                                                      postgres_uri: str) -> None:  # noqa: F811
    """The same generated join and cap on PostgreSQL (ADBC, temporary tables): cell data identical to DuckDB's."""
    from adbc_driver_postgresql import dbapi

    from dpsql.backends.postgres import PostgresBackend
    connection = dbapi.connect(postgres_uri)
    cursor = connection.cursor()
    for name in ("people", "visits"):
        cursor.adbc_ingest(name, data.sql(f"SELECT * FROM {name}").to_arrow_table(), mode="create", temporary=True)
    cursor.close()
    connection.commit()
    try:
        for kind in ("JOIN", "LEFT JOIN"):
            relation = batch_table(parse_batch(f"SELECT COUNT(*) FROM visits {kind} people USING (person_id)"), SCHEMA)
            found = _cell_vectors(PostgresBackend(connection, tables={"people": "people", "visits": "visits"}),
                                  relation)
            expected = _cell_vectors(DuckDBBackend(data), relation)
            assert all(np.array_equal(found[name], expected[name]) for name in expected), kind
    finally:
        connection.close()


@pytest.mark.slow
def test_spark_reads_the_same_joined_and_capped_cells_as_duckdb(data: duckdb.DuckDBPyConnection,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The same generated join and cap on Spark (local session, DataFrames): cell data identical to DuckDB's;
    the columns both tables declare (``visits.age``, ``people.age``) are read under their relation names."""
    pytest.importorskip("pyspark")
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):  # left by a Spark Connect session earlier in the run
        monkeypatch.delenv(name, raising=False)
    from pyspark.sql import SparkSession

    from dpsql.backends.spark import SparkBackend
    session = (SparkSession.builder.master("local[1]").appName("dpsql-joins").config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    visits = {**VISITS, "columns": {**VISITS["columns"], "age": {"type": "integer", "lower": 0, "upper": 99}}}
    schema = Schema.load({"tables": {"people": PEOPLE, "visits": visits}})
    data.execute("CREATE TEMP TABLE visits_aged AS SELECT *, CAST(cost AS INTEGER) % 100 AS age FROM visits")
    try:
        frames = {"people": session.createDataFrame(data.sql("SELECT * FROM people").to_arrow_table()),
                  "visits": session.createDataFrame(data.sql("SELECT * FROM visits_aged").to_arrow_table())}
        duck = duckdb.connect()
        duck.from_arrow(data.sql("SELECT * FROM people").to_arrow_table()).create("people")
        duck.from_arrow(data.sql("SELECT * FROM visits_aged").to_arrow_table()).create("visits")
        for kind in ("JOIN", "LEFT JOIN"):
            relation = batch_table(parse_batch(f"SELECT COUNT(*) FROM visits {kind} people USING (person_id)"), schema)
            cells = [relation.columns[name] for name in ("sex", "people.age", "visits.age", "ward")]
            with SparkBackend(session, frames) as backend:
                found = backend.cell_data(relation, cells, count_columns=[relation.columns["cost"]])
            expected = DuckDBBackend(duck).cell_data(relation, cells, count_columns=[relation.columns["cost"]])
            assert np.array_equal(found.index, expected.index) and np.array_equal(found.counts, expected.counts)
            assert np.array_equal(found.nonnull["cost"], expected.nonnull["cost"]), kind
    finally:
        data.execute("DROP TABLE visits_aged")
        session.stop()


def test_explain_states_the_join_and_the_cap_after_it(data: duckdb.DuckDBPyConnection) -> None:
    with dpsql.connect(data, schema=SCHEMA, budget=Budget(epsilon=1.0)) as connection:
        text = connection.cursor().explain("SELECT p.sex, COUNT(*) FROM visits v LEFT JOIN people p USING (person_id) "
                                           "GROUP BY p.sex", epsilon=1.0)
        assert connection.budget.remaining == 1.0
    assert "on table 'visits LEFT JOIN people'" in text
    assert ("Join: each row of 'visits' extended with the 'people' row of its unit (visits.person_id = "
            "people.person_id, generated from the schema); its rows without one are kept with NULL 'people' "
            f"columns. At most {MAX_ROWS} joined rows per unit are kept") in text


# ============================================================================== sensitivity
def _cell_vectors(source: duckdb.DuckDBPyConnection | SqlBackend, relation: Table) -> dict[str, np.ndarray]:
    """Counts, clamped sums (in quanta) and non-NULL counts of the joined relation over all its columns' cells."""
    backend = source if isinstance(source, SqlBackend) else DuckDBBackend(source)
    cells = [relation.columns[name] for name in ("sex", "age", "ward")]
    cost = relation.columns["cost"]
    data = backend.cell_data(relation, cells, sum_columns={cost: measure_quantum(cost)}, count_columns=[cost])
    size = int(np.prod(data.shape))
    vectors = {"counts": data.counts, "sum": data.sums["cost"], "nonnull": data.nonnull["cost"]}
    dense = {}
    for name, values in vectors.items():
        full = np.zeros(size, dtype=np.int64)
        full[data.index] = values
        dense[name] = full
    return dense


def _max_change(people: list[tuple[object, ...]], visits: list[tuple[object, ...]], relation: Table,
                persons: set[object] | None = None) -> tuple[int, int]:
    """Over every person removed (their people rows and all their visits; default: everyone): the largest
    L1 change of the count vectors and of the sum vector (in quanta)."""
    con = _load(duckdb.connect(), people, visits)
    full = _cell_vectors(con, relation)
    counts = sums = 0
    everyone = {p[0] for p in people} | {v[0] for v in visits if v[0] is not None}
    for person in sorted(everyone if persons is None else persons):
        _load(con, [p for p in people if p[0] != person], [v for v in visits if v[0] != person])
        less = _cell_vectors(con, relation)
        counts = max(counts, int(np.abs(full["counts"] - less["counts"]).sum()),
                     int(np.abs(full["nonnull"] - less["nonnull"]).sum()))
        sums = max(sums, int(np.abs(full["sum"] - less["sum"]).sum()))
    con.close()
    return counts, sums


@pytest.mark.parametrize("kind", ["JOIN", "LEFT JOIN"])
def test_removing_one_person_changes_the_joined_cell_data_by_at_most_max_rows(kind: str) -> None:
    relation = batch_table(parse_batch(f"SELECT COUNT(*) FROM visits {kind} people USING (person_id)"), SCHEMA)
    people, visits = _data()
    varied = [(v[0], "abc"[i % 3], float(i % 500)) for i, v in enumerate(visits)]  # heavy persons' visits differ too
    heavy = {person for person in range(1, 31) if sum(v[0] == person for v in visits) > MAX_ROWS}
    light = {person for person in range(1, 31) if 0 < sum(v[0] == person for v in visits) <= MAX_ROWS}
    persons = {*sorted(heavy)[:4], *sorted(light)[:4], 7, 35, 100, 101}  # heavy, light, no sex, no visit, no row
    counts, sums = _max_change(people, varied, relation, persons)
    quantum = measure_quantum(relation.columns["cost"])
    assert counts == MAX_ROWS  # reached: a person with more than MAX_ROWS visits is removed
    assert 0 < sums <= MAX_ROWS * 500 / quantum


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(people=st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["F", "M", None]), st.integers(0, 99)),
                       max_size=6),
       visits=st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 5, None]), st.sampled_from(["a", "b", "x"]),
                                 st.floats(-50, 900, allow_nan=False)), max_size=14),
       outer=st.booleans())
def test_the_bound_holds_on_any_data_even_when_people_repeats_a_person(
        people: list[tuple[object, ...]], visits: list[tuple[object, ...]], outer: bool) -> None:
    """Random small tables, where ``people`` may break its declaration (a person in several rows): the cap
    on the joined rows still bounds every change by MAX_ROWS rows."""
    kind = "LEFT JOIN" if outer else "JOIN"
    relation = batch_table(parse_batch(f"SELECT COUNT(*) FROM visits {kind} people USING (person_id)"), SCHEMA)
    counts, sums = _max_change(people, visits, relation)
    assert counts <= MAX_ROWS
    assert sums <= MAX_ROWS * 500 / measure_quantum(relation.columns["cost"])


# ============================================================================== calibration
@pytest.mark.slow
def test_joined_group_answers_are_calibrated_at_epsilon_one(data: duckdb.DuckDBPyConnection) -> None:
    """z = (answer − exact) / reported stddev over 150 seeded runs of a joined GROUP BY: mean 0 and variance 1
    (tolerances: 4 standard errors of the mean and of the variance of 450 z-scores)."""
    batch = "SELECT p.sex, COUNT(*) AS n FROM visits v JOIN people p USING (person_id) GROUP BY p.sex"
    truth = _truth(data, f"SELECT sex, COUNT(*) FROM ({_capped('JOIN')}) GROUP BY sex")
    exact = np.array([truth[s][0] for s in ("F", "M", None)])
    scores = []
    for seed in range(150):
        with dpsql.connect(data, schema=SCHEMA, budget=Budget(epsilon=1.0), rng=SeededRandomSource(seed)) as connection:
            found = connection.cursor().execute(batch, epsilon=1.0).fetch_arrow_table().to_pydict()
        scores.extend((np.array(found["n"]) - exact) / np.array(found["n_stddev"]))
    z = np.array(scores)
    assert abs(z.mean()) < 4 / math.sqrt(z.size)
    assert abs(z.var() - 1) < 4 * math.sqrt(5 / z.size)  # Laplace-like noise: Var(z²) ≤ 5 (kurtosis 6)


# ============================================================================== refusals
def _refused(sql: str, kind: type[Exception], *phrases: str, schema: Schema = SCHEMA) -> str:
    with pytest.raises(kind) as caught:
        compile_batch(parse_batch(sql), schema)
    message = str(caught.value)
    for phrase in phrases:
        assert phrase in message, message
    return message


@pytest.mark.parametrize("sql, phrases", [
    ("SELECT COUNT(*) FROM visits v CROSS JOIN people p",
     ["CROSS JOIN is not supported (line 1, col 31", "no contribution bound"]),
    ("SELECT COUNT(*) FROM visits v, people p WHERE v.person_id = p.person_id",
     ["multiple tables in FROM is not supported (line 1, col 32", "cross product"]),
    ("SELECT COUNT(*) FROM visits v JOIN people p ON v.person_id = p.person_id AND p.age > 3",
     ["a JOIN condition other than key = key is not supported (line 1, col 48"]),
    ("SELECT COUNT(*) FROM visits v JOIN people p ON v.person_id < p.person_id",
     ["a JOIN condition other than key = key is not supported (line 1, col 48"]),
    ("SELECT COUNT(*) FROM visits v RIGHT JOIN people p USING (person_id)",
     ["RIGHT JOIN is not supported (line 1, col 31", "LEFT JOIN"]),
    ("SELECT COUNT(*) FROM visits v FULL JOIN people p USING (person_id)", ["FULL JOIN is not supported"]),
    ("SELECT COUNT(*) FROM visits v NATURAL JOIN people p", ["NATURAL JOIN is not supported"]),
    ("SELECT COUNT(*) FROM visits v JOIN people p USING (person_id) JOIN people q USING (person_id)",
     ["a second JOIN is not supported (line 1, col 63"]),
    ("SELECT COUNT(*) FROM visits v JOIN people p USING (person_id, sex)", ["USING with several columns"]),
])
def test_joins_outside_the_grammar_are_refused_with_reason_and_position(sql: str, phrases: list[str]) -> None:
    _refused(sql, UnsupportedQueryError, *phrases)


@pytest.mark.parametrize("sql, phrases", [
    ("SELECT COUNT(*) FROM visits a JOIN visits b USING (person_id)",
     ["a self-join of 'visits' (line 1, col 31)", "no contribution bound"]),
    ("SELECT COUNT(*) FROM visits v JOIN people p ON v.ward = p.person_id",
     ["the join condition ON v.ward = p.person_id (line 1, col 31) is not the declared key",
      "visits.person_id to people.person_id", "Write USING (person_id)"]),
    ("SELECT COUNT(*) FROM visits v JOIN people p USING (ward)", ["the join condition USING (ward)"]),
    ("SELECT COUNT(*) FROM people p LEFT JOIN visits v USING (person_id)",
     ["'people' LEFT JOIN 'visits' (line 1, col 31)", "FROM visits LEFT JOIN people"]),
    ("SELECT COUNT(*) FROM visits v JOIN claims c USING (person_id)",
     ["a join between 'visits' and 'claims' (line 1, col 31)", "do not share a declared privacy unit"]),
    ("SELECT COUNT(*) FROM people p JOIN claims c USING (person_id)", ["do not share a declared privacy unit"]),
    ("SELECT COUNT(*) FROM visits v JOIN stays s USING (person_id)",
     ["both hold many rows per unit of 'people'", "Join each of them to 'people', in separate batches"]),
    ("SELECT COUNT(*) FROM visits v JOIN people p USING (person_id); SELECT COUNT(*) FROM people",
     ["a batch must query one relation; the statement at line 1, col 64 reads 'people'",
      "reads 'visits JOIN people'"]),
    ("SELECT COUNT(*) FROM visits v JOIN people p USING (person_id); "
     "SELECT COUNT(*) FROM visits v LEFT JOIN people p USING (person_id)", ["'visits LEFT JOIN people'"]),
])
def test_joins_the_schema_does_not_bound_are_refused(sql: str, phrases: list[str]) -> None:
    claims = {"columns": {"amount": {"type": "integer", "lower": 0, "upper": 9}}}
    stays = {**claims, "privacy_unit": {"column": "person_id", "max_rows": 2, "table": "people"}}
    schema = Schema.load({"tables": {"people": PEOPLE, "visits": VISITS, "claims": claims, "stays": stays}})
    _refused(sql, UnsupportedQueryError, *phrases, schema=schema)


def test_columns_resolve_by_qualifier_and_an_ambiguous_bare_name_is_refused() -> None:
    visits = {**VISITS, "columns": {**VISITS["columns"], "age": {"type": "integer", "lower": 0, "upper": 9}}}
    schema = Schema.load({"tables": {"people": PEOPLE, "visits": visits}})
    base = "SELECT {0}, COUNT(*) FROM visits v JOIN people p USING (person_id) GROUP BY {0}"
    message = _refused(base.format("age"), InvalidQueryError, "Column 'age' (line 1, col 77) is ambiguous",
                       "table 'visits' and table 'people'", "visits.age or people.age", schema=schema)
    assert message
    for column, key in (("p.age", "people.age"), ("v.age", "visits.age"), ("people.age", "people.age")):
        compiled = compile_batch(parse_batch(base.format(column)), schema)
        (axis,) = compiled.groups[0].axes
        assert axis.column.name == key and axis.column.table == key.split(".")[0]
        assert compiled.statements[0].statement.select[0].alias == "age"
    _refused(base.format("p.ward"), SchemaError, "Column 'ward' is not in the schema of table 'people'")
    _refused(base.format("height"), SchemaError, "not in the schema of table 'visits' nor of table 'people'")


def test_mismatched_keys_types_and_columns_are_refused_before_anything_is_charged() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE people (person_id VARCHAR, sex VARCHAR, age INTEGER)")
    con.execute("CREATE TABLE visits (person_id INTEGER, ward VARCHAR, cost DOUBLE)")
    budget = Budget(epsilon=1.0)
    with (dpsql.connect(con, schema=SCHEMA, budget=budget, rng=SeededRandomSource(0)) as connection,
          pytest.raises(SchemaError, match=r"tables.visits.privacy_unit joins 'person_id' \(INTEGER\)")):
        connection.cursor().execute("SELECT COUNT(*) FROM visits JOIN people USING (person_id)", epsilon=0.5)
    assert budget.remaining == 1.0
    con.execute("CREATE OR REPLACE TABLE people (person_id INTEGER, sex VARCHAR, age VARCHAR)")
    with (dpsql.connect(con, schema=SCHEMA, budget=budget, rng=SeededRandomSource(0)) as connection,
          pytest.raises(SchemaError, match=r"tables.people.columns.age is declared integer but the database column "
                                           r"'age' has type VARCHAR")):
        connection.cursor().execute("SELECT COUNT(*) FROM visits JOIN people USING (person_id)", epsilon=0.5)
    con.execute("ALTER TABLE visits DROP COLUMN ward")
    with (dpsql.connect(con, schema=SCHEMA, budget=budget, rng=SeededRandomSource(0)) as connection,
          pytest.raises(SchemaError, match=r"Column\(s\) 'ward' of table 'visits' are declared in the schema but "
                                           "missing")):
        connection.cursor().execute("SELECT COUNT(*) FROM visits JOIN people USING (person_id)", epsilon=0.5)
    assert budget.remaining == 1.0
    con.close()


@pytest.mark.parametrize("unit, people_unit, phrase", [
    ({"column": "person_id", "max_rows": 3, "table": "patients"}, None,
     "tables.visits.privacy_unit.table names 'patients', no declared table"),
    ({"column": "person_id", "max_rows": 3, "table": "visits"}, None,
     "tables.visits.privacy_unit.table names 'visits', this table itself"),
    ({"column": "person_id", "max_rows": 3, "table": "people"}, {"column": "person_id", "max_rows": 2},
     "tables.people.privacy_unit must be { column = \"<its unit column>\", max_rows = 1 }"),
    ({"column": "person_id", "max_rows": 3, "table": "people"}, "row", "got None with max_rows = 1"),
    ({"column": "person_id", "max_rows": 3, "table": 7}, None, "tables.visits.privacy_unit.table must name"),
    ({"column": "person_id", "max_rows": 3, "tables": "people"}, None, "tables.visits.privacy_unit must be"),
])
def test_the_unit_table_declaration_is_validated(unit: dict[str, object], people_unit: object, phrase: str) -> None:
    people = PEOPLE if people_unit is None else {**PEOPLE, "privacy_unit": people_unit}
    with pytest.raises(SchemaError) as caught:
        Schema.load({"tables": {"people": people, "visits": {**VISITS, "privacy_unit": unit}}})
    assert phrase in str(caught.value)


def test_declaring_a_unit_table_changes_only_that_tables_fingerprint() -> None:
    plain = Schema.load({"tables": {"people": PEOPLE, "visits": {
        **VISITS, "privacy_unit": {"column": "person_id", "max_rows": MAX_ROWS}}}})
    assert plain.table("people").fingerprint() == SCHEMA.table("people").fingerprint()
    assert plain.table("visits").fingerprint() != SCHEMA.table("visits").fingerprint()
    assert "table" not in plain.table("visits").privacy_parts()["privacy_unit"]
