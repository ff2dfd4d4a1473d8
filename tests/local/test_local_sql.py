"""Local mode for SQL batches and its command line: design, randomize (per row and simulated), answer."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.cli.local import add_commands
from dpsql.errors import DataError, PrivacyParameterError, ProgrammingError, UnsupportedQueryError
from dpsql.local import protocol
from dpsql.local.sql import (
    answer_batch,
    batch_counts,
    compile_local,
    design_batch,
    randomize_records,
    simulate_database,
)
from dpsql.noise import SeededRandomSource
from dpsql.schema import Schema

SCHEMA = """
[tables.people.columns.age]
type = "integer"
lower = 0
upper = 99
bin_width = 10
resolution = 10

[tables.people.columns.sex]
type = "categorical"
values = ["F", "M"]
"""
QUERIES = """
SELECT sex, COUNT(*) AS n FROM people GROUP BY sex;
SELECT age, COUNT(*) AS n FROM people WHERE age >= 20 GROUP BY age;
SELECT COUNT(*) AS n FROM people WHERE age < 50 AND sex = 'F';
"""
ROWS = 200_000


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("local")
    database = folder / "people.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute(f"CREATE TABLE people AS SELECT CAST((i * 7919) % 100 AS INTEGER) AS age, "
                    "CASE WHEN i % 3 = 0 THEN 'F' WHEN i % 97 = 0 THEN NULL ELSE 'M' END AS sex "
                    f"FROM range({ROWS}) AS r(i)")
        con.execute(f"COPY (SELECT * FROM people LIMIT 5000) TO '{folder / 'rows.parquet'}' (FORMAT PARQUET)")
    (folder / "schema.toml").write_text(SCHEMA)
    (folder / "queries.sql").write_text(QUERIES)
    return {"db": database, "schema": folder / "schema.toml", "queries": folder / "queries.sql",
            "rows": folder / "rows.parquet",
            "dir": folder}


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command", required=True))
    arguments = parser.parse_args(list(argv))
    return int(arguments.handler(arguments))


def truth(database: Path, sql: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(database), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_design_simulate_answer_matches_duckdb_within_the_standard_errors(files: dict[str, Path]) -> None:
    published = design_batch(QUERIES, files["schema"], epsilon=1.0, seed=0)
    assert published.layout is not None and published.layout.sizes == (11, 3)  # age bins + outside; F, M, NULL
    reports = simulate_database(published, files["db"], rng=np.random.default_rng(3))
    tables = answer_batch(QUERIES, published, reports)
    by_sex = dict(truth(files["db"], "SELECT sex, COUNT(*) FROM people WHERE sex IS NOT NULL GROUP BY sex"))
    first = tables[0].to_pydict()
    assert first["sex"] == ["F", "M"]
    for sex, value, stddev in zip(first["sex"], first["n"], first["n_stddev"]):
        assert abs(value - by_sex[sex]) < 6 * stddev  # chance of failure < 2e-9 per answer (normal approximation)
    ages = dict(truth(files["db"], "SELECT age // 10 * 10, COUNT(*) FROM people WHERE age >= 20 GROUP BY 1"))
    second = tables[1].to_pydict()
    for age, value, stddev in zip(second["age"], second["n"], second["n_stddev"]):
        assert abs(value - ages.get(age, 0)) < 6 * stddev + 1e-6
    (count,), = truth(files["db"], "SELECT COUNT(*) FROM people WHERE age < 50 AND sex = 'F'")
    assert abs(tables[2]["n"][0].as_py() - count) < 6 * tables[2]["n_stddev"][0].as_py()
    assert json.loads(tables[0].schema.metadata[b"dpsql"])["reports"] == ROWS


def test_client_records_map_to_the_cells_the_database_backend_counts(tmp_path: Path) -> None:
    # differential test of dpsql.local.layout against dpsql.backends.duckdb: NULLs, undeclared values,
    # boundaries, the inclusive top of numeric domains, clamping and dates.
    schema = Schema.load("""
[tables.t.columns.k]
type = "categorical"
values = ["a", "b", "c"]
[tables.t.columns.v]
type = "numeric"
lower = 0
upper = 10
bin_width = 2.5
[tables.t.columns.c]
type = "integer"
lower = 0
upper = 9
bin_width = 3
out_of_domain = "clamp"
[tables.t.columns.d]
type = "date"
lower = 2020-01-01
upper = 2020-12-31
unit = "month"
""")
    rows = {
        "k": ["a", "b", "c", "z", None, "a", "b", "c", "a", None],
        "v": [0.0, 2.5, 10.0, 10.5, -0.1, None, 9.999, 7.5, float("nan"), 5.0],
        "c": [0, 9, 10, -3, 3, None, 5, 6, 2, 100],
        "d": [dt.date(2020, 1, 1), dt.date(2020, 12, 31), dt.date(2021, 1, 1), None, dt.date(2019, 12, 31),
              dt.date(2020, 6, 15), dt.date(2020, 2, 29), dt.date(2020, 3, 1), dt.date(2020, 7, 31),
              dt.date(2020, 8, 1)],
    }
    database = tmp_path / "t.duckdb"
    with duckdb.connect(str(database)) as con:
        con.register("source", pa.table(rows))
        con.execute("CREATE TABLE t AS SELECT k, v, c, d FROM source")
    batch = compile_local("SELECT k, v, c, d, COUNT(*) FROM t GROUP BY k, v, c, d", schema)
    table = schema.table("t")
    with DuckDBBackend(str(database)) as backend:
        data = backend.cell_data(table, [table.column(a.column) for a in batch.layout.axes])
    expected = batch_counts(batch.layout, data.shape, data.index, data.counts)
    cells = batch.layout.cells_of(rows)
    np.testing.assert_array_equal(np.bincount(cells, minlength=batch.layout.cells), expected)


def test_cli_round_trip_with_per_row_reports(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    strategy, reports = files["dir"] / "strategy.json", files["dir"] / "reports.parquet"
    assert run("local", "design", str(files["queries"]), "--schema", str(files["schema"]), "--epsilon", "2",
               "-o", str(strategy), "--time-limit", "30") == 0
    design_output = capsys.readouterr().out
    assert "randomized response" in design_output and "sha256" in design_output
    assert run("local", "randomize", "--strategy", str(strategy), "--input", str(files["rows"]), "-o",
               str(reports)) == 0
    written = pq.read_table(reports)
    assert written.num_rows == 5000 and set(written.column_names) == {"strategy", "output"}
    out = files["dir"] / "answers"
    assert run("local", "answer", str(files["queries"]), "--strategy", str(strategy), "--reports", str(reports),
               "--out", str(out)) == 0
    first = pq.read_table(out / "statement_1.parquet")
    assert first.column_names == ["sex", "n", "n_stddev"]
    assert run("local", "answer", str(files["queries"]), "--strategy", str(strategy), "--reports", str(reports)) == 0
    assert "-- statement 3" in capsys.readouterr().out


def test_cli_simulation_is_seeded(files: dict[str, Path]) -> None:
    strategy = files["dir"] / "sim-strategy.json"
    protocol.save(design_batch(QUERIES, files["schema"], epsilon=0.5, time_limit=10), strategy)
    outputs = []
    for name in ("a", "b"):
        path = files["dir"] / f"sim-{name}.parquet"
        assert run("local", "randomize", "--strategy", str(strategy), "--db", str(files["db"]), "--seed", "4", "-o",
                   str(path)) == 0
        outputs.append(pq.read_table(path))
    assert outputs[0].equals(outputs[1]) and sum(outputs[0].column("count").to_pylist()) == ROWS


def test_bad_input_gets_clear_errors(files: dict[str, Path]) -> None:
    with pytest.raises(PrivacyParameterError, match=r"epsilon must be a finite number > 0; got 0.0"):
        run("local", "design", str(files["queries"]), "--schema", str(files["schema"]), "--epsilon", "0",
            "-o", str(files["dir"] / "never.json"))
    with pytest.raises(UnsupportedQueryError, match=r"COUNT\(\*\) only; SUM\(age\) \(line 1, col 8\)"):
        design_batch("SELECT SUM(age) FROM people", files["schema"], epsilon=1.0)
    published = design_batch(QUERIES, files["schema"], epsilon=1.0, time_limit=5)
    other = design_batch(QUERIES, files["schema"], epsilon=0.9, time_limit=5)
    foreign = randomize_records(other, pq.read_table(files["rows"]), rng=SeededRandomSource(1))
    with pytest.raises(DataError, match="made with another strategy"):
        answer_batch(QUERIES, published, foreign)
    with pytest.raises(ProgrammingError, match="differ from the strategy's"):
        answer_batch("SELECT sex, COUNT(*) FROM people GROUP BY sex", published, foreign)
    with pytest.raises(DataError, match="column 'age' holds integer values, but value #0 has type str"):
        protocol.randomize(published, {"age": "forty", "sex": "F"})
    with pytest.raises(DataError, match="lack column\\(s\\) sex"):
        protocol.randomize(published, {"age": 40})


def test_tables_local_mode_cannot_protect_are_refused(files: dict[str, Path]) -> None:
    per_person = SCHEMA + '\n[tables.people.privacy_unit]\ncolumn = "person"\nmax_rows = 3\n'
    with pytest.raises(UnsupportedQueryError, match="one per row"):
        design_batch(QUERIES, per_person, epsilon=1.0)
    excluding = SCHEMA + 'out_of_domain = "exclude"\n'
    with pytest.raises(UnsupportedQueryError, match="would send no report"):
        design_batch(QUERIES, excluding, epsilon=1.0)


def test_design_warns_above_epsilon_5() -> None:
    from dpsql.errors import DpsqlWarning

    with pytest.warns(DpsqlWarning, match="above 5"):
        design_batch("SELECT COUNT(*) AS n FROM people", SCHEMA, epsilon=6.0, time_limit=1.0)


def test_cli_randomize_shows_epsilon_and_refuses_above_max_epsilon(files: dict[str, Path],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14 item 5: ε and the mechanism go to stderr first; above --max-epsilon nothing is written."""
    strategy, reports = files["dir"] / "eps30.json", files["dir"] / "eps30.parquet"
    with pytest.warns(UserWarning, match="above 5"):
        protocol.save(design_batch(QUERIES, files["schema"], epsilon=30.0, time_limit=5), strategy)
    with pytest.raises(PrivacyParameterError, match=r"ε = 30 per report .*--max-epsilon = 5.*Nothing was randomized"):
        run("local", "randomize", "--strategy", str(strategy), "--input", str(files["rows"]), "-o", str(reports))
    assert not reports.exists()
    err = capsys.readouterr().err
    assert "ε = 30 per report, mechanism " in err and "--max-epsilon 5" in err
    assert run("local", "randomize", "--strategy", str(strategy), "--input", str(files["rows"]), "-o", str(reports),
               "--max-epsilon", "30") == 0
    assert pq.read_table(reports).num_rows == 5000
    with pytest.raises(PrivacyParameterError, match="limit max_epsilon = 5"):  # the Python client's default
        randomize_records(protocol.load(strategy), pq.read_table(files["rows"]))
