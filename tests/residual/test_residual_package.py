"""The shape of dpsql.residual: one package for the marginal cluster, shared base classes for the two
planners and public citations (sizes and private names: ``test_code_rules``)."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest

import dpsql.residual
from dpsql.residual import base, planner, plus

PACKAGE = Path(dpsql.residual.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_modules_cite_publicly(path: Path) -> None:
    assert not re.search(r"seed 00[0-9]|issue [0-9]|digest", path.read_text(encoding="utf-8"), flags=re.IGNORECASE)


def test_every_module_is_in_the_package_docstring() -> None:
    names = {m.name for m in pkgutil.iter_modules([str(PACKAGE)])}
    listed = set(re.findall(r"^    (\w+)  ", dpsql.residual.__doc__ or "", flags=re.MULTILINE))
    assert names == listed


def test_both_planners_share_the_selection_and_measurement_bases() -> None:
    assert issubclass(planner.Selection, base.Selection) and issubclass(plus.PlusSelection, base.Selection)
    assert issubclass(planner.Measurements, base.Measurements)
    assert issubclass(plus.PlusMeasurements, base.Measurements)
