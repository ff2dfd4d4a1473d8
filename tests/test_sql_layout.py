"""The SQL layer's shape: modules of at most 700 lines, and none reaching into another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dpsql.sql

SQL = Path(dpsql.sql.__file__).parent
MODULES = sorted(SQL.glob("*.py"))
MAX_LINES = 700


def _private_uses(tree: ast.Module) -> list[str]:
    """``from dpsql... import _x`` and ``m._x`` for a module ``m`` imported from dpsql, as 'line: name'."""
    modules: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpsql"):
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.lineno}: {node.module}.{alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(alias.asname or alias.name for alias in node.names if alias.name.startswith("dpsql"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_a_sql_module_has_at_most_700_lines(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_a_sql_module_uses_no_private_name_of_another_module(path: Path) -> None:
    assert _private_uses(ast.parse(path.read_text(encoding="utf-8"))) == []


def test_the_private_name_check_can_fail() -> None:
    tree = ast.parse("from dpsql.sql.source import _Scope\nfrom dpsql.sql import parse\nparse._parse_batch('')\n")
    assert _private_uses(tree) == ["1: dpsql.sql.source._Scope", "3: parse._parse_batch"]
