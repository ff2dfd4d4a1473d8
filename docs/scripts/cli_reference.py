"""docs/cli.md, generated from the ``dpsql`` command's argument parser (``dpsql.cli.parser``).

Run ``python docs/scripts/cli_reference.py --write`` after changing a command or an option;
``tests/docs/test_generated_pages.py`` checks that the page is current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dpsql.cli import parser

PAGE = Path(__file__).resolve().parents[1] / "cli.md"
INTRO = """# CLI reference

Every command of `dpsql` and its options, generated from the command's argument parser
(`docs/scripts/cli_reference.py`; the test suite checks that this page is current). `dpsql COMMAND
--help` prints the same. The [getting started](getting-started.md) page shows the commands in use.
"""


def subcommands(command: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """A parser's subcommands: name → (parser, one-line help), in the order they were added."""
    found: dict[str, tuple[argparse.ArgumentParser, str]] = {}
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found.update({name: (sub, helps.get(name, "")) for name, sub in action.choices.items()})
    return found


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def options(command: argparse.ArgumentParser) -> list[str]:
    """A Markdown table of a parser's arguments and options (help excluded)."""
    rows = []
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        name = ", ".join(f"`{option}`" for option in action.option_strings) or f"`{action.dest}`"
        if action.option_strings and action.nargs != 0:
            name += f" `{action.metavar or action.dest.upper()}`"
        text = cell(action.help or "")
        if action.choices:
            text += f" (one of: {', '.join(f'`{choice}`' for choice in action.choices)})"
        if action.required and action.option_strings:
            text += " **Required.**"
        default = action.default
        if action.option_strings and default not in (None, False, True, argparse.SUPPRESS) and "default" not in text:
            text += f" Default: `{default}`."
        rows.append(f"| {name} | {text} |")
    return ["| argument | meaning |", "|---|---|", *rows] if rows else []


def section(command: argparse.ArgumentParser, path: list[str], summary: str) -> list[str]:
    """The page's section of one command and, after it, of each of its subcommands."""
    lines = [f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`", ""]
    if summary or command.description:
        lines += [cell(command.description or summary), ""]
    usage = " ".join(command.format_usage().split())
    lines += ["```text", usage.removeprefix("usage: "), "```", ""]
    table = options(command)
    lines += [*table, ""] if table else []
    for name, (sub, text) in subcommands(command).items():
        lines += section(sub, [*path, name], text)
    return lines


def page() -> str:
    """The whole page."""
    return INTRO + "\n" + "\n".join(section(parser(), ["dpsql"], "")).rstrip("\n") + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        PAGE.write_text(page(), encoding="utf-8")
    else:
        print(page(), end="")
