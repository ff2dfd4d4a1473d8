"""Local mode for SQL batches: design a strategy for a batch, turn records into reports, answer the batch.

The batch's COUNT(*) statements (GROUP BY and WHERE on declared columns) are compiled together
into ONE statement group (``dpsql.sql.compile``), whose cells are the strategy's cells and whose
stacked blocks are the workload W. Answers come back in the central path's per-statement Arrow
shape (``dpsql.answers.tables.statement_tables``): group columns, each count, and ``<alias>_stddev``.

Privacy:
    Each person sends one ε-LDP report of their row's cell (``dpsql.local.protocol``); the
    guarantee is per report. So local mode refuses tables whose schema declares a privacy unit
    column (a person with several rows would send several reports) or ``out_of_domain =
    "exclude"`` (a person whose row is excluded would send nothing, and silence is not private).
    SUM, AVG and COUNT(column) are not answered in local mode.
"""

from __future__ import annotations

import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql.answers.derived import merge_unions
from dpsql.answers.tables import AnswerKey, AnswerSet, statement_tables
from dpsql.errors import DataError, DpsqlWarning, ProgrammingError, SchemaError, UnsupportedQueryError
from dpsql.local.answers import counts_of, plug_in_counts, reports_table
from dpsql.local.layout import AxisLayout, Layout
from dpsql.local.protocol import DEFAULT_MAX_EPSILON, StrategyFile, check_max_epsilon, publish, randomize_cells
from dpsql.local.selection import baselines, optimize, score
from dpsql.local.simulate import simulate
from dpsql.local.strategy import check_epsilon
from dpsql.local.variance import Factorization, cell_covariance, check_support, estimate_cells, worst_case_variance
from dpsql.matrix.linalg import bilinear_diag, quadratic_diag
from dpsql.matrix.workloads import Explicit, Workload
from dpsql.noise import RandomSource
from dpsql.planning.mechanism import Answers
from dpsql.planning.noise_forms import MeasuredForm
from dpsql.schema import Schema, Table
from dpsql.sql import ir, public_joins
from dpsql.sql.compile import CompiledBatch, batch_cell_totals, batch_table, compile_batch
from dpsql.sql.derived import covariance_pairs
from dpsql.sql.parse import parse_batch
from dpsql.sql.vectors import COUNTS

SchemaSource = str | Path | Mapping[str, Any] | Schema


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalBatch:
    """A batch compiled for local mode: one group of COUNT(*) blocks over the layout's cells."""

    compiled: CompiledBatch
    workload: Workload
    layout: Layout


def compile_local(text: str, schema: Schema) -> LocalBatch:
    """Parse and compile a batch into one group over one cell layout.

    Raises:
        UnsupportedQueryError: a statement uses SUM, AVG or COUNT(column), or the table declares
            a privacy unit column or ``out_of_domain = "exclude"``.
        SqlSyntaxError, SchemaError, InvalidQueryError: as for the central path.
    """
    batch = public_joins.resolve(parse_batch(text), schema)  # public joins → lookups on the key
    for statement in batch.statements:
        for aggregate in statement.aggregates:
            if aggregate.function != "count" or aggregate.column is not None:
                raise UnsupportedQueryError(
                    f"local mode answers COUNT(*) only; {_describe(aggregate)} ({aggregate.span.describe()}) is not "
                    "supported. Answer SUM, AVG and COUNT(column) with the central path (dpsql run).")
    _check_table(batch_table(batch, schema))
    compiled = compile_batch(batch, schema, partition=[list(range(len(batch.statements)))])
    group = compiled.groups[0]
    layout = Layout(table=compiled.table.name,
                    axes=tuple(AxisLayout.of(axis.column, axis.cell_of_base) for axis in group.axes))
    return LocalBatch(compiled=compiled, workload=group.workload(COUNTS), layout=layout)


#: ε per report above which ``design`` warns (as the central mechanisms do above 5); clients refuse
#: such files unless their user raises the limit (``protocol.DEFAULT_MAX_EPSILON``).
HIGH_EPSILON = DEFAULT_MAX_EPSILON


def design_batch(text: str, schema: SchemaSource, *, epsilon: float, seed: int = 0, restarts: int = 1,
                 time_limit: float | None = None) -> StrategyFile:
    """Optimize a strategy for the batch (best of descent and the baselines) and publish it.

    The strategy file embeds the layout and, unless ``schema`` is a Schema object, the schema
    table, so ``answer_batch`` needs no schema. No data is read.
    """
    if check_epsilon(epsilon) > HIGH_EPSILON:
        warnings.warn(f"epsilon = {epsilon} per report is above {HIGH_EPSILON:g}, which gives "
                      "little privacy protection.",
                      DpsqlWarning, stacklevel=2)
    loaded = Schema.load(schema)
    batch = compile_local(text, loaded)
    strategy = optimize(batch.workload, epsilon=epsilon, seed=seed, restarts=restarts, time_limit=time_limit)
    return publish(strategy, layout=batch.layout, schema=_table_data(schema, batch.layout.table))


def answer_batch(text: str, published: StrategyFile, reports: pa.Table, *,
                 schema: SchemaSource | None = None) -> list[pa.Table]:
    """One Arrow table per statement, answered from the reports (values and ``<alias>_stddev``).

    The standard errors are plug-in estimates (``dpsql.local.answers``).

    Raises:
        SchemaError: no schema was given and the strategy file embeds none.
        ProgrammingError: the batch's cells differ from the strategy's layout.
        DataError: a report belongs to another strategy.
        UnsupportedStrategyError: a query is outside the row space of the strategy.
    """
    batch = compile_local(text, _schema(published, schema))
    if published.layout != batch.layout:
        raise ProgrammingError(
            f"this batch's cells ({_cells(batch.layout)}) differ from the strategy's ({_cells(published.layout)}). "
            "Answer with a batch that groups and filters on the same columns at the same boundaries, or design a "
            "strategy for this batch (before collecting its reports).")
    strategy = published.strategy
    check_support(batch.workload, strategy)
    y = counts_of(published, reports)
    x_hat = estimate_cells(strategy, y)
    sigma = Explicit(cell_covariance(strategy, plug_in_counts(x_hat, int(y.sum())), Factorization.of(strategy)))
    blocks = batch.compiled.groups[0].blocks
    answers = {AnswerKey(0, position): Answers(values=np.asarray(block.workload @ x_hat),
                                               variances=np.maximum(quadratic_diag(block.workload, sigma), 0.0),
                                               form=MeasuredForm(workload=block.workload, profile=sigma, variance=1.0,
                                                                 scale=1.0, source=sigma))
               for position, block in enumerate(blocks)}
    _add_covariances(batch.compiled, sigma, answers)
    metadata = {"mechanism": f"local DP workload factorization ({published.name})", "epsilon": published.epsilon,
                "strategy_sha256": published.sha256, "reports": int(y.sum()),
                "stddev": "plug-in estimate: the exact standard error at the estimated counts"}
    tables = statement_tables(batch.compiled, AnswerSet(answers), metadata)
    return merge_unions([s.statement for s in batch.compiled.statements], tables)  # one table per UNION ALL


def _add_covariances(compiled: CompiledBatch, sigma: Workload, answers: dict[AnswerKey, Answers]) -> None:
    """Row-by-row Cov(U x̂, V x̂) = diag(U Σ Vᵀ) of every two blocks of a statement whose derived outputs
    combine several aggregates (``dpsql.sql.derived``): all blocks share the one estimate x̂."""
    blocks = compiled.groups[0].blocks
    for statement in compiled.statements:
        if not covariance_pairs(statement.statement):
            continue
        shared = sorted({b for output in statement.aggregates for b in output.blocks})
        for first, second in ((a, b) for a in shared for b in shared if a < b):
            found = answers[AnswerKey(0, first)]
            covariance = bilinear_diag(blocks[first].workload, sigma, blocks[second].workload)
            answers[AnswerKey(0, first)] = replace(found, covariances={**found.covariances, second: covariance})


def design_summary(text: str, published: StrategyFile, schema: SchemaSource | None = None, *,
                   alpha: float = 0.01) -> str:
    """A readable report: cells, queries, the chosen mechanism and every baseline's sample complexity."""
    batch = compile_local(text, _schema(published, schema))
    p = batch.workload.shape[0]
    chosen = published.strategy
    lines = [f"{len(batch.compiled.statements)} statement(s), {p} queries over {published.n} cells "
             f"({_cells(batch.layout)}); ε = {published.epsilon:g} per report.",
             f"chosen: {published.name}, {published.m} outputs; users for normalised variance {alpha:g}: "
             f"{worst_case_variance(batch.workload, chosen) / (p * alpha):,.1f}"]
    for scored in score(batch.workload, baselines(published.n, epsilon=published.epsilon)):
        lines.append(f"  {scored.strategy.name:<52} {scored.worst_case_variance / (p * alpha):14,.1f}")
    lines.append(f"strategy sha256: {published.sha256}")
    return "\n".join(lines)


def randomize_records(published: StrategyFile, records: pa.Table, *, rng: RandomSource | None = None,
                      max_epsilon: float = DEFAULT_MAX_EPSILON) -> pa.Table:
    """One report per row of ``records`` (the layout's columns, or ``cell`` for a strategy without layout).

    Privacy:
        Each report is an exact ε-LDP draw from OS randomness (``protocol.randomize_cells``):
        the way a client written in Python randomizes, and a faithful per-row simulation. A file
        whose ε is above ``max_epsilon`` is refused before any row is read
        (``protocol.check_max_epsilon``).
    """
    check_max_epsilon(published, max_epsilon)
    columns = {name.lower(): records.column(name).to_pylist() for name in records.column_names}
    if published.layout is not None:
        cells = published.layout.cells_of(columns)
    elif "cell" in columns:
        cells = np.asarray(columns["cell"])
    else:
        raise DataError("this strategy has no column layout: the input needs a 'cell' column of cell indices.")
    return reports_table(published, randomize_cells(published, cells, rng=rng, max_epsilon=max_epsilon))


def simulate_database(published: StrategyFile, database: str | Path, *, schema: SchemaSource | None = None,
                      rng: np.random.Generator | None = None) -> pa.Table:
    """Aggregated reports (strategy, output, count) for a DuckDB table, drawn per cell (``simulate``).

    Privacy:
        None — it reads the true counts; for simulation only.
    """
    from dpsql.backends.duckdb import DuckDBBackend

    layout = published.layout
    if layout is None:
        raise SchemaError("simulating from a database needs a strategy designed for a SQL "
                          "batch; this one has no layout.")
    table = _schema(published, schema).table(layout.table)
    with DuckDBBackend(str(database)) as backend:
        data = backend.cell_data(table, [table.column(axis.column) for axis in layout.axes])
    x = batch_counts(layout, data.shape, data.index, data.counts)
    y = simulate(published, x, rng=rng)
    outputs = np.flatnonzero(y)
    return reports_table(published, outputs, y[outputs])


def batch_counts(layout: Layout, shape: tuple[int, ...], index: npt.NDArray[np.int64],
                  counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Base-cell counts (flat over ``shape``) summed into the layout's cells."""
    # row counts fit
    return batch_cell_totals([axis.cell_of_base for axis in layout.axes], index, shape, counts).astype(np.int64)


def _check_table(table: Table) -> None:
    if table.privacy_unit.column is not None:
        raise UnsupportedQueryError(
            f"table '{table.name}' declares privacy_unit = "
            f"{{ column = \"{table.privacy_unit.column}\", ... }}; local mode "
            "protects each report (one per row), so a person with several rows would lose ε per row. Collect one row "
            "per person and declare privacy_unit = \"row\".")
    excluded = [c.name for c in table.columns.values() if c.outside_excluded]
    if excluded:
        raise UnsupportedQueryError(
            f"column(s) {', '.join(excluded)} of table '{table.name}' declare out_of_domain = "
            "\"exclude\": a person whose "
            "row is excluded would send no report, which is not private. Use the default (an outside cell) or "
            "\"clamp\" in local mode.")


def _schema(published: StrategyFile, schema: SchemaSource | None) -> Schema:
    """The schema given, else the one the strategy file embeds."""
    if schema is not None:
        return Schema.load(schema)
    if published.schema is None:
        raise SchemaError("the strategy file embeds no schema; pass the schema the strategy was designed with.")
    return Schema.load(published.schema)


def _table_data(schema: SchemaSource, table: str) -> dict[str, Any] | None:
    """The schema's TOML data for one table ({"tables": {name: spec}}), or None for a Schema object."""
    if isinstance(schema, Schema):
        return None
    if isinstance(schema, Mapping):
        data: Mapping[str, Any] = schema
    else:
        text = str(schema)
        is_path = isinstance(schema, Path) or ("\n" not in text and "=" not in text
                                               and not text.lstrip().startswith("["))
        data = tomllib.loads(Path(text).read_text() if is_path else text)
    tables = data.get("tables", {})
    name = next(key for key in tables if key.lower() == table)
    return {"tables": {name: tables[name]}}


def _describe(aggregate: ir.Aggregate) -> str:
    return f"{aggregate.function.upper()}({'*' if aggregate.column is None else aggregate.column.name})"


def _cells(layout: Layout | None) -> str:
    if layout is None:
        return "plain cell indices"
    if not layout.axes:
        return f"table '{layout.table}', no columns"
    return f"table '{layout.table}': " + " × ".join(f"{a.column}({a.size})" for a in layout.axes)

