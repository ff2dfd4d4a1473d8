"""Packaging: one source for the version (``dpsql.__version__``), and the Apache-2.0 LICENSE file that
pyproject.toml declares."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

import dpsql
from dpsql.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def test_the_version_has_one_source() -> None:
    project = _project()
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dpsql.__version__"}
    assert isinstance(dpsql.__version__, str) and dpsql.__version__[0].isdigit()


def test_the_command_line_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"dpsql {dpsql.__version__}"


def test_the_license_file_is_the_apache_license_pyproject_declares() -> None:
    project = _project()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text.splitlines()) == 202  # the full text, appendix included
