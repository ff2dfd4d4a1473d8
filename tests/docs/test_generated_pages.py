"""The generated parts of the documentation are current: the CLI reference (from the argument parser) and the
tables of standard errors on the ε page (computed by dpsql). Each failure names the command that regenerates them."""

from __future__ import annotations

import importlib.util
import math
import warnings
from pathlib import Path
from types import ModuleType

import dpsql

SCRIPTS = Path(__file__).resolve().parents[2] / "docs" / "scripts"


def script(name: str) -> ModuleType:
    """A script of docs/scripts, imported as a module."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_generated_from_the_current_parser() -> None:
    reference = script("cli_reference")
    assert reference.PAGE.read_text(encoding="utf-8") == reference.page(), (
        "docs/cli.md is out of date: run python docs/scripts/cli_reference.py --write")


def test_the_cli_reference_lists_every_command() -> None:
    page = script("cli_reference").page()
    for command in ("dpsql run", "dpsql explain", "dpsql budget set", "dpsql budget show", "dpsql budget history",
                    "dpsql schema suggest", "dpsql serve", "dpsql local design", "dpsql demo"):
        assert f"`{command}`" in page


def test_every_picture_the_site_embeds_is_drawn_by_a_plots_block_of_its_page() -> None:
    """docs/scripts/pictures.py makes the pictures from the pages' own blocks (they are never committed): each
    ``images/NAME`` a page embeds is written by one of its blocks marked ``plots``, which dpsql draws with --chart."""
    pictures = script("pictures")
    found = {}
    for page in pictures.code_blocks.PAGES:
        drawing = "".join(block.text for block in pictures.code_blocks.blocks(page.read_text(encoding="utf-8"))
                          if block.runs and block.marker == "plots")
        found.update({f"{page.name}: {name}": f"--chart {name}" in drawing for name in pictures.embedded(page)})
    assert found == {"getting-started.md: answers.png": True, "getting-started.md: spend.png": True}


def test_the_epsilon_tables_are_what_dpsql_reports() -> None:
    tables = script("epsilon_table")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsql.DpsqlWarning)  # ε = 10 is above 5: the table shows it on purpose
        generated = tables.tables()
    page = tables.PAGE.read_text(encoding="utf-8")
    assert tables.page_with(page, generated) == page, (
        "docs/choosing-epsilon.md's tables are out of date: run python docs/scripts/epsilon_table.py --write")


def test_a_count_costs_what_the_discrete_laplace_variance_says() -> None:
    """The table's count at ε: one standard error of a discrete Laplace of scale 1/ε, 2e^(−ε)/(1 − e^(−ε))²."""
    tables = script("epsilon_table")
    for epsilon in (0.1, 1.0):
        expected = math.sqrt(2 * math.exp(-epsilon)) / (1 - math.exp(-epsilon))
        got = tables.reported_stddev(tables.census(200), "SELECT COUNT(*) AS v FROM census", "epsilon", epsilon)
        assert math.isclose(got, expected, rel_tol=1e-9)
