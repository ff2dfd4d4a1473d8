"""Smoke tests: every script in examples/ and the `dpsql demo` command run and print results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_example_runs(script: Path) -> None:
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "RMSE" in result.stdout


@pytest.mark.slow
def test_demo_command_runs(tmp_path: Path) -> None:
    """The suite's one end-to-end run of `dpsql demo`: it builds the files, plans, charges and prints every statement."""
    from dpsql.cli import demo

    result = subprocess.run([sys.executable, "-m", "dpsql.cli", "demo", "--dir", str(tmp_path), "--rows", "20000"],
                            capture_output=True, text=True, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "Answered 12 statements as one release" in result.stdout and " ± " in result.stdout
    titles = [line[3:] for line in demo.QUERIES.splitlines() if line.startswith("-- ") and line[3].isdigit()]
    assert len(titles) == 12 and all(f"\n{title}\n" in result.stdout for title in titles)
    assert {p.name for p in tmp_path.iterdir()} >= {"census.duckdb", "schema.toml", "queries.sql"}


def test_census_example_files_are_the_demo_batch() -> None:
    """examples/census holds exactly the schema and queries `dpsql demo` runs."""
    from dpsql.cli import demo

    assert (ROOT / "examples" / "census" / "schema.toml").read_text() == demo.SCHEMA
    assert (ROOT / "examples" / "census" / "queries.sql").read_text() == demo.QUERIES
