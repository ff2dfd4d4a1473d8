"""Every code block of README.md and docs/*.md runs, so that no example can rot.

How a page runs, and its markers (``skip``, ``slow``, ``plots``), are in ``docs/scripts/code_blocks.py``: a page is
a script whose blocks run in order in one temporary folder. Here the blocks marked ``plots`` run where matplotlib is
installed (the extra ``plots``) and are left out elsewhere; the docs stage of ``.ci/run`` runs them to draw the site's
pictures (``docs/scripts/pictures.py``).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "scripts" / "code_blocks.py"


def _code_blocks() -> ModuleType:
    """docs/scripts/code_blocks.py as the module ``docs_code_blocks`` (loaded once; registered before it runs, since
    its dataclass looks its module up)."""
    if "docs_code_blocks" not in sys.modules:
        spec = importlib.util.spec_from_file_location("docs_code_blocks", SCRIPT)
        assert spec is not None and spec.loader is not None
        sys.modules["docs_code_blocks"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["docs_code_blocks"])
    return sys.modules["docs_code_blocks"]


code_blocks = _code_blocks()
PAGES: list[Path] = code_blocks.PAGES
ROOT: Path = code_blocks.ROOT
#: Whether matplotlib (the extra ``plots``) is here, so that the blocks that draw can run.
PLOTS = importlib.util.find_spec("matplotlib") is not None


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def with_blocks(*, marker: str) -> list[Path]:
    return [page for page in PAGES if any(block.runs and block.marker == marker
                                          for block in code_blocks.blocks(page.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("page", with_blocks(marker=""), ids=page_id)
def test_page_runs(page: Path, tmp_path: Path) -> None:
    code_blocks.run_page(page, tmp_path, slow=False, plots=PLOTS)


@pytest.mark.slow
@pytest.mark.parametrize("page", with_blocks(marker="slow"), ids=page_id)
def test_page_runs_with_its_slow_blocks(page: Path, tmp_path: Path) -> None:
    code_blocks.run_page(page, tmp_path, slow=True, plots=PLOTS)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_markers_are_before_fences_and_skips_say_why(page: Path) -> None:
    lines = page.read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, 1):
        marker = code_blocks.MARKER.fullmatch(line.strip())
        if marker is None:
            continue
        where = f"{page_id(page)}:{number}"
        assert number < len(lines) and code_blocks.FENCE.match(lines[number]), f"{where}: not before a fence"
        assert marker.group(1) in code_blocks.MARKERS, f"{where}: unknown marker {marker.group(1)!r}"
        assert marker.group(1) != "skip" or marker.group(2), f"{where}: a skip needs a reason"


def test_the_collector_reads_fences_markers_and_installs() -> None:
    page = ("text\n```bash\npip install . && dpsql demo\npip install x\necho hi\n```\n"
            "<!-- docs-test: skip needs a server -->\n```python\nprint(1)\n```\n```text\nout\n```\n"
            "<!-- docs-test: plots -->\n```bash\ndpsql budget show --chart spend.png\n```\n")
    found = code_blocks.blocks(page)
    assert [(b.language, b.line, b.marker, b.reason, b.runs) for b in found] == [
        ("bash", 2, "", "", True), ("python", 8, "skip", "needs a server", False), ("text", 11, "", "", False),
        ("bash", 15, "plots", "", True)]
    assert code_blocks.shell_script(found[0].text) == "dpsql demo\necho hi\n"


def test_a_page_runs_in_order_and_its_plots_blocks_only_when_asked(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\necho one >> ran.txt\n```\n<!-- docs-test: plots -->\n```bash\necho two >> ran.txt\n```\n"
                    "```python\nwith open('ran.txt', 'a') as f: f.write('three\\n')\n```\n```bash\nexit 4\n```\n",
                    encoding="utf-8")
    for plots, ran in ((False, "one\nthree\n"), (True, "one\ntwo\nthree\n")):
        folder = tmp_path / str(plots)
        folder.mkdir()
        with pytest.raises(code_blocks.BlockError, match=r"page\.md:11: the bash block failed \(4\)"):
            code_blocks.run_page(page, folder, slow=False, plots=plots)
        assert (folder / "ran.txt").read_text(encoding="utf-8") == ran


def test_a_background_process_a_page_leaves_is_stopped_when_it_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\nsleep 300 > /dev/null 2>&1 &\necho $! > server.pid\n```\n```bash\nexit 3\n```\n",
                    encoding="utf-8")
    with pytest.raises(code_blocks.BlockError):
        code_blocks.run_page(page, tmp_path, slow=False, plots=False)
    pid = int((tmp_path / "server.pid").read_text(encoding="utf-8"))
    for _ in range(200):  # SIGTERM was sent: the process ends (or waits, a zombie, for its parent to reap it)
        if _ended(pid):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"process {pid} still runs")


def _ended(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


def test_readme_keeps_the_command_ci_runs_and_runs_its_csv_path() -> None:
    """.ci/run greps the README's test command; the README's path from a CSV runs in test_page_runs, install lines
    aside: exactly the commands it shows."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert '\npip install ".[test]" && python -m pytest -n auto -m "not slow"\n' in readme
    assert len(readme.splitlines()) <= 200
    runnable = "".join(block.text for block in code_blocks.blocks(readme) if block.runs and block.marker == "")
    for step in ("census.csv", "dpsql schema suggest", "dpsql budget set", "dpsql run"):
        assert step in runnable
