"""Each answer's standard error as the chosen plan will report it — before any data is read.

For the statement groups, an answer of block b over measurement K (strategy Ã_K, calibrated noise
variance Var z = ``mechanism.calibrate(...).variance``, exact for the discrete Laplace/Gaussian
sampler at its rounded-up scale) has variance

    Var z · diag(W_b (Ã_Kᵀ Ã_K)⁺ W_bᵀ) · (scale_b · quantum_K)²

(``dpsql.engine.measuring.measure``); for ResidualPlanner, ``residual.queries.variances`` with the exact
per-residual σ² the discrete Gaussian releases with (``residual.planner.effective_sigma2``). Both
depend only on the plan (the public schema, the statements and the cost), so they are exactly the
``<alias>_stddev`` that ``execute`` later reports, computed the same way.

Only COUNT and SUM outputs (plain, filtered or scaled) and derived outputs linear in them
(``SUM(a) + SUM(b)``, ``2 * COUNT(*) - 1``: Var = cᵀ Σ c with the answers' exact covariances) have
such a standard error fixed before the data: an AVG's delta-method error, a ratio's or product's,
an order statistic's interval and a truncated SUM's (whose θ, and so every measurement's share, is
chosen from the data) depend on the data. :func:`unguaranteed` names them, so that an accuracy
target can refuse them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql.answers.derived import StatementAnswers, is_linear
from dpsql.engine.measuring.measure import add_covariances
from dpsql.engine.plan.group_route import GroupsPlan
from dpsql.engine.plan.residual_route import ResidualPlan
from dpsql.engine.plan.routes import Prepared
from dpsql.engine.reuse.reuse import planned_answers
from dpsql.engine.vocabulary import AnswerKey, AnswerSet
from dpsql.matrix import linalg
from dpsql.planning.mechanism import Answers, Measurement
from dpsql.planning.noise_forms import ExactForm, MeasuredForm
from dpsql.releases.information import KeptInformation
from dpsql.residual import planner as residual
from dpsql.residual import queries as mq
from dpsql.sql import derived as d
from dpsql.sql import ir
from dpsql.sql.vectors import SPREADS
from dpsql.sql.windows import windows_of

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
                      answers_of: Callable[[GroupsPlan | ResidualPlan], Mapping[AnswerKey, Answers]] | None = None
                      ) -> list[dict[str, FloatArray]]:
    """Per batch statement, per COUNT/SUM output (by alias; also a derived output linear in them),
    each answer's standard error in the statement's output row order before HAVING, ORDER BY and
    LIMIT (``CompiledStatement.block_rows``): the rows shown are some of these.

    Outputs listed by :func:`unguaranteed` are left out. Reads no data. ``answers_of`` gives every
    block's variances and covariances under the plan (default :func:`combined_answers`;
    ``dpsql.engine.reuse.free`` adds what earlier releases contribute).
    """
    chosen = prepared.chosen
    answers = AnswerSet((answers_of or combined_answers)(chosen) if isinstance(chosen, (GroupsPlan, ResidualPlan))
                        else {})
    skipped = {(u.statement, u.alias) for u in unguaranteed(prepared)}
    result: list[dict[str, FloatArray]] = []
    for index, statement in enumerate(chosen.compiled.statements):
        mine = answers.of_group(statement.group)
        outputs = statement.statement.outputs
        if outputs is None:
            result.append({output.aggregate.alias: np.sqrt(mine[output.blocks[0]].variances[statement.block_rows])
                           for output in statement.aggregates if (index, output.aggregate.alias) not in skipped})
        else:  # exact for linear outputs: Var(Σ c_i a_i) = cᵀ Σ c, whatever the values (zeros here)
            state = StatementAnswers(statement, mine)
            state.add_windows(chosen.compiled, [w for item in outputs.items if isinstance(item, ir.DerivedItem)
                                                and (index, item.alias) not in skipped
                                                for w in windows_of(item.expression)], mine)
            result.append({item.alias: np.sqrt(state.variance(state.evaluate(item.expression)))
                           for item in outputs.items
                           if isinstance(item, ir.DerivedItem) and (index, item.alias) not in skipped})
    return result


def unguaranteed(prepared: Prepared) -> list[Unguaranteed]:
    """The outputs whose standard error depends on the data (module docstring), in batch order."""
    chosen = prepared.chosen
    truncated = ({t.column.name for t in chosen.thresholds} if isinstance(chosen, GroupsPlan) else set())
    found = []
    for index, compiled in enumerate(chosen.compiled.statements):
        statement = compiled.statement
        if statement.outputs is None:
            items = [(output.aggregate.alias, output.aggregate.span, _why(output.aggregate, truncated))
                     for output in compiled.aggregates]
        else:
            items = [(item.alias, item.span, _why_derived(item, statement, truncated))
                     for item in statement.outputs.items if isinstance(item, ir.DerivedItem)]
        found += [Unguaranteed(statement=index, alias=alias, span=span, why=why)
                  for alias, span, why in items if why is not None]
    return found


def _why_derived(item: ir.DerivedItem, statement: ir.Statement, truncated: set[str]) -> str | None:
    """Why a derived output's standard error depends on the data, or None when the plan fixes it."""
    for reason in (_why(statement.aggregates[i], truncated) for i in d.aggregate_refs(item.expression)):
        if reason is not None and (item.plain or "AVG" not in reason):
            return reason
    if not item.plain and not is_linear(item.expression, statement):
        return ("a derived output that is not linear in SUM and COUNT answers (a ratio, product or average: its "
                "delta-method error depends on the noisy values)")
    return None


def _why(aggregate: ir.Aggregate, truncated: set[str]) -> str | None:
    """Why an aggregate's standard error depends on the data, or None when the plan fixes it."""
    if aggregate.function == "avg":
        return "an AVG's standard error (delta method) depends on the noisy SUM and COUNT"
    if aggregate.function in SPREADS:
        return ("a variance's or standard deviation's standard error (delta method) depends on the noisy COUNT, "
                "SUM and SUM of squares")
    if aggregate.quantile is not None:
        return "an order statistic's error depends on the data"
    if aggregate.function == "sum" and aggregate.column is not None and aggregate.column.name in truncated:
        return ("a truncated SUM: its threshold θ, and so the noise of every measurement of the batch, is chosen "
                "from the data")
    return None


def block_answers(plan: GroupsPlan | ResidualPlan) -> dict[AnswerKey, Answers]:
    """Every block's answers' variances (and the covariances derived outputs read), exactly as the
    route computes them after measuring; the values are zeros (no data is read)."""
    if isinstance(plan, ResidualPlan):
        return {key: Answers(values=np.zeros(v.size), variances=v) for key, v in _residual_variances(plan).items()}
    return _group_answers(plan)


def combined_answers(plan: GroupsPlan | ResidualPlan, cache: KeptInformation | None = None) -> dict[AnswerKey, Answers]:
    """Every block's answers as ``execute`` reports them without earlier releases: :func:`block_answers`,
    with each statement answered by GLS over every measurement of the batch that will be kept and
    informs it (``dpsql.engine.reuse.reuse.keep_and_answer``; ResidualPlanner's one group has nothing to combine).
    ``cache``: a release store's information, which remembers the pools of plans predicted before."""
    alone = block_answers(plan)
    if isinstance(plan, ResidualPlan):
        return alone
    return planned_answers(plan.compiled, plan.measurements, (), alone, cache)


def _group_answers(plan: GroupsPlan) -> dict[AnswerKey, Answers]:
    """``measure.measure_groups``'s variances and covariances from each measurement's calibration."""
    result: dict[AnswerKey, Answers] = {}
    for index, group in enumerate(plan.compiled.groups):
        for m in (m for m in plan.measurements if m.group == index):
            positions = [p for p, block in enumerate(group.blocks) if block.data == m.vector]
            if m.share == 0:  # an identically zero workload: exact zeros
                result.update({AnswerKey(index, p): _zeros(group.blocks[p].workload.shape[0]) for p in positions})
                continue
            calibration = m.calibration()
            profile = linalg.pinv_gram(calibration.strategy)
            stacked = calibration.variance * linalg.quadratic_diag(group.workload(m.vector), profile)
            ends = np.cumsum([group.blocks[p].workload.shape[0] for p in positions])
            # a stand-in release: answer_covariance reads only the strategy and the noise variance, never y
            release = Measurement(strategy=calibration.strategy, y=np.zeros(0), noise=calibration.noise,
                                  noise_scale=calibration.scale, noise_variance=calibration.variance)
            for position, end in zip(positions, ends):
                rows = slice(end - group.blocks[position].workload.shape[0], end)
                unit = group.blocks[position].scale * m.quantum
                variances = stacked[rows] * unit**2
                form = MeasuredForm(workload=group.blocks[position].workload, profile=profile,
                                    variance=calibration.variance, scale=unit, source=release)
                result[AnswerKey(index, position)] = Answers(values=np.zeros(variances.size), variances=variances,
                                                             form=form)
            add_covariances(plan.compiled, index, positions, release, m.quantum, result)
    return result


def _zeros(rows: int) -> Answers:
    return Answers(values=np.zeros(rows), variances=np.zeros(rows), form=ExactForm())


def _residual_variances(plan: ResidualPlan) -> dict[AnswerKey, FloatArray]:
    """``residual_route.answer``'s variances, with the σ² the discrete Gaussian releases with."""
    sigma2 = dict(zip(plan.selection.closure, residual.effective_sigma2(plan.selection).tolist()))
    return {AnswerKey(0, b): (np.zeros(block.workload.shape[0]) if q is None else mq.variances(q, sigma2.__getitem__))
            for b, (q, block) in enumerate(zip(plan.queries, plan.compiled.groups[0].blocks))}
