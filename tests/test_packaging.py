"""Packaging: one source for the version (``dpsql.__version__``), the Apache-2.0 LICENSE file that
pyproject.toml declares, and the command line in one package."""

from __future__ import annotations

import subprocess
import sys
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


def test_the_command_line_lives_in_one_package() -> None:
    """dpsql/cli/ holds every command-line module, and the console script points into it."""
    assert _project()["project"]["scripts"] == {"dpsql": "dpsql.cli:main"}
    package = ROOT / "dpsql"
    elsewhere = [path.relative_to(package).as_posix() for path in package.rglob("*.py")
                 if "cli" in path.stem and path.parent != package / "cli"]
    assert elsewhere == []
    assert {path.name for path in (package / "cli").glob("*.py")} == {
        "__init__.py", "__main__.py", "accuracy.py", "budget.py", "demo.py", "files.py", "local.py", "serve.py"}


def test_the_slow_marker_is_registered_and_markers_are_strict() -> None:
    """``-m "not slow"`` (the fast subset) only works if every long test spells the marker right."""
    options = _project()["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in options["addopts"].split()
    assert any(marker.startswith("slow:") for marker in options["markers"])


def test_the_core_install_has_five_dependencies_and_the_engines_are_extras() -> None:
    project = _project()["project"]
    assert [d.split(">")[0] for d in project["dependencies"]] == ["sqlglot", "duckdb", "numpy", "scipy", "pyarrow"]
    extras = project["optional-dependencies"]
    assert extras["spark"] == ["pyspark>=4"] and extras["spark-connect"] == ["pyspark-client>=4", "pandas>=2.2,<3"]
    assert extras["postgres"] == ["adbc-driver-postgresql>=1.0"]
    assert extras["serve"] == ["pygwire>=0.2,<0.3"]  # dpsql serve's protocol codec stays out of the core install


def test_importing_dpsql_and_its_backends_imports_no_engine_driver() -> None:
    """The Spark and PostgreSQL modules import pyspark, ADBC or psycopg only when a backend is opened, and the
    command line imports pygwire only for ``dpsql serve``."""
    code = ("import sys, dpsql, dpsql.cli, dpsql.backends.choose, dpsql.backends.spark, dpsql.backends.postgres; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'adbc_driver_postgresql', "
            "'adbc_driver_manager', 'psycopg', 'py4j', 'grpc', 'pandas', 'pygwire'}))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr


def test_every_exception_class_is_on_the_dpsql_module() -> None:
    """What the documentation names as an error can be caught as ``dpsql.<Name>``, and is exported."""
    import inspect

    from dpsql import errors

    classes = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__}
    assert classes and all(getattr(dpsql, name) is getattr(errors, name) for name in classes)
    assert classes <= set(dpsql.__all__)
