"""The site's pictures, drawn from the pages' own examples: never committed, made before each build.

A page that embeds ``![...](images/NAME.png)`` makes ``NAME.png`` in one of its blocks (marked
``<!-- docs-test: plots -->``: they need matplotlib, the optional extra ``plots``). This script runs
each such page in a temporary folder, every block included (``code_blocks.run_page``), and copies
the pictures it embeds into ``docs/images/`` (git-ignored). The docs stage of ``.ci/run`` runs
``python docs/scripts/pictures.py`` before ``mkdocs build --strict``, which fails on a picture that
is missing; run it too before ``mkdocs serve``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType


def _code_blocks() -> ModuleType:
    """docs/scripts/code_blocks.py as the module ``docs_code_blocks`` (loaded once; registered before it runs, since
    its dataclass looks its module up)."""
    if "docs_code_blocks" not in sys.modules:
        spec = importlib.util.spec_from_file_location("docs_code_blocks", Path(__file__).with_name("code_blocks.py"))
        assert spec is not None and spec.loader is not None
        sys.modules["docs_code_blocks"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["docs_code_blocks"])
    return sys.modules["docs_code_blocks"]


code_blocks = _code_blocks()

IMAGES = code_blocks.ROOT / "docs" / "images"
EMBED = re.compile(r"!\[[^\]]*\]\(images/([\w.-]+)\)")


def embedded(page: Path) -> list[str]:
    """The pictures a page embeds from ``images/``, by file name, in order."""
    return list(dict.fromkeys(EMBED.findall(page.read_text(encoding="utf-8"))))


def draw(pages: list[Path], into: Path = IMAGES) -> list[Path]:
    """Run each page that embeds pictures and copy them into ``into`` (docs/images/); the pictures written.

    Raises:
        FileNotFoundError: a page embeds a picture its blocks did not make.
    """
    into.mkdir(exist_ok=True)
    written = []
    for page in pages:
        names = embedded(page)
        if not names:
            continue
        with tempfile.TemporaryDirectory() as folder:
            with contextlib.redirect_stdout(io.StringIO()):  # what the python blocks print
                code_blocks.run_page(page, Path(folder), slow=False, plots=True)
            for name in names:
                made = Path(folder) / name
                if not made.is_file():
                    raise FileNotFoundError(f"{page.relative_to(code_blocks.ROOT)} embeds images/{name}, but none of "
                                            f"its blocks wrote {name}")
                written.append(Path(shutil.copyfile(made, into / name)))
    return written


if __name__ == "__main__":
    for picture in draw(code_blocks.PAGES):
        print(picture.relative_to(code_blocks.ROOT))
