"""Local differential privacy: each person randomizes their own record before it is collected.

The workload factorization mechanism (McKenna, Maity, Mazumdar, Miklau, PVLDB 13(11), 2020): a
strategy matrix Q (m × n) whose columns are the report distributions of the n cells, optimized
for a workload W, and the unbiased estimate W x̂ with x̂ = X⁺QᵀD⁻¹y from the report counts y.

Math modules (numpy and scipy only): ``strategy``, ``baselines``, ``variance``, ``projection``,
``factorization``, ``selection``, ``quantize``, ``layout``. The collection protocol (``protocol``:
strategy files, the client randomizer, report counting) and ``simulate`` need nothing more, so a
Python client installs no database or SQL package. Arrow answers (``answers``) and SQL (``sql``)
are loaded on first use; the command line (``dpsql local ...``) is ``dpsql.cli.local``.
"""

from typing import Any

from dpsql.local.baselines import fourier, hadamard, hierarchical, randomized_response, rappor, subset_selection
from dpsql.local.factorization import optimize_strategy
from dpsql.local.protocol import Report, StrategyFile, load, publish, randomize, report_counts, save
from dpsql.local.selection import baselines, optimize, rank, score
from dpsql.local.simulate import simulate
from dpsql.local.strategy import LocalStrategy, privacy_ratio
from dpsql.local.variance import (
    answer_variances,
    average_variance,
    estimate_cells,
    lower_bound,
    per_user_variance,
    reconstruction,
    sample_complexity,
    total_variance,
    worst_case_variance,
)

_LAZY = {
    "estimate": "dpsql.local.answers",
    "design_batch": "dpsql.local.sql",
    "answer_batch": "dpsql.local.sql",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dpsql.local' has no attribute {name!r}")


__all__ = [
    "LocalStrategy", "Report", "StrategyFile", "answer_batch", "answer_variances", "average_variance", "baselines",
    "design_batch", "estimate", "estimate_cells", "fourier", "hadamard", "hierarchical", "load", "lower_bound",
    "optimize", "optimize_strategy", "per_user_variance", "privacy_ratio", "publish", "randomize",
    "randomized_response", "rank", "rappor", "reconstruction", "report_counts", "sample_complexity", "save", "score",
    "simulate", "subset_selection", "total_variance", "worst_case_variance",
]
