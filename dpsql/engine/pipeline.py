"""One request pipeline: a batch answered, or explained, the same way from every entry point.

``Cursor.execute``/``explain`` (:mod:`dpsql.dbapi`), ``dpsql run``/``explain`` (:mod:`dpsql.cli`) and
``dpsql serve``'s session (:mod:`dpsql.server.session`) each build a
:class:`~dpsql.engine.request.Request` and call :func:`answer` or :func:`explain` with a
:class:`Context`: what the pipeline needs from its caller (a ``dpsql.Connection`` is one). A rule
added here holds at every entry point. :func:`answer`, in order:

1. :func:`~dpsql.engine.request.resolve`: the cost or the accuracy target, then the kept releases
   (with reuse), then the batch parsed once and split into statements kept releases answer for free
   and statements to measure (:mod:`dpsql.engine.reuse.free`);
2. a batch whose every statement is free: its ``privacy_unit_column`` option is checked, nothing
   is planned or charged;
3. else the measured statements are planned (:func:`dpsql.engine.plan.prepare.prepare`): with a cost,
   the budget is checked first, so a spent budget or an unreadable ledger is reported before the
   planning work; with a target, the least cost meeting it within what is left is found
   (:mod:`dpsql.engine.reuse.accuracy_target`);
4. the option is checked against the planned table;
5. :func:`dpsql.engine.run.run` charges the batch (recorded in a ledger), then reads, measures and
   keeps the release;
6. the free statements are answered over every kept measurement, a target's outcome is added to the
   metadata, and the tables come back in statement order (a UNION ALL's parts merged).

:func:`explain` follows steps 1 to 4 and describes the plan instead; it spends nothing, and a ledger
it cannot read still lets it show the plan, followed by why every query fails until it is fixed.
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from dpsql.backends import Backend
from dpsql.budget.accounting import PrivacyBudget
from dpsql.budget.records import BatchRecord
from dpsql.engine.explain import explain as explain_plan
from dpsql.engine.plan.prepare import prepare
from dpsql.engine.plan.residual_route import ResidualPlan
from dpsql.engine.plan.routes import Prepared
from dpsql.engine.request import Request, Resolved, resolve
from dpsql.engine.reuse import accuracy_target
from dpsql.engine.reuse.free import (
    assemble,
    combination_lines,
    combined_stddevs,
    explain_lines,
    free_tables,
    stddevs_with,
)
from dpsql.engine.reuse.release_store import ReleaseStore
from dpsql.engine.run import run
from dpsql.errors import BudgetNotSetError, LedgerError
from dpsql.noise import RandomSource
from dpsql.releases.kept import KeptMeasurement
from dpsql.schema import Schema
from dpsql.sql.compile import batch_table
from dpsql.sql.dp_options import check_privacy_unit


class Context(Protocol):
    """What the pipeline needs from its caller: the schema, the data, the budget and the kept releases."""

    @property
    def schema(self) -> Schema: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def rng(self) -> RandomSource | None:
        """A seeded source (tests on in-memory data), or None: the operating system's randomness."""
        ...

    @property
    def releases(self) -> ReleaseStore: ...

    @property
    def budget(self) -> PrivacyBudget:
        """The budget now (LedgerError when its ledger cannot be read)."""
        ...

    @property
    def backend_name(self) -> str:
        """Which backend reads the data, for EXPLAIN."""
        ...

    def budget_for(self, batch: BatchRecord) -> PrivacyBudget:
        """What ``batch`` draws from: an in-memory budget, or a ledger view whose charge records it."""
        ...


def answer(request: Request, context: Context) -> list[pa.Table]:
    """Every statement's table, in statement order (see the module docstring for the steps): the batch
    is charged once, durably, before any data is read; statements kept releases answer are free."""
    store = context.releases
    resolved = resolve(request, context.schema, store.kept, store.information)
    split = resolved.split
    found: accuracy_target.Target | None = None
    if split.all_free:
        check_privacy_unit(resolved.options, batch_table(resolved.batch, context.schema))
        budget = context.budget
        measured: list[pa.Table] = []
        kept = resolved.kept  # nothing was measured since the split read them
    else:
        if resolved.target is not None:
            found = _least_cost(resolved, context, context.budget)
            prepared = found.prepared
        else:
            assert resolved.cost is not None
            context.budget.check(resolved.cost)  # an unreadable ledger or a spent budget fails before planning
            prepared = _prepared(resolved, context)
        check_privacy_unit(resolved.options, prepared.chosen.compiled.table)
        budget = context.budget_for(BatchRecord.of(request.operation, request.parameters, prepared.cost,
                                                   _mechanism(prepared)))
        measured = run(prepared, backend=context.backend, budget=budget, rng=context.rng, progress=request.progress,
                       postprocess=request.postprocess, store=store, combine=request.reuse, merge=False)
        kept = store.kept() if split.free else []  # this batch's release included
    free = free_tables(split, kept, budget, request.postprocess, store.information)
    if resolved.target is not None:
        measured = accuracy_target.annotate(measured, found, resolved.target, accuracy_target.statement_ratios(found)
                                            if found is not None else [])
        ratios = split.free_ratios()
        free = {s: accuracy_target.annotate([t], None, resolved.target, [ratios[s]])[0] for s, t in free.items()}
    return assemble(split, measured, free)


def explain(request: Request, context: Context) -> str:
    """The plan (each route's candidates and expected errors, each statement against answering it
    alone, the cost), which statements kept releases answer, the least cost meeting a target, the
    backend and the budget left; nothing is read or spent."""
    store = context.releases
    resolved = resolve(request, context.schema, lambda: _kept_for_explain(store), store.information)
    split = resolved.split
    reused = "\n".join(explain_lines(split)) + "\n" if split.releases else ""
    if split.all_free:
        check_privacy_unit(resolved.options, batch_table(resolved.batch, context.schema))
        return reused + context.backend_name
    targeted: list[str] = []
    if resolved.target is not None:
        found = _least_cost(resolved, context, None)
        prepared, targeted = found.prepared, accuracy_target.explain_lines(found)
    else:
        prepared = _prepared(resolved, context)
    if split.combined:
        combined = combined_stddevs(split, prepared, resolved.kept, store.information)
        reused = "\n".join(explain_lines(split, combined)) + "\n"
    check_privacy_unit(resolved.options, prepared.chosen.compiled.table)
    combination = combination_lines(prepared, resolved.kept, store.information)
    reused += "".join(f"{line}\n" for line in combination)
    backend = "\n".join([*targeted, context.backend_name])
    try:
        budget = context.budget
    except LedgerError as err:
        return (f"{reused}{explain_plan(prepared)}\n{backend}\n"
                f"Budget: unknown, so every query fails until this is fixed: {err}")
    return f"{reused}{explain_plan(prepared, budget)}\n{backend}"


def _prepared(resolved: Resolved, context: Context) -> Prepared:
    """The plan of the measured statements at the batch's cost (no data read): when none is free,
    the plan the split made to compare kept answers with (the same statements, cost and weights)."""
    assert resolved.cost is not None
    if resolved.split.plan is not None:
        return resolved.split.plan
    request = resolved.request
    return prepare(resolved.batch, context.schema, resolved.cost, progress=request.progress, weights=request.weights,
                   statements=resolved.split.measured)


def _least_cost(resolved: Resolved, context: Context, budget: PrivacyBudget | None) -> accuracy_target.Target:
    """The least cost meeting the target for the statements left to measure, their answers combined
    with the kept measurements; with ``budget``, refused above what is left of it."""
    assert resolved.target is not None
    split, request = resolved.split, resolved.request
    kept = resolved.kept if split.compiled is not None else []
    return accuracy_target.find(resolved.target, resolved.batch, context.schema, weights=request.weights,
                                budget=budget, progress=request.progress,
                                stddevs=stddevs_with(kept, context.releases.information),
                                statements=split.measured, targets=split.measured_targets())


def _kept_for_explain(store: ReleaseStore) -> list[KeptMeasurement]:
    """The kept releases, or none when the ledger cannot be read (EXPLAIN then says why)."""
    try:
        return store.kept()
    except (LedgerError, BudgetNotSetError):
        return []


def _mechanism(prepared: Prepared) -> str:
    """The release mechanism as the ledger records it, e.g. 'matrix mechanism, discrete Laplace'."""
    route = "ResidualPlanner" if isinstance(prepared.chosen, ResidualPlan) else "matrix mechanism"
    return f"{route}, {'discrete Laplace' if prepared.cost.family == 'epsilon' else 'discrete Gaussian'}"
