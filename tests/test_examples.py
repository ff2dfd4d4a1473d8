"""Smoke tests: every script in examples/ and the `dpsql demo` command run and print results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dpsql.answers.tables import PLUS_MINUS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
@pytest.mark.slow
def test_example_runs(script: Path) -> None:
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "RMSE" in result.stdout


#: People in the demo's table for the suite's one run of `dpsql demo`.
DEMO_ROWS = 2_000


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The suite's one end-to-end run of `dpsql demo` (it builds the files, plans, charges and prints every
    statement): the finished process and the folder it wrote."""
    folder = tmp_path_factory.mktemp("demo")
    result = subprocess.run([sys.executable, "-m", "dpsql.cli", "demo", "--dir", str(folder), "--rows", str(DEMO_ROWS)],
                            capture_output=True, text=True, check=False, cwd=ROOT)
    return result, folder


@pytest.mark.slow
def test_demo_command_runs(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    from dpsql.cli import demo

    result, tmp_path = demo_run
    assert result.returncode == 0, result.stderr
    assert "Answered 12 statements as one release" in result.stdout and " ± " in result.stdout
    titles = [line[3:] for line in demo.QUERIES.splitlines() if line.startswith("-- ") and line[3].isdigit()]
    assert len(titles) == 12 and all(f"\n{title}\n" in result.stdout for title in titles)
    assert {p.name for p in tmp_path.iterdir()} >= {"census.duckdb", "schema.toml", "queries.sql"}
    out = result.stdout
    assert PLUS_MINUS in out and out.index(PLUS_MINUS) < out.index(f"\n{titles[0]}\n")  # what ± means, first
    assert "Statements:" not in out and "candidates" not in out and "dpsql demo --explain" in out  # no plan


@pytest.mark.slow
def test_demo_explain_prints_the_plan_after_the_answers(tmp_path: Path) -> None:
    from dpsql.cli import demo

    lines: list[str] = []
    demo.run(tmp_path, people=DEMO_ROWS, explain=True, echo=lines.append)
    out = "\n".join(lines)
    plan = out.index("How dpsql planned the batch")
    assert out.index("12. Dependents: children or seniors") < plan < out.index("Statements: the expected standard")
    assert "was not used (" not in out and "Error:" not in out  # notes are sentences, not exception text


@pytest.mark.slow
def test_demo_files_hold_twelve_statements_over_its_schema(demo_run: tuple[subprocess.CompletedProcess[str],
                                                                           Path]) -> None:
    from dpsql.backends.duckdb import DuckDBBackend
    from dpsql.schema import Schema
    from dpsql.sql.compile import compile_batch
    from dpsql.sql.parse import parse_batch

    _, tmp_path = demo_run
    database = tmp_path / "census.duckdb"
    schema = Schema.load(tmp_path / "schema.toml")
    compiled = compile_batch(parse_batch((tmp_path / "queries.sql").read_text()), schema)
    assert len(compiled.statements) == 12 and compiled.table.name == "census"
    with DuckDBBackend(str(database)) as backend:
        backend.check_table(compiled.table)
        assert backend.connection.execute("SELECT COUNT(*) FROM census").fetchone() == (DEMO_ROWS,)


def test_census_example_files_are_the_demo_batch() -> None:
    """examples/census holds exactly the schema and queries `dpsql demo` runs."""
    from dpsql.cli import demo

    assert (ROOT / "examples" / "census" / "schema.toml").read_text() == demo.SCHEMA
    assert (ROOT / "examples" / "census" / "queries.sql").read_text() == demo.QUERIES
