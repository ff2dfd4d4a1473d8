"""Statements answered for free from earlier releases, and a batch answered partly from them.

Before planning, each statement of the batch is compiled on its own cells and checked against the
kept measurements (:mod:`dpsql.engine.reuse`): a statement whose every block lies in their span
is *free*. Only the other statements are planned, charged and measured (a UNION ALL's parts go
together). After that release is kept, the free statements are answered again over all kept
measurements, new ones included, so their errors shrink too. Answering free statements is
post-processing of released values: it reads no data and charges nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql import mechanism
from dpsql.accounting import PrivacyBudget
from dpsql.derived_answers import merge_unions
from dpsql.engine import accuracy_target
from dpsql.engine import postprocess as postprocessing
from dpsql.engine.group_route import GroupsPlan
from dpsql.engine.metadata import ReleaseMetadata
from dpsql.engine.predicted import block_answers, predicted_stddevs
from dpsql.engine.residual_route import ResidualPlan
from dpsql.engine.reuse import Reuse, not_kept_reason, planned_answers, reuse_entry
from dpsql.releases.kept import KeptMeasurement
from dpsql.results import AnswerKey, AnswerSet, statement_tables
from dpsql.schema import Schema
from dpsql.sql import ir, public_tables
from dpsql.sql.compile import CompiledBatch, CompiledStatement, compile_batch
from dpsql.sql.parse import parse_batch

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class Split:
    """A batch split into statements answered from earlier releases and statements to measure."""

    batch: ir.Batch
    compiled: CompiledBatch | None
    free: Mapping[int, dict[AnswerKey, mechanism.Answers]]
    releases: Mapping[int, tuple[int, ...]]  # per free statement, the releases that answer it
    measured: tuple[int, ...]
    targets: tuple[accuracy_target.StatementTarget, ...] | None = None  # per batch statement, with a request

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


def split_batch(text: str, parameters: Sequence[object] | None, schema: Schema,
                kept: Sequence[KeptMeasurement], request: accuracy_target.Request | None = None) -> Split:
    """Which statements the kept measurements already answer (no data read). With an accuracy
    ``request``, a statement is free only if its every answer already meets its target; it must
    then be a plain COUNT/SUM statement, whose standard errors do not depend on the data."""
    batch = public_tables.resolve(parse_batch(text, parameters), schema)
    everything = tuple(range(len(batch.statements)))
    if not kept:
        return Split(batch=batch, compiled=None, free={}, releases={}, measured=everything)
    compiled = compile_batch(batch, schema)
    if not_kept_reason(compiled.table) is not None:
        return Split(batch=batch, compiled=None, free={}, releases={}, measured=everything)
    targets = None if request is None else accuracy_target.statement_targets(
        batch, request.max_stddev, request.max_relative_stddev, compiled.statements)
    reuse = Reuse(compiled=compiled, kept=kept)
    free = {s: found for s in everything if (found := reuse.statement_answers(s)) is not None
            and (targets is None or _meets(compiled.statements[s], found, targets[s]))}
    for part in _union_parts(batch):  # a UNION ALL is answered whole, from the releases or measured
        if not all(s in free for s in part):
            for s in part:
                free.pop(s, None)
    return Split(batch=batch, compiled=compiled, free=free, releases={s: reuse.releases_of(s) for s in free},
                 measured=tuple(s for s in everything if s not in free), targets=targets)


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
    """Each COUNT/SUM output's standard errors, in output row order (as ``engine.predicted`` gives them)."""
    return {output.aggregate.alias: answers[AnswerKey(statement.group, output.blocks[0])].stddevs[statement.block_rows]
            for output in statement.aggregates if len(output.blocks) == 1}


def stddevs_with(kept: Sequence[KeptMeasurement]) -> accuracy_target.Stddevs:
    """The accuracy search's predicted stddevs once a plan's measurements join ``kept`` (GLS)."""
    def answers(plan: GroupsPlan | ResidualPlan) -> Mapping[AnswerKey, mechanism.Answers]:
        alone = block_answers(plan)
        if isinstance(plan, GroupsPlan) and kept:
            return planned_answers(plan.compiled, plan.measurements, kept, alone)
        return alone

    return lambda prepared: predicted_stddevs(prepared, answers)


def _union_parts(batch: ir.Batch) -> list[list[int]]:
    parts: list[list[int]] = []
    for index, statement in enumerate(batch.statements):
        if statement.union is not None:
            if statement.union.part == 0:
                parts.append([])
            parts[-1].append(index)
    return parts


def free_tables(split: Split, kept: Sequence[KeptMeasurement], budget: PrivacyBudget,
                postprocess: Sequence[str] = ()) -> dict[int, pa.Table]:
    """The free statements' tables, answered over every kept measurement (those measured since the
    split included; a statement no longer determined by the pool keeps its split-time answers)."""
    if not split.free:
        return {}
    assert split.compiled is not None
    reuse = Reuse(compiled=split.compiled, kept=kept)
    answers: dict[AnswerKey, mechanism.Answers] = {}
    used: dict[int, tuple[int, ...]] = {}
    for statement, earlier in split.free.items():
        found = reuse.statement_answers(statement)
        answers.update(found if found is not None else earlier)
        used[statement] = reuse.releases_of(statement) if found is not None else split.releases[statement]
    order = sorted(split.free)
    compiled = replace(split.compiled, statements=tuple(split.compiled.statements[s] for s in order))
    answer_set = AnswerSet(answers)
    steps: list[str] = []
    if postprocess:
        answer_set, steps = postprocessing.apply(compiled, answer_set, postprocess)
    releases = sorted({r for s in order for r in used[s]})
    metadata = ReleaseMetadata(mechanism="answered from earlier releases (generalized least squares over their "
                                         "kept measurements; no new measurement)",
                               strategy={}, expected_rmse={}, postprocessing=tuple(steps))
    metadata = metadata.with_budget(f"nothing: answered by release(s) {', '.join(f'#{r}' for r in releases)}",
                                    f"{budget.remaining:.6g} of {budget.total.describe()}")
    entries = [reuse_entry(used[s]) for s in order]
    tables = statement_tables(compiled, answer_set, metadata.to_json(), entries)
    return dict(zip(order, tables))


def assemble(split: Split, measured: Sequence[pa.Table], free: Mapping[int, pa.Table]) -> list[pa.Table]:
    """Every statement's table in batch order (the measured ones, then merged per UNION ALL)."""
    tables = dict(zip(split.measured, measured))
    tables.update(free)
    return merge_unions(split.batch.statements, [tables[i] for i in range(len(split.batch.statements))])


def explain_lines(split: Split) -> list[str]:
    """EXPLAIN's account of reuse: each statement free (which releases, its largest stddev) or
    measured (its number in the plan that follows)."""
    if not split.free:
        return []
    lines = ["Reuse: statements that earlier releases already determine are answered from them for free."]
    for s in range(len(split.batch.statements)):
        if s in split.free:
            stddev = max(float(a.stddevs.max()) for a in split.free[s].values() if a.values.size)
            releases = ", ".join(f"#{r}" for r in split.releases[s])
            lines.append(f"  Statement {s + 1}: free (answered by release {releases}, stddev {stddev:.4g})")
        else:
            lines.append(f"  Statement {s + 1}: measured (statement {split.measured.index(s) + 1} of the plan below)")
    if split.all_free:
        lines.append("Cost: nothing — no new measurement, no data read.")
    return lines
