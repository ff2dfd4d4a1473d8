"""Skip a module whose engine is missing here, or fail it where CI says the engine must be present.

CI (``.ci/run``) installs Java, pyspark and PostgreSQL and sets ``DPSQL_REQUIRE_SPARK=1`` (where
Java could be installed): there a missing piece is a failure, so the backend tests cannot pass by
being skipped.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

SPARK = "DPSQL_REQUIRE_SPARK"


def unavailable(reason: str, variable: str = SPARK) -> NoReturn:
    """Skip the calling module with ``reason``; fail instead when ``variable`` is set to 1."""
    if os.environ.get(variable) == "1":
        pytest.fail(f"{reason} ({variable}=1 requires it here)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def module(name: str, reason: str, variable: str = SPARK) -> ModuleType:
    """``import name``, or :func:`unavailable`."""
    try:
        return importlib.import_module(name)
    except ImportError:
        unavailable(reason, variable)
