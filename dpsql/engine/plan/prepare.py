"""Planning a batch, no data read: parse, weigh the statements, plan every route, choose one, and
check that the plan never spends more than the batch is charged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dpsql.answers.derived import check_unions
from dpsql.budget.accounting import PrivacyCost, check_batch_cost
from dpsql.engine.measuring.measurements import check_plan_cost
from dpsql.engine.plan.grouping import batch_memo
from dpsql.engine.plan.planning_size import bounded_partition, check_planning_size, planning_resources
from dpsql.engine.plan.residual_route import ResidualPlan
from dpsql.engine.plan.routes import PlanRequest, Prepared, ResidualPlanner, StatementGroups, choose
from dpsql.engine.plan.weighing import statement_weights_of
from dpsql.engine.vocabulary import NotApplicable
from dpsql.matrix import blas
from dpsql.planning.planner import Progress
from dpsql.schema import Schema
from dpsql.sql import ir, public_joins
from dpsql.sql.compile import batch_table, compile_batch, initial_partition
from dpsql.sql.flatten import expand_weights
from dpsql.sql.parse import parse_batch

#: Shown when ResidualPlanner is certified optimal and the statement groups are therefore not planned.
NOT_PLANNED = ("statement groups were not planned: ResidualPlanner's expected error equals the SVD lower bound of this "
               "batch's workload, so no strategy answers it more accurately")


def read_batch(batch: str | ir.Batch, parameters: Sequence[object] | None, schema: Schema) -> ir.Batch:
    """The batch parsed (a text, with its ``parameters``; ``sql.parse``), its joins with public tables
    rewritten as lookups on the key (``sql.public_joins``). A batch read before is returned as it is."""
    parsed = batch if isinstance(batch, ir.Batch) else parse_batch(batch, parameters)
    return public_joins.resolve(parsed, schema)


@blas.single_threaded()
@planning_resources()
def prepare(batch: str | ir.Batch, schema: Schema, cost: PrivacyCost, parameters: Sequence[object] | None = None,
            progress: Progress | None = None, *, plan_all_routes: bool = False,
            weights: Sequence[float] | None = None, statements: Sequence[int] | None = None) -> Prepared:
    """Parse, compile, plan every route and split the batch's budget — no data read.

    ``batch`` is the SQL text (parsed with ``parameters``) or a batch :func:`read_batch` read.
    ``progress`` hears about each strategy that has to be optimized (seconds, not milliseconds).
    ``plan_all_routes`` plans the statement groups even when ResidualPlanner is certified optimal
    (to compare the routes; the choice is the same). ``weights`` (one positive number per
    statement, in statement order; default all 1) weigh each statement's errors, relative to
    answering it alone, in the objective every planning decision minimises (``dpsql.planning.weights``).
    After planning, a statement still expected to do worse than answering it alone has its
    weight raised and the budget split again, then the groups are planned again with the raised
    weights (``dpsql.engine.plan.guard``, ``dpsql.engine.plan.group_route``); if it stays worse, the plan's
    ``guard_notes`` say so (EXPLAIN and the statement's result metadata show it). ``statements``
    plans only those statements of the batch (0-based; the others are answered from earlier
    releases, :mod:`dpsql.engine.reuse.free`). A cost above ``MAX_BATCH_COST`` is refused first
    (PrivacyParameterError), and work is bounded before anything is planned
    (:mod:`dpsql.engine.plan.planning_size`).
    """
    check_batch_cost(cost)
    batch = read_batch(batch, parameters, schema)
    planned = statement_weights_of(expand_weights(batch, weights), len(batch.statements))
    if statements is not None:
        batch = replace(batch, statements=tuple(batch.statements[i] for i in statements))
        planned = tuple(planned[i] for i in statements)
    table = batch_table(batch, schema)
    check_unions(batch, table)
    memo = batch_memo(batch)  # shared by the size check and the groups' route
    request = PlanRequest(batch=batch, schema=schema, cost=cost, weights=planned, progress=progress, memo=memo)
    check_planning_size(batch, compile_batch(batch, schema, bounded_partition(batch, table, memo), memo))
    residual = ResidualPlanner().plan(request)
    certified = isinstance(residual, ResidualPlan) and residual.optimal and len(initial_partition(batch, table)) > 1
    groups = NotApplicable(NOT_PLANNED) if certified and not plan_all_routes else StatementGroups().plan(request)
    chosen = choose(groups, residual)
    check_plan_cost(chosen.cost_parts(), cost)
    return Prepared(cost=cost, groups=groups, residual=residual, chosen=chosen)
