"""The math layers import only numpy and scipy: sqlglot, duckdb and pyarrow stay out."""

from __future__ import annotations

import subprocess
import sys

MATH_MODULES = ["dpsql.workloads", "dpsql.kronvec", "dpsql.linalg", "dpsql.strategies", "dpsql.noise", "dpsql.residual.queries", "dpsql.truncation",
                "dpsql.residual", "dpsql.residual.basis", "dpsql.residual.planner", "dpsql.residual.plus",
                "dpsql.mechanism", "dpsql.error", "dpsql.weights"]
MATH_MODULES += ["dpsql.local", "dpsql.local.strategy", "dpsql.local.baselines", "dpsql.local.variance", "dpsql.local.projection", "dpsql.local.factorization", "dpsql.local.selection", "dpsql.local.quantize", "dpsql.local.layout", "dpsql.local.protocol", "dpsql.local.simulate"]

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'sqlglot', 'duckdb', 'pyarrow'}:
            raise ImportError('math layers must not import ' + name)
sys.meta_path.insert(0, Block())
"""


def test_math_layers_import_without_sql_or_database_packages() -> None:
    code = BLOCKER + "".join(f"import {name}\n" for name in MATH_MODULES)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
