"""Every code block of README.md and docs/*.md runs, so that no example can rot.

A page is a script: its ```python and ```bash blocks run in order in one temporary folder. The
python blocks share one namespace (``exec`` in this process, the folder as working directory); the
bash blocks run under ``bash -e -o pipefail`` in that folder, with this interpreter's ``bin``
first on ``PATH`` (so ``dpsql`` and ``python`` are this environment's) and the repository first on
``PYTHONPATH`` (so they run this checkout's code). Blocks in any other fence (``text``, ``toml``,
``sql``) are output samples or files shown, and are not run.

An HTML comment on the line before a fence (invisible on the rendered page) changes that:
``<!-- docs-test: skip REASON -->`` never runs the block (the reason is required, and the test
ids list such blocks), ``<!-- docs-test: slow -->`` runs it only in the page's slow test, which
runs every block. In a bash block, ``pip install ... && rest`` runs ``rest`` and a line that only
installs is left out: the environment under test is already installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import dpsql

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = ("python", "bash")
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
    source = str(Path(dpsql.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH", "")]))
    return env


def run_page(page: Path, folder: Path, *, slow: bool) -> None:
    """Run the page's blocks in order in ``folder`` (with ``slow``, the slow ones too)."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    where = page.relative_to(ROOT)
    previous = Path.cwd()
    os.chdir(folder)
    try:
        for block in blocks(page.read_text(encoding="utf-8")):
            if not block.runs or (block.marker == "slow" and not slow):
                continue
            label = f"{where}:{block.line}"
            if block.language == "python":
                exec(compile(block.text, label, "exec"), namespace)
                continue
            result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", shell_script(block.text)], cwd=folder,
                                    env=environment(), capture_output=True, text=True, check=False)
            assert result.returncode == 0, (f"{label}: the bash block failed ({result.returncode})\n"
                                            f"{block.text}\nstdout:\n{result.stdout[-3000:]}\n"
                                            f"stderr:\n{result.stderr[-3000:]}")
    finally:
        os.chdir(previous)


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def with_blocks(*, marker: str) -> list[Path]:
    return [page for page in PAGES
            if any(block.runs and block.marker == marker for block in blocks(page.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("page", with_blocks(marker=""), ids=page_id)
def test_page_runs(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", with_blocks(marker="slow"), ids=page_id)
def test_page_runs_with_its_slow_blocks(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path, slow=True)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_markers_are_before_fences_and_skips_say_why(page: Path) -> None:
    lines = page.read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, 1):
        marker = MARKER.fullmatch(line.strip())
        if marker is None:
            continue
        assert number < len(lines) and FENCE.match(lines[number]), f"{page_id(page)}:{number}: not before a fence"
        assert marker.group(1) in ("skip", "slow"), f"{page_id(page)}:{number}: unknown marker {marker.group(1)!r}"
        assert marker.group(1) != "skip" or marker.group(2), f"{page_id(page)}:{number}: a skip needs a reason"


def test_the_collector_reads_fences_markers_and_installs() -> None:
    page = ("text\n```bash\npip install . && dpsql demo\npip install x\necho hi\n```\n"
            "<!-- docs-test: skip needs a server -->\n```python\nprint(1)\n```\n```text\nout\n```\n")
    found = blocks(page)
    assert [(b.language, b.line, b.marker, b.reason, b.runs) for b in found] == [
        ("bash", 2, "", "", True), ("python", 8, "skip", "needs a server", False), ("text", 11, "", "", False)]
    assert shell_script(found[0].text) == "dpsql demo\necho hi\n"


def test_readme_keeps_the_command_ci_runs_and_runs_its_csv_path() -> None:
    """.ci/run greps the README's test command; the README's path from a CSV runs in test_page_runs, install lines
    aside: exactly the commands it shows."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert '\npip install ".[test]" && python -m pytest -n auto -m "not slow"\n' in readme
    assert len(readme.splitlines()) <= 200
    runnable = "".join(block.text for block in blocks(readme) if block.runs and block.marker == "")
    for step in ("census.csv", "dpsql schema suggest", "dpsql budget set", "dpsql run"):
        assert step in runnable
