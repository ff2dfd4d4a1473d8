"""Answering a prepared batch: check and charge the cost, let the chosen route read and measure,
post-process on request, package one Arrow table per statement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pyarrow as pa

from dpsql.answers.derived import merge_unions
from dpsql.answers.tables import statement_tables
from dpsql.backends import Backend
from dpsql.budget.accounting import PrivacyBudget
from dpsql.engine import postprocess as postprocessing
from dpsql.engine.plan.metadata import statement_metadata
from dpsql.engine.plan.routes import Prepared
from dpsql.engine.reuse.release_store import ReleaseStore
from dpsql.engine.reuse.reuse import Sources, keep_and_answer, reuse_entry
from dpsql.engine.vocabulary import Report
from dpsql.errors import ProgrammingError
from dpsql.matrix import blas
from dpsql.noise import RandomSource

#: Said as ``budget_spent`` when nothing is measured.
NOTHING_SPENT = "nothing: every statement's WHERE clause is never TRUE (exact zeros, no data read)"


@blas.single_threaded()
def run(prepared: Prepared, *, backend: Backend, budget: PrivacyBudget, rng: RandomSource | None = None,
        progress: Report | None = None, postprocess: Sequence[str] = (), store: ReleaseStore | None = None,
        combine: bool = True, merge: bool = True) -> list[pa.Table]:
    """Charge the batch, then let the chosen route scan, measure and answer; one table per statement.

    The cost is checked against the budget and charged (durably, for a ledger) before the first
    read of the data; a batch whose statements are all identically zero is answered with exact
    zeros and charges nothing. ``progress`` receives a short message before each step (scan,
    measurement, packaging). ``postprocess`` lists opt-in steps of
    :mod:`dpsql.engine.postprocess` ("nonnegative", "isotonic"). With a ``store``, the release's
    measurements are kept there (after the charge) and, with ``combine``, every statement is
    answered by generalized least squares over them and the measurements kept before
    (:mod:`dpsql.engine.reuse.reuse`); without, from this release alone.
    ``merge=False`` returns one table per batch statement, UNION ALL parts apart.
    """
    report = progress or (lambda message: None)
    if rng is not None and budget.durable:  # a known seed replays the noise (see dbapi.connect)
        raise ProgrammingError("rng= (a chosen random source) is for tests on in-memory data with an in-memory "
                               "Budget; a release charged to a ledger draws its noise from the operating system. "
                               "Nothing was run or charged.")
    chosen = prepared.chosen
    unknown = sorted(set(postprocess) - set(postprocessing.STEPS))
    if unknown:
        raise ProgrammingError(f"unknown post-processing step(s) {', '.join(unknown)}; "
                               f"use {' or '.join(postprocessing.STEPS)}. "
                               "Nothing was run or charged.")
    budget.check(prepared.cost)
    backend.check_table(chosen.compiled.table)
    if not chosen.measures_nothing:
        budget.charge(prepared.cost)
    release = chosen.answer(backend=backend, rng=rng, report=report)
    answers, metadata = release.answers, release.metadata
    reused: dict[int, Sources] = {}
    if store is not None and release.measured:
        answers, reused = keep_and_answer(release.compiled, release.measured, answers, store, budget, combine)
    if postprocess:
        answers, steps = postprocessing.apply(release.compiled, answers, postprocess)
        metadata = replace(metadata, postprocessing=tuple(steps or [f"{', '.join(postprocess)}: nothing to change"]))
    report("packaging the results")
    spent = NOTHING_SPENT if chosen.measures_nothing else prepared.cost.describe()
    metadata = metadata.with_budget(spent, f"{budget.remaining:.6g} of {budget.total.describe()}")
    statements = statement_metadata(release.errors, chosen.weights, release.split_cap)
    entries = [{**s.to_json(), **reuse_entry(reused.get(i))} for i, s in enumerate(statements)]
    tables = statement_tables(release.compiled, answers, metadata.to_json(), entries)
    if not merge:
        return tables
    return merge_unions([s.statement for s in release.compiled.statements], tables)  # one table per UNION ALL
