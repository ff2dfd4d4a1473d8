"""Arrow tables of private answers: group columns, values and their standard errors.

One ``pyarrow.Table`` per statement: the SELECT list in order — group columns in their declared
types (a bin as its lower bound, plus ``<name>_upper``, its exclusive upper bound, when bins are
wider than one value; a CASE, date-part or lookup key typed by its labels), each aggregate as
float64 with ``<alias>_stddev`` beside it (an order statistic, :mod:`dpsql.sql.quantiles`, also has
``<alias>_low`` and ``<alias>_high``, its 95 % interval, and dates on a date column; metadata key
``order_statistics``). Every declared
group is present, in deterministic order (GROUP BY order, each column's declared order); ORDER BY
and LIMIT apply to the noisy values. The schema metadata key ``dpsql`` holds JSON with the
mechanism, strategies, budget spent and left, and the expected RMSE.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql.answers import derived
from dpsql.answers.columns import AVG_MIN_COUNT_STDDEVS, aggregate_values, group_columns, rows_kept, sort_order
from dpsql.planning.mechanism import Answers
from dpsql.schema import EPOCH
from dpsql.sql import ir
from dpsql.sql import quantiles as qs
from dpsql.sql.compile import CompiledBatch, CompiledStatement, OutputAggregate


class AnswerKey(NamedTuple):
    """Where a block's answers belong: statement group ``group``, block ``block`` of that group."""

    group: int
    block: int


class AnswerSet(Mapping[AnswerKey, Answers]):
    """The released answers of a batch, one :class:`~dpsql.planning.mechanism.Answers` per block."""

    __slots__ = ("_answers", "_groups")

    def __init__(self, answers: Mapping[AnswerKey, Answers] | None = None) -> None:
        self._answers = {AnswerKey(*key): found for key, found in (answers or {}).items()}
        self._groups: dict[int, dict[int, Answers]] | None = None

    def __getitem__(self, key: tuple[int, int]) -> Answers:
        return self._answers[AnswerKey(*key)]

    def __iter__(self) -> Iterator[AnswerKey]:
        return iter(self._answers)

    def __len__(self) -> int:
        return len(self._answers)

    def of_group(self, group: int) -> dict[int, Answers]:
        """The answers of one statement group, by block (indexed by group once, on first use)."""
        if self._groups is None:
            self._groups = {}
            for key, found in self._answers.items():
                self._groups.setdefault(key.group, {})[key.block] = found
        return dict(self._groups.get(group, {}))


def statement_tables(compiled: CompiledBatch, answers: AnswerSet,
                     metadata: Mapping[str, Any],
                     per_statement: Sequence[Mapping[str, Any]] | None = None) -> list[pa.Table]:
    """One table per statement, from the answers of every block, keyed (group, block index).

    Each table's metadata is ``metadata``, plus that statement's entry of ``per_statement``, plus,
    when some AVG groups are NULL, ``avg_null`` with the reason per output column.
    """
    tables = []
    for index, statement in enumerate(compiled.statements):
        table, notes = _table(compiled, statement, answers)
        own = {**metadata, **per_statement[index]} if per_statement is not None else metadata
        own = {**own, "avg_null": notes} if notes else own
        own = {**own, **_derived_metadata(statement.statement)}
        own = {**own, **_order_statistics(statement, table)}
        tables.append(table.replace_schema_metadata({b"dpsql": json.dumps(own, default=str).encode()}))
    return tables


def _table(compiled: CompiledBatch, statement: CompiledStatement,
           answers: AnswerSet) -> tuple[pa.Table, dict[str, str]]:
    columns: dict[str, pa.Array] = {}
    notes: dict[str, str] = {}
    mine = answers.of_group(statement.group)
    if statement.statement.outputs is not None:  # derived outputs, HAVING (dpsql.sql.derived)
        return derived.derived_table(compiled, statement, mine)
    for item in statement.statement.select:
        if isinstance(item, ir.GroupColumn):
            index = next(i for i, c in enumerate(statement.statement.group_by)
                         if c.name.lower() == item.column.name.lower())
            columns.update(group_columns(compiled, statement, index, item.alias))
        elif (found := _find(statement, item)).quantile is not None:
            columns.update(_quantile_columns(statement, found, mine))
        else:
            value, stddev = aggregate_values(statement, found, mine)
            columns[item.alias] = pa.array(value, type=pa.float64(), from_pandas=True)
            columns[f"{item.alias}_stddev"] = pa.array(stddev, type=pa.float64(), from_pandas=True)
            missing = int(np.isnan(value).sum())
            if item.function == "avg" and missing:
                notes[item.alias] = (f"{missing} group(s) NULL: the noisy count of non-NULL values is below "
                                     f"max(1, {AVG_MIN_COUNT_STDDEVS:g} standard errors), "
                                     "too small for a meaningful ratio")
    table = pa.table(columns)
    order = _order(statement.statement, table)
    table = table.take(pa.array(order, type=pa.int64()))
    return rows_kept(table, statement.statement.offset, statement.statement.limit), notes


def _find(statement: CompiledStatement, aggregate: ir.Aggregate) -> OutputAggregate:
    return next(a for a in statement.aggregates if a.aggregate is aggregate)


def _quantile_columns(statement: CompiledStatement, output: OutputAggregate,
                      answers: Mapping[int, Answers]) -> dict[str, pa.Array]:
    """An order statistic's four columns (``dpsql.sql.quantiles``): the estimate, its CI half-width
    / 1.96, and the CI's ends; on a date column the estimate and ends are dates (the CI's ends
    rounded inward to whole days), the stddev is in days."""
    plan = output.quantile
    assert plan is not None
    block = output.blocks[0]
    found = qs.answer_arrays(plan, statement.block_rows, answers[block], block)
    alias = output.aggregate.alias

    def typed(values: npt.NDArray[np.float64], rounding: Any) -> pa.Array:
        if plan.kind != "date":
            return pa.array(values, type=pa.float64(), from_pandas=True)
        return pa.array([None if math.isnan(v) else EPOCH + dt.timedelta(days=int(rounding(v))) for v in values],
                        type=pa.date32())

    return {alias: typed(found["value"], round), f"{alias}_stddev": pa.array(found["stddev"], type=pa.float64(),
                                                                             from_pandas=True),
            f"{alias}_low": typed(found["low"], math.ceil), f"{alias}_high": typed(found["high"], math.floor)}


def _order_statistics(statement: CompiledStatement, table: pa.Table) -> dict[str, object]:
    """``order_statistics`` metadata: each order statistic's definition, bias bound and NULL groups."""
    entries = {output.aggregate.alias: qs.describe(output.quantile, table.column(output.aggregate.alias).null_count)
               for output in statement.aggregates if output.quantile is not None}
    return {"order_statistics": entries} if entries else {}


def _order(statement: ir.Statement, table: pa.Table) -> list[int]:
    """Row order for ORDER BY, applied to the noisy values: stable sorts from the last key to the
    first, NULLs (and NaN) last in either direction, as DuckDB orders them."""
    outputs = [item.alias for item in statement.select]
    return sort_order([(outputs[item.key - 1] if isinstance(item.key, int) else item.key, item.descending)
                       for item in statement.order_by], table)


def _derived_metadata(statement: ir.Statement) -> dict[str, Any]:
    """What the metadata says about derived outputs and HAVING (``dpsql.answers.derived``)."""
    if statement.outputs is None:
        return {}
    return derived.metadata(statement)


#: The line printed above answers shown as ``value ± stddev``: what the ± is.
PLUS_MINUS = ("Each answer reads value ± one standard error: the standard deviation of the noise in it (the exact "
              "value lies within two standard errors about 95 % of the time).")


def format_table(table: pa.Table, *, limit: int | None = None) -> str:
    """A plain-text rendering: values and their ± standard errors, aligned."""
    shown = table if limit is None else table.slice(0, limit)
    names = [n for n in shown.column_names if not n.endswith("_stddev")]
    cells = []
    for name in names:
        values = shown.column(name).to_pylist()
        errors = shown.column(f"{name}_stddev").to_pylist() if f"{name}_stddev" in shown.column_names else None
        cells.append([_cell(v, None if errors is None else errors[i]) for i, v in enumerate(values)])
    widths = [max([len(name)] + [len(c) for c in column]) for name, column in zip(names, cells)]
    lines = ["  ".join(name.rjust(w) for name, w in zip(names, widths))]
    lines += ["  ".join(column[r].rjust(w) for column, w in zip(cells, widths)) for r in range(shown.num_rows)]
    if limit is not None and table.num_rows > limit:
        lines.append(f"... {table.num_rows - limit} more rows")
    return "\n".join(lines)


def _cell(value: object, stddev: object) -> str:
    """``value ± stddev`` with one decimal, or as many more as show the standard error's two leading
    digits (a ratio of 0.2134 ± 0.0040 is not 0.2 ± 0.0).

    >>> _cell(5417.04, 11.3), _cell(0.21342, 0.00401), _cell(3.0, 0.0)
    ('5,417.0 ± 11.3', '0.2134 ± 0.0040', '3.0 ± 0.0')
    """
    if value is None:
        return "NULL"
    if stddev is not None and isinstance(value, float):
        error = float(stddev)  # type: ignore[arg-type]
        decimals = 1 if not 0 < error < 1 else min(8, 1 - math.floor(math.log10(error)))
        return f"{value:,.{decimals}f} ± {error:,.{decimals}f}"
    return f"{value:,.1f}" if isinstance(value, float) else str(value)
