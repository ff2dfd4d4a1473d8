"""Names that do not collide: one definition of each shared type in the math layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dpsql
from dpsql import backends, noise, schema
from dpsql.backends import duckdb as duckdb_backend
from dpsql.planning import accuracy, mechanism, planner, weights
from dpsql.strategies import hdmm, marginals

PACKAGE = Path(dpsql.__file__).parent


def _noise_literals() -> list[str]:
    """Modules of dpsql that spell out Literal["gaussian", "laplace"] (in any order)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal"
                    and isinstance(node.slice, ast.Tuple)
                    and {getattr(e, "value", None) for e in node.slice.elts} == {"gaussian", "laplace"}):
                found.append(str(path.relative_to(PACKAGE)))
    return found


def test_the_noise_literal_is_defined_once_in_dpsql_noise() -> None:
    assert _noise_literals() == ["noise/__init__.py"]
    for module in (accuracy, mechanism, planner, weights, hdmm, marginals):
        assert module.Noise is noise.Noise, module.__name__


def test_measure_quantum_is_schema_arithmetic() -> None:
    """The value of one integer unit of a measure column is computed from the declared schema alone,
    in dpsql.schema, not in the DuckDB backend."""
    assert schema.measure_quantum.__module__ == "dpsql.schema"
    assert not hasattr(duckdb_backend, "measure_quantum") and "measure_quantum" not in backends.__all__


#: Internal project references ("seed 003", "issue 6", a digest's section) instead of public citations.
INTERNAL_REFERENCE = re.compile(r"seed[ -]00[0-9]|[Ii]ssue [0-9]|digest §|research digest|\.md §")


def test_code_and_documentation_cite_papers_not_internal_notes() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    root = PACKAGE.parent
    pages = [root / "README.md", root / "ARCHITECTURE.md", *sorted((root / "docs").rglob("*.md"))]
    found = [f"{path.name}:{number}" for path in [*files, *pages]
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if INTERNAL_REFERENCE.search(line)]
    assert found == []
