"""No import cycles: the modules of dpsql, with an arrow from each module to every dpsql module it imports
(at the top, inside a function, or for type checking only: each is a dependency), form no cycle.

A cycle means neither module can be read, tested or moved without the other; it is also how an import
order bug is born. Read from the source (AST), so nothing is executed.
"""

from __future__ import annotations

from pathlib import Path

from _imports import PACKAGE, imported, modules


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the dpsql modules it imports (``from pkg import name`` counts ``pkg.name`` when that is a
    module). dpsql's imports are all absolute (ruff's isort settings keep them so)."""
    found = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        for module, alias, level in imported(path.read_text(encoding="utf-8")):
            assert level == 0, f"{name}: a relative import"
            target = f"{module}.{alias}" if alias and f"{module}.{alias}" in found else module
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles: " + "; ".join(" ↔ ".join(component) for component in found)


def test_the_cycle_finder_finds_a_cycle(tmp_path: Path) -> None:
    """The check can fail: three modules importing each other in a ring, and one outside it."""
    package = tmp_path / "dpsql"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "a.py").write_text("from dpsql.inner import b\n")
    (package / "inner" / "b.py").write_text("def f():\n    from dpsql import c\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dpsql.a\n")
    (package / "d.py").write_text("import dpsql.a\n")
    assert cycles(import_graph(package)) == [["dpsql.a", "dpsql.c", "dpsql.inner.b"]]
