"""The shape of dpsql.residual: one package for the marginal cluster, public names across its
modules, shared base classes for the two planners, modules of one concern and public citations."""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import pytest

import dpsql.residual
from dpsql.residual import base, planner, plus

PACKAGE = Path(dpsql.residual.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))


def private_uses(source: str) -> list[str]:
    """Private names (_x, not dunders) imported from, or read as attributes of, an imported module."""
    tree = ast.parse(source)
    aliases: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for a in node.names:
                aliases.add(a.asname or a.name)
                if _private(a.name):
                    found.append(f"from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and _private(node.attr):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_the_checker_finds_private_imports_and_attributes() -> None:
    source = "from dpsql.residual import lattice\nfrom x import _y\nlattice._unique_rows(1)\nself._z\n"
    assert private_uses(source) == ["from x import _y", "lattice._unique_rows"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_module_uses_another_modules_private_names(path: Path) -> None:
    assert private_uses(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_modules_stay_small_and_cite_publicly(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 700
    assert not re.search(r"seed 00[0-9]|issue [0-9]|digest", text, flags=re.IGNORECASE)


def test_every_module_is_in_the_package_docstring() -> None:
    names = {m.name for m in pkgutil.iter_modules([str(PACKAGE)])}
    listed = set(re.findall(r"^    (\w+)  ", dpsql.residual.__doc__ or "", flags=re.MULTILINE))
    assert names == listed


def test_both_planners_share_the_selection_and_measurement_bases() -> None:
    assert issubclass(planner.Selection, base.Selection) and issubclass(plus.PlusSelection, base.Selection)
    assert issubclass(planner.Measurements, base.Measurements)
    assert issubclass(plus.PlusMeasurements, base.Measurements)
