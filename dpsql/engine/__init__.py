"""The engine: a batch of SQL statements planned without reading data, then answered privately.

Every entry point (``Cursor.execute``/``explain``, ``dpsql run``/``explain``, ``dpsql serve``) builds a
``request.Request`` and calls ``pipeline.answer`` or ``pipeline.explain``, which read it once
(``request.resolve``: the cost or target, the batch parsed and split by reuse) and run the passes.

Passes, in order (each a module of this package):
    prepare          parse, weigh the statements, plan every route, choose, check the plan's cost;
    routes           the Route protocol, ``Prepared``, and the choice between route plans;
      group_route    statement groups: grouping → value cells or apart → budget split → guard;
      residual_route ResidualPlanner over all the batch's marginals (COUNT(*) under ρ-zCDP);
    run              check and charge the cost, answer with the chosen route, keep the release,
                     post-process, package;
    explain          the plan as text, spending nothing.
Around them: ``free`` splits a batch into statements earlier releases answer (``reuse``: GLS over
kept measurements, ``release_store``: where they are kept) and statements to measure;
``accuracy_target`` finds the least cost meeting a standard-error target from ``predicted``
standard errors, before any data is read.
Answering touches data and randomness only in ``scan``, ``measure``, ``residual_route.answer`` and
the threshold selections of ``thresholds``, all after the charge.
"""

from dpsql.engine.explain import explain
from dpsql.engine.group_route import GroupsPlan
from dpsql.engine.guard import StatementError, statement_errors
from dpsql.engine.measurements import PlannedVector
from dpsql.engine.prepare import prepare
from dpsql.engine.residual_route import ResidualPlan
from dpsql.engine.routes import Prepared, Route, RoutePlan
from dpsql.engine.run import run
from dpsql.engine.vocabulary import AnswerKey, AnswerSet, NotApplicable

__all__ = ["AnswerKey", "AnswerSet", "GroupsPlan", "NotApplicable", "PlannedVector", "Prepared", "ResidualPlan",
           "Route", "RoutePlan", "StatementError", "explain", "prepare", "run", "statement_errors"]
