"""The ``dpsql`` command line through ``dpsql.cli.main``: run (terminal, parquet, csv), explain,
budget set / show / history, schema suggest, and errors that exit with status 2 and one clear line
on stderr."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from dpsql.answers.tables import PLUS_MINUS
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.cli import BROKEN_PIPE, main
from dpsql.schema import Schema

SCHEMA = """
[tables.people.columns.age]
type = "integer"
lower = 0
upper = 99
bin_width = 10
resolution = 1

[tables.people.columns.sex]
type = "categorical"
values = ["F", "M"]

[tables.people.columns.income]
type = "numeric"
lower = 0
upper = 1000
bin_width = 500
"""
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
QUERIES = """-- two statements, one batch
SELECT sex, COUNT(*) AS n FROM people GROUP BY sex;
SELECT age, AVG(income) AS mean_income FROM people WHERE age >= 20 GROUP BY age;
"""


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    database = tmp_path / "people.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE people AS SELECT CAST(i % 100 AS INTEGER) AS age, CASE WHEN i % 3 = 0 THEN "
                    "'F' ELSE 'M' END AS sex, CAST(i % 1000 AS DOUBLE) AS income FROM range(2000) AS r(i)")
    (tmp_path / "schema.toml").write_text(SCHEMA)
    (tmp_path / "queries.sql").write_text(QUERIES)
    Ledger(default_path(database)).set_total("people.duckdb", PrivacyCost(rho=100.0),  # the owner's budget
                                             binding=Binding.of(Schema.load(SCHEMA), database))
    return {"db": str(database), "schema": str(tmp_path / "schema.toml"), "queries": str(tmp_path / "queries.sql")}


def arguments(files: dict[str, str], command: str = "run", *extra: str,
              cost: tuple[str, str] = ("--epsilon", "1")) -> list[str]:
    return [command, files["queries"], "--db", files["db"], "--schema", files["schema"], *cost, *extra]


def test_run_prints_each_statement_with_standard_errors(files: dict[str, str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments(files)) == 0
    out, err = capsys.readouterr()
    assert "-- statement 1" in out and "-- statement 2" in out
    lines = out.splitlines()
    first = lines.index("-- statement 1")
    assert lines[first + 1].split() == ["sex", "n"]
    assert lines[first + 2].split()[0] == "F" and "±" in lines[first + 2] and lines[first + 3].split()[0] == "M"
    second = lines.index("-- statement 2")
    assert lines[second + 1].split() == ["age", "age_upper", "mean_income"]
    bands = [line.split() for line in lines[second + 2:second + 12]]
    assert [band[0] for band in bands] == [str(age) for age in range(0, 100, 10)]  # every declared age band
    assert [band[2] for band in bands[:2]] == ["NULL", "NULL"]  # WHERE age >= 20 leaves no row in them: AVG is NULL
    assert all("±" in " ".join(band) for band in bands[2:])
    assert lines[0] == PLUS_MINUS and "one standard error" in lines[0]  # what ± means comes first
    assert err.splitlines() == [f"budget: charged ε=1; left 99.5 of ρ=100 (ledger {files['db']}.dpsql-ledger)"]


def test_run_verbose_reports_progress_and_explain_prints_the_plan_after_the_answers(
        files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments(files, "run", "--verbose", "--explain")) == 0
    out, err = capsys.readouterr()
    assert "answered 2 statement(s)" in err and "Traceback" not in err  # progress goes to stderr, results to stdout
    plan = out.index("How dpsql planned the batch (before it was answered; nothing spent):")
    assert out.index("-- statement 2") < plan < out.index("Statements: the expected standard error")
    assert main(arguments(files)) == 0
    assert "Statements:" not in capsys.readouterr().out  # no plan without --explain


def test_run_reads_the_batch_from_standard_input(files: dict[str, str], capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(QUERIES))
    assert main(["run", "-", "--db", files["db"], "--schema", files["schema"], "--epsilon", "1"]) == 0
    out = capsys.readouterr().out
    assert "-- statement 1" in out and "-- statement 2" in out and "-- statement 3" not in out


def test_run_with_rho(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments(files, cost=("--rho", "0.5"))) == 0
    assert capsys.readouterr().out.removeprefix(PLUS_MINUS).count("±") == 10


@pytest.mark.parametrize("file_format, read", [("parquet", pq.read_table), ("csv", pa_csv.read_csv)])
def test_run_out_writes_one_file_per_statement(files: dict[str, str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                              file_format: str, read) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "results" / "nested"
    assert main(arguments(files, "run", "--out", str(out_dir), "--format", file_format)) == 0
    written = sorted(out_dir.iterdir())
    assert [p.name for p in written] == [f"statement_1.{file_format}", f"statement_2.{file_format}"]
    assert capsys.readouterr().out.split() == [str(p) for p in written]
    first, second = (read(str(p)) for p in written)
    assert first.column_names == ["sex", "n", "n_stddev"] and first.column("sex").to_pylist() == ["F", "M"]
    assert second.column_names == ["age", "age_upper", "mean_income", "mean_income_stddev"] and second.num_rows == 10
    assert second.schema.field("age").type == pa.int64() and second.schema.field("mean_income").type == pa.float64()
    if file_format == "parquet":  # parquet keeps the release's metadata
        assert b"dpsql" in first.schema.metadata


def test_run_out_defaults_to_parquet(files: dict[str, str], tmp_path: Path) -> None:
    assert main(arguments(files, "run", "--out", str(tmp_path / "o"))) == 0
    assert sorted(p.suffix for p in (tmp_path / "o").iterdir()) == [".parquet", ".parquet"]


def test_explain_prints_the_plan_and_spends_nothing(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments(files, "explain", cost=("--epsilon", "0.5"))) == 0
    out = capsys.readouterr().out
    assert "2 statement(s) on table 'people'" in out and "Cost: ε=0.5" in out
    assert "identity" in out and "expected RMSE" in out


def test_explain_takes_statement_weights(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """--weights 1,4 reaches the plan (EXPLAIN names the weight); a malformed list or a wrong count is refused."""
    assert main(arguments(files, "explain", "--weights", "1,4", cost=("--epsilon", "0.5"))) == 0
    assert "weight 4" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(arguments(files, "explain", "--weights", "1,x", cost=("--epsilon", "0.5")))
    assert "not a comma-separated list of numbers" in capsys.readouterr().err
    assert main(arguments(files, "explain", "--weights", "1", cost=("--epsilon", "0.5"))) == 2
    assert "weights= has 1 number(s) but the batch has 2 statement(s)" in capsys.readouterr().err


def test_schema_suggest_prints_the_not_private_warning(files: dict[str, str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "suggest", "--db", files["db"], "--table", "people"]) == 0
    out = capsys.readouterr().out
    assert "NOT PRIVATE" in out and "[tables.people" in out and "sex" in out


def test_a_csv_from_schema_suggest_to_a_charged_answer(files: dict[str, str], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "adult.csv"
    with duckdb.connect(files["db"], read_only=True) as con:
        pa_csv.write_csv(con.sql("SELECT * FROM people").to_arrow_table(), csv)
    assert main(["schema", "suggest", "--db", str(csv)]) == 0  # the table: the file's name without .csv
    suggested = capsys.readouterr().out
    assert "[tables.adult]" in suggested
    (tmp_path / "adult.toml").write_text(suggested)
    books = ["--db", str(csv), "--schema", str(tmp_path / "adult.toml")]
    assert main(["budget", "set", *books, "--epsilon", "5"]) == 0
    assert f"ledger: {csv}.dpsql-ledger" in capsys.readouterr().out
    queries = _write(tmp_path, "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex")
    assert main(["run", queries, *books, "--epsilon", "1"]) == 0
    out = capsys.readouterr().out
    assert "F" in out and "±" in out
    assert len(Ledger(default_path(csv)).history("adult.csv")) == 1


@pytest.mark.parametrize("make_args, error_name, phrase", [
    (lambda f, t: arguments({**f, "queries": _write(t, "SELECT COUNT(* FROM people")}), "SqlSyntaxError",
     "line 1, col"),
    (lambda f, t: arguments({**f,
                             "queries": _write(t,
                                               "SELECT sex, COUNT(*) FROM people p CROSS JOIN q GROUP BY sex")}),
     "UnsupportedQueryError", "CROSS JOIN is not supported (line 1, col 36"),
    (lambda f, t: arguments({**f, "queries": _write(t, "SELECT COUNT(*) FROM people WHERE height > 1")}), "SchemaError",
     "Column 'height'"),
    (lambda f, t: arguments({**f, "queries": str(t / "missing.sql")}), "InterfaceError",
     "cannot read the queries file"),
    (lambda f, t: arguments({**f, "schema": _write(t, "[tables.people.columns.age]\ntype = 'integer'")}), "SchemaError",
     "tables.people.columns.age.lower must be a finite number"),
    (lambda f, t: arguments({**f, "db": str(t / "missing.duckdb")}), "OperationalError", "no database file at"),
    (lambda f, t: ["schema", "suggest", "--db", str(t / "typo.duckdb"), "--table", "people"], "OperationalError",
     "check the path"),
    (lambda f, t: arguments(f, cost=("--epsilon", "-1")), "PrivacyParameterError",
     "epsilon must be a finite number > 0"),
    (lambda f, t: arguments(f, "explain", cost=("--epsilon", "inf")), "PrivacyParameterError", "got inf"),
    (lambda f, t: ["schema", "suggest", "--db", f["db"], "--table", "nobody"], "SchemaError", "nobody"),
])
def test_errors_exit_2_with_one_clear_line(files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          make_args, error_name: str, phrase: str) -> None:  # type: ignore[no-untyped-def]
    assert main(make_args(files, tmp_path)) == 2
    out, err = capsys.readouterr()
    message = [line for line in err.splitlines() if line.startswith("dpsql: ")]
    assert message and message[0].startswith(f"dpsql: {error_name}: ") and phrase in message[0], err
    assert "Traceback" not in err and "Traceback" not in out


def test_a_missing_schema_file_is_named(files: dict[str, str], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments({**files, "schema": str(tmp_path / "missing.toml")})) == 2
    assert "missing.toml" in capsys.readouterr().err


def test_the_queries_file_may_hold_unicode_and_comments(files: dict[str, str], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "/* Übersicht — naïve */\nSELECT COUNT(*) AS n FROM people WHERE sex = 'F'; -- done\n")
    assert main(arguments({**files, "queries": path})) == 0
    assert capsys.readouterr().out.removeprefix(PLUS_MINUS).count("±") == 1


def test_a_batch_without_a_cost_exits_2_naming_the_three_ways_to_give_one(files: dict[str, str],
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", files["queries"], "--db", files["db"], "--schema", files["schema"]]) == 2
    error = capsys.readouterr().err
    assert "--epsilon" in error and "--rho" in error and "WITH DIFFERENTIAL_PRIVACY OPTIONS" in error
    with pytest.raises(SystemExit) as caught:
        main(["run", files["queries"], "--db", files["db"], "--schema", files["schema"], "--epsilon", "1",
              "--rho", "1"])
    assert caught.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_run_takes_the_cost_from_bigquerys_clause_in_the_sql(files: dict[str, str], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.25) COUNT(*) AS n FROM people;\n"
                            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5) sex, COUNT(*) AS n FROM people "
                            "GROUP BY sex\n")
    assert main(["run", path, "--db", files["db"], "--schema", files["schema"]]) == 0
    assert "charged ε=0.75" in capsys.readouterr().err


def test_out_naming_an_existing_file_is_a_clear_error(files: dict[str, str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder")
    assert main(arguments(files, "run", "--out", str(blocker))) == 2
    assert "Traceback" not in capsys.readouterr().err


def _write(folder: Path, text: str) -> str:
    path = folder / "batch.sql"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_run_names_the_truncation_threshold_and_null_averages(files: dict[str, str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    Path(files["schema"]).write_text(SCHEMA.replace("bin_width = 500\n", 'bin_width = 500\ntruncate = "svt"\n'))
    assert main(["budget", "set", "--db", files["db"], "--schema", files["schema"], "--rho", "100", "--rebind"]) == 0
    assert main(arguments(files)) == 0
    out = capsys.readouterr().out
    assert "-- income: sums truncated at θ = " in out
    assert "mean_income: 2 group(s) NULL" in out  # ages 0-19 are outside the WHERE clause: their count is exactly 0


def test_run_accepts_the_post_processing_flags(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments(files, "run", "--nonnegative", "--isotonic")) == 0
    assert "-- statement 2" in capsys.readouterr().out


# ------------------------------------------------------------------------------- the ledger
def test_a_run_is_charged_to_the_ledger_next_to_the_database(files: dict[str, str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments(files, cost=("--rho", "0.5"))) == 0
    assert main(arguments(files, "run", "--no-reuse", cost=("--epsilon", "1"))) == 0  # ε = 1 costs ρ = 1/2 on ρ
    err = capsys.readouterr().err
    assert "budget: charged ρ=0.5; left 99.5 of ρ=100" in err and "budget: charged ε=1; left 99 of ρ=100" in err
    charges = Ledger(default_path(files["db"])).history("people.duckdb")
    assert [c.cost for c in charges] == [PrivacyCost(rho=0.5), PrivacyCost(epsilon=1.0)]
    assert sum(c.price for c in charges) == 1


def test_explain_spends_nothing(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments(files, "explain", cost=("--rho", "0.5"))) == 0
    assert "budget left 100 of ρ=100" in capsys.readouterr().out
    assert Ledger(default_path(files["db"])).history("people.duckdb") == []


def test_budget_set_show_and_history(files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "elsewhere" / "books.ledger"
    ledger.parent.mkdir()
    books = ["--db", files["db"], "--ledger", str(ledger)]
    assert main(["budget", "set", *books, "--schema", files["schema"], "--epsilon", "3.5"]) == 0
    assert "total  ε=3.5" in capsys.readouterr().out
    assert main(arguments(files, "run", "--ledger", str(ledger), cost=("--epsilon", "1"))) == 0
    assert main(["budget", "set", *books, "--epsilon", "4"]) == 0  # raising the total is the owner's action
    capsys.readouterr()
    assert main(["budget", "show", *books]) == 0
    out = capsys.readouterr().out
    assert "total  ε=4" in out and "spent  ε=1" in out and "left   ε=3" in out
    assert "charges: 1" in out and "ε=1  matrix mechanism, discrete Laplace" in out
    assert main(["budget", "history", *books]) == 0
    out = capsys.readouterr().out
    assert "charges: 1" in out and "set total ε=3.5" in out and "change total ε=4" in out
    assert Ledger(default_path(files["db"])).history("people.duckdb") == []  # the default ledger was not charged


def test_budget_show_reads_a_rho_spend_as_epsilon_delta(files: dict[str, str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "set", "--db", files["db"], "--schema", files["schema"], "--dataset", "tiny", "--rho",
                 "0.03125", "--rebind"]) == 0  # a second budget on the fixture's file, on purpose
    assert main(["budget", "show", "--db", files["db"], "--dataset", "tiny", "--delta", "1e-3"]) == 0
    # ρ = 1/32 is (0.688, 10⁻³)-DP by the Canonne–Kamath–Steinke conversion (OpenDP's test value 0.6880024554878086)
    assert "total  ρ=0.03125  ≡ (ε=0.688, δ=0.001)-DP" in capsys.readouterr().out


def test_a_second_run_of_the_same_queries_is_answered_from_the_first_for_free(
        files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    books = ["--db", files["db"], "--schema", files["schema"]]
    assert main(["budget", "set", *books, "--epsilon", "2"]) == 0
    capsys.readouterr()
    assert main(arguments(files)) == 0
    first = capsys.readouterr()
    assert main(arguments(files)) == 0
    second = capsys.readouterr()
    assert "budget: charged ε=1" in first.err and "budget: charged nothing: answered by release(s) #" in second.err
    assert first.out == second.out  # the same answers, read from the kept release
    assert main(arguments(files, "explain")) == 0
    assert "Statement 1: free (answered by release #" in capsys.readouterr().out
    assert main(["budget", "show", "--db", files["db"]]) == 0
    shown = capsys.readouterr().out
    assert "spent  ε=1" in shown and "release #" in shown and "noisy values" in shown


def test_an_analyst_sub_budget(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "set", "--db", files["db"], "--analyst", "ana", "--rho", "0.5"]) == 0
    assert main(arguments(files, "run", "--analyst", "ana", cost=("--rho", "0.5"))) == 0
    assert main(arguments(files, "run", "--analyst", "ana", "--no-reuse", cost=("--rho", "0.5"))) == 2
    assert "analyst 'ana' on dataset 'people.duckdb' has ρ=0 left of 0.5" in capsys.readouterr().err
    assert main(arguments(files, cost=("--rho", "0.5"))) == 2  # with analyst totals, a run without one would evade them
    assert "has per-analyst totals" in capsys.readouterr().err


@pytest.mark.parametrize("make_args, error_name, phrase", [
    (lambda f: arguments(f), "BudgetNotSetError", "no ledger file at"),
    (lambda f: arguments(f, "explain"), None,
     "Budget: unknown, so every query fails until this is fixed: no ledger file"),
    (lambda f: ["budget", "show", "--db", f["db"]], "BudgetNotSetError", "no ledger file at"),
])
def test_without_a_budget_nothing_runs(files: dict[str, str], capsys: pytest.CaptureFixture[str], make_args,  # type: ignore[no-untyped-def]
                                       error_name: str | None, phrase: str) -> None:
    default_path(files["db"]).unlink()
    assert main(make_args(files)) == (2 if error_name else 0)
    out, err = capsys.readouterr()
    assert phrase in (err if error_name else out) and "-- statement" not in out
    if error_name:
        assert f"dpsql: {error_name}: " in err and "dpsql budget set --db" in err
    assert not default_path(files["db"]).exists()  # reading never creates a ledger


def test_a_corrupted_ledger_fails_every_run_closed(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    default_path(files["db"]).write_bytes(b"this is not a ledger" * 100)
    assert main(arguments(files)) == 2
    out, err = capsys.readouterr()
    assert "dpsql: LedgerError: " in err and "Nothing was run or charged" in err and "-- statement" not in out


@pytest.mark.parametrize("argv, error_name, phrase", [
    (lambda f: ["budget", "set", "--db", f["db"], "--epsilon", "1"], "PrivacyParameterError",
     "cannot change to epsilon"),
    (lambda f: ["budget", "set", "--db", f["db"] + ".missing", "--epsilon", "1"], "OperationalError",
     "no database file at"),
    (lambda f: ["budget", "set", "--db", f["db"], "--rho", "-1"], "PrivacyParameterError",
     "rho must be a finite number > 0"),
])
def test_budget_set_errors(files: dict[str, str], capsys: pytest.CaptureFixture[str], argv, error_name: str,  # type: ignore[no-untyped-def]
                           phrase: str) -> None:
    assert main(arguments(files, cost=("--rho", "1"))) == 0  # a charge in ρ: the unit is now fixed
    capsys.readouterr()
    assert main(argv(files)) == 2
    err = capsys.readouterr().err
    assert f"dpsql: {error_name}: " in err and phrase in err
    assert Ledger(default_path(files["db"])).balance("people.duckdb").limits[0].total == 100  # unchanged


def test_budget_set_refuses_a_total_below_what_is_spent(files: dict[str, str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(arguments(files, cost=("--rho", "2"))) == 0
    assert main(["budget", "set", "--db", files["db"], "--rho", "1.5"]) == 2
    assert "ρ=2 is already spent" in capsys.readouterr().err
    assert Ledger(default_path(files["db"])).balance("people.duckdb").limits[0].total == 100


def test_budget_set_needs_a_total(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "set", "--db", files["db"]]) == 2
    assert "needs a total (--epsilon E or --rho R), --share-releases or --no-share-releases" in capsys.readouterr().err


@pytest.mark.parametrize("make_data, schema_text, error_name, phrase", [
    (lambda folder: _write(folder, "sex,age\nF,30\n"), SCHEMA, "OperationalError",
     "is not a DuckDB database file"),  # a CSV without its .csv ending
    (lambda folder: _database(folder, "CREATE TABLE visits AS SELECT 1 AS age"),
     SCHEMA + '\n[tables.trips.columns.km]\ntype = "integer"\nlower = 0\nupper = 9\n', "SchemaError",
     "(table(s) people, trips)"),  # neither declared table is in the database
])
def test_budget_set_refuses_data_it_cannot_read_before_writing_anything(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str], make_data,  # type: ignore[no-untyped-def]
                                                                        schema_text: str, error_name: str,
                                                                        phrase: str) -> None:
    data = make_data(tmp_path)
    schema = tmp_path / "owner.toml"
    schema.write_text(schema_text)
    assert main(["budget", "set", "--db", data, "--schema", str(schema), "--epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert f"dpsql: {error_name}: " in err and phrase in err and "Nothing was set" in err
    assert not default_path(data).exists() and not Path(str(default_path(data)) + ".key").exists()


def _database(folder: Path, sql: str) -> str:
    path = folder / "other.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(sql)
    return str(path)


@pytest.mark.parametrize("command, status", [
    (lambda f: ["budget", "show", "--db", f["db"]], BROKEN_PIPE), (lambda f: arguments(f, "explain"), BROKEN_PIPE),
    (lambda f: ["schema", "suggest", "--db", f["db"], "--table", "people"], BROKEN_PIPE),
    (lambda f: ["--help"], 0)])  # argparse's help ignores a closed pipe itself
def test_output_into_a_closed_pipe_ends_quietly(files: dict[str, str], command, status: int) -> None:  # type: ignore[no-untyped-def]
    reader, writer = os.pipe()
    os.close(reader)  # `dpsql ... | head -1` once head has gone: every write fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "dpsql.cli", *command(files)], stdout=writer,
                              stderr=subprocess.PIPE, text=True, env=ENV, timeout=300, check=False)
    finally:
        os.close(writer)
    assert done.returncode == status and done.stderr == ""


def test_run_chart_without_matplotlib_refuses_before_charging(files: dict[str, str], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    chart = tmp_path / "answers.png"
    with monkeypatch.context() as without:
        without.setitem(sys.modules, "matplotlib", None)  # as if the extra 'plots' were not installed
        assert main(arguments(files, "run", "--chart", str(chart))) == 2
    assert 'pip install "dpsql[plots]"' in capsys.readouterr().err and not chart.exists()
    assert Ledger(default_path(files["db"])).history("people.duckdb") == []  # refused before the charge


def test_run_chart_draws_the_answers(files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    chart = tmp_path / "answers.png"
    assert main(arguments(files, "run", "--chart", str(chart))) == 0
    assert f"chart: {chart}" in capsys.readouterr().err and chart.read_bytes().startswith(b"\x89PNG")


def test_budget_show_chart_draws_the_spend(files: dict[str, str], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    assert main(arguments(files, "run", cost=("--rho", "0.5"))) == 0
    assert main(arguments(files, "run", "--no-reuse", cost=("--rho", "0.25"))) == 0
    chart = tmp_path / "spend.png"
    capsys.readouterr()
    assert main(["budget", "show", "--db", files["db"], "--chart", str(chart)]) == 0
    out, err = capsys.readouterr()
    assert "charges: 2" in out and f"chart: {chart}" in err and chart.read_bytes().startswith(b"\x89PNG")


def test_budget_show_chart_without_matplotlib_says_how_to_install_it(files: dict[str, str], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    chart = tmp_path / "spend.png"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the extra 'plots' were not installed
    assert main(["budget", "show", "--db", files["db"], "--chart", str(chart)]) == 2
    out, err = capsys.readouterr()
    assert 'pip install "dpsql[plots]"' in err and out == "" and not chart.exists()
