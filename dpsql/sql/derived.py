"""Outputs computed from released aggregates: arithmetic, constants and HAVING (parsed into :mod:`dpsql.sql.ir`).

A statement may select, besides group columns and plain aggregates,

- arithmetic on aggregates and numeric constants: ``SUM(x)/COUNT(*)``, ``AVG(x)*12``,
  ``COUNT(*) - SUM(y)``, ``100.0 * SUM(y) / SUM(x)``, unary minus and parentheses;
- constants: ``'adults' AS grp``, ``1``, ``DATE '2020-01-01'``;

and filter its rows with ``HAVING <condition>`` on aggregates, arithmetic on them, output names and
GROUP BY columns. Every aggregate inside an expression or in HAVING is measured as an ordinary
aggregate of the statement (one not selected by itself is *hidden*: measured, not shown), so the
statement costs exactly what the same statement selecting its aggregates plainly costs. The derived
values, the HAVING filter, ORDER BY and LIMIT are then functions of the released answers only:
post-processing, free (Dwork and Roth, "The Algorithmic Foundations of Differential Privacy",
2014, Prop. 2.1). :mod:`dpsql.answers.derived` computes them.

Parsing produces a statement whose ``select`` holds its group columns and every measured aggregate
(hidden ones named ``<name> [hidden]``), without ORDER BY and LIMIT, and whose ``outputs`` holds
the output list, HAVING, ORDER BY and LIMIT over those outputs. An aggregate written twice (same
function, column and options) is measured once.

Default output names: the AS name, else the expression's text as written with its white space
collapsed (``SUM(x)/COUNT(*)``); DuckDB would call it by its own rendering
(``(sum(x) / count_star())``), which is why a stable name should be given with AS.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Literal as TypingLiteral

import numpy as np
import numpy.typing as npt
from sqlglot import exp

from dpsql import schema as sch
from dpsql.errors import InvalidQueryError, UnsupportedQueryError
from dpsql.sql import ir, windows
from dpsql.sql.arithmetic import INTEGER_TYPES
from dpsql.sql.predicates import OPERATORS, parse_value
from dpsql.sql.source import Scope, describe, invalid, node_span, unparen, unsupported
from dpsql.sql.vectors import SPREADS

__all__ = ["check_outputs", "finish_statement", "has_stddev", "is_output_expression", "measures", "parse_output"]

_EXPRESSION_SUPPORTED = ("Output expressions combine COUNT, SUM and AVG with numeric constants by + - * / , unary "
                         "minus and parentheses, and apply ROUND, CEIL, FLOOR, TRUNC, ABS, GREATEST, LEAST, COALESCE, "
                         "NULLIF and CAST (to an integer, floating-point or DECIMAL type) to them.")
_HAVING_SUPPORTED = ("HAVING compares aggregates, arithmetic on them, output names and GROUP BY columns with "
                     "constants or each other (=, <>, <, <=, >, >=, BETWEEN, IN, IS [NOT] NULL), joined by AND, OR, "
                     "NOT and parentheses.")
#: What the result metadata and EXPLAIN say about HAVING.
HAVING_NOTE = ("HAVING applied to the noisy answers: post-processing, no extra privacy cost; "
               "rows are kept by noisy values")
#: What the result metadata and EXPLAIN say about rounding functions in an output.
ROUNDING_NOTE = ("rounded after answering (ROUND, CEIL, FLOOR, TRUNC, CAST): post-processing, no extra privacy "
                 "cost; the standard error is the unrounded value's, and the rounding moves the value by at most "
                 "{bound:g}")
#: ... when a rounded value enters a product or ratio of aggregates.
ROUNDING_UNBOUNDED = ("rounded after answering inside a product or ratio of aggregates: post-processing, no extra "
                      "privacy cost; the standard error is the unrounded expression's, and the rounding's effect is "
                      "not bounded: round the result instead")
#: The name a hidden aggregate (measured for an expression or HAVING, not selected) is given.
HIDDEN = "{} [hidden]"

_ARITHMETIC: dict[type[exp.Expr], ir.ArithmeticOperator] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
#: Output functions by sqlglot node (CAST and ROUND are read apart: a target type, decimals).
_FUNCTIONS: dict[type[exp.Expr], ir.OutputFunction] = {
    exp.Ceil: "ceil", exp.Floor: "floor", exp.Trunc: "trunc", exp.Abs: "abs", exp.Greatest: "greatest",
    exp.Least: "least", exp.Coalesce: "coalesce", exp.Nullif: "nullif"}
_CASTS = (exp.Cast, exp.TryCast)
#: SQL types a released value may be cast to: integers (``arithmetic.INTEGER_TYPES``, rounded half to even, as
#: DuckDB casts), floats, decimals.
_REAL_TYPES = frozenset({"FLOAT", "DOUBLE", "DECFLOAT"})
_DECIMAL_TYPES = frozenset({"DECIMAL", "NUMERIC", "BIGDECIMAL"})


#: GROUPING(k, ...) and GROUPING_ID(k, ...) (``dpsql.sql.grouping_sets``): sqlglot reads them as aggregates, but
#: each is a constant of the statement's grouping set, read as one.
GROUPING_CALLS = (exp.Grouping, exp.GroupingId)

#: A select item as parsed, before :func:`finish_statement`.
ParsedItem = ir.SelectItem | ir.DerivedItem | ir.ConstantItem


# ================================================================================== parsing
ParseAggregate = Callable[[exp.Expr], "ParsedItem"]


def is_output_expression(node: exp.Expr) -> bool:
    """Whether a select item is arithmetic, a constant or an output function of aggregates (handled
    here, not as a column or aggregate)."""
    reads_aggregate = any(isinstance(n, exp.AggFunc) for n in node.walk())
    return isinstance(node, (*_ARITHMETIC, exp.Neg, exp.Literal, exp.Placeholder, exp.IntDiv, exp.Mod, exp.Pow,
                             exp.Window)) \
        or (isinstance(node, exp.Cast) and not any(isinstance(n, exp.Column) for n in node.walk())) \
        or (isinstance(node, (*_FUNCTIONS, *_CASTS, exp.Round)) and reads_aggregate)


def parse_output(value: exp.Expr, alias: str | None, span: ir.Span, scope: Scope,
                 parse_aggregate: ParseAggregate) -> ir.DerivedItem | ir.ConstantItem:
    """A select item that is arithmetic or a constant; ``parse_aggregate`` reads an aggregate leaf."""
    name = alias or " ".join(scope.source.text[node_span(value, scope).start:node_span(value, scope).end].split())
    if not any(isinstance(node, exp.AggFunc) and not isinstance(node, GROUPING_CALLS) for node in value.walk()):
        constant = _constant(value, scope, parse_aggregate)
        if isinstance(constant, int) and not -2**63 <= constant < 2**63:
            raise InvalidQueryError(f"the constant output {name} is outside the range of a 64-bit integer "
                                    f"({span.describe()}); write it as a decimal (e.g. {constant}.0).")
        return ir.ConstantItem(value=constant, alias=name, span=span)
    return ir.DerivedItem(expression=_expression(value, scope, parse_aggregate, None), alias=name, span=span)


def _constant(node: exp.Expr, scope: Scope, parse_aggregate: ParseAggregate) -> ir.Value:
    """A constant output: a literal as written, or numeric arithmetic (of GROUPING() too) folded to a number."""
    if not isinstance(node, (*_ARITHMETIC, exp.Neg, exp.Paren)) or _is_negative_number(node):
        return parse_value(node, scope, "the SELECT list").value
    folded = _fold(_expression(node, scope, parse_aggregate, None))
    assert folded is not None
    return folded


def _is_negative_number(node: exp.Expr) -> bool:
    return isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string


def _no_aggregate(node: exp.Expr) -> ParsedItem:
    raise AssertionError("no aggregate in a constant")


HavingNames = Callable[[exp.Column], ir.Expression]


def _expression(node: exp.Expr, scope: Scope, parse_aggregate: ParseAggregate,
                names: HavingNames | None) -> ir.Expression:
    """Arithmetic over aggregates and constants (and, in HAVING, ``names``: output and group columns)."""
    span = node_span(node, scope)
    if isinstance(node, exp.Paren):
        return _expression(node.this, scope, parse_aggregate, names)
    operator = _ARITHMETIC.get(type(node))
    if operator is not None:
        left = _expression(node.this, scope, parse_aggregate, names)
        right = _expression(node.expression, scope, parse_aggregate, names)
        if operator == "/" and _fold(right) == 0:
            raise invalid("division by the constant zero", node, scope, "Divide by a non-zero constant or aggregate.")
        for side, operand in (("left", left), ("right", right)):
            if isinstance(operand, ir.Constant) and not _numeric(operand.value):
                raise unsupported(f"a non-number on the {side} of {operator}", node, scope, _EXPRESSION_SUPPORTED)
        return ir.Arithmetic(operator=operator, left=left, right=right, span=span)
    if isinstance(node, exp.Neg) and not _is_negative_number(node):
        return ir.Negate(operand=_expression(node.this, scope, parse_aggregate, names), span=span)
    if isinstance(node, (exp.IntDiv, exp.Mod, exp.Pow)):
        raise unsupported(f"{describe(node, scope)} (//, %, ^)", node, scope, _EXPRESSION_SUPPORTED)
    if isinstance(node, (*_FUNCTIONS, *_CASTS, exp.Round)):
        return _call(node, scope, lambda n: _expression(n, scope, parse_aggregate, names))
    if isinstance(node, exp.Window):  # over the released groups (dpsql.sql.windows)
        return windows.parse_window(node, scope, lambda n: _expression(n, scope, parse_aggregate, names))
    if isinstance(node, (exp.AggFunc, exp.Filter)):  # exp.Filter: an aggregate with FILTER (WHERE ...)
        item = parse_aggregate(node)
        if isinstance(item, ir.ConstantItem):  # GROUPING(): a constant of the grouping set
            return ir.Constant(value=item.value, span=span)
        if not isinstance(item, ir.Aggregate):
            raise unsupported(f"{describe(node, scope)} inside an expression", node, scope,
                              "Only COUNT, SUM and AVG compose; select it by itself.")
        return ir.AggregateLeaf(aggregate=item, span=span)
    if isinstance(node, exp.Column) and names is not None:
        return names(node)
    if isinstance(node, exp.Column):
        raise unsupported("a column in an output expression", node, scope,
                          _EXPRESSION_SUPPORTED + " Select the column by itself (and GROUP BY it).")
    try:
        return ir.Constant(value=parse_value(node, scope, "an output expression").value, span=span)
    except UnsupportedQueryError:
        raise unsupported(f"{describe(node, scope)} in an output expression", node, scope,
                          _EXPRESSION_SUPPORTED) from None


def _call(node: exp.Expr, scope: Scope, operand: Callable[[exp.Expr], ir.Expression]) -> ir.Call:
    """An output function: ROUND(x [, d]), CEIL/FLOOR/TRUNC/ABS(x), GREATEST/LEAST/COALESCE(x, ...),
    NULLIF(x, y), CAST(x AS <integer, floating-point or DECIMAL(p, s) type>)."""
    span = node_span(node, scope)
    if isinstance(node, _CASTS):
        target = node.to
        name = target.this.name if isinstance(target, exp.DataType) else ""
        if name in INTEGER_TYPES:
            return ir.Call(function="cast_integer", operands=(operand(node.this),), span=span)
        if name in _REAL_TYPES:
            return ir.Call(function="cast_real", operands=(operand(node.this),), span=span)
        if name in _DECIMAL_TYPES:
            sizes = [e.this for e in target.expressions if isinstance(e, exp.DataTypeParam)]
            scale = int(sizes[1].name) if len(sizes) > 1 and sizes[1].is_int else 0 if sizes else 3
            return ir.Call(function="round", operands=(operand(node.this),), span=span, digits=scale)
        raise unsupported(f"CAST of a released value to {target.sql() if target is not None else 'this type'}",
                          node, scope, "Cast to an integer, floating-point or DECIMAL type, or format the value "
                          "after fetching.")
    if isinstance(node, exp.Round):
        digits = 0
        decimals = node.args.get("decimals")
        if decimals is not None:
            folded = _fold(_expression(decimals, scope, _no_aggregate, None)) \
                if not any(isinstance(n, (exp.AggFunc, exp.Column)) for n in decimals.walk()) else None
            if not isinstance(folded, int) or isinstance(folded, bool) or abs(folded) > 300:
                raise unsupported("ROUND with decimals that are not an integer constant", decimals, scope,
                                  "Write the number of decimals as an integer, e.g. ROUND(AVG(income), 2).")
            digits = folded
        return ir.Call(function="round", operands=(operand(node.this),), span=span, digits=digits)
    function = _FUNCTIONS[type(node)]
    arguments = [node.this, *(node.expressions or []), *([node.expression] if function == "nullif" else [])]
    return ir.Call(function=function, operands=tuple(operand(a) for a in arguments), span=span)


def _numeric(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fold(expression: ir.Expression) -> float | int | None:
    """The value of an expression of numeric constants only (None when it reads anything else)."""
    if isinstance(expression, ir.Constant):
        return expression.value if _numeric(expression.value) else None  # type: ignore[return-value]
    if isinstance(expression, ir.Negate):
        inner = _fold(expression.operand)
        return None if inner is None else -inner
    if isinstance(expression, ir.Arithmetic):
        left, right = _fold(expression.left), _fold(expression.right)
        if left is None or right is None:
            return None
        if expression.operator == "/":
            return left / right if right != 0 else None
        return {"+": left + right, "-": left - right, "*": left * right}[expression.operator]
    return None


def measures(item: object) -> bool:
    """Whether a parsed select item reads an aggregate."""
    return isinstance(item, (ir.Aggregate, ir.DerivedItem))


def has_stddev(item: object) -> bool:
    """Whether an output has a ``<alias>_stddev`` column beside it."""
    return isinstance(item, (ir.Aggregate, ir.DerivedItem))


def having_measures(select: exp.Select) -> bool:
    """Whether the statement's HAVING clause reads an aggregate."""
    having = select.args.get("having")
    return having is not None and any(isinstance(node, exp.AggFunc) and not isinstance(node, GROUPING_CALLS)
                                      for node in having.walk())


# -------------------------------------------------------------------------------------------- HAVING
def parse_having(having: exp.Having, items: tuple[ParsedItem, ...],
                 group_by: tuple[ir.Column, ...], scope: Scope, parse_aggregate: ParseAggregate) -> ir.Condition:
    """The HAVING condition; a column names an output (by its name) or a GROUP BY column."""
    def names(node: exp.Column) -> ir.Expression:
        span = node_span(node, scope)
        name = node.name.lower()
        if not node.table:
            for item in items:
                if item.alias.lower() == name:
                    return ir.OutputRef(name=item.alias, span=span)
        for position, column in enumerate(group_by):
            if column.name.lower() == name:
                return ir.GroupRef(position=position, span=span)
        raise invalid(f"HAVING column '{node.name}' is neither an output name nor a GROUP BY column", node, scope,
                      "HAVING reads aggregates, output names and GROUP BY columns; put row conditions in WHERE.")

    return _condition(unparen(having.this), scope, lambda n: _expression(n, scope, parse_aggregate, names))


def _condition(node: exp.Expr, scope: Scope, operand: Callable[[exp.Expr], ir.Expression]) -> ir.Condition:
    span = node_span(node, scope)
    if isinstance(node, exp.Paren):
        return _condition(node.this, scope, operand)
    if isinstance(node, (exp.And, exp.Or)):
        parts = (_condition(node.this, scope, operand), _condition(node.expression, scope, operand))
        return ir.Connective(all_of=isinstance(node, exp.And), operands=parts, span=span)
    if isinstance(node, exp.Not):
        inner = unparen(node.this)
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return ir.NullTest(operand=operand(inner.this), negated=True, span=span)
        return ir.Negation(operand=_condition(node.this, scope, operand), span=span)
    if type(node) in OPERATORS:
        return ir.Compare(operator=OPERATORS[type(node)], left=operand(node.this), right=operand(node.expression),
                       span=span)
    if isinstance(node, exp.Between):
        return ir.Range(operand=operand(node.this), low=operand(node.args["low"]), high=operand(node.args["high"]),
                     negated=False, span=span)
    if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
        return ir.Among(operand=operand(node.this), values=tuple(operand(v) for v in node.expressions), negated=False,
                     span=span)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return ir.NullTest(operand=operand(node.this), negated=False, span=span)
    raise unsupported(f"{describe(node, scope)} in HAVING", node, scope, _HAVING_SUPPORTED)


# ================================================================================== the statement
def finish_statement(statement: ir.Statement, parsed: tuple[ParsedItem, ...],
                     having: ir.Condition | None) -> ir.Statement:
    """The statement with its select items: unchanged when they are group columns and plain aggregates
    and there is no HAVING; else the measured aggregates numbered and the outputs, HAVING, ORDER BY
    and LIMIT moved to ``statement.outputs``."""
    plain = tuple(item for item in parsed if isinstance(item, (ir.GroupColumn, ir.Aggregate)))
    if having is None and len(plain) == len(parsed):
        return replace(statement, select=plain)
    measured: list[ir.Aggregate] = []
    keys: list[object] = []

    def number(aggregate: ir.Aggregate, hidden: bool) -> int:
        key = _aggregate_key(aggregate)
        if key in keys:
            return keys.index(key)
        keys.append(key)
        measured.append(replace(aggregate, alias=_hidden_name(aggregate.alias, measured)) if hidden else aggregate)
        return len(measured) - 1

    items: list[ir.OutputItem] = []
    for item in parsed:  # plain aggregates first, so that a repeated one is shown by its own name
        if isinstance(item, ir.Aggregate):
            number(item, hidden=False)
    for item in parsed:
        if isinstance(item, ir.Aggregate):
            items.append(ir.DerivedItem(expression=ir.AggregateRef(index=number(item, False), span=item.span),
                                     alias=item.alias, span=item.span, plain=True))
        elif isinstance(item, ir.DerivedItem):
            items.append(replace(item, expression=_numbered(item.expression, number)))
        else:
            items.append(item)
    condition = None if having is None else _numbered_condition(having, number)
    groups = tuple(item for item in parsed if isinstance(item, ir.GroupColumn))
    return replace(statement, select=groups + tuple(measured), order_by=(), limit=None, offset=0,
                   outputs=ir.Outputs(items=tuple(items), having=condition, order_by=statement.order_by,
                                   limit=statement.limit, offset=statement.offset))


def _hidden_name(alias: str, measured: list[ir.Aggregate]) -> str:
    """``<alias> [hidden]``, numbered when two hidden aggregates share a default name (``count [hidden 2]``)."""
    taken = {aggregate.alias.lower() for aggregate in measured}
    name, number = HIDDEN.format(alias), 2
    while name.lower() in taken:
        name, number = f"{alias} [hidden {number}]", number + 1
    return name


def _aggregate_key(aggregate: ir.Aggregate) -> object:
    """What makes two aggregates the same query: every field but names and positions."""
    return _strip(aggregate)


def _strip(value: object) -> object:
    if isinstance(value, ir.Column):
        return ("column", value.name.lower())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,) + tuple(
            (f.name, _strip(getattr(value, f.name))) for f in dataclasses.fields(value)
            if f.name not in {"alias", "span", "text"})
    if isinstance(value, tuple):
        return tuple(_strip(v) for v in value)
    return value


def _numbered(expression: ir.Expression, number: Callable[[ir.Aggregate, bool], int]) -> ir.Expression:
    if isinstance(expression, ir.AggregateLeaf):
        return ir.AggregateRef(index=number(expression.aggregate, True), span=expression.span)
    if isinstance(expression, ir.Call):
        return replace(expression, operands=tuple(_numbered(o, number) for o in expression.operands))
    if isinstance(expression, ir.Negate):
        return replace(expression, operand=_numbered(expression.operand, number))
    if isinstance(expression, ir.Arithmetic):
        return replace(expression, left=_numbered(expression.left, number), right=_numbered(expression.right, number))
    if isinstance(expression, ir.Window):
        return replace(expression, argument=_numbered(expression.argument, number))
    return expression


def _numbered_condition(condition: ir.Condition, number: Callable[[ir.Aggregate, bool], int]) -> ir.Condition:
    def go(expression: ir.Expression) -> ir.Expression:
        return _numbered(expression, number)
    if isinstance(condition, ir.Compare):
        return replace(condition, left=go(condition.left), right=go(condition.right))
    if isinstance(condition, ir.Range):
        return replace(condition, operand=go(condition.operand), low=go(condition.low), high=go(condition.high))
    if isinstance(condition, ir.Among):
        return replace(condition, operand=go(condition.operand), values=tuple(go(v) for v in condition.values))
    if isinstance(condition, ir.NullTest):
        return replace(condition, operand=go(condition.operand))
    if isinstance(condition, ir.Negation):
        return replace(condition, operand=_numbered_condition(condition.operand, number))
    return replace(condition, operands=tuple(_numbered_condition(c, number) for c in condition.operands))


def operands(expression: ir.Expression) -> tuple[ir.Expression, ...]:
    """The expressions an arithmetic, unary minus or output function reads; () for a leaf."""
    if isinstance(expression, ir.Arithmetic):
        return expression.left, expression.right
    if isinstance(expression, ir.Negate):
        return (expression.operand,)
    if isinstance(expression, ir.Window):
        return (expression.argument,)
    return expression.operands if isinstance(expression, ir.Call) else ()


def aggregate_refs(expression: ir.Expression) -> Iterator[int]:
    """The measured aggregates an expression reads (with repeats)."""
    if isinstance(expression, ir.AggregateRef):
        yield expression.index
    for operand in operands(expression):
        yield from aggregate_refs(operand)


def rounding_bound(expression: ir.Expression) -> float:
    """How far the output functions of an expression move its value at most: ½·10⁻ᵈ for ROUND to d
    decimals (and a CAST to DECIMAL(p, d)), ½ for a CAST to an integer, 1 for CEIL, FLOOR and TRUNC,
    added through + and −, scaled through · and / by a constant, summed over nested ones (0: nothing
    rounds; infinite: a rounded value in a product or ratio of aggregates, whose effect has no bound)."""
    if isinstance(expression, ir.Negate):
        return rounding_bound(expression.operand)
    if isinstance(expression, ir.Arithmetic):
        left, right = rounding_bound(expression.left), rounding_bound(expression.right)
        if expression.operator in "+-" or left == right == 0:
            return left + right
        factor = _fold(expression.right) if expression.operator == "/" else \
            _fold(expression.left) if left == 0 else _fold(expression.right) if right == 0 else None
        if factor is None or factor == 0:
            return math.inf
        return (left + right) / abs(factor) if expression.operator == "/" else (left + right) * abs(factor)
    if not isinstance(expression, ir.Call):
        return 0.0
    own = {"round": 0.5 * 10.0 ** -expression.digits, "cast_integer": 0.5, "ceil": 1.0, "floor": 1.0,
           "trunc": 1.0}.get(expression.function, 0.0)
    return own + sum(rounding_bound(o) for o in expression.operands)


def rounding_note(bound: float) -> str:
    """What is said of an output whose rounding moves it by at most ``bound``."""
    return ROUNDING_UNBOUNDED if math.isinf(bound) else ROUNDING_NOTE.format(bound=bound)


def spread_note(aggregate: ir.Aggregate) -> str:
    """How a variance or standard deviation is estimated, and its bias (EXPLAIN and the result metadata)."""
    sample = aggregate.function.endswith("samp")
    formula = "(S₂ − S₁²/n)/(n − 1)" if sample else "S₂/n − (S₁/n)²"
    note = (f"{formula} from the noisy COUNT n, SUM S₁ and SUM of squares S₂ of the values clamped to the measure "
            "bounds (three data vectors, independent noise); standard error by the delta method; NULL where "
            f"{'n − 1' if sample else 'n'} is below max(1, 2 standard errors of n), as for AVG")
    if aggregate.function.startswith("var"):
        return note + "; not clamped: noise can make it negative"
    return (note + "; the standard deviation is √max(variance, 0): clamped at 0 where the noisy variance is negative, "
            "which biases it upward where the true variance is within about 2 of its standard errors of 0, and "
            "√ biases it down by about SE(variance)²/(8·variance^1.5) elsewhere; its standard error is "
            "min(SE(variance)/(2·value), √SE(variance))")


def explain_notes(statement: ir.Statement) -> list[str]:
    """EXPLAIN's notes on a statement's variances and standard deviations, UNION ALL (or grouping set), hidden
    aggregates and HAVING."""
    notes = [f"{a.alias}: {spread_note(a)}" for a in statement.aggregates if a.function in SPREADS]
    union = statement.union
    if union is not None and union.grouping_set is not None:
        notes.append(f"grouping set {union.grouping_set}, part {union.part + 1} of {union.parts} of the GROUP BY at "
                     f"{union.span.describe()}, returned as one table (NULL for the keys it rolls up)")
    elif union is not None:
        notes.append(f"part {union.part + 1} of {union.parts} of the UNION ALL at {union.span.describe()}, returned "
                     "as one table")
    if statement.outputs is None:
        return notes
    hidden = [a.alias for a in statement.aggregates if a.alias.endswith(HIDDEN.format(""))]
    if hidden:
        notes.append(f"measured for expressions or HAVING, not shown: {', '.join(hidden)}; the outputs computed from "
                     "the aggregates are post-processing, no extra privacy cost")
    if statement.outputs.having is not None:
        notes.append(HAVING_NOTE)
    for item in statement.outputs.items:
        bound = rounding_bound(item.expression) if isinstance(item, ir.DerivedItem) else 0.0
        if bound:
            notes.append(f"{item.alias}: {rounding_note(bound)}")
        found = windows.windows_of(item.expression) if isinstance(item, ir.DerivedItem) else []
        if found:
            notes.append(f"{item.alias}: {windows.describe_windows(found)}")
    return notes


def covariance_pairs(statement: ir.Statement) -> bool:
    """Whether the statement's outputs need the covariances of its aggregates' answers (an
    expression reading two or more different aggregates, or an AVG)."""
    if statement.outputs is None:
        return False
    return any(isinstance(item, ir.DerivedItem) and not item.plain
               and (len(set(aggregate_refs(item.expression))) > 1
                    or any(statement.aggregates[i].function in ("avg", *SPREADS)
                           for i in aggregate_refs(item.expression)))
               for item in statement.outputs.items)


# ================================================================================== checks against the schema
Kind = TypingLiteral["number", "string", "date", "unknown"]


def refuse_order_statistics(statement: ir.Statement, construct: str) -> None:
    """Order statistics (``dpsql.sql.quantiles``) come with their interval columns and are answered
    apart from other aggregates: not (yet) inside derived outputs, HAVING or UNION ALL."""
    for aggregate in statement.aggregates:
        if aggregate.function == "quantile":
            raise UnsupportedQueryError(
                f"the order statistic {aggregate.alias} ({aggregate.span.describe()}) in a statement with {construct} "
                "is not supported: its value comes with a 95 % interval (<alias>_low, <alias>_high) that those "
                "outputs cannot carry. Ask for it in a statement of its own (it is measured with the batch).")


def check_outputs(statement: ir.Statement, table: sch.Table, groups: npt.NDArray[np.int64], cells: int) -> None:
    """Before anything is spent: output names unique (with ``_stddev``/``_upper``), ORDER BY keys known,
    HAVING comparing values of one kind (numbers, strings or dates), and windows over the statement's
    ``groups`` (each row's group per GROUP BY column) of ``cells`` cells answerable
    (``dpsql.sql.windows``), so that answering never fails."""
    outputs = statement.outputs
    if outputs is None:
        return
    windows.check_windows(statement, table, groups, cells)
    refuse_order_statistics(statement, "HAVING, arithmetic or constant columns")
    names: list[str] = []
    for item in outputs.items:
        names.append(item.alias)
        if has_stddev(item):
            names.append(f"{item.alias}_stddev")
        elif isinstance(item, ir.GroupColumn):
            domain = table.column(item.column.name).domain
            if isinstance(domain, sch.Ordered) and domain.reports_upper:
                names.append(f"{item.alias}_upper")
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            raise InvalidQueryError(f"the output column name '{name}' would appear twice in the statement at "
                                    f"{statement.span.describe()} (dpsql adds <alias>_stddev beside each aggregate "
                                    "or expression and <column>_upper beside wide bins); choose another alias.")
        seen.add(name.lower())
    for order in outputs.order_by:
        if isinstance(order.key, str) and order.key.lower() not in seen:
            raise UnsupportedQueryError(f"ORDER BY {order.key} ({order.span.describe()}) names no output column; use "
                                        f"one of {', '.join(i.alias for i in outputs.items)} or a 1-based position.")
    for item in outputs.items:
        if isinstance(item, ir.DerivedItem) and not item.plain:
            _check_composable(item.expression, statement)
    if outputs.having is not None:
        _check_condition(outputs.having, statement, table)


#: The aggregates whose answers (and standard errors) compose in expressions.
COMPOSABLE = frozenset({"count", "sum", "avg", *SPREADS})


def _check_composable(expression: ir.Expression, statement: ir.Statement) -> None:
    """Expressions read COUNT, SUM, AVG, variances and standard deviations (whose variances and covariances
    are known)."""
    for index in aggregate_refs(expression):
        aggregate = statement.aggregates[index]
        if aggregate.function not in COMPOSABLE:
            raise UnsupportedQueryError(f"{aggregate.function.upper()} inside an expression "
                                        f"({aggregate.span.describe()}) is not supported: only COUNT, SUM, AVG, "
                                        "variances and standard deviations compose. Select it by itself.")


def _kind(expression: ir.Expression, statement: ir.Statement, table: sch.Table) -> Kind:
    if isinstance(expression, ir.Constant):
        value = expression.value
        return "number" if _numeric(value) else "date" if isinstance(value, dt.date) else "string"
    if isinstance(expression, ir.GroupRef):
        return _column_kind(table.column(statement.group_by[expression.position].name))
    if isinstance(expression, ir.OutputRef):
        assert statement.outputs is not None
        item = next(i for i in statement.outputs.items if i.alias == expression.name)
        if isinstance(item, ir.GroupColumn):
            return _column_kind(table.column(item.column.name))
        if isinstance(item, ir.ConstantItem):
            return _kind(ir.Constant(value=item.value, span=item.span), statement, table)
        return "number"
    return "number"


def _column_kind(column: sch.Column) -> Kind:
    domain = column.domain
    if isinstance(domain, sch.Categorical):
        return "string" if all(isinstance(v, str) for v in domain.values) else "number"
    return "date" if domain.kind == "date" else "number"


def _check_condition(condition: ir.Condition, statement: ir.Statement, table: sch.Table) -> None:
    if isinstance(condition, (ir.Connective, ir.Negation)):
        for part in condition.operands if isinstance(condition, ir.Connective) else (condition.operand,):
            _check_condition(part, statement, table)
        return
    if isinstance(condition, ir.NullTest):
        return
    first, others = ((condition.left, (condition.right,)) if isinstance(condition, ir.Compare)
                     else (condition.operand, (condition.low, condition.high)) if isinstance(condition, ir.Range)
                     else (condition.operand, condition.values))
    for other in (first, *others):
        if isinstance(other, ir.Arithmetic | ir.Negate | ir.Call):
            _check_arithmetic(other, statement, table)
    kinds = {_kind(e, statement, table) for e in (first, *others)}
    if len(kinds) > 1:
        raise UnsupportedQueryError(f"HAVING at {condition.span.describe()} compares values of different types "
                                    f"({' and '.join(sorted(kinds))}); compare numbers with numbers, strings with "
                                    "strings and dates with dates.")


def _check_arithmetic(expression: ir.Expression, statement: ir.Statement, table: sch.Table) -> None:
    """Arithmetic in HAVING reads numbers only."""
    parts = operands(expression)
    for part in parts:
        _check_arithmetic(part, statement, table)
    if not parts and _kind(expression, statement, table) != "number":
        raise UnsupportedQueryError(f"HAVING arithmetic at {expression.span.describe()} reads a non-number; "
                                    "arithmetic takes aggregates, numeric outputs and numbers.")
