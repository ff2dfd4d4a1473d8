"""A deterministic work budget for the strategy optimizers (HDMM, OPT_M, Eigen-Design).

Planning is bounded by a count of work, never by wall time, so the strategy chosen for a workload
does not depend on machine speed or load. One unit of work is one evaluation of an optimizer's
objective (with its gradient), or one step of a fixed-point iteration; every optimizer's public
``max_evaluations`` argument is such a count.

>>> budget = WorkBudget(2)
>>> budget.spend(); budget.exhausted
False
>>> budget.spend()
Traceback (most recent call last):
    ...
dpsql.strategies.budget.Exhausted: the work budget of 2 evaluations is spent
"""

from __future__ import annotations

import numbers

#: Default work budget of one optimizer call: generous, so that the papers' benchmark workloads
#: converge well within it (the test suite's largest call spends about 1,600); the planner passes
#: its own, smaller budgets (dpsql.planning.planner.PLAN_EVALUATIONS).
MAX_EVALUATIONS = 10_000


class Exhausted(Exception):  # noqa: N818 - a control-flow signal caught by its optimizer, not an error
    """Raised inside an objective when its budget is spent (caught by the optimizer that owns it)."""


def _checked_limit(max_evaluations: object) -> int:
    """``max_evaluations`` as a positive int, or ValueError naming it."""
    if isinstance(max_evaluations, bool) or not isinstance(max_evaluations, numbers.Integral) \
            or int(max_evaluations) < 1:
        raise ValueError(f"max_evaluations must be a positive integer number of objective evaluations; "
                         f"got {max_evaluations!r}.")
    return int(max_evaluations)


class WorkBudget:
    """Counts units of work (objective evaluations) against a limit shared by all solves of one call."""

    def __init__(self, max_evaluations: int) -> None:
        self.limit = _checked_limit(max_evaluations)
        self.used = 0

    @property
    def exhausted(self) -> bool:
        """Whether every unit has been spent."""
        return self.used >= self.limit

    def step(self) -> bool:
        """Count one unit of work; whether any remain (for loops that stop by themselves)."""
        self.used += 1
        return self.used < self.limit

    def spend(self) -> None:
        """Count one evaluation; raise :class:`Exhausted` when that was the last one."""
        if not self.step():
            raise Exhausted(f"the work budget of {self.limit} evaluations is spent")
