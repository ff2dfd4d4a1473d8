"""WHERE predicates, and the columns and constants in them, translated into the IR.

One function per construct, dispatched on the sqlglot node type (``_PREDICATES``, ``_VALUES``):
comparisons (``5 < age`` is turned around to ``age > 5``), [NOT] BETWEEN, [NOT] IN, IS [NOT] NULL,
[NOT] LIKE/ILIKE (their cells: :mod:`dpsql.sql.filters`), NOT, AND/OR (nested same-kind connectives
flattened) and parentheses; constants are numbers, -numbers, strings, dates (a timestamp at midnight:
:mod:`dpsql.sql.timestamps`; CURRENT_DATE; a date ± an interval of days, weeks, months, quarters or
years) and bound ``?`` parameters. Every node keeps its span, and anything else is refused
with :class:`~dpsql.errors.UnsupportedQueryError` located in the text (:mod:`dpsql.sql.source`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from sqlglot import exp

from dpsql.errors import InvalidQueryError, UnsupportedQueryError
from dpsql.sql import ir, timestamps
from dpsql.sql.arithmetic import StepForm, affine, has_step, level_set, step_form
from dpsql.sql.source import (
    Scope,
    describe,
    fragment,
    invalid,
    is_empty,
    located,
    node_span,
    representable,
    unparen,
    unsupported,
)

_WHERE_SUPPORTED = (
    "WHERE supports column <op> constant (=, <>, !=, <, <=, >, >=), column [NOT] BETWEEN constant AND "
    "constant, column [NOT] IN (constants), column IS [NOT] NULL, column [NOT] LIKE|ILIKE 'pattern' "
    "(categorical columns), NOT, AND, OR and parentheses; the column may carry + - * / by numbers "
    "(age + 1 > 30, income / 12 >= 4000, 2 * hours < 80) and be rounded by FLOOR, CEIL, TRUNC, ROUND, // or a "
    "CAST to an integer where the steps fall on cell boundaries (FLOOR(age / 5) = 6, age // 10 <= 2)."
)
_LIKE_SUPPORTED = "LIKE, NOT LIKE and ILIKE take a 'string' pattern (or a ? bound to one), optionally ESCAPE 'c'."
_IS_SUPPORTED = "WHERE supports column IS NULL and column IS NOT NULL."
_VALUE_SUPPORTED = ("Constants are numbers, -numbers, 'strings', DATE 'YYYY-MM-DD', TIMESTAMP 'YYYY-MM-DD 00:00:00', "
                    "CURRENT_DATE, a date ± INTERVAL n DAY|WEEK|MONTH|QUARTER|YEAR and ? parameters.")
OPERATORS: dict[type[exp.Expr], ir.ComparisonOperator] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}
#: DuckDB's default schema: ``main.people`` is ``people``.
DEFAULT_SCHEMA = "main"
_FLIPPED: dict[ir.ComparisonOperator, ir.ComparisonOperator] = {
    "=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<=",
}


# --------------------------------------------------------------------------------------------------
# Columns


def parse_column(node: exp.Expr, scope: Scope, context: str, supported: str) -> ir.Column:
    """A plain column, optionally qualified by the table name or alias.

    Args:
        context: Where the column stands, for messages: 'in GROUP BY', 'in SUM()', 'before IN'.
    """
    node = unparen(node)
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
        described = "*" if isinstance(node, exp.Column) else describe(node, scope)
        raise unsupported(f"{described} {context}", node, scope, supported)
    schema = node.args.get("db")
    if not is_empty(node.args.get("catalog")) or (schema is not None and schema.name.lower() != DEFAULT_SCHEMA):
        raise unsupported("a column qualified by a schema other than main, or by a catalog", node, scope, supported)
    qualifier = node.table or None
    table = None if qualifier is None else scope.table_of(qualifier)
    if qualifier is not None and table is None:
        names = f"neither table '{scope.table}' nor its alias '{scope.alias}'" if scope.alias else \
            f"not table '{scope.table}'"
        if scope.joined:
            names = "none of the tables in FROM and JOIN nor their aliases"
        raise invalid(f"Column qualifier '{qualifier}' is {names}", node, scope,
                      "Qualify columns by the table name or alias, or not at all.")
    return ir.Column(name=node.name, qualifier=qualifier, span=node_span(node, scope),
                     qualified_table=table if scope.joined else None)


# --------------------------------------------------------------------------------------------------
# WHERE


def parse_predicate(node: exp.Expr, scope: Scope) -> ir.Predicate:
    """Dispatch on the node type through ``_PREDICATES``; anything else is unsupported."""
    parse = _PREDICATES.get(type(node))
    if parse is None:
        construct = "a bare column as a condition" if isinstance(node, exp.Column) else describe(node, scope)
        raise unsupported(construct, node, scope, _WHERE_SUPPORTED)
    return parse(node, scope)



@dataclass(frozen=True, slots=True)
class _Solved:
    """A side of a condition that is one column under + − · / by numbers, inverted: the column's value
    for a value v of the side is ``scale · v + shift`` (exact rationals); ``scale < 0`` flips an order."""

    column: exp.Column
    scale: Fraction
    shift: Fraction

    def value(self, literal: ir.Literal, node: exp.Expr, scope: Scope) -> ir.Literal:
        """The constant the column is compared with, for the side's constant ``literal``."""
        if isinstance(literal.value, bool) or not isinstance(literal.value, (int, float)):
            raise unsupported("arithmetic on a column compared with a non-number", node, scope, _WHERE_SUPPORTED)
        solved = self.scale * Fraction(literal.value) + self.shift
        return replace(literal, value=int(solved) if solved.denominator == 1 else float(solved))


def _solve(node: exp.Expr, scope: Scope) -> _Solved | None:
    """``node`` as one column under + − · / by numbers (``x + c``, ``c − x``, ``x · c``, ``x / c``,
    ``−x``, nested: :func:`~dpsql.sql.arithmetic.affine`), inverted exactly; None when it is not (a plain
    column is scale 1, shift 0).

    As DuckDB evaluates ``/`` (a division, not an integer division) and the inversion is exact, the
    condition holds for the same values of the column, except where the engine's floating-point
    arithmetic rounds at the boundary itself."""
    found = affine(node, scope)
    if found is None or not isinstance(unparen(found[0]), exp.Column):
        return None
    column, a, b = found
    if a == 0:
        raise unsupported("a column multiplied by zero", node, scope, _WHERE_SUPPORTED)
    column_node = unparen(column)
    assert isinstance(column_node, exp.Column)
    return _Solved(column_node, 1 / a, -b / a)  # v = a·u + b ⇔ u = (v − b) / a


def _column_side(node: exp.Expr, scope: Scope) -> tuple[exp.Expr, _Solved | None]:
    """A condition's column side: a plain column as is, arithmetic on one column solved (else as is)."""
    node = unparen(node)
    if isinstance(node, exp.Column):
        return node, None
    solved = _solve(node, scope)
    return (node, None) if solved is None else (solved.column, solved)


def _step_side(node: exp.Expr, scope: Scope) -> StepForm | None:
    """A condition's side that rounds one column (``FLOOR(age / 5) * 5``, ``age // 10``, ``CAST(x / 3 AS
    INTEGER)``: :func:`~dpsql.sql.arithmetic.step_form`), else None."""
    node = unparen(node)
    if isinstance(node, exp.Column) or node.find(exp.Column) is None or not has_step(node):
        return None
    return step_form(node, scope, "in WHERE", _WHERE_SUPPORTED)


def _step_condition(form: StepForm, operator: ir.ComparisonOperator, literal: ir.Literal, node: exp.Expr,
                    scope: Scope) -> ir.Predicate:
    """``p · s + q op v`` with s = step(a · x + b), solved for x.

    s op' k with k = (v − q) / p (op flipped for p < 0). s takes whole values, so s < k ⇔ s ≤ ⌈k⌉ − 1,
    s > k ⇔ s ≥ ⌊k⌋ + 1, and s = k needs a whole k; s ≤ m (s ≥ m) ⇔ y is at or below (above) the level set
    {y : s(y) = m}, an interval (:func:`~dpsql.sql.arithmetic.level_set`): FLOOR(y) ≤ 6 ⇔ y < 7. Then
    y = a · x + b is solved for x as arithmetic without a step is. ``<>`` is NOT ``=``, so a NULL column
    stays UNKNOWN, as in SQL."""
    if isinstance(literal.value, bool) or not isinstance(literal.value, (int, float)):
        raise unsupported("a rounded column compared with a non-number", node, scope, _WHERE_SUPPORTED)
    k = (Fraction(literal.value) - form.outer_shift) / form.outer_scale
    operator = _FLIPPED[operator] if form.outer_scale < 0 else operator
    span = node_span(node, scope)

    def on_column(y_operator: ir.ComparisonOperator, y: Fraction) -> ir.Comparison:
        x = (y - form.inner_shift) / form.inner_scale
        return ir.Comparison(column=parse_column(form.column, scope, "in WHERE", _WHERE_SUPPORTED),
                             operator=_FLIPPED[y_operator] if form.inner_scale < 0 else y_operator,
                             value=replace(literal, value=int(x) if x.denominator == 1 else float(x)), span=span)

    if operator in ("=", "<>"):
        if k.denominator != 1:
            raise unsupported(f"{describe(node, scope)}, which is never {'TRUE' if operator == '=' else 'FALSE'}",
                              node, scope, "The rounded value takes whole steps: compare it with one of them, or "
                              "with a range.")
        level = level_set(form.step, int(k))
        both = ir.And(operands=(on_column(">=" if level.low_closed else ">", level.low),
                                on_column("<=" if level.high_closed else "<", level.high)), span=span)
        return both if operator == "=" else ir.Not(operand=both, span=span)
    if operator in ("<", "<="):
        level = level_set(form.step, math.ceil(k) - 1 if operator == "<" else math.floor(k))
        return on_column("<=" if level.high_closed else "<", level.high)
    level = level_set(form.step, math.floor(k) + 1 if operator == ">" else math.ceil(k))
    return on_column(">=" if level.low_closed else ">", level.low)


def _step_membership(form: StepForm, values: tuple[ir.Literal, ...], node: exp.In, scope: Scope) -> ir.Predicate:
    """``rounded IN (v, ...)``: an OR of the equalities of the values the rounded side can take."""
    possible = [v for v in values if not isinstance(v.value, (int, float)) or isinstance(v.value, bool)
                or ((Fraction(v.value) - form.outer_shift) / form.outer_scale).denominator == 1]
    if not possible:
        raise unsupported(f"{describe(node, scope)}, which is never TRUE", node, scope,
                          "The rounded value takes whole steps: list some of them.")
    equalities = tuple(_step_condition(form, "=", value, node, scope) for value in possible)
    return equalities[0] if len(equalities) == 1 else ir.Or(operands=equalities, span=node_span(node, scope))


def _parse_comparison(node: exp.Binary, scope: Scope) -> ir.Predicate:
    """``column op constant`` or ``constant op column`` (turned around: ``5 < age`` is ``age > 5``);
    a column under + − · / by numbers is solved for the column (``age + 1 > 30`` is ``age > 29``,
    ``-2 * x < 6`` is ``x > -3``), and so is a rounded one (``FLOOR(age / 5) = 6`` is ``age >= 30 AND
    age < 35``: :func:`_step_condition`)."""
    left, right = unparen(node.this), unparen(node.expression)
    operator = OPERATORS[type(node)]
    if right.find(exp.Column) is not None and left.find(exp.Column) is None:
        left, right, operator = right, left, _FLIPPED[operator]
    form = _step_side(left, scope) if right.find(exp.Column) is None else None
    if form is not None:
        return _step_condition(form, operator, parse_value(right, scope, "a comparison"), node, scope)
    column, solved = _column_side(left, scope)
    if solved is not None and right.find(exp.Column) is None:
        value = solved.value(parse_value(right, scope, "a comparison"), right, scope)
        return ir.Comparison(column=parse_column(column, scope, "in a comparison", _WHERE_SUPPORTED),
                             operator=_FLIPPED[operator] if solved.scale < 0 else operator, value=value,
                             span=node_span(node, scope))
    if isinstance(left, exp.Column) and isinstance(right, exp.Column):
        quoted = next((side for side in (right, left) if _quoted_name(side) is not None), None)
        if quoted is not None:
            raise _double_quoted(quoted, "a comparison", scope)
        raise unsupported("column-to-column comparison", node, scope, _WHERE_SUPPORTED)
    if isinstance(right, exp.Column):
        left, right, operator = right, left, _FLIPPED[operator]
    if not isinstance(left, exp.Column):
        culprit = next((side for side in (left, right) if side.find(exp.Column)), None)
        construct = "a comparison without a column" if culprit is None else describe(culprit, scope)
        raise unsupported(construct, culprit or node, scope, _WHERE_SUPPORTED)
    return ir.Comparison(column=parse_column(left, scope, "in a comparison", _WHERE_SUPPORTED),
                         operator=operator, value=parse_value(right, scope, "a comparison"),
                         span=node_span(node, scope))


def _parse_between(node: exp.Between, scope: Scope) -> ir.Between | ir.And:
    """``column BETWEEN low AND high`` (a rounded column: both comparisons); NOT BETWEEN is handled by
    ``_parse_not``."""
    if node.args.get("symmetric"):
        raise unsupported("BETWEEN SYMMETRIC", node, scope, _WHERE_SUPPORTED)
    low = parse_value(node.args["low"], scope, "a BETWEEN bound")
    high = parse_value(node.args["high"], scope, "a BETWEEN bound")
    form = _step_side(node.this, scope)
    if form is not None:
        return ir.And(operands=(_step_condition(form, ">=", low, node, scope),
                                _step_condition(form, "<=", high, node, scope)), span=node_span(node, scope))
    column, solved = _column_side(node.this, scope)
    if solved is not None:
        low, high = solved.value(low, node.args["low"], scope), solved.value(high, node.args["high"], scope)
        if solved.scale < 0:
            low, high = high, low
    return ir.Between(column=parse_column(column, scope, "before BETWEEN", _WHERE_SUPPORTED), low=low, high=high,
                      negated=False, span=node_span(node, scope))


def _parse_in(node: exp.In, scope: Scope) -> ir.InList | ir.Predicate:
    """``column IN (constant, ...)`` (a rounded column: one equality per value it can take); NOT IN is
    handled by ``_parse_not``."""
    for key in ("query", "unnest", "field"):
        if not is_empty(node.args.get(key)):
            raise unsupported(f"IN {key}", node, scope, _WHERE_SUPPORTED)
    values = tuple(parse_value(value, scope, "an IN list") for value in node.expressions)
    form = _step_side(node.this, scope)
    if form is not None:
        return _step_membership(form, values, node, scope)
    column, solved = _column_side(node.this, scope)
    if solved is not None:
        values = tuple(solved.value(v, n, scope) for v, n in zip(values, node.expressions))
    return ir.InList(column=parse_column(column, scope, "before IN", _WHERE_SUPPORTED), values=values,
                     negated=False, span=node_span(node, scope))


def _parse_not(node: exp.Not, scope: Scope) -> ir.Predicate:
    """``NOT p``; ``[NOT] x IN``/``BETWEEN`` under NOT become the negated IR forms."""
    operand, span = node.this, node_span(node, scope)
    if isinstance(operand, exp.Is):
        return _parse_is_null(operand, scope, negated=True, span=span)
    if isinstance(operand, (exp.Like, exp.ILike, exp.Escape)):
        return _parse_like(operand, scope, negated=True, span=span)
    if isinstance(operand, (exp.In, exp.Between)):
        inner = _parse_in(operand, scope) if isinstance(operand, exp.In) else _parse_between(operand, scope)
        if isinstance(inner, (ir.InList, ir.Between)):
            return replace(inner, negated=True, span=span)
        return ir.Not(operand=inner, span=span)
    return ir.Not(operand=parse_predicate(operand, scope), span=span)


def _parse_connective(node: exp.Connector, scope: Scope) -> ir.Predicate:
    """AND / OR, nested same-kind connectives (also inside parentheses) flattened into one node."""
    kind = ir.And if isinstance(node, exp.And) else ir.Or
    operands: list[ir.Predicate] = []
    for child in node.flatten():
        parsed = parse_predicate(child, scope)
        if isinstance(parsed, (ir.And, ir.Or)) and type(parsed) is kind:
            operands.extend(parsed.operands)
        else:
            operands.append(parsed)
    return kind(operands=tuple(operands), span=node_span(node, scope))


def _parse_paren(node: exp.Paren, scope: Scope) -> ir.Predicate:
    """``( predicate )``."""
    return parse_predicate(node.this, scope)


def _parse_is_null(node: exp.Is, scope: Scope, negated: bool = False, span: ir.Span | None = None) -> ir.IsNull:
    """``column IS NULL`` (``negated``: IS NOT NULL); ``x IS TRUE`` and the like are refused."""
    if not isinstance(unparen(node.expression), exp.Null):
        raise unsupported(f"IS {describe(unparen(node.expression), scope)}", node, scope, _IS_SUPPORTED)
    return ir.IsNull(column=parse_column(node.this, scope, "before IS NULL", _IS_SUPPORTED), negated=negated,
                     span=span or node_span(node, scope))


def _parse_like(node: exp.Like | exp.ILike | exp.Escape, scope: Scope, negated: bool = False,
               span: ir.Span | None = None) -> ir.Like:
    """``column [NOT] LIKE|ILIKE 'pattern' [ESCAPE 'c']``."""
    whole = node
    escape: str | None = None
    if isinstance(node, exp.Escape):
        value = parse_value(node.expression, scope, "ESCAPE").value
        if not isinstance(value, str) or len(value) != 1:
            raise unsupported("an ESCAPE that is not one character", node.expression, scope, _LIKE_SUPPORTED)
        escape, node = value, node.this
    if not isinstance(node, (exp.Like, exp.ILike)):
        raise unsupported(describe(node, scope), node, scope, _LIKE_SUPPORTED)
    pattern = parse_value(node.expression, scope, "a LIKE pattern")
    if not isinstance(pattern.value, str):
        raise unsupported("a LIKE pattern that is not a string", node.expression, scope, _LIKE_SUPPORTED)
    if escape is not None and dangling_escape(pattern.value, escape):
        raise unsupported("a LIKE pattern ending in its escape character", node.expression, scope,
                          "Escape the escape character itself, or drop it from the end of the pattern.")
    return ir.Like(column=parse_column(node.this, scope, "before LIKE", _LIKE_SUPPORTED), pattern=pattern,
                   escape=escape, case_insensitive=isinstance(node, exp.ILike),
                   negated=negated != bool(node.args.get("negate")), span=span or node_span(whole, scope))


def dangling_escape(pattern: str, escape: str) -> bool:
    """Whether the pattern ends in an escape character that quotes nothing (DuckDB refuses it).

    >>> dangling_escape("a!", "!"), dangling_escape("a!!", "!"), dangling_escape("a!%", "!")
    (True, False, False)
    """
    index = 0
    while index < len(pattern):
        if pattern[index] == escape:
            if index + 1 == len(pattern):
                return True
            index += 1
        index += 1
    return False


_PREDICATES: dict[type[exp.Expr], Callable[[Any, Scope], ir.Predicate]] = {
    **{kind: _parse_comparison for kind in OPERATORS},
    exp.Between: _parse_between,
    exp.In: _parse_in,
    exp.Not: _parse_not,
    exp.And: _parse_connective,
    exp.Or: _parse_connective,
    exp.Paren: _parse_paren,
    exp.Is: _parse_is_null,
    exp.Like: _parse_like,
    exp.ILike: _parse_like,
    exp.Escape: _parse_like,
}


# --------------------------------------------------------------------------------------------------
# Constants


def parse_value(node: exp.Expr, scope: Scope, context: str) -> ir.Literal:
    """A constant, dispatching on the node type through ``_VALUES``.

    Args:
        context: Where the value stands, for messages: 'a comparison', 'an IN list', 'LIMIT'.
    """
    parse = _VALUES.get(type(node))
    if parse is None:
        _refuse_clock(node, scope)
        if _quoted_name(node) is not None:
            raise _double_quoted(node, context, scope)
        raise unsupported(f"{describe(node, scope)} in {context}", node, scope, _VALUE_SUPPORTED)
    return parse(node, scope, context)


def _parse_constant(node: exp.Literal, scope: Scope, context: str) -> ir.Literal:
    """A string, integer or decimal literal."""
    if node.is_string:
        return ir.Literal(value=node.this, span=node_span(node, scope))
    try:
        value = _number(node.this)
    except ValueError:
        raise unsupported(f"the number {node.this}", node, scope, _VALUE_SUPPORTED) from None
    if not representable(value):
        raise InvalidQueryError(located(f"a {len(node.this)}-character number is outside the range of a double "
                                        f"(±{sys.float_info.max:.4g})",
                                        node_span(node, scope), scope.source,
                                        "No declared domain reaches it: write a number within the column's bounds."))
    return ir.Literal(value=value, span=node_span(node, scope))


def _number(text: str) -> int | float:
    """An integer if ``text`` is all digits, else a float.

    >>> _number("42"), _number("1.5e3"), _number("0.5")
    (42, 1500.0, 0.5)
    """
    return int(text) if text.isdigit() else float(text)


def _parse_negative(node: exp.Neg, scope: Scope, context: str) -> ir.Literal:
    """``-number``."""
    inner = parse_value(node.this, scope, context)
    if isinstance(inner.value, bool) or not isinstance(inner.value, (int, float)):
        raise unsupported("a minus sign before a non-number", node, scope, _VALUE_SUPPORTED)
    return ir.Literal(value=-inner.value, span=node_span(node, scope))


def _quoted_name(node: exp.Expr) -> str | None:
    """The name of an unqualified double-quoted identifier (``"F"``), else None."""
    node = unparen(node)
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier) and node.this.quoted and not node.table:
        return node.name
    return None


def _double_quoted(node: exp.Expr, context: str, scope: Scope) -> UnsupportedQueryError:
    """``"F" is an identifier; use 'F'``: SQL strings take single quotes, double quotes name a column."""
    name = _quoted_name(node) or ""
    return unsupported(f'the identifier "{name}" in {context}', node, scope,
                       f"\"{name}\" is an identifier (double quotes name a column); use '{name}' for the string.")


_CLOCK = {"CURRENT_TIMESTAMP", "CURRENT_TIME", "NOW", "LOCALTIMESTAMP", "GET_CURRENT_TIMESTAMP"}


_CLOCK_NODES = (exp.CurrentTimestamp, exp.CurrentTime, exp.CurrentDatetime)


def _refuse_clock(node: exp.Expr, scope: Scope) -> None:
    """Refuse NOW(), CURRENT_TIMESTAMP and the like (also inside arithmetic), pointing at the word: a
    time of day is finer than any date column's cells (CURRENT_DATE is read as a date)."""
    clock = next((child for child in node.walk() if isinstance(child, _CLOCK_NODES) or (
        isinstance(child, exp.Anonymous) and str(child.this).upper() in _CLOCK)), None)
    if clock is None:
        return
    start, end = node.meta.get("start"), node.meta.get("end")
    words = [index for index in range(scope.first, scope.last + 1) if scope.source.word(index) in _CLOCK]
    inside = [i for i in words if start is None or start <= scope.source.token_span(i, i).start <= (end or 0)]
    where = scope.source.token_span(inside[0], inside[0]) if inside else (
        scope.source.token_span(words[0], words[0]) if words else node_span(node, scope))
    raise unsupported(f"{scope.source.text[where.start:where.end].upper()}", where, scope,
                      "Date columns hold days: write CURRENT_DATE (± INTERVAL n DAY|WEEK|MONTH|QUARTER|YEAR) or "
                      "DATE 'yyyy-mm-dd'.")


def _parse_date(node: exp.Cast, scope: Scope, context: str) -> ir.Literal:
    """``DATE 'yyyy-mm-dd'``, ``CAST('yyyy-mm-dd' AS DATE)`` or ``'yyyy-mm-dd'::DATE``; a TIMESTAMP
    literal at midnight is its date (see :func:`dpsql.sql.timestamps.timestamp_as_date`)."""
    if node.to.is_type(*_TIMESTAMPS) and is_empty(node.args.get("format")):
        return _parse_timestamp(node, scope, context)
    if not node.to.is_type(exp.DataType.Type.DATE) or not is_empty(node.args.get("format")):
        raise unsupported(f"CAST to {node.to.sql(dialect='duckdb')}", node, scope, _VALUE_SUPPORTED)
    value = parse_value(node.this, scope, context).value
    if isinstance(value, str):
        value = _date(value, node, scope)
    elif not isinstance(value, dt.date):
        raise unsupported("a CAST of a number to DATE", node, scope, _VALUE_SUPPORTED)
    return ir.Literal(value=value, span=node_span(node, scope))


_TIMESTAMPS = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.DATETIME)


def _parse_timestamp(node: exp.Cast, scope: Scope, context: str) -> ir.Literal:
    """``TIMESTAMP 'yyyy-mm-dd hh:mm:ss'`` (or a CAST to TIMESTAMP) at midnight, as its date."""
    value = parse_value(node.this, scope, context).value
    span = node_span(node, scope)
    if isinstance(value, dt.date):
        return ir.Literal(value=value, span=span)
    if not isinstance(value, str):
        raise unsupported("a CAST of a number to TIMESTAMP", node, scope, _VALUE_SUPPORTED)
    moment = timestamps.parse_timestamp(value)
    if moment is None:
        return ir.Literal(value=_date(value, node, scope), span=span)
    if moment.time() != dt.time(0):
        raise unsupported(f"the TIMESTAMP '{value.strip()}' inside the day {moment.date()}", node, scope,
                          timestamps.day_boundaries(moment.date()))
    return ir.Literal(value=moment.date(), span=span)


def _date(text: str, node: exp.Expr, scope: Scope) -> dt.date:
    """Read ``yyyy-mm-dd`` (month and day may have one digit)."""
    match = re.fullmatch(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*", text)
    try:
        if match:
            return dt.date(*(int(part) for part in match.groups()))
    except ValueError:
        pass
    raise invalid(f"'{text}' is not a date", node, scope, "Write dates as DATE 'YYYY-MM-DD'.")


def _parse_parameter(node: exp.Placeholder, scope: Scope, context: str) -> ir.Literal:
    """A ``?`` placeholder, replaced by its bound parameter value."""
    value = scope.source.parameters.get(int(node.meta.get("start", -1)))
    if node.this is not None or value is None:
        raise unsupported("a named or numbered parameter ($1, :name)", node, scope,
                          "Use ? placeholders, bound in text order to the parameters sequence.")
    return ir.Literal(value=value, span=node_span(node, scope))


def _parse_parenthesized_value(node: exp.Paren, scope: Scope, context: str) -> ir.Literal:
    """``( constant )``."""
    return replace(parse_value(node.this, scope, context), span=node_span(node, scope))


#: Interval units a date moves by (DuckDB's singular and plural words): (days, months) per unit.
_INTERVAL_UNITS: dict[str, tuple[int, int]] = {
    "DAY": (1, 0), "DAYS": (1, 0), "WEEK": (7, 0), "WEEKS": (7, 0), "MONTH": (0, 1), "MONTHS": (0, 1),
    "QUARTER": (0, 3), "QUARTERS": (0, 3), "YEAR": (0, 12), "YEARS": (0, 12)}


def _parse_current_date(node: exp.CurrentDate, scope: Scope, context: str) -> ir.Literal:
    """CURRENT_DATE (``today()``): this machine's date when the batch is read, a public constant (no
    row is read for it); the result depends on the day the batch runs, as the same SQL's does in DuckDB."""
    return ir.Literal(value=dt.date.today(), span=node_span(node, scope))


def _parse_date_shift(node: exp.Add | exp.Sub, scope: Scope, context: str) -> ir.Literal:
    """``date ± INTERVAL n unit`` (DAY, WEEK, MONTH, QUARTER, YEAR) or ``date ± n`` days, for a date
    constant (DATE '…', CURRENT_DATE): as DuckDB adds them, a month or year step keeping the day of the
    month, or the month's last day where it has fewer (2020-01-31 + 1 month = 2020-02-29)."""
    start = parse_value(node.this, scope, context)
    step = unparen(node.expression)
    written = fragment(scope.source.text, node_span(node, scope))
    if not isinstance(start.value, dt.date):
        raise unsupported(f"arithmetic in {context}", node, scope, _VALUE_SUPPORTED)
    if isinstance(step, exp.Interval):
        unit = step.args.get("unit")
        count = step.this
        word = unit.name.upper() if unit is not None else ""
        if word not in _INTERVAL_UNITS or not isinstance(count, exp.Literal) or not re.fullmatch(r"-?\d+", count.name):
            raise unsupported(f"the interval in {written}", node, scope,
                              "Intervals are INTERVAL n DAY|WEEK|MONTH|QUARTER|YEAR for an integer n.")
        days, months = (int(count.name) * k for k in _INTERVAL_UNITS[word])
    else:
        number = parse_value(step, scope, context).value
        if isinstance(number, bool) or not isinstance(number, int):
            raise unsupported(f"adding {fragment(scope.source.text, node_span(step, scope))} to a date", step, scope,
                              "Add INTERVAL n DAY|WEEK|MONTH|QUARTER|YEAR or an integer number of days.")
        days, months = number, 0
    sign = -1 if isinstance(node, exp.Sub) else 1
    try:
        moved = _add_months(start.value, sign * months) + dt.timedelta(days=sign * days)
    except (OverflowError, ValueError):
        raise unsupported(f"a date outside the years 1–9999 ({written})", node, scope, _VALUE_SUPPORTED) from None
    return ir.Literal(value=moved, span=node_span(node, scope))


def _add_months(day: dt.date, months: int) -> dt.date:
    """``day`` moved by whole months, the day of the month kept where the month has it, else its last day."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    last = (dt.date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1) - dt.timedelta(days=1)).day
    return dt.date(year, month + 1, min(day.day, last))


_VALUES: dict[type[exp.Expr], Callable[[Any, Scope, str], ir.Literal]] = {
    exp.Literal: _parse_constant,
    exp.Neg: _parse_negative,
    exp.Cast: _parse_date,
    exp.Placeholder: _parse_parameter,
    exp.Paren: _parse_parenthesized_value,
    exp.CurrentDate: _parse_current_date,
    exp.Add: _parse_date_shift,
    exp.Sub: _parse_date_shift,
}
