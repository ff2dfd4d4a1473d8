"""The code blocks of README.md and docs/*.md, and how they run: a page is a script.

A page's ```python and ```bash blocks run in order in one folder. The python blocks share one
namespace (``exec`` in this process, the folder as working directory); the bash blocks run under
``bash -e -o pipefail`` in that folder, with this interpreter's ``bin`` first on ``PATH`` (so
``dpsql`` and ``python`` are this environment's) and the repository first on ``PYTHONPATH`` (so
they run this checkout's code). Blocks in any other fence (``text``, ``toml``, ``sql``) are output
samples or files shown, and are not run.

An HTML comment on the line before a fence (invisible on the rendered page) changes that:
``<!-- docs-test: skip REASON -->`` never runs the block (the reason is required),
``<!-- docs-test: slow -->`` runs it only when slow blocks are asked for, and
``<!-- docs-test: plots -->`` only when pictures are (it draws with matplotlib, the optional extra
``plots``: ``tests/docs/test_code_blocks.py`` runs it where matplotlib is installed, and
``docs/scripts/pictures.py`` runs it to make the site's pictures). In a bash block,
``pip install ... && rest`` runs ``rest`` and a line that only installs is left out: the
environment it runs in is already installed. A block that starts a process in the background (a
server) writes its process id to a ``NAME.pid`` file in the folder; whatever such a process is still
running when the page ends, or fails, is stopped (SIGTERM), so a failing page leaves nothing behind.

Used by ``tests/docs/test_code_blocks.py`` and ``docs/scripts/pictures.py``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = ("python", "bash")
MARKERS = ("skip", "slow", "plots")
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\S*)\s*$")
INSTALL = re.compile(r"^pip install [^&]*?(&&\s*(?P<rest>.*))?$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, text, first line (1-based) and the marker before it."""
    language: str
    text: str
    line: int
    marker: str = ""
    reason: str = ""

    @property
    def runs(self) -> bool:
        return self.language in RUN and self.marker != "skip"


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown page, in order (fences at the start of a line)."""
    found: list[Block] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        marker = MARKER.fullmatch(lines[index - 1].strip()) if index else None
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"line {index + 1}: a fence that is never closed")
        found.append(Block(opening.group(1), "\n".join(lines[index + 1:end]) + "\n", index + 1,
                           marker.group(1) if marker else "", marker.group(2) if marker else ""))
        index = end + 1
    return found


def shell_script(text: str) -> str:
    """A bash block without its installs: ``pip install X && rest`` → ``rest``; an install alone → nothing."""
    kept = []
    for line in text.split("\n"):
        install = INSTALL.match(line.strip())
        if install is None:
            kept.append(line)
        elif install.group("rest"):
            kept.append(install.group("rest"))
    return "\n".join(kept)


def environment() -> dict[str, str]:
    """This interpreter's bin first on PATH, this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


class BlockError(AssertionError):
    """A bash block exited with an error (its text, and the ends of its output, in the message)."""


def run_page(page: Path, folder: Path, *, slow: bool, plots: bool) -> None:
    """Run the page's blocks in order in ``folder`` (with ``slow``, the slow ones too; with ``plots``, the
    ones that draw)."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    previous = Path.cwd()
    os.chdir(folder)
    try:
        for block in blocks(page.read_text(encoding="utf-8")):
            if not block.runs or (block.marker == "slow" and not slow) or (block.marker == "plots" and not plots):
                continue
            label = f"{where}:{block.line}"
            if block.language == "python":
                exec(compile(block.text, label, "exec"), namespace)
                continue
            result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", shell_script(block.text)], cwd=folder,
                                    env=environment(), capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise BlockError(f"{label}: the bash block failed ({result.returncode})\n{block.text}\n"
                                  f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}")
    finally:
        os.chdir(previous)
        _stop_background(folder)


def _stop_background(folder: Path) -> None:
    """SIGTERM to every process whose id a block left in a ``*.pid`` file of ``folder``."""
    for pid_file in folder.glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError):
            pass
