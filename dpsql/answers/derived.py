"""Derived outputs, HAVING, ORDER BY and LIMIT computed from a statement's released answers.

Post-processing only (Dwork and Roth, "The Algorithmic Foundations of Differential Privacy", 2014,
Prop. 2.1): every value here is a function of the noisy answers and the public plan, so it costs
nothing and no exception, NULL or row depends on the data except through the noisy values.

Standard errors. The statement's answers a = (a_1 … a_m) (its blocks: a SUM or COUNT each, an AVG
reads two) have, row by row, the covariance Σ: Var(a_j) from the mechanism; Cov(a_j, a_k) =
σ² u_j (AᵀA)⁺ v_k from ``mechanism.answer_covariance`` when both were reconstructed from one
measurement (same statement group and data vector), and 0 when measured apart (independent noise).
An output f(a) has the standard error √(∇fᵀ Σ ∇f), with ∇f by forward differentiation:
exact for linear combinations (Var(Σ c_j a_j) = Σ c_j c_k Σ_jk), the delta method for products and
ratios (Var(x/y) ≈ Var(x)/y² + x²Var(y)/y⁴ − 2x·Cov(x, y)/y³).

A ratio is NULL where its denominator's noisy value is below max(1, AVG_MIN_COUNT_STDDEVS standard
errors) in absolute value — the rule AVG uses (:mod:`dpsql.answers.columns`): there the ratio is dominated
by the noise of its denominator and the delta method is meaningless. A denominator with no noise
(a constant; an exact zero) makes the ratio NULL only when it is zero.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpsql import schema as sch
from dpsql.answers import windows as aw
from dpsql.answers.columns import (
    AVG_MIN_COUNT_STDDEVS,
    aggregate_values,
    group_columns,
    rolled_up_columns,
    rows_kept,
    sort_order,
    spread_gradient,
    values_and_covariance,
)
from dpsql.errors import UnsupportedQueryError
from dpsql.planning.mechanism import Answers
from dpsql.sql import derived as d
from dpsql.sql import ir
from dpsql.sql.compile import CompiledBatch, CompiledStatement
from dpsql.sql.vectors import SPREADS
from dpsql.sql.windows import describe_windows, windows_of

FloatArray = npt.NDArray[np.float64]



@dataclass(frozen=True, slots=True)
class Differentiated:
    """An output's values (rows,) and gradients (rows, m) with respect to the statement's blocks."""

    value: FloatArray
    gradient: FloatArray


class _Statement:
    """One statement's answers in output row order: each block's values and the covariance Σ."""

    def __init__(self, statement: CompiledStatement, answers: Mapping[int, Answers]) -> None:
        rows = statement.block_rows
        self.statement = statement
        self.positions = sorted({b for output in statement.aggregates for b in output.blocks})
        self.column = {b: j for j, b in enumerate(self.positions)}
        self.values, self.sigma = values_and_covariance([answers[b] for b in self.positions], self.positions, rows)
        self.windows: dict[ir.Window, tuple[int, FloatArray]] = {}

    def add_windows(self, compiled: CompiledBatch, found: Sequence[ir.Window], answers: Mapping[int, Answers]) -> None:
        """Each window's sum of answers as one more column, with its covariances with every column
        (:mod:`dpsql.answers.windows`)."""
        n, m = self.values.shape
        rows = self.statement.block_rows
        columns = [aw.Column(b, aw.on_block(aw.identity(n), rows, answers[b].values.size)) for b in self.positions]
        added = []
        for window in found:
            assert isinstance(window.argument, ir.AggregateRef)
            block = self.statement.aggregates[window.argument.index].blocks[0]
            framed = aw.frames(compiled, self.statement, window)
            self.windows[window] = (len(columns), framed.sizes)
            combination = framed.combination
            columns.append(aw.Column(block, aw.on_block(combination, rows, answers[block].values.size)))
            added.append((combination.distinct @ self.values[:, self.column[block]])[combination.which])
        if not added:
            return
        sigma = aw.covariances(columns, answers, m)
        sigma[:, :m, :m] = self.sigma
        self.values, self.sigma = np.column_stack([self.values, *added]), sigma

    def window(self, window: ir.Window) -> Differentiated:
        """SUM (the column's sum), AVG (divided by the frame's size) or COUNT (the size, no noise);
        NULL where the frame is empty (SUM, AVG)."""
        column, sizes = self.windows[window]
        gradient = np.zeros_like(self.values)
        if window.function == "count":
            return Differentiated(sizes.astype(np.float64), gradient)
        gradient[:, column] = 1.0
        scale = np.where(sizes > 0, 1.0 / np.maximum(sizes, 1.0), np.nan) if window.function == "avg" \
            else np.where(sizes > 0, 1.0, np.nan)
        return Differentiated(self.values[:, column] * scale, gradient * scale[:, None])

    def block(self, position: int) -> Differentiated:
        gradient = np.zeros_like(self.values)
        gradient[:, self.column[position]] = 1.0
        return Differentiated(self.values[:, self.column[position]], gradient)

    def variance(self, value: Differentiated) -> FloatArray:
        """∇fᵀ Σ ∇f row by row (NaN where the value is NULL)."""
        return np.maximum(np.einsum("ni,nij,nj->n", value.gradient, self.sigma, value.gradient), 0.0)

    def evaluate(self, expression: ir.Expression) -> Differentiated:
        """Forward differentiation of an expression over the statement's aggregates and numbers."""
        n, m = self.values.shape
        if isinstance(expression, ir.AggregateRef):
            return self.aggregate(expression.index)
        if isinstance(expression, ir.Constant):
            return Differentiated(np.full(n, float(expression.value)), np.zeros((n, m)))  # type: ignore[arg-type]
        if isinstance(expression, ir.Negate):
            inner = self.evaluate(expression.operand)
            return Differentiated(-inner.value, -inner.gradient)
        if isinstance(expression, ir.Call):
            return applied(expression, [self.evaluate(o) for o in expression.operands])
        if isinstance(expression, ir.Window):
            return self.window(expression)
        assert isinstance(expression, ir.Arithmetic), "HAVING names are resolved by the caller"
        left, right = self.evaluate(expression.left), self.evaluate(expression.right)
        if expression.operator == "+":
            return Differentiated(left.value + right.value, left.gradient + right.gradient)
        if expression.operator == "-":
            return Differentiated(left.value - right.value, left.gradient - right.gradient)
        if expression.operator == "*":
            return Differentiated(left.value * right.value,
                          right.value[:, None] * left.gradient + left.value[:, None] * right.gradient)
        return self.ratio(left, right, signed=True)

    def aggregate(self, index: int) -> Differentiated:
        """A SUM or COUNT block; AVG = SUM/COUNT with AVG's rule for the count; a variance or standard
        deviation from its SUM, COUNT and SUM of squares (``spread_gradient``)."""
        output = self.statement.aggregates[index]
        if output.aggregate.function in SPREADS:
            columns = [self.column[b] for b in output.blocks]
            value, gradient, _ = spread_gradient(output.aggregate.function, self.values[:, columns],
                                                 self.sigma[:, columns][:, :, columns])
            full = np.zeros_like(self.values)
            full[:, columns] = gradient
            return Differentiated(value, full)
        if output.aggregate.function != "avg":
            return self.block(output.blocks[0])
        return self.ratio(self.block(output.blocks[0]), self.block(output.blocks[1]), signed=False)

    def ratio(self, numerator: Differentiated, denominator: Differentiated, *, signed: bool) -> Differentiated:
        """x/y and its gradient ∇x/y − x∇y/y²; NULL (NaN) where y is too noisy (module docstring).
        ``signed``: compare |y| (any ratio) or y (AVG's count) with the threshold."""
        y = denominator.value
        spread = np.sqrt(self.variance(denominator))
        size = np.abs(y) if signed else y
        enough = np.where(spread > 0, size >= np.maximum(1.0, AVG_MIN_COUNT_STDDEVS * spread), y != 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.where(enough, numerator.value / y, np.nan)
            gradient = (numerator.gradient / y[:, None]
                        - (numerator.value / y**2)[:, None] * denominator.gradient)
        return Differentiated(value, np.where(enough[:, None], gradient, np.nan))


def applied(call: ir.Call, operands: Sequence[Differentiated]) -> Differentiated:
    """An output function of values, with its gradient: rounding (ROUND half away from zero, as
    DuckDB rounds a DOUBLE; CAST to an integer half to even, as DuckDB casts; CEIL, FLOOR, TRUNC)
    keeps its operand's gradient, so the standard error is the unrounded value's (the rounding moves
    a value by at most :func:`dpsql.sql.derived.rounding_bound`); ABS flips it where the value is negative; GREATEST,
    LEAST and COALESCE take the chosen operand's row by row (NULLs skipped; all NULL: NULL); NULLIF
    is NULL where its operands are equal (the delta method: a function's derivative where it is smooth)."""
    first = operands[0]
    x = first.value
    function = call.function
    with np.errstate(invalid="ignore", over="ignore"):
        if function == "round":
            scale = 10.0 ** call.digits
            return Differentiated(np.sign(x) * np.floor(np.abs(x) * scale + 0.5) / scale, first.gradient)
        if function in ("ceil", "floor", "trunc"):
            return Differentiated({"ceil": np.ceil, "floor": np.floor, "trunc": np.trunc}[function](x), first.gradient)
        if function == "cast_integer":
            rounded = np.rint(x)
            inside = np.abs(rounded) < 2.0**63
            return Differentiated(np.where(inside, rounded, np.nan), np.where(inside[:, None], first.gradient, np.nan))
        if function == "cast_real":
            return first
        if function == "abs":
            return Differentiated(np.abs(x), np.where((x < 0)[:, None], -first.gradient, first.gradient))
        if function == "nullif":
            same = x == operands[1].value
            return Differentiated(np.where(same, np.nan, x), np.where(same[:, None], np.nan, first.gradient))
    values = np.stack([o.value for o in operands])
    missing = np.isnan(values)
    if function == "coalesce":
        chosen = np.argmax(~missing, axis=0)
    else:
        fill = -np.inf if function == "greatest" else np.inf
        ranked = np.where(missing, fill, values)
        chosen = np.argmax(ranked, axis=0) if function == "greatest" else np.argmin(ranked, axis=0)
    rows = np.arange(values.shape[1])
    gradients = np.stack([o.gradient for o in operands])
    return Differentiated(values[chosen, rows], gradients[chosen, rows])


def derived_table(compiled: CompiledBatch, statement: CompiledStatement,
                  answers: Mapping[int, Answers]) -> tuple[pa.Table, dict[str, str]]:
    """The statement's output table (outputs, then HAVING, ORDER BY, LIMIT) and its NULL notes."""
    outputs = statement.statement.outputs
    assert outputs is not None
    state = _Statement(statement, answers)
    state.add_windows(compiled, [w for item in outputs.items if isinstance(item, ir.DerivedItem)
                                 for w in windows_of(item.expression)], answers)
    columns: dict[str, pa.Array] = {}
    notes: dict[str, str] = {}
    rows = len(statement.block_rows)
    for item in outputs.items:
        if isinstance(item, ir.GroupColumn) and item.rolled_up:
            columns.update(rolled_up_columns(compiled.table, item, rows))
        elif isinstance(item, ir.GroupColumn):
            columns.update(group_columns(compiled, statement, _group_position(statement, item.column), item.alias))
        elif isinstance(item, ir.ConstantItem):
            columns[item.alias] = pa.array([item.value] * rows, type=_arrow_type(item.value))
        else:
            value, stddev = _output_values(state, statement, item, answers)
            columns[item.alias] = _integers(value) if _is_integer(item.expression) else \
                pa.array(value, type=pa.float64(), from_pandas=True)
            columns[f"{item.alias}_stddev"] = pa.array(stddev, type=pa.float64(), from_pandas=True)
    table = pa.table(columns)
    if outputs.having is not None:
        keep = [r for r, kept in enumerate(_condition(outputs.having, state, statement, compiled, table)) if kept]
        table = table.take(pa.array(keep, type=pa.int64()))
    for item in outputs.items:  # NULL ratios among the rows HAVING keeps
        missing = table.column(item.alias).null_count if isinstance(item, ir.DerivedItem) else 0
        if missing:
            notes[item.alias] = (f"{missing} group(s) NULL: a denominator's noisy value (the count of non-NULL "
                                 f"values, for AVG) is below max(1, {AVG_MIN_COUNT_STDDEVS:g} standard errors), "
                                 "too small for a meaningful ratio")
    names = [item.alias for item in outputs.items]
    keys = [(names[o.key - 1] if isinstance(o.key, int) else _spelled(o.key, table), o.descending)
            for o in outputs.order_by]
    table = table.take(pa.array(sort_order(keys, table), type=pa.int64()))
    return rows_kept(table, outputs.offset, outputs.limit), notes


def _output_values(state: _Statement, statement: CompiledStatement, item: ir.DerivedItem,
                   answers: Mapping[int, Answers]) -> tuple[FloatArray, FloatArray]:
    """A lone aggregate as a plain statement answers it (``aggregate_values``); an expression by forward
    differentiation."""
    if item.plain:
        assert isinstance(item.expression, ir.AggregateRef)
        return aggregate_values(statement, statement.aggregates[item.expression.index], answers)
    found = state.evaluate(item.expression)
    return found.value, np.sqrt(state.variance(found))


def _is_integer(expression: ir.Expression) -> bool:
    """Whether an output is a CAST to an integer type (an int64 column, as SQL returns it)."""
    return isinstance(expression, ir.Call) and expression.function == "cast_integer"


def _integers(values: FloatArray) -> pa.Array:
    """Whole numbers as int64, NaN as NULL."""
    missing = np.isnan(values)
    return pa.array(np.where(missing, 0.0, values).astype(np.int64), type=pa.int64(), mask=missing)


def _group_position(statement: CompiledStatement, column: ir.Column) -> int:
    return next(i for i, c in enumerate(statement.statement.group_by) if c.name.lower() == column.name.lower())


def _spelled(name: str, table: pa.Table) -> str:
    return next(c for c in table.column_names if c.lower() == name.lower())


def _arrow_type(value: object) -> pa.DataType:
    if isinstance(value, str):
        return pa.string()
    if isinstance(value, int):
        return pa.int64()
    return pa.float64() if isinstance(value, float) else pa.date32()


def metadata(statement: ir.Statement) -> dict[str, Any]:
    """The result metadata of a statement's derived outputs and HAVING (empty for plain statements)."""
    outputs = statement.outputs
    if outputs is None:
        return {}
    found: dict[str, Any] = {}
    formulas = {item.alias: _formula(item.expression, statement) for item in outputs.items
                if isinstance(item, ir.DerivedItem) and not item.plain}
    if formulas:
        found["derived"] = formulas
    if outputs.having is not None:
        found["having"] = d.HAVING_NOTE
    framed = {item.alias: describe_windows(windows_of(item.expression)) for item in outputs.items
              if isinstance(item, ir.DerivedItem) and windows_of(item.expression)}
    if framed:
        found["windows"] = framed
    return found


def _formula(expression: ir.Expression, statement: ir.Statement) -> str:
    rounding = _rounding_note(expression)
    if _linear(expression, statement):
        return ("post-processing of the released aggregates; standard error exact: Var(Σ c_i a_i) = "
                "Σ c_i c_j Cov(a_i, a_j)" + rounding)
    return ("post-processing of the released aggregates; standard error by the delta method (gradientᵀ Σ gradient); "
            f"NULL where a denominator is below max(1, {AVG_MIN_COUNT_STDDEVS:g} standard errors), as for AVG"
            + rounding)


def _rounding_note(expression: ir.Expression) -> str:
    """What the metadata says of rounding functions in an output: the standard error is the unrounded
    value's, and how far the rounding moves it at most (summed over nested roundings)."""
    bound = d.rounding_bound(expression)
    return "" if bound == 0 else f"; {d.rounding_note(bound)}"


def _linear(expression: ir.Expression, statement: ir.Statement) -> bool:
    """Whether the expression is a linear combination of SUM/COUNT answers (AVG is a ratio)."""
    if isinstance(expression, ir.Negate):
        return _linear(expression.operand, statement)
    if isinstance(expression, ir.Arithmetic):
        left, right = _linear(expression.left, statement), _linear(expression.right, statement)
        if expression.operator in "+-":
            return left and right
        if expression.operator == "*":
            return (_constant(expression.left) and right) or (_constant(expression.right) and left)
        return _constant(expression.right) and left
    if isinstance(expression, ir.AggregateRef):
        return statement.aggregates[expression.index].function in ("count", "sum")
    if isinstance(expression, ir.Window):  # a sum of COUNT or SUM answers (dpsql.sql.windows), or a public size
        return True
    if isinstance(expression, ir.Call):  # rounding and a CAST to a float keep the operand's gradient
        return expression.function in ("round", "ceil", "floor", "trunc", "cast_integer", "cast_real") and \
            _linear(expression.operands[0], statement)
    return isinstance(expression, ir.Constant)


def _constant(expression: ir.Expression) -> bool:
    return not any(True for _ in d.aggregate_refs(expression))


# ------------------------------------------------------------------------------------------------ HAVING
Cell = float | str | object


def _condition(condition: ir.Condition, state: _Statement, statement: CompiledStatement, compiled: CompiledBatch,
               table: pa.Table) -> list[bool | None]:
    """SQL's three-valued truth of the condition, row by row (None: UNKNOWN, e.g. a NULL ratio)."""
    def operand(expression: ir.Expression) -> list[Cell]:
        return _operand(expression, state, statement, compiled, table)

    if isinstance(condition, ir.Connective):
        parts = [_condition(c, state, statement, compiled, table) for c in condition.operands]
        return [_all(row) if condition.all_of else _any(row) for row in zip(*parts)]
    if isinstance(condition, ir.Negation):
        return [None if t is None else not t for t in _condition(condition.operand, state, statement, compiled, table)]
    if isinstance(condition, ir.NullTest):
        return [(v is None) != condition.negated for v in operand(condition.operand)]
    if isinstance(condition, ir.Compare):
        return [_compare(a, condition.operator, b) for a, b in zip(operand(condition.left), operand(condition.right))]
    if isinstance(condition, ir.Range):
        found = [_all([_compare(v, ">=", lo), _compare(v, "<=", hi)]) for v, lo, hi in
                 zip(operand(condition.operand), operand(condition.low), operand(condition.high))]
    else:
        values = [operand(v) for v in condition.values]
        found = [_any([_compare(v, "=", option[r]) for option in values])
                 for r, v in enumerate(operand(condition.operand))]
    return [None if t is None else t != condition.negated for t in found]


def _operand(expression: ir.Expression, state: _Statement, statement: CompiledStatement, compiled: CompiledBatch,
             table: pa.Table) -> list[Cell]:
    """An operand's row values (None for NULL): arithmetic from the answers, names from the table."""
    rows = table.num_rows
    if isinstance(expression, ir.OutputRef):
        return [_null(v) for v in table.column(expression.name).to_pylist()]
    if isinstance(expression, ir.GroupRef):
        column = statement.statement.group_by[expression.position]
        return group_columns(compiled, statement, expression.position, column.name)[column.name].to_pylist()
    if isinstance(expression, ir.Constant) and not isinstance(expression.value, (int, float)):
        return [expression.value] * rows
    return [_null(v) for v in _numbers(expression, state, statement, compiled, table).tolist()]


def _numbers(expression: ir.Expression, state: _Statement, statement: CompiledStatement, compiled: CompiledBatch,
             table: pa.Table) -> FloatArray:
    """Numeric values of HAVING arithmetic, whose names are numeric output columns."""
    if isinstance(expression, ir.OutputRef | ir.GroupRef):
        return np.array([np.nan if v is None else v for v in _operand(expression, state, statement, compiled, table)],
                        dtype=float)
    if isinstance(expression, ir.Negate):
        return -_numbers(expression.operand, state, statement, compiled, table)
    if isinstance(expression, ir.Call):
        n = table.num_rows
        return applied(expression, [Differentiated(_numbers(o, state, statement, compiled, table), np.zeros((n, 0)))
                                    for o in expression.operands]).value
    if isinstance(expression, ir.Arithmetic):
        left = _numbers(expression.left, state, statement, compiled, table)
        right = _numbers(expression.right, state, statement, compiled, table)
        if expression.operator == "/":
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(right != 0, left / right, np.nan)
        return {"+": left + right, "-": left - right, "*": left * right}[expression.operator]
    return state.evaluate(expression).value


def _null(value: object) -> object:
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else value


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {"=": operator.eq, "<>": operator.ne, "<": operator.lt,
                                                   "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _compare(left: object, relation: str, right: object) -> bool | None:
    """``left relation right``; UNKNOWN (None) when either is NULL. The kinds were checked to match
    before anything was spent (``derived.check_outputs``)."""
    if left is None or right is None:
        return None
    return _COMPARE[relation](left, right)


def _all(values: list[bool | None] | tuple[bool | None, ...]) -> bool | None:
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True


def _any(values: list[bool | None] | tuple[bool | None, ...]) -> bool | None:
    if any(v is True for v in values):
        return True
    return None if any(v is None for v in values) else False


# ------------------------------------------------------------------------------------------------ UNION ALL
def check_unions(batch: ir.Batch, table: sch.Table) -> None:
    """Before anything is spent: the parts of each UNION ALL have as many output columns, of
    compatible types (numbers with numbers), and its ORDER BY names outputs of the first part."""
    for parts in _unions(batch.statements):
        for index in parts:
            found = batch.statements[index].union
            d.refuse_order_statistics(batch.statements[index], found.construct if found is not None else "UNION ALL")
        columns = [_output_columns(batch.statements[i], table) for i in parts]
        first = columns[0]
        union = batch.statements[parts[0]].union
        assert union is not None
        for index, other in zip(parts[1:], columns[1:]):
            statement = batch.statements[index]
            if len(other) != len(first):
                raise UnsupportedQueryError(
                    f"the UNION ALL at {union.span.describe()} joins statements of {len(first)} and {len(other)} "
                    f"output columns ({statement.span.describe()}); with dpsql's <alias>_stddev and <column>_upper "
                    "columns the parts must select the same kinds of outputs in the same order.")
            for (name, kind), (other_name, other_kind) in zip(first, other):
                if _merged_type(kind, other_kind) is None:
                    raise UnsupportedQueryError(
                        f"the UNION ALL at {union.span.describe()} puts {other_name} ({other_kind}) under {name} "
                        f"({kind}) ({statement.span.describe()}); each column must hold one type in every part.")
        names = [n.lower() for n, _ in first]
        items = _items(batch.statements[parts[0]])
        for key, _ in union.order_by:
            if (isinstance(key, int) and not 1 <= key <= len(items)) or (isinstance(key, str)
                                                                         and key.lower() not in names):
                shown = ", ".join(n for n, _ in first)
                raise UnsupportedQueryError(f"ORDER BY {key} after the UNION ALL at {union.span.describe()} names no "
                                            f"output of its first statement; use one of {shown} "
                                            f"or a position from 1 to {len(items)}.")


def merge_unions(statements: Sequence[ir.Statement], tables: list[pa.Table]) -> list[pa.Table]:
    """One table per user statement: the parts of a UNION ALL concatenated in order under the first
    part's names, then its ORDER BY and LIMIT (post-processing of released tables)."""
    merged: list[pa.Table] = []
    for index, (statement, table) in enumerate(zip(statements, tables)):
        union = statement.union
        if union is None or union.part == 0:
            merged.append(table)
        if union is not None and union.part == union.parts - 1:
            merged[-1] = _concatenated(statements[index - union.parts + 1], tables[index - union.parts + 1:index + 1])
    return merged


def _concatenated(first: ir.Statement, parts: Sequence[pa.Table]) -> pa.Table:
    union = first.union
    assert union is not None
    names = parts[0].column_names
    table = pa.concat_tables([part.rename_columns(names).replace_schema_metadata(None) for part in parts],
                             promote_options="permissive")
    outputs = [str(getattr(item, "alias", "")) for item in _items(first)]
    keys = [(outputs[key - 1] if isinstance(key, int) else _spelled(key, table), descending)
            for key, descending in union.order_by]
    table = table.take(pa.array(sort_order(keys, table), type=pa.int64()))
    table = rows_kept(table, union.offset, union.limit)
    found = [json.loads(part.schema.metadata[b"dpsql"]) for part in parts]
    if union.grouping_set is None:
        own = {**found[0], "union_all": f"{len(parts)} statements measured in this batch, their rows concatenated in "
                                        "order (post-processing); each part's metadata is under parts"}
    else:
        own = {**found[0], "grouping_sets": f"{len(parts)} grouping sets measured in this batch, one GROUP BY each "
                                            "with NULL for the keys it rolls up, their rows concatenated in order "
                                            "(post-processing); each part's metadata is under parts"}
    own["parts"] = found
    return table.replace_schema_metadata({b"dpsql": json.dumps(own, default=str).encode()})


def _unions(statements: Sequence[ir.Statement]) -> list[list[int]]:
    """The statement indices of each UNION ALL."""
    found: list[list[int]] = []
    for index, statement in enumerate(statements):
        if statement.union is not None:
            if statement.union.part == 0:
                found.append([])
            found[-1].append(index)
    return found


def _items(statement: ir.Statement) -> tuple[object, ...]:
    return statement.outputs.items if statement.outputs is not None else statement.select


def _output_columns(statement: ir.Statement, table: sch.Table) -> list[tuple[str, pa.DataType | None]]:
    """The statement's output columns and Arrow types, from the schema (None: not known here)."""
    columns: list[tuple[str, pa.DataType | None]] = []
    for item in _items(statement):
        alias = getattr(item, "alias", "?")
        if isinstance(item, ir.GroupColumn):
            domain = table.column(item.column.name).domain
            if isinstance(domain, sch.Categorical):
                kind = pa.string() if all(isinstance(v, str) for v in domain.values) else pa.int64()
                columns.append((alias, kind))
                continue
            kind = {"integer": pa.int64(), "numeric": pa.float64(), "date": pa.date32()}[domain.kind]
            columns.append((alias, kind))
            if domain.reports_upper:
                columns.append((f"{alias}_upper", kind))
        elif isinstance(item, ir.ConstantItem):
            columns.append((alias, _arrow_type(item.value)))
        elif isinstance(item, (ir.Aggregate, ir.DerivedItem)):
            columns += [(alias, pa.float64()), (f"{alias}_stddev", pa.float64())]
        else:
            columns.append((alias, None))
    return columns


def _merged_type(first: pa.DataType | None, other: pa.DataType | None) -> pa.DataType | None:
    """The type a column of two parts has in the union (None: incompatible); unknown types pass."""
    if first is None or other is None or first == other:
        return first or other or pa.null()
    numbers = {pa.int64(), pa.float64()}
    return pa.float64() if first in numbers and other in numbers else None


#: A derived statement's answers with their covariances, and whether an expression is linear in its SUM/COUNT
#: answers: ``dpsql.engine.reuse.predicted`` predicts linear outputs' standard errors with them, before the data.
StatementAnswers = _Statement
is_linear = _linear
