"""Smoke tests: every script in examples/ and the `dpsql demo` command run and print results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_example_runs(script: Path) -> None:
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "RMSE" in result.stdout


def test_demo_command_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "dpsql.cli", "demo"], capture_output=True, text=True, timeout=300,
                            check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "more accurate" in result.stdout and "± stderr" in result.stdout
