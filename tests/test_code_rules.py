"""Module boundaries: no module reaches another module's private name, and modules stay small.

A name with a leading underscore belongs to its module. Every other module of dpsql, the tests and
the benchmarks use only public names of dpsql's modules: ``from M import _x`` and ``M._x`` (M
imported as a module) are both refused. Every module of dpsql has at most ``MAX_LINES`` lines, but
those in ``ONE_CONCERN``, each with the reason it stays whole.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = [ROOT / "dpsql", ROOT / "tests", ROOT / "benchmarks"]
#: Modules whose private names no other module may reach (packages: every submodule too).
CHECKED = ("dpsql",)
MAX_LINES = 700
#: Modules allowed more than MAX_LINES, and why each is one concern.
ONE_CONCERN = {
    "dpsql/matrix/workloads.py": "the implicit-matrix class hierarchy: every class implements the same private "
                                 "protocol (_matmat, _rmatmat, _column_terms, _quadratic_diag_dense) that the "
                                 "others call",
}


def module_name(path: Path) -> str:
    """The dotted module name of a file under ROOT (``pkg/__init__.py`` is ``pkg``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_checked(module: str, checked: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in checked)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def owner(importer: str, module: str) -> bool:
    """Whether ``importer`` is ``module`` itself (a module may use its own private names)."""
    return importer == module


def module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names bound to dpsql modules: ``import a.b as c``, ``from a import b`` (b a module)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def private_reaches(source: str, importer: str, label: str, checked: tuple[str, ...] = CHECKED) -> list[str]:
    """Every private name of a checked module that ``source`` (module ``importer``) reaches."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and is_checked(node.module, checked):
            found += [f"{label}:{node.lineno} imports {node.module}.{alias.name}"
                      for alias in node.names if is_private(alias.name) and not owner(importer, node.module)]
    aliases = module_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and is_private(node.attr):
            module = aliases.get(node.value.id)
            if module and is_checked(module, checked) and not owner(importer, module):
                found.append(f"{label}:{node.lineno} uses {module}.{node.attr}")
    return found


def python_files() -> list[Path]:
    return sorted(path for folder in SCANNED for path in folder.rglob("*.py"))


def test_no_module_reaches_a_private_name_of_a_checked_module() -> None:
    found = [message for path in python_files()
             for message in private_reaches(path.read_text(encoding="utf-8"), module_name(path),
                                            str(path.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_the_checker_sees_both_forms() -> None:
    # The two forms the test refuses; a module's use of its own private names is allowed.
    checked = ("dpsql.noise", "dpsql.planning.mechanism", "dpsql.matrix.workloads")
    source = "from dpsql.noise.sources import _smear\nfrom dpsql.planning import mechanism\nmechanism._narrowed\n"
    assert private_reaches(source, "tests.probe", "probe", checked) == [
        "probe:1 imports dpsql.noise.sources._smear", "probe:3 uses dpsql.planning.mechanism._narrowed"]
    own = private_reaches(source, "dpsql.planning.mechanism", "probe", checked)
    assert own == ["probe:1 imports dpsql.noise.sources._smear"]
    assert private_reaches("import dpsql.matrix.workloads as wl\nwl._anything\n", "tests.probe", "probe", checked) == [
        "probe:2 uses dpsql.matrix.workloads._anything"]
    assert not private_reaches(source, "tests.probe", "probe", ("dpsql.matrix.linalg",))


@pytest.mark.parametrize("path", sorted((ROOT / "dpsql").rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT)))
def test_modules_stay_small_unless_one_concern(path: Path) -> None:
    name = str(path.relative_to(ROOT))
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES or name in ONE_CONCERN, f"{name} has {lines} lines; split it by concern"


def test_every_one_concern_exception_is_still_needed() -> None:
    for name in ONE_CONCERN:
        assert len((ROOT / name).read_text(encoding="utf-8").splitlines()) > MAX_LINES, f"{name} fits now: drop it"
