"""Routes: the ways of answering a batch, each planned without reading data, and the choice among them.

A :class:`Route` plans a batch into a :class:`RoutePlan` or says why it does not apply
(:class:`~dpsql.engine.vocabulary.NotApplicable`). Every plan has its expected total error, its
batch objective (each statement's error relative to answering it alone, weighted; ``dpsql.planning.weights``)
and ``answer(backend, rng, report)``; the route with the lower objective answers. Two routes exist:
the statement groups (:mod:`dpsql.engine.plan.group_route`) and ResidualPlanner
(:mod:`dpsql.engine.plan.residual_route`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from dpsql.backends import Backend
from dpsql.budget.accounting import PrivacyCost
from dpsql.engine.plan import group_route, residual_route
from dpsql.engine.plan.group_route import GroupsPlan
from dpsql.engine.plan.guard import StatementError
from dpsql.engine.plan.metadata import Release
from dpsql.engine.plan.residual_route import ResidualPlan
from dpsql.engine.vocabulary import NotApplicable, Report
from dpsql.noise import RandomSource
from dpsql.planning.planner import Progress
from dpsql.schema import Schema
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, StatementMemo


class RoutePlan(Protocol):
    """A route's plan for one batch, made from public information only."""

    @property
    def name(self) -> str: ...
    @property
    def cost(self) -> PrivacyCost: ...
    @property
    def compiled(self) -> CompiledBatch: ...
    @property
    def weights(self) -> tuple[float, ...]: ...
    @property
    def measures_nothing(self) -> bool: ...
    @property
    def expected_total(self) -> float: ...
    @property
    def answer_count(self) -> int: ...
    @property
    def objective(self) -> float: ...
    @property
    def guard_notes(self) -> tuple[tuple[int, str], ...]: ...

    def statement_errors(self) -> list[StatementError]: ...

    def cost_parts(self) -> list[PrivacyCost]: ...

    def answer(self, *, backend: Backend, rng: RandomSource | None, report: Report) -> Release: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """What every route plans from: the parsed batch, the schema, the cost and the statements' weights."""

    batch: ir.Batch
    schema: Schema
    cost: PrivacyCost
    weights: tuple[float, ...]
    progress: Progress | None
    memo: StatementMemo | None = None  # the batch's statements compiled so far (``compile.StatementMemo``)


class Route(Protocol):
    """A way of answering a batch."""

    def plan(self, request: PlanRequest) -> RoutePlan | NotApplicable: ...


class StatementGroups:
    """Statement groups measured with the matrix mechanism (any COUNT/SUM/AVG batch, ε or ρ)."""

    def plan(self, request: PlanRequest) -> GroupsPlan:
        return group_route.plan_route(request.batch, request.schema, request.cost, request.weights, request.progress,
                                      request.memo)


class ResidualPlanner:
    """ResidualPlanner over all the batch's marginals (COUNT(*) batches under ρ-zCDP)."""

    def plan(self, request: PlanRequest) -> ResidualPlan | NotApplicable:
        return residual_route.plan(request.batch, request.schema, request.cost, request.weights)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """Everything decided before the data is touched: each route's plan (or why it does not apply)
    and the chosen one, which answers."""

    cost: PrivacyCost
    groups: GroupsPlan | NotApplicable
    residual: ResidualPlan | NotApplicable
    chosen: RoutePlan


def choose(groups: GroupsPlan | NotApplicable, residual: ResidualPlan | NotApplicable) -> GroupsPlan | ResidualPlan:
    """The plan with the lower batch objective (both weigh every statement's answers by the same c_b;
    ResidualPlanner's blocks are COUNT(*)s); the statement groups on a tie."""
    if isinstance(residual, ResidualPlan) and (isinstance(groups, NotApplicable)
                                               or residual.objective < groups.objective * (1 - 1e-9)):
        return residual
    assert isinstance(groups, GroupsPlan), "one route always applies: the statement groups answer every batch"
    return groups
