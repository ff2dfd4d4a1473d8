"""What a release says about itself: the result metadata every statement's Arrow table carries
(``dpsql`` key, JSON), as dataclasses with ``to_json()``, and the :class:`Release` a route's answering
returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from dpsql.answers.tables import AnswerSet
from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.measuring.measure import MeasuredVector
from dpsql.engine.plan.guard import StatementError, guard_notes
from dpsql.sql.compile import CompiledBatch


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseMetadata:
    """The batch-wide metadata: mechanism and strategies, expected RMSEs, how the sums were answered,
    bias bounds, released thresholds, post-processing, and the budget spent and left."""

    mechanism: str
    strategy: Mapping[str, str]
    expected_rmse: Mapping[str, float]
    answering: tuple[str, ...] = ()
    bias_bound: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    truncation_threshold: Mapping[str, float] = field(default_factory=dict)
    truncation: Mapping[str, str] = field(default_factory=dict)
    postprocessing: tuple[str, ...] = ()
    budget_spent: str = ""
    budget_remaining: str = ""

    def with_budget(self, spent: str, remaining: str) -> ReleaseMetadata:
        return replace(self, budget_spent=spent, budget_remaining=remaining)

    def to_json(self) -> dict[str, object]:
        """The metadata as JSON values; optional entries only when they say something."""
        found: dict[str, object] = {"mechanism": self.mechanism, "strategy": dict(self.strategy),
                                    "expected_rmse": dict(self.expected_rmse)}
        optional: dict[str, object] = {"answering": list(self.answering), "bias_bound": dict(self.bias_bound),
                                       "truncation_threshold": dict(self.truncation_threshold),
                                       "truncation": dict(self.truncation), "postprocessing": list(self.postprocessing)}
        found.update({key: value for key, value in optional.items() if value})
        return {**found, "budget_spent": self.budget_spent, "budget_remaining": self.budget_remaining}


@dataclass(frozen=True, slots=True, kw_only=True)
class StatementMetadata:
    """One statement's ``statement_error``: its expected RMSE per aggregate part, the RMSE of
    answering that part alone at the same share, their mean squared ratio, its weight, and a note
    when it is expected to do worse than alone (figures of the plan: public, no data)."""

    error: StatementError
    weight: float
    note: str | None = None

    def to_json(self) -> dict[str, object]:
        entry: dict[str, object] = {
            "expected_rmse": {label: rmse for label, rmse, _ in self.error.parts},
            "alone_rmse": {label: alone for label, _, alone in self.error.parts},
            "ratio_to_alone": self.error.ratio,
            "weight": self.weight,
        }
        if self.note is not None:
            entry["note"] = self.note
        return {"statement_error": entry}


def statement_metadata(errors: Sequence[StatementError], weights: Sequence[float],
                       cap: float | None) -> list[StatementMetadata]:
    """Each statement's :class:`StatementMetadata` (``cap``: the least worst ratio the guard's split
    reached, for its notes; None when no split was solved)."""
    notes = dict(guard_notes(errors, cap))
    return [StatementMetadata(error=e, weight=weights[s] if weights else 1.0, note=notes.get(s))
            for s, e in enumerate(errors)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """What a route's answering returns: the compiled batch as answered, the answers, each
    statement's expected error, the batch metadata (budget entries filled in by ``run``) and the
    noisy releases of the statement groups, which ``run`` keeps for reuse."""

    compiled: CompiledBatch
    answers: AnswerSet
    errors: list[StatementError]
    metadata: ReleaseMetadata
    split_cap: float | None  # the least worst ratio the guard's split reached (None: no split solved)
    measured: tuple[MeasuredVector, ...] = ()  # the statement groups' noisy releases (kept for reuse)


def family_name(cost: PrivacyCost) -> str:
    """The noise family a cost is answered with, as the metadata names it."""
    return "discrete Laplace (pure ε-DP)" if cost.family == "epsilon" else "discrete Gaussian (ρ-zCDP)"
