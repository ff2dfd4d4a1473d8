"""Statements answered for free from earlier releases, and a batch answered partly from them.

Before planning, each statement of the batch is compiled on its own cells and checked against the
kept measurements (:mod:`dpsql.engine.reuse.reuse`): a statement whose every block lies in their span
*can* be answered from them. It is *free* only if that answer is good enough for what the batch
offers to pay: with a cost (ε or ρ), every one of its answers' kept variances is at most what the
batch's own plan at that cost, without reuse, would give it, each statement combined with the
plan's other measurements that inform it as its release would be (so a free answer is never worse
than the one paid for; the kept answers are then those over the plan's statement groups, the cells
the release would pool on, when these answer every statement the kept measurements answer); with
an accuracy target, every answer meets the target. Only the other statements are planned, charged
and measured (a UNION ALL's parts go together); those the kept measurements could have answered
are then *measured and combined* with them. After the release is kept, the free statements are
answered again over all kept measurements, new ones included, so their errors shrink too.
Answering free statements is post-processing of released values: it reads no data and charges
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql.answers.derived import merge_unions
from dpsql.answers.tables import AnswerKey, AnswerSet, statement_tables
from dpsql.budget.accounting import PrivacyBudget, PrivacyCost
from dpsql.engine import postprocess as postprocessing
from dpsql.engine.plan.group_route import GroupsPlan
from dpsql.engine.plan.metadata import ReleaseMetadata
from dpsql.engine.plan.prepare import prepare
from dpsql.engine.plan.residual_route import ResidualPlan
from dpsql.engine.plan.routes import Prepared
from dpsql.engine.reuse import accuracy_target
from dpsql.engine.reuse.predicted import block_answers, combined_answers, predicted_stddevs
from dpsql.engine.reuse.reuse import Reuse, Sources, not_kept_reason, planned_answers, reuse_entry
from dpsql.planning import mechanism
from dpsql.planning.planner import Progress
from dpsql.releases.information import KeptInformation
from dpsql.releases.kept import KeptMeasurement
from dpsql.schema import Schema
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, CompiledStatement, compile_batch

FloatArray = npt.NDArray[np.float64]

#: A kept answer whose variance exceeds the paid one by at most this share is as accurate (float rounding:
#: the same batch asked again at the same cost is answered by GLS over its own release, to the last bits).
NO_WORSE_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class Split:
    """A batch split into statements answered from earlier releases and statements to measure."""

    batch: ir.Batch
    compiled: CompiledBatch | None
    free: Mapping[int, dict[AnswerKey, mechanism.Answers]]
    releases: Mapping[int, Sources]  # per statement kept measurements answer (free or not), the releases
    measured: tuple[int, ...]
    targets: tuple[accuracy_target.StatementTarget, ...] | None = None  # per batch statement, with a request
    #: Statements kept measurements answer but not well enough, so measured (and combined): their kept answers.
    combined: Mapping[int, dict[AnswerKey, mechanism.Answers]] = field(default_factory=dict)
    #: Per statement kept measurements answer, its largest stddev under the batch's plan at its cost without reuse.
    paid: Mapping[int, float] = field(default_factory=dict)
    cost: PrivacyCost | None = None
    #: Per statement, how many kept measurements the pools' work bound left out.
    left_out: Mapping[int, int] = field(default_factory=dict)
    #: The whole batch's plan at ``cost`` without reuse when no statement is free: the plan of the
    #: measured statements, planned once (``paid`` read it).
    plan: Prepared | None = None

    def measured_targets(self) -> tuple[accuracy_target.StatementTarget, ...] | None:
        """The measured statements' targets (None: the search reads them from its own plan)."""
        return None if self.targets is None else tuple(self.targets[s] for s in self.measured)

    def free_ratios(self) -> dict[int, float]:
        """Per free statement, its worst stddev/target ratio (with a request; else 0)."""
        assert self.compiled is not None or not self.free
        if self.targets is None or self.compiled is None:
            return {s: 0.0 for s in self.free}
        return {s: accuracy_target.worst_ratio([_stddevs(self.compiled.statements[s], answers)], [self.targets[s]])
                for s, answers in self.free.items()}

    @property
    def all_free(self) -> bool:
        return not self.measured


def split_batch(batch: ir.Batch, schema: Schema, kept: Sequence[KeptMeasurement],
                request: accuracy_target.TargetRequest | None = None, *, cost: PrivacyCost | None = None,
                weights: Sequence[float] | None = None, cache: KeptInformation | None = None,
                progress: Progress | None = None) -> Split:
    """Which statements of ``batch`` (as :func:`dpsql.engine.plan.prepare.read_batch` read it) the kept
    measurements already answer well enough (no data read). With an accuracy ``request``, a
    statement is free only if its every answer already meets its target; it must then be a plain
    COUNT/SUM statement, whose standard errors do not depend on the data. With a ``cost``, only if
    none of its answers' variances exceeds what the batch's plan at that cost (with ``weights``)
    gives it without reuse (``progress``: that plan's progress). ``cache``: the store's kept information."""
    everything = tuple(range(len(batch.statements)))
    if not kept:
        return Split(batch=batch, compiled=None, free={}, releases={}, measured=everything, cost=cost)
    compiled = compile_batch(batch, schema)
    if not_kept_reason(compiled.table) is not None:
        return Split(batch=batch, compiled=None, free={}, releases={}, measured=everything, cost=cost)
    targets = None if request is None else accuracy_target.statement_targets(
        batch, request.max_stddev, request.max_relative_stddev, compiled.statements)
    reuse = Reuse(compiled=compiled, kept=kept, cache=cache if cache is not None else KeptInformation())
    answerable = {s: found for s in everything if (found := reuse.statement_answers(s)) is not None}
    paid: dict[int, list[FloatArray]] = {}
    plan: Prepared | None = None
    if targets is not None:
        free = {s: found for s, found in answerable.items() if _meets(compiled.statements[s], found, targets[s])}
    elif cost is not None and answerable:
        plan = prepare(batch, schema, cost, progress=progress, weights=weights)
        if isinstance(plan.chosen, GroupsPlan):  # answered over the plan's groups, as its release would be
            grouped = Reuse(compiled=plan.chosen.compiled, kept=kept, cache=reuse.cache)
            again = {s: found for s in answerable if (found := grouped.statement_answers(s)) is not None}
            if set(again) == set(answerable):
                compiled, reuse, answerable = plan.chosen.compiled, grouped, again
        paid = _paid_variances(plan, answerable, cache)
        free = {s: found for s, found in answerable.items()
                if _no_worse(_variances(compiled.statements[s], found), paid[s])}
    else:
        free = dict(answerable)
    for part in _union_parts(batch):  # a UNION ALL is answered whole, from the releases or measured
        if not all(s in free for s in part):
            for s in part:
                free.pop(s, None)
    left = {s: count for s in answerable if (count := len(reuse.left_out_of(s)))}
    measured = tuple(s for s in everything if s not in free)
    return Split(batch=batch, compiled=compiled, free=free, releases={s: reuse.sources_of(s) for s in answerable},
                 measured=measured, targets=targets, plan=plan if measured == everything else None,
                 combined={s: found for s, found in answerable.items() if s not in free},
                 paid={s: float(np.sqrt(max((float(v.max()) for v in variances if v.size), default=0.0)))
                       for s, variances in paid.items()},
                 cost=cost, left_out=left)


def _variances(statement: CompiledStatement, answers: Mapping[AnswerKey, mechanism.Answers]) -> list[FloatArray]:
    """The variances of every block a statement reads (per output, its SUM then its COUNT), all rows."""
    return [answers[AnswerKey(statement.group, p)].variances for output in statement.aggregates for p in output.blocks]


def _paid_variances(prepared: Prepared, statements: Iterable[int],
                    cache: KeptInformation | None = None) -> dict[int, list[FloatArray]]:
    """Per listed statement, its blocks' variances under the whole batch's plan at its cost without reuse
    (each statement combined with the batch's other measurements that inform it, as ``execute`` would)."""
    plan = prepared.chosen
    assert isinstance(plan, GroupsPlan | ResidualPlan)
    answers = combined_answers(plan, cache)
    return {s: _variances(plan.compiled.statements[s], answers) for s in statements}


def _no_worse(kept: Sequence[FloatArray], paid: Sequence[FloatArray]) -> bool:
    """Whether every kept variance is at most the paid one (to float rounding)."""
    return len(kept) == len(paid) and all(
        k.shape == p.shape and bool(np.all(k <= p * (1 + NO_WORSE_TOLERANCE) + np.finfo(float).tiny))
        for k, p in zip(kept, paid))


def _meets(statement: CompiledStatement, answers: Mapping[AnswerKey, mechanism.Answers],
           target: accuracy_target.StatementTarget) -> bool:
    """Whether kept measurements answer a statement within ``target`` (None: any accuracy)."""
    if target is None:
        return True
    plain = statement.statement.outputs is None and all(
        output.aggregate.function in ("count", "sum") and output.aggregate.quantile is None
        for output in statement.aggregates)
    return plain and accuracy_target.worst_ratio([_stddevs(statement, answers)], [target]) <= 1


def _stddevs(statement: CompiledStatement, answers: Mapping[AnswerKey, mechanism.Answers]) -> dict[str, FloatArray]:
    """Each COUNT/SUM output's standard errors, in output row order (as ``engine.reuse.predicted`` gives them)."""
    return {output.aggregate.alias: answers[AnswerKey(statement.group, output.blocks[0])].stddevs[statement.block_rows]
            for output in statement.aggregates if len(output.blocks) == 1}


def stddevs_with(kept: Sequence[KeptMeasurement], cache: KeptInformation | None = None) -> accuracy_target.Stddevs:
    """The accuracy search's predicted stddevs once a plan's measurements join ``kept`` (GLS)."""
    def answers(plan: GroupsPlan | ResidualPlan) -> Mapping[AnswerKey, mechanism.Answers]:
        alone = block_answers(plan)
        if isinstance(plan, GroupsPlan):
            return planned_answers(plan.compiled, plan.measurements, kept, alone, cache)
        return alone

    return lambda prepared: predicted_stddevs(prepared, answers)


def combined_stddevs(split: Split, prepared: Prepared, kept: Sequence[KeptMeasurement],
                     cache: KeptInformation | None = None) -> dict[int, float]:
    """Per statement measured and combined (by batch statement), its largest predicted stddev once
    the plan's measurements join the kept ones (no data read)."""
    plan = prepared.chosen
    if not isinstance(plan, GroupsPlan):
        return {}
    answers = planned_answers(plan.compiled, plan.measurements, kept, block_answers(plan), cache)
    found = {}
    for position, s in enumerate(split.measured):
        if s in split.combined:
            variances = _variances(plan.compiled.statements[position], answers)
            found[s] = float(np.sqrt(max((float(v.max()) for v in variances if v.size), default=0.0)))
    return found


def combination_lines(prepared: Prepared, kept: Sequence[KeptMeasurement],
                      cache: KeptInformation | None = None) -> list[str]:
    """EXPLAIN's account of the statements answered by GLS over the batch's measurements of other
    statement groups (and ``kept`` ones): per such statement of the plan, its largest stddev as
    ``execute`` reports it, against its own group's measurements alone (the plan's figures)."""
    plan = prepared.chosen
    if not isinstance(plan, GroupsPlan):
        return []
    alone = block_answers(plan)
    answers = planned_answers(plan.compiled, plan.measurements, kept, alone, cache)
    lines = []
    for s, statement in enumerate(plan.compiled.statements):
        before, after = (_largest(_variances(statement, found)) for found in (alone, answers))
        if after < before * (1 - NO_WORSE_TOLERANCE):
            lines.append(f"  statement {s + 1} of the plan below: stddev {np.sqrt(after):.6g} (its group's "
                         f"measurements alone: {np.sqrt(before):.6g})")
    if not lines:
        return []
    return ["Combined: these statements are answered by generalized least squares over every kept-eligible "
            "measurement of the batch" + (" and the kept releases" if kept else "") + " that informs them; "
            "largest stddev of each, as execute reports it:", *lines]


def _largest(variances: Sequence[FloatArray]) -> float:
    return max((float(v.max()) for v in variances if v.size), default=0.0)


def _union_parts(batch: ir.Batch) -> list[list[int]]:
    parts: list[list[int]] = []
    for index, statement in enumerate(batch.statements):
        if statement.union is not None:
            if statement.union.part == 0:
                parts.append([])
            parts[-1].append(index)
    return parts


def free_tables(split: Split, kept: Sequence[KeptMeasurement], budget: PrivacyBudget,
                postprocess: Sequence[str] = (), cache: KeptInformation | None = None) -> dict[int, pa.Table]:
    """The free statements' tables, answered over every kept measurement (those measured since the
    split included; a statement no longer determined by the pool keeps its split-time answers)."""
    if not split.free:
        return {}
    assert split.compiled is not None
    reuse = Reuse(compiled=split.compiled, kept=kept, cache=cache if cache is not None else KeptInformation())
    answers: dict[AnswerKey, mechanism.Answers] = {}
    used: dict[int, Sources] = {}
    for statement, earlier in split.free.items():
        found = reuse.statement_answers(statement)
        answers.update(found if found is not None else earlier)
        used[statement] = reuse.sources_of(statement) if found is not None else split.releases[statement]
    order = sorted(split.free)
    compiled = replace(split.compiled, statements=tuple(split.compiled.statements[s] for s in order))
    answer_set = AnswerSet(answers)
    steps: list[str] = []
    if postprocess:
        answer_set, steps = postprocessing.apply(compiled, answer_set, postprocess)
    releases = Sources()
    for s in order:
        releases |= used[s]
    metadata = ReleaseMetadata(mechanism="answered from earlier releases (generalized least squares over their "
                                         "kept measurements; no new measurement)",
                               strategy={}, expected_rmse={}, postprocessing=tuple(steps))
    metadata = metadata.with_budget(f"nothing: answered by {releases.describe()}",
                                    f"{budget.remaining:.6g} of {budget.total.describe()}")
    entries = [reuse_entry(used[s]) for s in order]
    tables = statement_tables(compiled, answer_set, metadata.to_json(), entries)
    return dict(zip(order, tables))


def assemble(split: Split, measured: Sequence[pa.Table], free: Mapping[int, pa.Table]) -> list[pa.Table]:
    """Every statement's table in batch order (the measured ones, then merged per UNION ALL)."""
    tables = dict(zip(split.measured, measured))
    tables.update(free)
    return merge_unions(split.batch.statements, [tables[i] for i in range(len(split.batch.statements))])


def explain_lines(split: Split, combined: Mapping[int, float] | None = None) -> list[str]:
    """EXPLAIN's account of reuse, per statement: free (which releases, its largest stddev, and what
    the cost would buy without reuse), measured and combined (the same two, and the combination's
    largest stddev from ``combined``, by batch statement), or measured (its number in the plan below)."""
    if not split.releases:
        return []
    paying = f"at {split.cost.describe()} " if split.cost is not None else ""
    lines = ["Reuse: a statement earlier releases determine is free when their answer is at least as accurate as "
             + ("this batch's cost would buy without reuse;" if split.cost is not None else "asked;")
             + " otherwise it is measured and combined with them."]
    for s in range(len(split.batch.statements)):
        kept = split.free.get(s, split.combined.get(s))
        if kept is None:
            lines.append(f"  Statement {s + 1}: measured (no kept measurement determines it; statement "
                         f"{split.measured.index(s) + 1} of the plan below)")
            continue
        stddev = max((float(a.stddevs.max()) for a in kept.values() if a.values.size), default=0.0)
        paid = f"; measured {paying}without reuse: {split.paid[s]:.4g}" if s in split.paid else ""
        left = (f"; {split.left_out[s]} kept measurement(s) left out of its pool by the work bound "
                "(dpsql.engine.reuse.reuse.MAX_POOL_WORK)" if s in split.left_out else "")
        source = split.releases[s].describe("release")
        if s in split.free:
            lines.append(f"  Statement {s + 1}: free (answered by {source}, stddev {stddev:.4g}{paid}{left})")
        else:
            both = (f"; combined: {combined[s]:.4g}" if combined is not None and s in combined else "")
            lines.append(f"  Statement {s + 1}: measured and combined with {source} (kept alone: stddev {stddev:.4g}"
                         f"{paid}{both}{left}; statement {split.measured.index(s) + 1} of the plan below)")
    if split.all_free:
        lines.append("Cost: nothing — no new measurement, no data read.")
    return lines
