"""Parse a batch of aggregate SQL statements into dpsql's typed IR (:mod:`dpsql.sql.ir`).

The batch is tokenized and parsed with sqlglot (DuckDB dialect), then translated, one function per
construct, into frozen IR nodes that each carry the :class:`~dpsql.sql.ir.Span` of their source
text. The SQL is only read: it is never executed or re-emitted for execution, and ``?`` parameters
become :class:`~dpsql.sql.ir.Literal` values, never text.

Grammar (anything else raises :class:`~dpsql.errors.UnsupportedQueryError`)::

    batch      := statement (';' statement)*        -- -- and /* */ comments; blank statements skipped
    statement  := SELECT item (',' item)* FROM table [[AS] alias]
                  [WHERE predicate]
                  [GROUP BY column (',' column)*]
                  [ORDER BY key [ASC | DESC] (',' key [ASC | DESC])*]
                  [LIMIT count]
    item       := column [[AS] name]                -- the column must be in GROUP BY
                | aggregate [[AS] name]             -- at least one aggregate per statement
    aggregate  := COUNT(*) | COUNT(column) | SUM(column) | AVG(column)
    column     := [table_or_alias '.'] name
    predicate  := column op value | value op column -- op: = <> != < <= > >=; `5 < age` is `age > 5`
                | column [NOT] BETWEEN value AND value
                | column [NOT] IN (value (',' value)*)
                | NOT predicate | predicate AND predicate | predicate OR predicate | '(' predicate ')'
    value      := integer | decimal | '-' value | 'string' | DATE 'yyyy-mm-dd'
                | CAST('yyyy-mm-dd' AS DATE) | ?    -- ? binds the next parameter, in text order
    key        := output name (also <aggregate alias>_stddev) | 1-based select position
    count      := non-negative integer | ?

Output names are the AS alias, the group column's name, or ``count``, ``count_<col>``,
``sum_<col>``, ``avg_<col>``; a repeated name gets the suffix ``_2``, ``_3``, ... Names compare
case-insensitively, as in DuckDB. Syntax errors raise :class:`~dpsql.errors.SqlSyntaxError`; every
message gives the line, column and source fragment of the offending construct.

Example:
    >>> batch = parse_batch("SELECT sex, COUNT(*) FROM people WHERE age >= ? GROUP BY sex", [18])
    >>> statement = batch.statements[0]
    >>> [item.alias for item in statement.select]
    ['sex', 'count']
    >>> statement.where.column.name, statement.where.operator, statement.where.value.value
    ('age', '>=', 18)
    >>> statement.where.span.describe(), batch.text[statement.where.span.start:statement.where.span.end]
    ('line 1, col 40', 'age >= ?')
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType  # type: ignore[attr-defined]  # re-exported there

from dpsql.errors import InvalidQueryError, ParameterError, ProgrammingError, SqlSyntaxError, UnsupportedQueryError
from dpsql.sql import ir

__all__ = ["parse_batch"]

# Limits (README "Limits"): bounded work before anything is planned, explain included. Each is
# checked before the work it bounds and refused with InvalidQueryError naming the limit and where.
#: Characters in one batch's SQL text.
MAX_SQL_LENGTH = 200_000
#: Nesting depth: open parentheses plus a run of prefix NOT / minus / plus signs (sqlglot's
#: recursive descent takes some 20 Python frames per level and overflows near 45).
MAX_NESTING = 32
#: Statements in one batch.
MAX_STATEMENTS = 1_000
#: Predicate atoms in one statement's WHERE clause (each comparison, BETWEEN and IN value counts one).
MAX_PREDICATE_ATOMS = 1_000
#: A LIMIT count (DuckDB's own bound, a signed 64-bit integer).
MAX_LIMIT = 2**63 - 1

_SUPPORTED = (
    "dpsql answers SELECT [group columns,] COUNT(*)|COUNT(col)|SUM(col)|AVG(col) FROM one table "
    "[WHERE predicates on columns] [GROUP BY columns]."
)
_WHERE_SUPPORTED = (
    "WHERE supports column <op> constant (=, <>, !=, <, <=, >, >=), column [NOT] BETWEEN constant AND "
    "constant, column [NOT] IN (constants), NOT, AND, OR and parentheses."
)
_VALUE_SUPPORTED = "Constants are numbers, -numbers, 'strings', DATE 'YYYY-MM-DD' and ? parameters."
_AGGREGATE_SUPPORTED = "Aggregates are COUNT(*), COUNT(col), SUM(col) and AVG(col) over one plain column."
_GROUP_SUPPORTED = "GROUP BY takes plain column names."
_ORDER_SUPPORTED = "ORDER BY takes output names or 1-based select positions, each optionally ASC or DESC."
_LIMIT_SUPPORTED = "LIMIT takes a non-negative integer or a ? bound to one."
_SYNTAX_ADVICE = "dpsql reads DuckDB SQL; fix the text at this position."

_DIALECT = DuckDB()
_QUOTED_TOKENS = frozenset(
    getattr(TokenType, name)
    for name in ("STRING", "IDENTIFIER", "NATIONAL_STRING", "RAW_STRING", "BYTE_STRING", "HEX_STRING",
                 "BIT_STRING", "HEREDOC_STRING", "UNICODE_STRING")
    if hasattr(TokenType, name)
)
_JOIN_WORDS = frozenset({"JOIN", "INNER", "LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "NATURAL", "SEMI",
                         "ANTI", "ASOF", "POSITIONAL", "LATERAL"})
# Keywords that belong to a node but come before (after) the first (last) token sqlglot recorded in it.
_PREFIX_WORDS: dict[type[exp.Expr], frozenset[str]] = {
    exp.Not: frozenset({"NOT"}),
    exp.Neg: frozenset({"-"}),
    exp.Join: _JOIN_WORDS,
    exp.With: frozenset({"WITH", "RECURSIVE"}),
    exp.Having: frozenset({"HAVING"}),
    exp.Qualify: frozenset({"QUALIFY"}),
    exp.Offset: frozenset({"OFFSET"}),
    exp.Case: frozenset({"CASE", "WHEN"}),
    exp.Distinct: frozenset({"DISTINCT"}),
    exp.Subquery: frozenset({"(", "SELECT", "DISTINCT"}),
    exp.Select: frozenset({"SELECT", "DISTINCT"}),
    exp.Exists: frozenset({"EXISTS", "(", "SELECT"}),
    exp.TableSample: frozenset({"USING", "SAMPLE", "TABLESAMPLE"}),
    exp.Rollup: frozenset({"ROLLUP"}),
    exp.Cube: frozenset({"CUBE"}),
    exp.GroupingSets: frozenset({"GROUPING SETS"}),
}
_SUFFIX_WORDS: dict[type[exp.Expr], frozenset[str]] = {
    exp.Ordered: frozenset({"ASC", "DESC", "NULLS", "FIRST", "LAST"}),
    exp.Case: frozenset({"END"}),
    exp.Is: frozenset({"IS", "NOT", "NULL", "TRUE", "FALSE"}),
}
_TYPED_STRING_WORDS = frozenset({"DATE", "TIMESTAMP", "TIMESTAMPTZ", "TIME"})
# Nodes with no recorded token at all are located by their keyword.
_ANCHOR_WORDS: dict[type[exp.Expr], str] = {exp.Distinct: "DISTINCT", exp.Group: "GROUP BY", exp.Star: "*",
                                            exp.Null: "NULL"}

_FORBIDDEN: tuple[tuple[type[exp.Expr], str], ...] = (
    (exp.With, "WITH (common table expression)"),
    (exp.Join, "JOIN"),
    (exp.Subquery, "subquery"),
    (exp.Exists, "EXISTS (subquery)"),
    (exp.Select, "subquery"),
    (exp.SetOperation, "UNION/INTERSECT/EXCEPT"),
    (exp.Window, "window function (OVER)"),
    (exp.Distinct, "DISTINCT"),
    (exp.Having, "HAVING"),
    (exp.Qualify, "QUALIFY"),
    (exp.Offset, "OFFSET"),
    (exp.TableSample, "SAMPLE"),
    (exp.Lateral, "LATERAL"),
    (exp.Pivot, "PIVOT"),
    (exp.Unnest, "UNNEST"),
)
_CLAUSES = frozenset({"expressions", "from_", "from", "where", "group", "order", "limit"})
_CLAUSE_NAMES = {"into": "SELECT INTO", "windows": "WINDOW", "sort": "SORT BY", "cluster": "CLUSTER BY",
                 "distribute": "DISTRIBUTE BY", "locks": "FOR UPDATE", "kind": "SELECT AS STRUCT/VALUE",
                 "prewhere": "PREWHERE", "connect": "CONNECT BY", "hint": "a query hint"}
_TABLE_PARTS = {"db": "a schema-qualified table name", "catalog": "a catalog-qualified table name"}

_NAMES: tuple[tuple[type[exp.Expr] | tuple[type[exp.Expr], ...], str], ...] = (
    (exp.Column, "a column"),
    (exp.Literal, "a constant"),
    (exp.Star, "*"),
    (exp.Placeholder, "a ? parameter"),
    (exp.Boolean, "boolean literal (TRUE/FALSE)"),
    (exp.Null, "NULL"),
    (exp.TryCast, "TRY_CAST"),
    (exp.Cast, "CAST"),
    (exp.Case, "CASE"),
    (exp.If, "IF"),
    (exp.Like, "LIKE"),
    (exp.ILike, "ILIKE"),
    (exp.Is, "IS [NOT] NULL"),
    ((exp.NullSafeEQ, exp.NullSafeNEQ), "IS [NOT] DISTINCT FROM"),
    (exp.Filter, "FILTER"),
    (exp.Interval, "INTERVAL"),
    (exp.Window, "window function (OVER)"),
    (exp.Subquery, "subquery"),
    (exp.Exists, "EXISTS (subquery)"),
    (exp.Distinct, "DISTINCT"),
    (exp.Rollup, "ROLLUP"),
    (exp.Cube, "CUBE"),
    (exp.GroupingSets, "GROUPING SETS"),
    (exp.DPipe, "string concatenation (||)"),
    ((exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Pow, exp.Neg, exp.BitwiseAnd,
      exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot, exp.BitwiseLeftShift, exp.BitwiseRightShift),
     "arithmetic"),
    (exp.Connector, "a boolean expression"),
    (exp.Predicate, "a condition"),
)

_AGGREGATES: dict[type[exp.Expr], ir.AggregateFunction] = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg"}
_OPERATORS: dict[type[exp.Expr], ir.ComparisonOperator] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}
_FLIPPED: dict[ir.ComparisonOperator, ir.ComparisonOperator] = {
    "=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<=",
}


# --------------------------------------------------------------------------------------------------
# The text, its tokens and spans


@dataclass(frozen=True, slots=True)
class _Source:
    """The batch text and tokens, with the look-ups that turn offsets into spans."""

    text: str
    tokens: tuple[Token, ...]
    starts: tuple[int, ...]  # token start offsets, for bisection
    line_starts: tuple[int, ...]
    parameters: Mapping[int, ir.Value] = field(default_factory=dict)  # by offset of the ? token

    @classmethod
    def of(cls, text: str, tokens: Sequence[Token]) -> _Source:
        """Index ``text``: the offsets where its lines start, and its tokens."""
        line_starts = (0, *(index + 1 for index, char in enumerate(text) if char == "\n"))
        starts = tuple(token.start for token in tokens)
        return cls(text=text, tokens=tuple(tokens), starts=starts, line_starts=line_starts)

    def span(self, start: int, end: int) -> ir.Span:
        """The span of ``text[start:end]``, with 1-based line and column."""
        line = bisect_right(self.line_starts, start)
        return ir.Span(line=line, column=start - self.line_starts[line - 1] + 1, start=start, end=end)

    def token_span(self, first: int, last: int) -> ir.Span:
        """The span from the start of token ``first`` to the end of token ``last``."""
        return self.span(self.tokens[first].start, self.tokens[last].end + 1)

    def index(self, offset: int) -> int:
        """The index of the token that contains ``offset``."""
        return bisect_right(self.starts, offset) - 1

    def word(self, index: int) -> str:
        """Token ``index`` upper-cased if it is a keyword, symbol or bare name; else ''."""
        if not 0 <= index < len(self.tokens) or self.tokens[index].token_type in _QUOTED_TOKENS:
            return ""
        return self.tokens[index].text.upper()


@dataclass(frozen=True, slots=True)
class _Scope:
    """One statement being translated: its tokens ``first..last`` and, once read, its table."""

    source: _Source
    first: int
    last: int
    table: str = ""
    alias: str | None = None
    table_span: ir.Span | None = None

    @property
    def span(self) -> ir.Span:
        """The statement's own span, first token to last."""
        return self.source.token_span(self.first, self.last)


def _fragment(text: str, span: ir.Span, limit: int = 60) -> str:
    """The source of ``span`` on one line, at most ``limit`` characters.

    >>> text = "SELECT COUNT(*) FROM people p\\n  JOIN visits v ON v.person = p.id AND v.day > DATE '2020-01-01'"
    >>> _fragment(text, ir.Span(line=2, column=3, start=32, end=len(text)))
    'JOIN visits v ON v.person = p.id AND v.day > DATE ...'
    """
    piece = " ".join(text[span.start:span.end].split())
    if len(piece) <= limit:
        return piece
    return piece[: limit - 4].rsplit(" ", 1)[0] + " ..."


def _token_range(node: exp.Expr, source: _Source) -> tuple[int, int] | None:
    """The tokens ``node`` covers: its own token and its children's, widened to its keywords."""
    if isinstance(node, exp.Paren):
        inner = _token_range(node.this, source)
        return None if inner is None else (inner[0] - 1, inner[1] + 1)
    if isinstance(node, (exp.Not, exp.Neg)):  # one NOT / minus sign before the operand
        inner = _token_range(node.this, source)
        if inner is None:
            return None
        if isinstance(node.this, (exp.In, exp.Between)) and _infix_not(source, inner):
            return inner  # `x NOT IN (...)` / `x NOT BETWEEN ...`: the NOT is inside the operand's tokens
        return _balance(source, _widen_prefix(source, inner[0], _PREFIX_WORDS[type(node)], once=True), inner[1])
    covered = _children_range(node, source)
    if covered is None:
        return None
    first = _widen_prefix(source, covered[0], _PREFIX_WORDS.get(type(node), frozenset()), once=False)
    last = covered[1]
    if isinstance(node, exp.Cast):
        first, last = _widen_cast(source, first, last)
    elif isinstance(node, exp.Func) and not isinstance(node, exp.Binary) and "start" not in node.meta:
        first = _widen_function_name(source, first, node.sql_name())
    first, last = _balance(source, first, last)
    while source.word(last + 1) in _SUFFIX_WORDS.get(type(node), ()):
        last += 1
    return first, last


def _infix_not(source: _Source, covered: tuple[int, int]) -> bool:
    """Whether the NOT of a negated IN / BETWEEN sits between the operand's first and last tokens."""
    first, last = covered
    depth = 0
    for index in range(first, last + 1):
        word = source.word(index)
        depth += (word == "(") - (word == ")")
        if depth == 0 and word == "NOT" and index > first:
            return True
    return False


def _children_range(node: exp.Expr, source: _Source) -> tuple[int, int] | None:
    """The union of the token of ``node`` itself (if sqlglot recorded it) and its children's ranges.

    AND/OR chains are flattened first, so that a long chain does not recurse once per operand.
    """
    children = node.flatten(unnest=False) if isinstance(node, exp.Connector) else node.iter_expressions()
    ranges = [covered for covered in (_token_range(child, source) for child in children) if covered is not None]
    if "start" in node.meta:
        ranges.append((source.index(node.meta["start"]), source.index(node.meta["end"])))
    if not ranges:
        return None
    return min(first for first, _ in ranges), max(last for _, last in ranges)


def _widen_prefix(source: _Source, first: int, words: frozenset[str], once: bool) -> int:
    """Take in the run of ``words`` (one word if ``once``) before token ``first``, across ``(``."""
    start, taken = first, 0
    while not (once and taken) and (source.word(start - 1) in words or (words and source.word(start - 1) == "(")):
        taken += source.word(start - 1) != "("
        start -= 1
    while start < first and source.word(start) == "(" and "(" not in words:
        start += 1
    return start


def _widen_function_name(source: _Source, first: int, name: str) -> int:
    """Take in ``name(`` before the first argument of a function whose name token is unrecorded."""
    start = first
    while source.word(start - 1) == "(":
        start -= 1
    if start < first and 0 < start and (source.word(start - 1) == name.upper()
                                        or source.tokens[start - 1].token_type == TokenType.VAR):
        return start - 1
    return first


def _widen_cast(source: _Source, first: int, last: int) -> tuple[int, int]:
    """Take in ``CAST(`` / ``TRY_CAST(`` before, ``DATE`` before or ``::type`` after a cast operand."""
    if source.word(first - 1) == "(" and source.word(first - 2) in {"CAST", "TRY_CAST"}:
        return first - 2, last
    if source.word(first - 1) in _TYPED_STRING_WORDS:
        return first - 1, last
    if source.word(last + 1) == "::":
        return first, last + 2
    return first, last


def _balance(source: _Source, first: int, last: int) -> tuple[int, int]:
    """Widen ``first..last`` until every parenthesis inside it is matched."""
    depth = lowest = 0
    for index in range(first, last + 1):
        depth += {"(": 1, ")": -1}.get(source.word(index), 0)
        lowest = min(lowest, depth)
    opens, closes = -lowest, depth - lowest
    while opens > 0 and first > 0:
        first -= 1
        opens += {"(": -1, ")": 1}.get(source.word(first), 0)
    while closes > 0 and last < len(source.tokens) - 1:
        last += 1
        closes += {")": -1, "(": 1}.get(source.word(last), 0)
    return first, last


def _find_word(scope: _Scope, words: frozenset[str] | set[str]) -> int | None:
    """The first token of the statement, outside parentheses, that is one of ``words``."""
    depth = 0
    for index in range(scope.first, scope.last + 1):
        word = scope.source.word(index)
        if depth == 0 and word in words:
            return index
        depth += {"(": 1, ")": -1}.get(word, 0)
    return None


def _node_span(node: exp.Expr, scope: _Scope) -> ir.Span:
    """The span of ``node``; a node with no recorded token is located by its keyword."""
    covered = _token_range(node, scope.source)
    if covered is None:
        word = _ANCHOR_WORDS.get(type(node), "")
        if isinstance(node, exp.Boolean):
            word = "TRUE" if node.this else "FALSE"
        anchor = _find_word(scope, {word}) if word else None
        covered = (scope.first, scope.first) if anchor is None else (anchor, anchor)
    return scope.source.token_span(*covered)


# --------------------------------------------------------------------------------------------------
# Error messages


def _located(head: str, span: ir.Span, source: _Source, tail: str) -> str:
    """The one message format: ``<head> (line L, col C: "<fragment>"). <tail>``."""
    return f'{head} ({span.describe()}: "{_fragment(source.text, span)}"). {tail}'


def _unsupported(construct: str, where: exp.Expr | ir.Span, scope: _Scope,
                 supported: str = _SUPPORTED) -> UnsupportedQueryError:
    """``<construct> is not supported (line L, col C: "..."). <what is supported>``."""
    span = where if isinstance(where, ir.Span) else _node_span(where, scope)
    return UnsupportedQueryError(_located(f"{construct} is not supported", span, scope.source, supported))


def _invalid(problem: str, where: exp.Expr, scope: _Scope, advice: str) -> SqlSyntaxError:
    """A statement that is not valid SQL for its own table and outputs, located like the others."""
    return SqlSyntaxError(_located(problem, _node_span(where, scope), scope.source, advice))


def _describe(node: exp.Expr, scope: _Scope) -> str:
    """A short name for the construct ``node`` is, for messages: 'arithmetic', 'function LOWER()'."""
    for kinds, name in _NAMES:
        if isinstance(node, kinds):
            return name
    if isinstance(node, exp.Func):
        kind = "aggregate" if isinstance(node, exp.AggFunc) else "function"
        meta = node.meta
        name = scope.source.text[meta["start"]:meta["end"] + 1] if "start" in meta else node.sql_name()
        return f"{kind} {name.upper()}()"
    return f"the {type(node).__name__} expression"


def _unparen(node: exp.Expr) -> exp.Expr:
    """``node`` without the parentheses around it."""
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _is_empty(value: object) -> bool:
    """Whether a sqlglot argument is absent (None, False or an empty list)."""
    return value is None or value is False or (isinstance(value, (list, str)) and not value)


# --------------------------------------------------------------------------------------------------
# Tokens, statements and parameters


class _Parser(DuckDB.Parser):  # type: ignore[misc,valid-type]
    """DuckDB's parser, also recording where each placeholder (``?``, ``$1``, ``:name``) is."""

    def _parse_placeholder(self) -> exp.Expr | None:
        token = self._curr
        node: exp.Expr | None = super()._parse_placeholder()
        if node is not None and token is not None and "start" not in node.meta:
            node.update_positions(token)
        return node


def _tokenize(text: str) -> tuple[Token, ...]:
    """Tokenize the whole batch; positions in the tokens are offsets into ``text``.

    Raises:
        SqlSyntaxError: an unterminated string, quoted name or comment, or other unreadable text.
    """
    tokenizer = _DIALECT.tokenizer()
    try:
        return tuple(tokenizer.tokenize(text))
    except TokenError as err:
        read = tokenizer.tokens
        offset = _skip_blanks(text, read[-1].end + 1 if read else 0)
        cause = err.__cause__
        reason = (re.sub(r" from \d+:\d+$", "", str(cause)) if isinstance(cause, TokenError)
                  else "unreadable text (an unterminated /* comment?)")
        source = _Source.of(text, ())
        span = source.span(offset, len(text))
        message = _located(f"SQL syntax error: {reason}", span, source,
                           "Close every string, quoted name and /* comment.")
        raise SqlSyntaxError(message) from err


def _skip_blanks(text: str, offset: int) -> int:
    """The first offset at or after ``offset`` that is not white space or a complete comment.

    >>> _skip_blanks("a = /* c */ -- d\\n 'x", 3)
    18
    """
    while offset < len(text):
        if text[offset].isspace():
            offset += 1
        elif text.startswith("--", offset):
            newline = text.find("\n", offset)
            offset = len(text) if newline < 0 else newline + 1
        elif text.startswith("/*", offset) and text.find("*/", offset + 2) >= 0:
            offset = text.find("*/", offset + 2) + 2
        else:
            break
    return offset


def _statement_ranges(tokens: Sequence[Token]) -> list[tuple[int, int]]:
    """The ``(first, last)`` token indices of each non-blank statement between semicolons."""
    ranges, first = [], 0
    for index, token in enumerate(tokens):
        if token.token_type == TokenType.SEMICOLON:
            if index > first:
                ranges.append((first, index - 1))
            first = index + 1
    if first < len(tokens):
        ranges.append((first, len(tokens) - 1))
    return ranges


def _parse_trees(source: _Source) -> list[tuple[exp.Expr, _Scope]]:
    """Parse each statement's tokens with sqlglot.

    Raises:
        SqlSyntaxError: sqlglot cannot parse a statement.
    """
    parser = _Parser(dialect=_DIALECT)
    trees = []
    for first, last in _statement_ranges(source.tokens):
        try:
            tree = parser.parse(list(source.tokens[first:last + 1]), source.text)[0]
        except ParseError as err:
            raise _syntax_error(err, source) from err
        if tree is not None:
            trees.append((tree, _Scope(source, first, last)))
    return trees


def _syntax_error(err: ParseError, source: _Source) -> SqlSyntaxError:
    """Turn sqlglot's ParseError (line, end column, highlighted token) into a located message."""
    detail: dict[str, Any] = err.errors[0] if err.errors else {}
    highlight = detail.get("highlight") or ""
    description = str(detail.get("description") or err).split("\n")[0]
    description = re.sub(r"<class '(?:\w+\.)*(\w+)'>", r"\1", description)
    offset = 0
    if detail.get("line") and detail.get("col"):
        line = min(int(detail["line"]), len(source.line_starts))
        offset = source.line_starts[line - 1] + int(detail["col"]) - len(highlight)
    offset = min(max(offset, 0), len(source.text))
    end = min(len(source.text), offset + len(highlight) + len(detail.get("end_context") or ""))
    span = source.span(offset, max(end, offset))
    return SqlSyntaxError(_located(f"SQL syntax error: {description}", span, source, _SYNTAX_ADVICE))


def _bind_parameters(tokens: Sequence[Token], parameters: Sequence[object] | None) -> dict[int, ir.Value]:
    """Map the offset of each ``?`` token, in text order, to its checked parameter value.

    Raises:
        ParameterError: ``parameters`` is not a sequence, has the wrong length, or holds a value
            that is not an int, float, str or datetime.date.
    """
    if parameters is None:
        parameters = ()
    if isinstance(parameters, (str, bytes)) or not isinstance(parameters, Sequence):
        raise ParameterError(
            f"parameters must be a sequence such as a list or tuple; got {type(parameters).__name__}.")
    marks = [token.start for token in tokens if token.token_type == TokenType.PLACEHOLDER]
    if len(marks) != len(parameters):
        raise ParameterError(
            f"the batch has {len(marks)} ? placeholder{'s' * (len(marks) != 1)} but {len(parameters)} "
            f"{'parameter was' if len(parameters) == 1 else 'parameters were'} given. Pass one value per ?, "
            "in text order.")
    return {mark: _check_parameter(index, value) for index, (mark, value) in enumerate(zip(marks, parameters))}


def _check_parameter(index: int, value: object) -> ir.Value:
    """Accept an int, finite float, str or datetime.date (not bool, not datetime.datetime).

    >>> _check_parameter(0, dt.date(2020, 1, 1))
    datetime.date(2020, 1, 1)
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise ParameterError(f"parameters[{index}] is {value}; a float parameter must be finite.")
    if isinstance(value, int) and not isinstance(value, bool) and not _representable(value):
        raise ParameterError(f"parameters[{index}] is an integer outside the range of a double "
                             f"(±{sys.float_info.max:.4g}); pass a number within the column's bounds.")
    if isinstance(value, (int, float, str, dt.date)) and not isinstance(value, (bool, dt.datetime)):
        return value
    raise ParameterError(
        f"parameters[{index}] has type {type(value).__name__}; a parameter must be an int, float, "
        "str or datetime.date.")


# --------------------------------------------------------------------------------------------------
# Statements


def parse_batch(text: str, parameters: Sequence[object] | None = None) -> ir.Batch:
    """Parse a batch of ``;``-separated aggregate SELECT statements into the IR.

    Args:
        text: The SQL (DuckDB dialect), with ``--`` and ``/* */`` comments allowed anywhere.
        parameters: Values for the ``?`` placeholders, in text order across the whole batch: each an
            int, float, str or datetime.date. They become IR literals; they never enter the text.

    Returns:
        The statements in text order; each node's span indexes into ``text``.

    Raises:
        SqlSyntaxError: the text is not valid SQL, names an unknown ORDER BY output or table
            qualifier, or holds an impossible date. The message gives line, column and fragment.
        UnsupportedQueryError: a construct outside the grammar of this module's docstring.
        ProgrammingError: wrong number or type of parameters.

    A batch parsed before (the same text and parameters) is returned from memory: the IR is
    immutable, and parsing is a tenth of a repeated batch's time.
    """
    try:
        key: tuple[object, ...] | None = (text, None if parameters is None else tuple((type(p), p) for p in parameters))
        hash(key)
    except TypeError:  # an unhashable parameter: the parser reports it
        key = None
    with _parsed_lock:
        if key is not None and key in _parsed:
            _parsed.move_to_end(key)
            return _parsed[key]
    batch = _parse_batch(text, parameters)
    if key is not None:
        with _parsed_lock:
            _parsed[key] = batch
            while len(_parsed) > PARSED_BATCHES:
                _parsed.popitem(last=False)
    return batch


#: Parsed batches kept in memory (by text and parameters).
PARSED_BATCHES = 256
_parsed: OrderedDict[tuple[object, ...], ir.Batch] = OrderedDict()
_parsed_lock = threading.Lock()


def _parse_batch(text: str, parameters: Sequence[object] | None) -> ir.Batch:
    """:func:`parse_batch` without the memory."""
    if not isinstance(text, str):
        raise ProgrammingError(f"SQL text must be a str; got {type(text).__name__}.")
    if len(text) > MAX_SQL_LENGTH:
        raise InvalidQueryError(f"the batch's SQL text has {len(text):,} characters; the limit is MAX_SQL_LENGTH = "
                                f"{MAX_SQL_LENGTH:,}. Split it into several batches.")
    source = _Source.of(text, _tokenize(text))
    _check_nesting(source)
    _check_statement_count(source)
    try:
        trees = _parse_trees(source)
        if not trees:
            raise SqlSyntaxError("The batch holds no SQL statement. Pass one or more SELECT statements "
                                 "separated by ';'.")
        source = replace(source, parameters=_bind_parameters(source.tokens, parameters))
        statements = tuple(_parse_statement(tree, replace(scope, source=source)) for tree, scope in trees)
    except RecursionError:  # a shape the pre-scan does not measure: refuse it, never a bare RecursionError
        raise InvalidQueryError(f"the batch nests too deeply to be read (limit MAX_NESTING = {MAX_NESTING} levels of "
                                "parentheses, NOT and signs). Flatten the expression.") from None
    return ir.Batch(statements=statements, text=text)


def _check_nesting(source: _Source) -> None:
    """Refuse nesting deeper than MAX_NESTING: open parentheses plus the current run of prefix NOT/-/+.

    >>> _check_nesting(_Source.of("SELECT (((1)))", _tokenize("SELECT (((1)))")))
    """
    depth = run = 0
    for index, token in enumerate(source.tokens):
        kind = token.token_type
        if kind in (TokenType.NOT, TokenType.DASH, TokenType.PLUS):
            run += 1
        elif kind != TokenType.L_PAREN:
            run = 0
        depth += (kind == TokenType.L_PAREN) - (kind == TokenType.R_PAREN)
        if depth + run > MAX_NESTING:
            span = source.token_span(index, index)
            raise InvalidQueryError(_located(
                f"the expression nests deeper than MAX_NESTING = {MAX_NESTING} levels "
                "(parentheses plus NOT and signs in a row)", span, source,
                "Flatten it: drop redundant parentheses and double NOTs, or use IN lists."))


def _check_statement_count(source: _Source) -> None:
    """Refuse a batch of more than MAX_STATEMENTS statements (before any is parsed)."""
    ranges = _statement_ranges(source.tokens)
    if len(ranges) > MAX_STATEMENTS:
        span = source.token_span(*ranges[MAX_STATEMENTS])
        raise InvalidQueryError(_located(f"the batch has {len(ranges):,} statements; the limit is MAX_STATEMENTS = "
                                         f"{MAX_STATEMENTS:,}", span, source, "Split it into several batches."))


def _parse_statement(tree: exp.Expr, scope: _Scope) -> ir.Statement:
    """Translate one parsed statement, checking the statement shape before its parts."""
    select = _require_select(tree, scope)
    _reject_forbidden(select, scope)
    _reject_other_clauses(select, scope)
    scope = _parse_from(select, scope)
    group_by = _parse_group_by(select.args.get("group"), scope)
    items = _parse_select_list(select, group_by, scope)
    where = select.args.get("where")
    if where is not None:
        _check_atom_count(where, scope)
    span = scope.span
    return ir.Statement(
        text=scope.source.text[span.start:span.end],
        table=scope.table,
        table_alias=scope.alias,
        table_span=scope.table_span,
        select=items,
        where=None if where is None else _parse_predicate(where.this, scope),
        group_by=group_by,
        order_by=_parse_order_by(select, items, group_by, scope),
        limit=_parse_limit(select.args.get("limit"), scope),
        span=span,
    )


def _require_select(tree: exp.Expr, scope: _Scope) -> exp.Select:
    """The statement as a SELECT; set operations, DDL, DML and commands are unsupported."""
    if isinstance(tree, exp.Select):
        return tree
    if isinstance(tree, exp.SetOperation):
        keyword = _find_word(scope, {"UNION", "INTERSECT", "EXCEPT"})
        if keyword is not None:
            span = scope.source.token_span(keyword, scope.last)
            raise _unsupported(scope.source.word(keyword), span, scope)
        raise _unsupported(type(tree).__name__.upper(), scope.span, scope)
    if isinstance(tree, exp.Subquery):
        raise _unsupported("a parenthesized query", scope.span, scope)
    raise _unsupported(f"{scope.source.word(scope.first) or 'this'} statement", scope.span, scope)


def _reject_forbidden(select: exp.Select, scope: _Scope) -> None:
    """Reject the first (in text order) join, subquery, CTE, window, DISTINCT, HAVING, ... anywhere."""
    found = []
    for node in select.walk():
        name = next((name for kind, name in _FORBIDDEN if isinstance(node, kind)), None)
        if name is not None and node is not select:
            found.append((_node_span(node, scope), name, node))
    if not found:
        return
    span, name, node = min(found, key=lambda entry: entry[0].start)
    if isinstance(node, exp.Join) and scope.source.word(scope.source.index(span.start) - 1) == ",":
        name = "multiple tables in FROM"
    raise _unsupported(name, span, scope)


def _reject_other_clauses(select: exp.Select, scope: _Scope) -> None:
    """Reject any SELECT clause outside the grammar (INTO, WINDOW, FOR UPDATE, ...)."""
    for key, value in select.args.items():
        if key in _CLAUSES or _is_empty(value):
            continue
        where = value if isinstance(value, exp.Expr) else scope.span
        raise _unsupported(_CLAUSE_NAMES.get(key, key.upper().strip("_")), where, scope)


def _parse_from(select: exp.Select, scope: _Scope) -> _Scope:
    """Read ``FROM table [[AS] alias]`` into the scope."""
    clause = select.args.get("from_") or select.args.get("from")
    if clause is None:
        raise _unsupported("a SELECT without FROM", scope.span, scope)
    table = clause.this
    if not isinstance(table, exp.Table):
        raise _unsupported(f"{_describe(table, scope)} in FROM", table, scope)
    name = table.this
    if not isinstance(name, exp.Identifier) or scope.source.text[name.meta.get("start", 0)] == "'":
        raise _unsupported("a table function or file in FROM", table, scope)
    for key, value in table.args.items():
        if key not in {"this", "alias"} and not _is_empty(value):
            raise _unsupported(_TABLE_PARTS.get(key, f"table {key.upper().strip('_')}"), table, scope)
    alias = table.args.get("alias")
    if alias is not None and alias.columns:
        raise _unsupported("column aliases on a table", alias, scope)
    return replace(scope, table=name.name, alias=alias.name if alias is not None else None,
                   table_span=_node_span(name, scope))


def _parse_column(node: exp.Expr, scope: _Scope, context: str, supported: str) -> ir.Column:
    """A plain column, optionally qualified by the table name or alias.

    Args:
        context: Where the column stands, for messages: 'in GROUP BY', 'in SUM()', 'before IN'.
    """
    node = _unparen(node)
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
        described = "*" if isinstance(node, exp.Column) else _describe(node, scope)
        raise _unsupported(f"{described} {context}", node, scope, supported)
    if not _is_empty(node.args.get("db")) or not _is_empty(node.args.get("catalog")):
        raise _unsupported("a column qualified by schema or catalog", node, scope, supported)
    qualifier = node.table or None
    if qualifier is not None and qualifier.lower() not in {scope.table.lower(), (scope.alias or "").lower()}:
        names = f"neither table '{scope.table}' nor its alias '{scope.alias}'" if scope.alias else \
            f"not table '{scope.table}'"
        raise _invalid(f"Column qualifier '{qualifier}' is {names}", node, scope,
                       "Qualify columns by the table name or alias, or not at all.")
    return ir.Column(name=node.name, qualifier=qualifier, span=_node_span(node, scope))


# --------------------------------------------------------------------------------------------------
# SELECT list and GROUP BY


def _parse_group_by(group: exp.Group | None, scope: _Scope) -> tuple[ir.Column, ...]:
    """GROUP BY plain columns, a repeated column kept once."""
    if group is None:
        return ()
    for key in ("grouping_sets", "cube", "rollup", "totals", "all"):
        if not _is_empty(group.args.get(key)):
            raise _unsupported(f"GROUP BY {key.upper().replace('_', ' ')}", group, scope, _GROUP_SUPPORTED)
    columns: list[ir.Column] = []
    for node in group.expressions:
        column = _parse_column(node, scope, "in GROUP BY", _GROUP_SUPPORTED)
        if all(column.name.lower() != seen.name.lower() for seen in columns):
            columns.append(column)
    return tuple(columns)


def _parse_select_list(select: exp.Select, group_by: tuple[ir.Column, ...],
                       scope: _Scope) -> tuple[ir.SelectItem, ...]:
    """The select items, with unique output names; at least one must be an aggregate."""
    grouped = {column.name.lower() for column in group_by}
    items = tuple(_parse_select_item(node, grouped, scope) for node in select.expressions)
    if not any(isinstance(item, ir.Aggregate) for item in items):
        raise _unsupported("a SELECT without COUNT, SUM or AVG", scope.span, scope)
    return _unique_aliases(items)


def _parse_select_item(node: exp.Expr, grouped: set[str], scope: _Scope) -> ir.SelectItem:
    """A grouped column or an aggregate, with its AS name or default name."""
    alias = node.alias if isinstance(node, exp.Alias) else None
    value = _unparen(node.this if isinstance(node, exp.Alias) else node)
    span = _node_span(node, scope)
    if isinstance(value, exp.Column) and isinstance(value.this, exp.Identifier):
        column = _parse_column(value, scope, "in SELECT", _SUPPORTED)
        if column.name.lower() not in grouped:
            raise _unsupported(f"selecting column '{column.name}' without grouping by it", value, scope)
        return ir.GroupColumn(column=column, alias=alias or column.name, span=span)
    function = _AGGREGATES.get(type(value))
    if function is None:
        raise _unsupported(_describe_item(value, scope), value, scope)
    argument = _parse_aggregate_argument(value, function, scope)
    return ir.Aggregate(function=function, column=argument, alias=alias or _default_alias(function, argument),
                        span=span)


def _describe_item(value: exp.Expr, scope: _Scope) -> str:
    """Name a select item that is neither a column nor COUNT/SUM/AVG."""
    if isinstance(value, exp.Star) or (isinstance(value, exp.Column) and isinstance(value.this, exp.Star)):
        return "SELECT *"
    described = _describe(value, scope)
    return described if described.startswith("aggregate") else f"{described} in the SELECT list"


def _parse_aggregate_argument(node: exp.Expr, function: ir.AggregateFunction,
                              scope: _Scope) -> ir.Column | None:
    """The column of COUNT(col), SUM(col) or AVG(col); None for COUNT(*)."""
    if isinstance(node, exp.Count) and node.expressions:
        raise _unsupported("COUNT of several expressions", node, scope, _AGGREGATE_SUPPORTED)
    argument = node.this
    if function == "count" and isinstance(argument, exp.Star):
        if any(not _is_empty(value) for value in argument.args.values()):
            raise _unsupported("COUNT(* EXCLUDE/REPLACE ...)", node, scope, _AGGREGATE_SUPPORTED)
        return None
    if argument is None:
        raise _unsupported(f"{function.upper()}() without an argument", node, scope, _AGGREGATE_SUPPORTED)
    return _parse_column(argument, scope, f"in {function.upper()}()", _AGGREGATE_SUPPORTED)


def _default_alias(function: ir.AggregateFunction, column: ir.Column | None) -> str:
    """``count`` for COUNT(*), else ``<function>_<column>``.

    >>> age = ir.Column(name="age", qualifier=None, span=ir.Span(line=1, column=1, start=0, end=3))
    >>> _default_alias("count", None), _default_alias("sum", age)
    ('count', 'sum_age')
    """
    return function if column is None else f"{function}_{column.name}"


def _unique_aliases(items: tuple[ir.SelectItem, ...]) -> tuple[ir.SelectItem, ...]:
    """Give a repeated output name (case-insensitively) the suffix ``_2``, ``_3``, ..."""
    taken: set[str] = set()
    result: list[ir.SelectItem] = []
    for item in items:
        alias, suffix = item.alias, 2
        while alias.lower() in taken:
            alias, suffix = f"{item.alias}_{suffix}", suffix + 1
        taken.add(alias.lower())
        result.append(item if alias == item.alias else replace(item, alias=alias))
    return tuple(result)


# --------------------------------------------------------------------------------------------------
# WHERE


def _parse_predicate(node: exp.Expr, scope: _Scope) -> ir.Predicate:
    """Dispatch on the node type through ``_PREDICATES``; anything else is unsupported."""
    parse = _PREDICATES.get(type(node))
    if parse is None:
        construct = "a bare column as a condition" if isinstance(node, exp.Column) else _describe(node, scope)
        raise _unsupported(construct, node, scope, _WHERE_SUPPORTED)
    return parse(node, scope)


def _check_atom_count(where: exp.Where, scope: _Scope) -> None:
    """Refuse a WHERE clause of more than MAX_PREDICATE_ATOMS atoms (each IN value counts one)."""
    atoms = sum(1 for _ in where.find_all(exp.Between, *_OPERATORS))
    atoms += sum(len(node.expressions) for node in where.find_all(exp.In))
    if atoms > MAX_PREDICATE_ATOMS:
        raise InvalidQueryError(_located(f"the WHERE clause has {atoms:,} predicate atoms; the limit is "
                                         f"MAX_PREDICATE_ATOMS = {MAX_PREDICATE_ATOMS:,}", _node_span(where, scope),
                                         scope.source,
                                         "Use ranges (BETWEEN, <, >=) or GROUP BY instead of long lists."))


def _parse_comparison(node: exp.Binary, scope: _Scope) -> ir.Comparison:
    """``column op constant`` or ``constant op column`` (turned around: ``5 < age`` is ``age > 5``)."""
    left, right = _unparen(node.this), _unparen(node.expression)
    operator = _OPERATORS[type(node)]
    if isinstance(left, exp.Column) and isinstance(right, exp.Column):
        raise _unsupported("column-to-column comparison", node, scope, _WHERE_SUPPORTED)
    if isinstance(right, exp.Column):
        left, right, operator = right, left, _FLIPPED[operator]
    if not isinstance(left, exp.Column):
        culprit = next((side for side in (left, right) if side.find(exp.Column)), None)
        construct = "a comparison without a column" if culprit is None else _describe(culprit, scope)
        raise _unsupported(construct, culprit or node, scope, _WHERE_SUPPORTED)
    return ir.Comparison(column=_parse_column(left, scope, "in a comparison", _WHERE_SUPPORTED),
                         operator=operator, value=_parse_value(right, scope, "a comparison"),
                         span=_node_span(node, scope))


def _parse_between(node: exp.Between, scope: _Scope) -> ir.Between:
    """``column BETWEEN low AND high``; NOT BETWEEN is handled by ``_parse_not``."""
    if node.args.get("symmetric"):
        raise _unsupported("BETWEEN SYMMETRIC", node, scope, _WHERE_SUPPORTED)
    return ir.Between(column=_parse_column(node.this, scope, "before BETWEEN", _WHERE_SUPPORTED),
                      low=_parse_value(node.args["low"], scope, "a BETWEEN bound"),
                      high=_parse_value(node.args["high"], scope, "a BETWEEN bound"),
                      negated=False, span=_node_span(node, scope))


def _parse_in(node: exp.In, scope: _Scope) -> ir.InList:
    """``column IN (constant, ...)``; NOT IN is handled by ``_parse_not``."""
    for key in ("query", "unnest", "field"):
        if not _is_empty(node.args.get(key)):
            raise _unsupported(f"IN {key}", node, scope, _WHERE_SUPPORTED)
    return ir.InList(column=_parse_column(node.this, scope, "before IN", _WHERE_SUPPORTED),
                     values=tuple(_parse_value(value, scope, "an IN list") for value in node.expressions),
                     negated=False, span=_node_span(node, scope))


def _parse_not(node: exp.Not, scope: _Scope) -> ir.Predicate:
    """``NOT p``; ``[NOT] x IN``/``BETWEEN`` under NOT become the negated IR forms."""
    operand, span = node.this, _node_span(node, scope)
    if isinstance(operand, exp.In):
        return replace(_parse_in(operand, scope), negated=True, span=span)
    if isinstance(operand, exp.Between):
        return replace(_parse_between(operand, scope), negated=True, span=span)
    return ir.Not(operand=_parse_predicate(operand, scope), span=span)


def _parse_connective(node: exp.Connector, scope: _Scope) -> ir.Predicate:
    """AND / OR, nested same-kind connectives (also inside parentheses) flattened into one node."""
    kind = ir.And if isinstance(node, exp.And) else ir.Or
    operands: list[ir.Predicate] = []
    for child in node.flatten():
        parsed = _parse_predicate(child, scope)
        if isinstance(parsed, (ir.And, ir.Or)) and type(parsed) is kind:
            operands.extend(parsed.operands)
        else:
            operands.append(parsed)
    return kind(operands=tuple(operands), span=_node_span(node, scope))


def _parse_paren(node: exp.Paren, scope: _Scope) -> ir.Predicate:
    """``( predicate )``."""
    return _parse_predicate(node.this, scope)


_PREDICATES: dict[type[exp.Expr], Callable[[Any, _Scope], ir.Predicate]] = {
    **{kind: _parse_comparison for kind in _OPERATORS},
    exp.Between: _parse_between,
    exp.In: _parse_in,
    exp.Not: _parse_not,
    exp.And: _parse_connective,
    exp.Or: _parse_connective,
    exp.Paren: _parse_paren,
}


# --------------------------------------------------------------------------------------------------
# Constants


def _parse_value(node: exp.Expr, scope: _Scope, context: str) -> ir.Literal:
    """A constant, dispatching on the node type through ``_VALUES``.

    Args:
        context: Where the value stands, for messages: 'a comparison', 'an IN list', 'LIMIT'.
    """
    parse = _VALUES.get(type(node))
    if parse is None:
        raise _unsupported(f"{_describe(node, scope)} in {context}", node, scope, _VALUE_SUPPORTED)
    return parse(node, scope, context)


def _parse_constant(node: exp.Literal, scope: _Scope, context: str) -> ir.Literal:
    """A string, integer or decimal literal."""
    if node.is_string:
        return ir.Literal(value=node.this, span=_node_span(node, scope))
    try:
        value = _number(node.this)
    except ValueError:
        raise _unsupported(f"the number {node.this}", node, scope, _VALUE_SUPPORTED) from None
    if not _representable(value):
        raise InvalidQueryError(_located(f"a {len(node.this)}-character number is outside the range of a double "
                                         f"(±{sys.float_info.max:.4g})",
                                         _node_span(node, scope), scope.source,
                                         "No declared domain reaches it: write a number within the column's bounds."))
    return ir.Literal(value=value, span=_node_span(node, scope))


def _representable(value: float) -> bool:
    """A finite double can hold ``value`` (|value| ≤ 1.797…e308): every domain compares numbers as doubles.

    >>> _representable(10**308), _representable(10**309), _representable(float("inf"))
    (True, False, False)
    """
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= sys.float_info.max


def _number(text: str) -> int | float:
    """An integer if ``text`` is all digits, else a float.

    >>> _number("42"), _number("1.5e3"), _number("0.5")
    (42, 1500.0, 0.5)
    """
    return int(text) if text.isdigit() else float(text)


def _parse_negative(node: exp.Neg, scope: _Scope, context: str) -> ir.Literal:
    """``-number``."""
    inner = _parse_value(node.this, scope, context)
    if isinstance(inner.value, bool) or not isinstance(inner.value, (int, float)):
        raise _unsupported("a minus sign before a non-number", node, scope, _VALUE_SUPPORTED)
    return ir.Literal(value=-inner.value, span=_node_span(node, scope))


def _parse_date(node: exp.Cast, scope: _Scope, context: str) -> ir.Literal:
    """``DATE 'yyyy-mm-dd'``, ``CAST('yyyy-mm-dd' AS DATE)`` or ``'yyyy-mm-dd'::DATE``."""
    if not node.to.is_type(exp.DataType.Type.DATE) or not _is_empty(node.args.get("format")):
        raise _unsupported(f"CAST to {node.to.sql(dialect='duckdb')}", node, scope, _VALUE_SUPPORTED)
    value = _parse_value(node.this, scope, context).value
    if isinstance(value, str):
        value = _date(value, node, scope)
    elif not isinstance(value, dt.date):
        raise _unsupported("a CAST of a number to DATE", node, scope, _VALUE_SUPPORTED)
    return ir.Literal(value=value, span=_node_span(node, scope))


def _date(text: str, node: exp.Expr, scope: _Scope) -> dt.date:
    """Read ``yyyy-mm-dd`` (month and day may have one digit)."""
    match = re.fullmatch(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*", text)
    try:
        if match:
            return dt.date(*(int(part) for part in match.groups()))
    except ValueError:
        pass
    raise _invalid(f"'{text}' is not a date", node, scope, "Write dates as DATE 'YYYY-MM-DD'.")


def _parse_parameter(node: exp.Placeholder, scope: _Scope, context: str) -> ir.Literal:
    """A ``?`` placeholder, replaced by its bound parameter value."""
    value = scope.source.parameters.get(int(node.meta.get("start", -1)))
    if node.this is not None or value is None:
        raise _unsupported("a named or numbered parameter ($1, :name)", node, scope,
                           "Use ? placeholders, bound in text order to the parameters sequence.")
    return ir.Literal(value=value, span=_node_span(node, scope))


def _parse_parenthesized_value(node: exp.Paren, scope: _Scope, context: str) -> ir.Literal:
    """``( constant )``."""
    return replace(_parse_value(node.this, scope, context), span=_node_span(node, scope))


_VALUES: dict[type[exp.Expr], Callable[[Any, _Scope, str], ir.Literal]] = {
    exp.Literal: _parse_constant,
    exp.Neg: _parse_negative,
    exp.Cast: _parse_date,
    exp.Placeholder: _parse_parameter,
    exp.Paren: _parse_parenthesized_value,
}


# --------------------------------------------------------------------------------------------------
# ORDER BY and LIMIT


def _parse_order_by(select: exp.Select, items: tuple[ir.SelectItem, ...], group_by: tuple[ir.Column, ...],
                    scope: _Scope) -> tuple[ir.OrderItem, ...]:
    """ORDER BY output names or positions, each ASC (default) or DESC."""
    order = select.args.get("order")
    if order is None:
        return ()
    result = []
    for node in order.expressions:
        last = (_token_range(node, scope.source) or (0, 0))[1]
        if scope.source.word(last - 1) == "NULLS" or node.args.get("with_fill"):
            raise _unsupported("NULLS FIRST/LAST", node, scope, _ORDER_SUPPORTED)
        key = _order_key(node.this, select, items, group_by, scope)
        result.append(ir.OrderItem(key=key, descending=bool(node.args.get("desc")), span=_node_span(node, scope)))
    return tuple(result)


def _order_key(node: exp.Expr, select: exp.Select, items: tuple[ir.SelectItem, ...],
               group_by: tuple[ir.Column, ...], scope: _Scope) -> str | int:
    """A 1-based position, or the output name a name or select expression refers to."""
    target = _unparen(node)
    if isinstance(target, exp.Literal) and not target.is_string:
        if not target.this.isdigit() or not 1 <= int(target.this) <= len(items):
            raise _invalid(f"ORDER BY position {target.this} is out of range", target, scope,
                           f"Use a position from 1 to {len(items)}.")
        return int(target.this)
    if isinstance(target, exp.Column) and isinstance(target.this, exp.Identifier):
        return _output_name(_parse_column(target, scope, "in ORDER BY", _ORDER_SUPPORTED), items, group_by,
                            target, scope)
    for raw, item in zip(select.expressions, items):
        if _unparen(raw.this if isinstance(raw, exp.Alias) else raw) == target:
            return item.alias
    raise _unsupported(f"{_describe(target, scope)} in ORDER BY", target, scope, _ORDER_SUPPORTED)


def _output_name(column: ir.Column, items: tuple[ir.SelectItem, ...], group_by: tuple[ir.Column, ...],
                 node: exp.Expr, scope: _Scope) -> str:
    """The output an ORDER BY name refers to, spelled as that output is.

    An output name (alias, or ``<aggregate alias>_stddev`` for the noise column dpsql adds beside each
    aggregate) comes first; then a selected group column by its column name.
    """
    name = column.name.lower()
    if column.qualifier is None:
        outputs = [item.alias for item in items] + [f"{item.alias}_stddev" for item in items
                                                    if isinstance(item, ir.Aggregate)]
        for output in outputs:
            if output.lower() == name:
                return output
    for item in items:
        if isinstance(item, ir.GroupColumn) and item.column.name.lower() == name:
            return item.alias
    if any(grouped.name.lower() == name for grouped in group_by):
        raise _unsupported("ORDER BY a group column that is not selected", node, scope, _ORDER_SUPPORTED)
    names = ", ".join(item.alias for item in items)
    raise _invalid(f"ORDER BY '{column.name}' names no output column", node, scope,
                   f"Use an output name ({names}, or <aggregate>_stddev) or a position from 1 to {len(items)}.")


def _parse_limit(limit: exp.Limit | None, scope: _Scope) -> int | None:
    """LIMIT n for a non-negative integer n (a literal or a bound ``?``)."""
    if limit is None:
        return None
    for key, value in limit.args.items():
        if key != "expression" and not _is_empty(value):
            raise _unsupported(f"LIMIT {key.upper()}", limit, scope, _LIMIT_SUPPORTED)
    node = limit.expression
    value = _parse_value(node, scope, "LIMIT").value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _unsupported(f"LIMIT {_fragment(scope.source.text, _node_span(node, scope))}", node, scope,
                           _LIMIT_SUPPORTED)
    if value > MAX_LIMIT:
        raise InvalidQueryError(_located(f"LIMIT {value:.3g} is above MAX_LIMIT = 2^63 − 1", _node_span(node, scope),
                                         scope.source, "Drop the LIMIT or use a smaller count."))
    return value
