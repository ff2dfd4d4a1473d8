"""The modules of a package and what each imports, read from the source (AST), so nothing is executed:
shared by the layering and import-cycle tests."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dpsql"


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name → source file, for every module under ``root`` (a package's ``__init__`` is the package)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(source: str) -> list[tuple[str, str, int]]:
    """Every import of a module's source, at the top, inside a function or for type checking only:
    ``(module, name, level)`` for ``from module import name``, ``(module, "", 0)`` for ``import module``.

    >>> imported("from dpsql.backends import Backend\\nimport dpsql.backends.duckdb")
    [('dpsql.backends', 'Backend', 0), ('dpsql.backends.duckdb', '', 0)]
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.module or "", alias.name, node.level) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "", 0) for alias in node.names]
    return found
