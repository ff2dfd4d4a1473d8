"""Spellings and predicates that map exactly onto the batch's cells: IS [NOT] NULL, [NOT] LIKE/ILIKE
on categorical columns, FILTER (WHERE …) and the conditional aggregates analysts write without it, and
COUNT(<constant>). (IS NULL and LIKE are parsed with the other WHERE predicates in
:mod:`dpsql.sql.predicates`; timestamps at midnight against date columns: :mod:`dpsql.sql.timestamps`.)

Privacy: every construct here is an *exact rewrite to cells*. Each one is turned into a set of
batch cells (a predicate's TRUE and FALSE boxes) or a weighted sum over cells of a data vector
dpsql already measures (cell counts, non-NULL counts, clamped sums), built from the SQL text and
the declared schema only. So a statement using them asks the same linear queries, at the same
sensitivity and the same cost, as its plain form (``sex LIKE 'F%'`` is ``sex IN ('F', 'Female')``,
``COUNT_IF(p)`` is ``COUNT(*) FILTER (WHERE p)``), and nothing is read from the data to build them.

Semantics, as DuckDB evaluates them on the declared domain:

- ``x IS NULL`` is TRUE on ``x``'s *outside* cell and FALSE on its declared cells; it is never
  UNKNOWN. dpsql reads a value outside the declared domain as NULL (an undeclared category, a
  number beyond [lower, upper]), so IS NULL counts those rows too; ``out_of_domain = "clamp"``
  puts out-of-range values into the edge bins instead (then IS NULL holds the NULLs only), and
  ``out_of_domain = "exclude"`` removes such rows from the table, so IS NULL is never TRUE (an
  exact zero). ``x IS NOT NULL`` and ``NOT (x IS NULL)`` are the declared cells.
- ``x LIKE pattern`` (``%`` any run, ``_`` one character, ``ESCAPE e``; ILIKE ignores case) is the
  IN list of the declared values the pattern matches; NOT LIKE the declared values it does not
  match. Like IN/NOT IN, both are UNKNOWN on the outside cell. A pattern that matches no declared
  value is FALSE on every declared cell (an exact zero, not an error).
- ``agg FILTER (WHERE p)`` aggregates the rows where WHERE ∧ p is TRUE (UNKNOWN rows are left out,
  as in SQL). ``CASE WHEN p THEN v [ELSE e] END`` takes ``v`` exactly where p is TRUE, so the
  indicator spellings below are the same queries.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt
from sqlglot import exp

from dpsql import schema as sch
from dpsql.errors import UnsupportedQueryError
from dpsql.matrix.workloads import DisjointSum, Explicit, Kron, Workload
from dpsql.sql import ir
from dpsql.sql.predicates import parse_predicate, parse_value
from dpsql.sql.source import Scope, is_empty, node_span, unparen, unsupported

__all__ = [
    "Atom", "atoms", "base_mask", "constant_count_argument", "is_null_cells", "like_mask", "like_regex", "scaled",
    "statement_atoms", "statement_notes", "unwrap_aggregate",
]

BoolArray = npt.NDArray[np.bool_]
#: A WHERE atom: the predicate that reads one column.
Atom = ir.Comparison | ir.Between | ir.InList | ir.IsNull | ir.Like

FILTER_SUPPORTED = (
    "Write the condition as a FILTER clause: COUNT(*) FILTER (WHERE p), SUM(col) FILTER (WHERE p), "
    "AVG(col) FILTER (WHERE p); or the indicator spellings SUM(CASE WHEN p THEN col ELSE 0 END), "
    "SUM(CASE WHEN p THEN 1 ELSE 0 END), COUNT(CASE WHEN p THEN 1 END), COUNT_IF(p), "
    "AVG(CASE WHEN p THEN col END)."
)


# --------------------------------------------------------------------------------------------------
# Parsing: aggregates


def constant_count_argument(node: exp.Expr, scope: Scope) -> bool:
    """Whether COUNT's argument is a non-NULL constant (COUNT(1) = COUNT(*)); COUNT(NULL) is refused.

    COUNT(NULL) is 0 on every table; it is refused rather than answered, as it asks nothing.
    """
    argument = unparen(node.this)
    if isinstance(argument, exp.Null):
        raise unsupported("COUNT(NULL) (it is 0 on every table)", _call_span(node, scope), scope,
                          "Count rows with COUNT(*) or the non-NULL values of a column with COUNT(col).")
    if isinstance(argument, exp.Boolean):
        return True
    if isinstance(argument, (exp.Literal, exp.Neg, exp.Cast, exp.Placeholder)):
        parse_value(argument, scope, "COUNT()")
        return True
    return False


def _call_span(node: exp.Expr, scope: Scope) -> ir.Span:
    """A call from its name to its closing parenthesis (a child without a token, such as NULL, is not
    in :func:`node_span`)."""
    first = scope.source.index(node_span(node, scope).start)
    depth, last = 0, first
    for last in range(first, scope.last + 1):
        depth += {"(": 1, ")": -1}.get(scope.source.word(last), 0)
        if depth == 0 and scope.source.word(last) == ")":
            break
    return scope.source.token_span(first, last)


def unwrap_aggregate(node: exp.Expr, scope: Scope) -> tuple[exp.Expr, ir.Predicate | None, float]:
    """A FILTER or conditional aggregate as (the plain aggregate node, its filter, its scale).

    Exact rewrites (p a WHERE predicate; k a number; ``ELSE 0`` and no ELSE alike for SUM):

    - ``agg FILTER (WHERE p)``: agg, filter p;
    - ``COUNT_IF(p)``, ``COUNT(CASE WHEN p THEN <constant> END)``, ``SUM(CASE WHEN p THEN 1 ELSE 0 END)``:
      COUNT(*) FILTER (WHERE p);
    - ``SUM(CASE WHEN p THEN k ELSE 0 END)``: k · COUNT(*) FILTER (WHERE p) (scale k);
    - ``SUM|AVG|COUNT(CASE WHEN p THEN col [ELSE NULL] END)``, ``SUM(CASE WHEN p THEN col ELSE 0 END)``:
      the same aggregate of col FILTER (WHERE p);
    - ``COUNT(CASE WHEN p THEN <constant> ELSE <constant> END)``: COUNT(*) (no row gives NULL);
    - ``IF(p, v, e)`` as ``CASE WHEN p THEN v ELSE e END``.

    Any other CASE inside an aggregate is refused, naming it, with the FILTER rewrite. Other nodes
    come back unchanged.
    """
    if isinstance(node, exp.Filter):
        inner, condition, scale = unwrap_aggregate(unparen(node.this), scope)
        where = parse_predicate(node.expression.this, scope)
        return inner, _conjoin(where, condition, node_span(node, scope)), scale
    if isinstance(node, exp.CountIf):
        return exp.Count(this=exp.Star()), parse_predicate(node.this, scope), 1.0
    case = unparen(node.this) if isinstance(node, (exp.Count, exp.Sum, exp.Avg)) else None
    if isinstance(node, (exp.Count, exp.Sum, exp.Avg)) and isinstance(case, (exp.Case, exp.If)):
        return _conditional(node, case, scope)
    return node, None, 1.0


def _conjoin(left: ir.Predicate, right: ir.Predicate | None, span: ir.Span) -> ir.Predicate:
    """left AND right (right None: left)."""
    return left if right is None else ir.And(operands=(left, right), span=span)


def _conditional(node: exp.Count | exp.Sum | exp.Avg, case: exp.Case | exp.If,
                 scope: Scope) -> tuple[exp.Expr, ir.Predicate | None, float]:
    """One ``CASE WHEN p THEN v [ELSE e] END`` (or ``IF(p, v, e)``) inside COUNT/SUM/AVG, as in
    :func:`unwrap_aggregate`."""
    name = type(node).__name__.upper()
    if isinstance(case, exp.Case):
        if len(case.args.get("ifs") or []) != 1 or not is_empty(case.args.get("this")):
            raise _refuse(name, case, scope, "a CASE with several WHEN branches or a CASE operand")
        branch, otherwise = case.args["ifs"][0], case.args.get("default")
    else:
        branch, otherwise = case, case.args.get("false")
    then = unparen(branch.args["true"])
    otherwise = None if otherwise is None or isinstance(unparen(otherwise), exp.Null) else unparen(otherwise)
    condition = parse_predicate(branch.this, scope)
    column = isinstance(then, exp.Column) and isinstance(then.this, exp.Identifier)
    number = _number(then)
    if isinstance(node, exp.Count):
        constant = _is_constant(then)
        if otherwise is None and (column or constant):
            return exp.Count(this=then if column else exp.Star()), condition, 1.0
        if otherwise is not None and constant and _is_constant(otherwise):
            return exp.Count(this=exp.Star()), None, 1.0  # ELSE <constant> is not NULL: every row counts
    elif otherwise is None or _number(otherwise) == 0:
        if column and (isinstance(node, exp.Sum) or otherwise is None):
            return type(node)(this=then), condition, 1.0
        if isinstance(node, exp.Sum) and number is not None:
            return exp.Count(this=exp.Star()), condition, number
    raise _refuse(name, case, scope, "this CASE")


def _refuse(function: str, case: exp.Expr, scope: Scope, what: str) -> UnsupportedQueryError:
    return unsupported(f"{what} inside {function}() (it is not an indicator dpsql can rewrite exactly)", case, scope,
                       FILTER_SUPPORTED)


def _number(node: exp.Expr) -> float | None:
    """A numeric literal (or its negation) as a float, else None.

    >>> _number(exp.Literal.number(3)), _number(exp.Neg(this=exp.Literal.number("1.5"))), _number(exp.null())
    (3.0, -1.5, None)
    """
    node = unparen(node)
    if isinstance(node, exp.Neg):
        inner = _number(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return float(node.this)
        except ValueError:
            return None
    return None


def _is_constant(node: exp.Expr) -> bool:
    """A non-NULL literal: a number, a string or TRUE/FALSE."""
    node = unparen(node)
    return isinstance(node, (exp.Literal, exp.Boolean)) or _number(node) is not None


# --------------------------------------------------------------------------------------------------
# Compiling: cells


def base_mask(column: sch.Column, atom: ir.IsNull | ir.Like) -> BoolArray:
    """The declared base cells where the atom is TRUE: none for IS NULL (it is TRUE on the outside
    cell only, see :func:`is_null_cells`), ``~`` none for IS NOT NULL, the matching values for LIKE."""
    if isinstance(atom, ir.IsNull):
        return np.full(column.domain.size, atom.negated)
    return like_mask(column, atom)


def is_null_cells(size: int, has_outside: bool, excluded: bool, negated: bool) -> tuple[BoolArray, BoolArray]:
    """(TRUE cells, FALSE cells) of IS [NOT] NULL on an axis of ``size`` batch cells (outside cell last).

    IS NULL is TRUE on the outside cell (none when the column excludes its NULL and out-of-domain
    rows: then it is FALSE everywhere) and FALSE on every declared cell; never UNKNOWN.

    >>> [m.tolist() for m in is_null_cells(3, True, False, False)]
    [[False, False, True], [True, True, False]]
    >>> [m.tolist() for m in is_null_cells(3, True, False, True)]
    [[True, True, False], [False, False, True]]
    """
    null = np.zeros(size, dtype=bool)
    if has_outside and not excluded:
        null[-1] = True
    return (~null, null) if negated else (null, ~null)


def like_regex(pattern: str, escape: str | None, case_insensitive: bool) -> re.Pattern[str]:
    """SQL LIKE as a regular expression: ``%`` any run, ``_`` one character, ``escape`` quotes the next one.

    >>> bool(like_regex("F%", None, False).fullmatch("Female")), bool(like_regex("a!%", "!", False).fullmatch("a%"))
    (True, True)
    >>> bool(like_regex("f_", None, True).fullmatch("FX")), bool(like_regex("f_", None, False).fullmatch("FX"))
    (True, False)
    """
    parts, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if escape is not None and char == escape and index + 1 < len(pattern):
            parts.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        parts.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        index += 1
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if case_insensitive else 0))


def like_mask(column: sch.Column, atom: ir.Like) -> BoolArray:
    """Declared values matching the pattern (NOT LIKE: not matching); refused on ordered columns and on
    categorical columns that are not strings."""
    domain = column.domain
    keyword = ("NOT " if atom.negated else "") + ("ILIKE" if atom.case_insensitive else "LIKE")
    if not isinstance(domain, sch.Categorical):
        raise UnsupportedQueryError(
            f"{keyword} on the {domain.kind} column '{column.name}' is not supported ({atom.span.describe()}). "
            f"Write a range instead: {column.name} >= <low> AND {column.name} < <high>, or BETWEEN."
        )
    if not all(isinstance(value, str) for value in domain.values):
        raise UnsupportedQueryError(
            f"{keyword} on '{column.name}' is not supported ({atom.span.describe()}): its declared values are not "
            f"strings. Use = or IN with its declared values."
        )
    assert isinstance(atom.pattern.value, str)
    regex = like_regex(atom.pattern.value, atom.escape, atom.case_insensitive)
    member = np.array([regex.fullmatch(str(value)) is not None for value in domain.values], dtype=bool)
    return ~member if atom.negated else member


def statement_atoms(statement: ir.Statement) -> list[Atom]:
    """The atoms of the WHERE clause and of every aggregate's FILTER, in order."""
    return atoms(statement.where) + [atom for aggregate in statement.aggregates for atom in atoms(aggregate.filter)]


def atoms(predicate: ir.Predicate | None) -> list[Atom]:
    """The atoms of a predicate, in order."""
    if predicate is None:
        return []
    if isinstance(predicate, (ir.And, ir.Or)):
        return [atom for operand in predicate.operands for atom in atoms(operand)]
    if isinstance(predicate, ir.Not):
        return atoms(predicate.operand)
    return [predicate]


def statement_notes(statement: ir.Statement, table: sch.Table) -> list[str]:
    """EXPLAIN notes: each [NOT] LIKE that selects no declared value (FALSE on every row, not an error)."""
    notes = []
    for atom in statement_atoms(statement):
        column = table.column(atom.column.name)
        if isinstance(atom, ir.Like) and isinstance(column.domain, sch.Categorical) and \
                not like_mask(column, atom).any():
            keyword = ("NOT " if atom.negated else "") + ("ILIKE" if atom.case_insensitive else "LIKE")
            notes.append(f"{keyword} '{atom.pattern.value}' ({atom.span.describe()}) selects no declared value of "
                         f"{column.key}: it is FALSE on every row")
    return notes


def scaled(workload: Workload, factor: float) -> Workload:
    """``factor`` times a block's workload (its answers and standard errors scale alike), keeping its
    Kronecker structure: the first factor of each Kronecker term is multiplied."""
    if factor == 1.0:
        return workload
    if isinstance(workload, DisjointSum):
        return DisjointSum([scaled(term, factor) for term in workload.terms])
    if isinstance(workload, Kron):
        first, *rest = workload.factors
        return Kron([Explicit(factor * first.dense()), *rest])
    return Explicit(factor * workload.dense())
