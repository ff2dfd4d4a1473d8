"""Each answer's standard error as the chosen plan will report it — before any data is read.

For the statement groups, an answer of block b over measurement K (strategy Ã_K, calibrated noise
variance Var z = ``mechanism.calibrate(...).variance``, exact for the discrete Laplace/Gaussian
sampler at its rounded-up scale) has variance

    Var z · diag(W_b (Ã_Kᵀ Ã_K)⁺ W_bᵀ) · (scale_b · quantum_K)²

(``dpsql.engine.measure``); for ResidualPlanner, ``residual.queries.variances`` with the exact
per-residual σ² the discrete Gaussian releases with (``residual.planner.effective_sigma2``). Both
depend only on the plan (the public schema, the statements and the cost), so they are exactly the
``<alias>_stddev`` that ``execute`` later reports, computed the same way.

Only COUNT and SUM outputs (plain, filtered or scaled) have such a standard error fixed before the
data: an AVG's delta-method error, an order statistic's interval, a derived output's error and a
truncated SUM's (whose θ, and so every measurement's share, is chosen from the data) depend on
the data. :func:`unguaranteed` names them, so that an accuracy target can refuse them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql import linalg
from dpsql.engine.group_route import GroupsPlan
from dpsql.engine.residual_route import ResidualPlan
from dpsql.engine.routes import Prepared
from dpsql.engine.vocabulary import AnswerKey
from dpsql.residual import planner as residual
from dpsql.residual import queries as mq
from dpsql.sql import ir

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class Unguaranteed:
    """An output whose standard error is not known before the data: where it is and why."""

    statement: int  # index in the batch (flattened: each UNION ALL part is one)
    alias: str
    span: ir.Span
    why: str

    def describe(self) -> str:
        return f"'{self.alias}' ({self.span.describe()}): {self.why}"


def predicted_stddevs(prepared: Prepared,
                      variances: Callable[[GroupsPlan | ResidualPlan], Mapping[AnswerKey, FloatArray]] | None = None
                      ) -> list[dict[str, FloatArray]]:
    """Per batch statement, per COUNT/SUM output (by alias), each answer's standard error in the
    statement's output row order before ORDER BY/LIMIT (``CompiledStatement.block_rows``).

    Outputs listed by :func:`unguaranteed` are left out. Reads no data. ``variances`` gives every
    block's variances under the plan (default :func:`block_variances`; ``dpsql.engine.reuse`` adds
    what earlier releases contribute).
    """
    chosen = prepared.chosen
    of_plan = variances or block_variances
    found = of_plan(chosen) if isinstance(chosen, (GroupsPlan, ResidualPlan)) else {}
    skipped = {(u.statement, u.alias) for u in unguaranteed(prepared)}
    result: list[dict[str, FloatArray]] = []
    for index, statement in enumerate(chosen.compiled.statements):
        result.append({output.aggregate.alias: np.sqrt(found[AnswerKey(statement.group, output.blocks[0])]
                                                       [statement.block_rows])
                       for output in statement.aggregates if (index, output.aggregate.alias) not in skipped})
    return result


def unguaranteed(prepared: Prepared) -> list[Unguaranteed]:
    """The outputs whose standard error depends on the data (module docstring), in batch order."""
    chosen = prepared.chosen
    truncated = ({t.column.name for t in chosen.thresholds} if isinstance(chosen, GroupsPlan) else set())
    found = []
    for index, statement in enumerate(chosen.compiled.statements):
        outputs = statement.statement.outputs
        if outputs is not None:
            found += [Unguaranteed(statement=index, alias=item.alias, span=item.span,
                                   why="a derived output (arithmetic or HAVING over aggregates)")
                      for item in outputs.items if not isinstance(item, ir.GroupColumn)]
            continue
        for output in statement.aggregates:
            why = _why(output.aggregate, truncated)
            if why is not None:
                found.append(Unguaranteed(statement=index, alias=output.aggregate.alias, span=output.aggregate.span,
                                          why=why))
    return found


def _why(aggregate: ir.Aggregate, truncated: set[str]) -> str | None:
    """Why an aggregate's standard error depends on the data, or None when the plan fixes it."""
    if aggregate.function == "avg":
        return "an AVG's standard error (delta method) depends on the noisy SUM and COUNT"
    if aggregate.quantile is not None:
        return "an order statistic's error depends on the data"
    if aggregate.function == "sum" and aggregate.column is not None and aggregate.column.name in truncated:
        return ("a truncated SUM: its threshold θ, and so the noise of every measurement of the batch, is chosen "
                "from the data")
    return None


def block_variances(plan: GroupsPlan | ResidualPlan) -> dict[AnswerKey, FloatArray]:
    """Every block's answers' variances, exactly as the route computes them after measuring."""
    if isinstance(plan, ResidualPlan):
        return _residual_variances(plan)
    return _group_variances(plan)


def _group_variances(plan: GroupsPlan) -> dict[AnswerKey, FloatArray]:
    """``measure.measure_groups``'s variances from each measurement's calibration (no data)."""
    result: dict[AnswerKey, FloatArray] = {}
    for index, group in enumerate(plan.compiled.groups):
        for m in (m for m in plan.measurements if m.group == index):
            positions = [p for p, block in enumerate(group.blocks) if block.data == m.vector]
            if m.share == 0:  # an identically zero workload: exact zeros
                result.update({AnswerKey(index, p): np.zeros(group.blocks[p].workload.shape[0]) for p in positions})
                continue
            calibration = m.calibration()
            profile = linalg.pinv_gram(calibration.strategy)
            stacked = calibration.variance * linalg.quadratic_diag(group.workload(m.vector), profile)
            ends = np.cumsum([group.blocks[p].workload.shape[0] for p in positions])
            for position, end in zip(positions, ends):
                rows = slice(end - group.blocks[position].workload.shape[0], end)
                unit = group.blocks[position].scale * m.quantum
                result[AnswerKey(index, position)] = stacked[rows] * unit**2
    return result


def _residual_variances(plan: ResidualPlan) -> dict[AnswerKey, FloatArray]:
    """``residual_route.answer``'s variances, with the σ² the discrete Gaussian releases with."""
    sigma2 = dict(zip(plan.selection.closure, residual.effective_sigma2(plan.selection).tolist()))
    return {AnswerKey(0, b): (np.zeros(block.workload.shape[0]) if q is None else mq.variances(q, sigma2.__getitem__))
            for b, (q, block) in enumerate(zip(plan.queries, plan.compiled.groups[0].blocks))}
