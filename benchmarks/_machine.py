"""Machine and version header printed by every benchmark."""

from __future__ import annotations

import os
import platform

import numpy as np
import scipy

import dpsql


def header(title: str) -> str:
    """One line naming the benchmark, the machine and the library versions."""
    return (f"# {title}\n# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
            f"dpsql {dpsql.__version__}")
