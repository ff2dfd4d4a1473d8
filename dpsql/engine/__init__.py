"""The engine: a batch of SQL statements planned without reading data, then answered privately.

Every entry point (``Cursor.execute``/``explain``, ``dpsql run``/``explain``, ``dpsql serve``) builds a
``request.Request`` and calls ``pipeline.answer`` or ``pipeline.explain``, which read it once
(``request.resolve``: the cost or target, the batch parsed and split by reuse) and run the passes.

By phase, each a subpackage that imports only those below it:
    reuse/      before planning: ``free`` splits a batch into statements earlier releases answer
                (``reuse``: GLS over kept measurements, ``release_store``: where they are kept) and
                statements to measure; ``accuracy_target`` finds the least cost meeting a
                standard-error target from ``predicted`` standard errors, before any data is read;
    plan/       planning a batch: ``prepare`` parses, weighs the statements, plans every route
                (``routes``: ``group_route``, the statement groups: grouping → value cells or apart
                → budget split → guard; ``residual_route``, ResidualPlanner over the batch's
                marginals), chooses, and checks the plan's cost;
    measuring/  a planned data vector (``measurements``) read (``scan``) and measured (``measure``).
At the top, beside the entry (``request``, ``pipeline``): ``run`` checks and charges the cost, answers
with the chosen route, keeps the release, post-processes (``postprocess``) and packages; ``explain``
prints the plan, spending nothing; ``vocabulary`` holds the words every pass shares.
Answering touches data and randomness only in ``measuring.scan``, ``measuring.measure``,
``plan.residual_route.answer`` and the threshold selections of ``plan.thresholds``, all after the charge.
"""

from dpsql.engine.explain import explain
from dpsql.engine.measuring.measurements import PlannedVector
from dpsql.engine.plan.group_route import GroupsPlan
from dpsql.engine.plan.guard import StatementError, statement_errors
from dpsql.engine.plan.prepare import prepare
from dpsql.engine.plan.residual_route import ResidualPlan
from dpsql.engine.plan.routes import Prepared, Route, RoutePlan
from dpsql.engine.run import run
from dpsql.engine.vocabulary import AnswerKey, AnswerSet, NotApplicable

__all__ = ["AnswerKey", "AnswerSet", "GroupsPlan", "NotApplicable", "PlannedVector", "Prepared", "ResidualPlan",
           "Route", "RoutePlan", "StatementError", "explain", "prepare", "run", "statement_errors"]
