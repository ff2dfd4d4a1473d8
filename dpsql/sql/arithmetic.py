"""Arithmetic on one column: numeric constants, affine maps and rounding steps, in exact rationals.

Shared by GROUP BY, where ``p · step(a · x + b) + q`` is an arithmetic bin (:mod:`dpsql.sql.group_keys`),
and by WHERE, where a condition on such an expression is solved for the column x
(:mod:`dpsql.sql.predicates`). ``step`` is FLOOR, CEIL, TRUNC, ROUND (half away from zero, DuckDB's),
a CAST to an integer type (half to even, DuckDB's cast) or none; ``x // c`` is TRUNC(x / c), as DuckDB
divides integers.

Every step is a non-decreasing function onto the integers, so the values y where ``step(y) = k`` form
one interval (:func:`level_set`), and a comparison of ``step(y)`` with a number is a comparison of y
with an end of such an interval: FLOOR(y) ≤ 6 ⇔ y < 7, ROUND(y) = 3 ⇔ 2.5 ≤ y < 3.5. Nothing here reads
data; everything is a function of the SQL text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from dpsql.sql import ir
from dpsql.sql.source import Scope, describe, invalid, unparen, unsupported

#: SQL integer types: a CAST to one rounds half to even (DuckDB's cast), in SELECT and in GROUP BY.
INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINT",
                           "UBIGINT", "UHUGEINT", "MEDIUMINT", "INT128", "INT256"})
#: The rounding functions by sqlglot node.
STEPS: dict[type[exp.Expr], ir.BinStep] = {exp.Floor: "floor", exp.Ceil: "ceil", exp.Trunc: "trunc",
                                           exp.Round: "round"}


def number_constant(node: exp.Expr) -> Fraction | None:
    """A numeric literal or −literal (not a parameter) as an exact rational, else None."""
    node = unparen(node)
    negative = isinstance(node, exp.Neg)
    inner = unparen(node.this) if negative else node
    if not isinstance(inner, exp.Literal) or inner.is_string:
        return None
    try:
        value = Fraction(inner.this)
    except ValueError:
        return None
    return -value if negative else value


def affine(node: exp.Expr, scope: Scope) -> tuple[exp.Expr, Fraction, Fraction] | None:
    """``node`` as a · u + b for the one operand u that is not a number (+ − · / by numbers, unary minus,
    nested); None when two operands are not numbers, or for c / u (not monotone across u = 0).

    Raises:
        InvalidQueryError: a division by the constant zero.
    """
    node = unparen(node)
    if isinstance(node, exp.Neg):
        found = affine(node.this, scope)
        return None if found is None else (found[0], -found[1], -found[2])
    if not isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        return node, Fraction(1), Fraction(0)
    left, right = number_constant(node.this), number_constant(node.expression)
    if (left is None) == (right is None):
        return None
    inner = affine(node.expression if left is not None else node.this, scope)
    if inner is None:
        return None
    u, a, b = inner
    constant = left if left is not None else right
    assert constant is not None
    if isinstance(node, exp.Add):
        return u, a, b + constant
    if isinstance(node, exp.Sub):
        return (u, a, b - constant) if right is not None else (u, -a, constant - b)
    if isinstance(node, exp.Mul):
        return u, a * constant, b * constant
    if left is not None:
        return None
    if constant == 0:
        raise invalid("division by the constant zero", node, scope, "Divide by a non-zero number.")
    return u, a / constant, b / constant


def has_step(node: exp.Expr) -> bool:
    """Whether ``node`` holds a rounding step (FLOOR, CEIL, TRUNC, ROUND, ``//``, a CAST to an integer)."""
    return any(isinstance(n, (*STEPS, exp.IntDiv)) or (isinstance(n, exp.Cast) and n.to.this.name in INTEGER_TYPES)
               for n in node.walk())


@dataclass(frozen=True, slots=True)
class StepForm:
    """``outer_scale · step(inner_scale · column + inner_shift) + outer_shift``; ``integral``: the value is
    an integer (``//`` and a CAST give integers, FLOOR etc. doubles, as in DuckDB)."""

    column: exp.Column
    step: ir.BinStep
    inner_scale: Fraction
    inner_shift: Fraction
    outer_scale: Fraction
    outer_shift: Fraction
    integral: bool


def step_form(node: exp.Expr, scope: Scope, context: str, supported: str) -> StepForm:
    """``node`` as p · step(a · x + b) + q: an affine outside, at most one rounding step, an affine of one
    column inside (``x // c`` is TRUNC(x / c) with an integer value).

    Raises:
        UnsupportedQueryError: anything else (``context`` says where: "in GROUP BY", "in WHERE"), with
            ``supported``.
    """
    outer = affine(node, scope)
    if outer is None:
        raise unsupported(f"{describe(node, scope)} {context}", node, scope, supported)
    inner_node, p, q = outer
    step: ir.BinStep = "none"
    integral = False
    inner_node = unparen(inner_node)
    if isinstance(inner_node, exp.IntDiv):
        divisor = number_constant(inner_node.expression)
        if divisor is None or divisor == 0:
            raise unsupported("// by something other than a non-zero number", inner_node, scope, supported)
        step, integral = "trunc", True
        inside: exp.Expr = exp.Div(this=inner_node.this, expression=inner_node.expression)
    elif isinstance(inner_node, exp.Cast) and inner_node.to.this.name in INTEGER_TYPES:
        step, integral, inside = "rint", True, inner_node.this
        if isinstance(unparen(inside), tuple(STEPS)):  # CAST(FLOOR(x / c) AS INTEGER): the inner step decides
            step, inside = STEPS[type(unparen(inside))], unparen(inside).this
    elif isinstance(inner_node, tuple(STEPS)):
        decimals = inner_node.args.get("decimals")
        if decimals is not None and number_constant(decimals) != 0:
            raise unsupported(f"ROUND to decimals {context}", inner_node, scope,
                              "Round to a whole number (ROUND(x)) or scale first: ROUND(x * 10) / 10.")
        step, inside = STEPS[type(inner_node)], inner_node.this
    else:
        inside = inner_node
    found = affine(inside, scope)
    if found is None or not isinstance(unparen(found[0]), exp.Column):
        culprit = inside if found is None else found[0]
        raise unsupported(f"{describe(culprit, scope)} {context}", culprit, scope, supported)
    column, a, b = found
    if a == 0 or p == 0:
        raise unsupported(f"a column multiplied by zero {context}", node, scope, supported)
    column_node = unparen(column)
    assert isinstance(column_node, exp.Column)
    return StepForm(column=column_node, step=step, inner_scale=a, inner_shift=b, outer_scale=p, outer_shift=q,
                    integral=integral and p.denominator == 1 and q.denominator == 1)


def stepped(step: ir.BinStep, y: Fraction) -> Fraction:
    """step(y), exactly."""
    if step == "floor":
        return Fraction(math.floor(y))
    if step == "ceil":
        return Fraction(math.ceil(y))
    if step == "trunc":
        return Fraction(math.trunc(y))
    if step == "round":  # half away from zero
        return Fraction(math.floor(abs(y) + Fraction(1, 2))) * (1 if y >= 0 else -1)
    if step == "rint":  # half to even
        return Fraction(round(y))
    return y


@dataclass(frozen=True, slots=True)
class Interval:
    """An interval of rationals with closed or open ends."""

    low: Fraction
    low_closed: bool
    high: Fraction
    high_closed: bool


def level_set(step: ir.BinStep, k: int) -> Interval:
    """{y : step(y) = k} for a rounding step (not ``none``) and an integer k.

    >>> level_set("floor", 3), level_set("trunc", 0) == Interval(Fraction(-1), False, Fraction(1), False)
    (Interval(low=Fraction(3, 1), low_closed=True, high=Fraction(4, 1), high_closed=False), True)
    >>> level_set("rint", 2).low_closed, level_set("rint", 3).low_closed   # half to even: 2.5 → 2, 3.5 → 4
    (True, False)
    """
    assert step != "none"
    half = Fraction(1, 2)
    if step == "floor" or (step == "trunc" and k > 0):
        return Interval(Fraction(k), True, Fraction(k + 1), False)
    if step == "ceil" or (step == "trunc" and k < 0):
        return Interval(Fraction(k - 1), False, Fraction(k), True)
    if step == "trunc":
        return Interval(Fraction(-1), False, Fraction(1), False)
    if step == "round":
        if k == 0:
            return Interval(-half, False, half, False)
        return Interval(k - half, k > 0, k + half, k < 0)
    even = k % 2 == 0
    return Interval(k - half, even, k + half, even)
