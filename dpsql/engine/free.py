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

import pyarrow as pa

from dpsql import mechanism
from dpsql.accounting import PrivacyBudget
from dpsql.derived_answers import merge_unions
from dpsql.engine import postprocess as postprocessing
from dpsql.engine.metadata import ReleaseMetadata
from dpsql.engine.reuse import Reuse, not_kept_reason, reuse_entry
from dpsql.releases.kept import KeptMeasurement
from dpsql.results import AnswerKey, AnswerSet, statement_tables
from dpsql.schema import Schema
from dpsql.sql import ir, public_tables
from dpsql.sql.compile import CompiledBatch, compile_batch
from dpsql.sql.parse import parse_batch


@dataclass(frozen=True, slots=True, kw_only=True)
class Split:
    """A batch split into statements answered from earlier releases and statements to measure."""

    batch: ir.Batch
    compiled: CompiledBatch | None
    free: Mapping[int, dict[AnswerKey, mechanism.Answers]]
    releases: Mapping[int, tuple[int, ...]]  # per free statement, the releases that answer it
    measured: tuple[int, ...]

    @property
    def all_free(self) -> bool:
        return not self.measured


def split_batch(text: str, parameters: Sequence[object] | None, schema: Schema,
                kept: Sequence[KeptMeasurement], targets: Sequence[float | None] | None = None) -> Split:
    """Which statements the kept measurements already answer (no data read). With ``targets``
    (one largest standard error, or None, per batch statement), a statement is free only if its
    every answer already meets its target; it must then be a plain COUNT/SUM statement, whose
    standard errors do not depend on the data."""
    batch = public_tables.resolve(parse_batch(text, parameters), schema)
    everything = tuple(range(len(batch.statements)))
    if not kept:
        return Split(batch=batch, compiled=None, free={}, releases={}, measured=everything)
    compiled = compile_batch(batch, schema)
    if not_kept_reason(compiled.table) is not None:
        return Split(batch=batch, compiled=None, free={}, releases={}, measured=everything)
    reuse = Reuse(compiled=compiled, kept=kept)
    free = {s: found for s in everything if (found := reuse.statement_answers(s)) is not None
            and (targets is None or _meets(compiled.statements[s].statement, found, targets[s]))}
    for part in _union_parts(batch):  # a UNION ALL is answered whole, from the releases or measured
        if not all(s in free for s in part):
            for s in part:
                free.pop(s, None)
    return Split(batch=batch, compiled=compiled, free=free, releases={s: reuse.releases_of(s) for s in free},
                 measured=tuple(s for s in everything if s not in free))


def _meets(statement: ir.Statement, answers: Mapping[AnswerKey, mechanism.Answers], target: float | None) -> bool:
    """Whether kept measurements answer a statement within ``target`` (None: any accuracy)."""
    if target is None:
        return True
    linear = statement.outputs is None and all(
        item.function in ("count", "sum") and item.quantile is None
        for item in statement.select if isinstance(item, ir.Aggregate))
    return linear and all(float(a.stddevs.max()) <= target for a in answers.values() if a.values.size)


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
