"""The engine's vocabulary: answers keyed by statement group and block (``dpsql.answers.tables``), routes
that do not apply, and the small helpers every pass shares (the noise family of a cost, a privacy unit's
row count)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dpsql.answers.tables import AnswerKey, AnswerSet
from dpsql.budget.accounting import PrivacyCost
from dpsql.noise import Noise
from dpsql.schema import Table

#: Receives a short message before each long step (scan, measurement, re-planning, packaging).
Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class NotApplicable:
    """A route, or a way of answering, that does not apply to this batch, and why (shown in EXPLAIN)."""

    reason: str


def noise_of(cost: PrivacyCost) -> Noise:
    """Laplace noise for an ε cost (pure ε-DP), Gaussian for a ρ cost (ρ-zCDP)."""
    return "laplace" if cost.family == "epsilon" else "gaussian"


def unit_rows(table: Table) -> int:
    """k: the most rows one privacy unit contributes (1 when each row is the unit)."""
    return table.privacy_unit.max_rows if table.privacy_unit.column else 1


__all__ = ["AnswerKey", "AnswerSet", "NotApplicable", "Report", "noise_of", "unit_rows"]
