"""The SQL text of a batch: its tokens, statements, spans, parameters and located error messages.

The text is tokenized once with sqlglot (DuckDB dialect); each ``;``-separated statement is then
parsed from its own tokens (:func:`parse_trees`). Everything here maps sqlglot's trees back onto
the text: :class:`Source` turns offsets into 1-based line/column spans (:class:`~dpsql.sql.ir.Span`),
:func:`node_span` finds the tokens a node covers (sqlglot records only some of them, so the range
is widened to the node's keywords and balanced parentheses), and :func:`located` writes the one
message format every error uses: ``<problem> (line L, col C: "<fragment>"). <advice>``.
``?`` parameters are checked and bound by the offset of their token (:func:`bind_parameters`),
so they become IR literals and never text.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType  # type: ignore[attr-defined]  # re-exported there

from dpsql.errors import ParameterError, SqlSyntaxError, UnsupportedQueryError
from dpsql.sql import ir

SUPPORTED = (
    "dpsql answers SELECT [group keys,] aggregates (COUNT, SUM, AVG, MEDIAN, ...) and arithmetic on them "
    "FROM a table [JOIN a public or unit table] [WHERE predicates on columns] [GROUP BY keys] [HAVING ...]; "
    "see the SQL reference, docs/sql.md."
)
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
    exp.Extract: frozenset({"EXTRACT", "FROM", "YEAR", "MONTH", "DAY", "QUARTER", "WEEK", "HOUR"}),
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


# --------------------------------------------------------------------------------------------------
# The text, its tokens and spans


@dataclass(frozen=True, slots=True)
class Source:
    """The batch text and tokens, with the look-ups that turn offsets into spans."""

    text: str
    tokens: tuple[Token, ...]
    starts: tuple[int, ...]  # token start offsets, for bisection
    line_starts: tuple[int, ...]
    parameters: Mapping[int, ir.Value] = field(default_factory=dict)  # by offset of the ? token

    @classmethod
    def of(cls, text: str, tokens: Sequence[Token]) -> Source:
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
class Scope:
    """One statement being translated: its tokens ``first..last`` and, once read, its table."""

    source: Source
    first: int
    last: int
    table: str = ""
    alias: str | None = None
    table_span: ir.Span | None = None
    joined: tuple[ir.Join, ...] = ()  # the JOINs after FROM, once read (dpsql.sql.joins)

    @property
    def span(self) -> ir.Span:
        """The statement's own span, first token to last."""
        return self.source.token_span(self.first, self.last)

    def table_of(self, qualifier: str) -> str | None:
        """The table a column qualifier names (the FROM or a joined table, by name or alias), or None."""
        for table, alias in ((self.table, self.alias), *((join.table, join.alias) for join in self.joined)):
            if qualifier.lower() in {table.lower(), (alias or "").lower()}:
                return table
        return None


def fragment(text: str, span: ir.Span, limit: int = 60) -> str:
    """The source of ``span`` on one line, at most ``limit`` characters.

    >>> text = "SELECT COUNT(*) FROM people p\\n  JOIN visits v ON v.person = p.id AND v.day > DATE '2020-01-01'"
    >>> fragment(text, ir.Span(line=2, column=3, start=32, end=len(text)))
    'JOIN visits v ON v.person = p.id AND v.day > DATE ...'
    """
    piece = " ".join(text[span.start:span.end].split())
    if len(piece) <= limit:
        return piece
    return piece[: limit - 4].rsplit(" ", 1)[0] + " ..."


def token_range(node: exp.Expr, source: Source) -> tuple[int, int] | None:
    """The tokens ``node`` covers: its own token and its children's, widened to its keywords."""
    if isinstance(node, exp.Paren):
        inner = token_range(node.this, source)
        return None if inner is None else (inner[0] - 1, inner[1] + 1)
    if isinstance(node, (exp.Not, exp.Neg)):  # one NOT / minus sign before the operand
        inner = token_range(node.this, source)
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


def _infix_not(source: Source, covered: tuple[int, int]) -> bool:
    """Whether the NOT of a negated IN / BETWEEN sits between the operand's first and last tokens."""
    first, last = covered
    depth = 0
    for index in range(first, last + 1):
        word = source.word(index)
        depth += (word == "(") - (word == ")")
        if depth == 0 and word == "NOT" and index > first:
            return True
    return False


def _children_range(node: exp.Expr, source: Source) -> tuple[int, int] | None:
    """The union of the token of ``node`` itself (if sqlglot recorded it) and its children's ranges.

    AND/OR chains are flattened first, so that a long chain does not recurse once per operand.
    """
    children = node.flatten(unnest=False) if isinstance(node, exp.Connector) else node.iter_expressions()
    ranges = [covered for covered in (token_range(child, source) for child in children) if covered is not None]
    if "start" in node.meta:
        ranges.append((source.index(node.meta["start"]), source.index(node.meta["end"])))
    if not ranges:
        return None
    return min(first for first, _ in ranges), max(last for _, last in ranges)


def _widen_prefix(source: Source, first: int, words: frozenset[str], once: bool) -> int:
    """Take in the run of ``words`` (one word if ``once``) before token ``first``, across ``(``."""
    start, taken = first, 0
    while not (once and taken) and (source.word(start - 1) in words or (words and source.word(start - 1) == "(")):
        taken += source.word(start - 1) != "("
        start -= 1
    while start < first and source.word(start) == "(" and "(" not in words:
        start += 1
    return start


def _widen_function_name(source: Source, first: int, name: str) -> int:
    """Take in ``name(`` before the first argument of a function whose name token is unrecorded."""
    start = first
    while source.word(start - 1) == "(":
        start -= 1
    if start < first and 0 < start and (source.word(start - 1) == name.upper()
                                        or source.tokens[start - 1].token_type == TokenType.VAR):
        return start - 1
    return first


def _widen_cast(source: Source, first: int, last: int) -> tuple[int, int]:
    """Take in ``CAST(`` / ``TRY_CAST(`` before, ``DATE`` before or ``::type`` after a cast operand."""
    if source.word(first - 1) == "(" and source.word(first - 2) in {"CAST", "TRY_CAST"}:
        return first - 2, last
    if source.word(first - 1) in _TYPED_STRING_WORDS:
        return first - 1, last
    if source.word(last + 1) == "::":
        return first, last + 2
    return first, last


def _balance(source: Source, first: int, last: int) -> tuple[int, int]:
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


def find_word(scope: Scope, words: frozenset[str] | set[str]) -> int | None:
    """The first token of the statement, outside parentheses, that is one of ``words``."""
    depth = 0
    for index in range(scope.first, scope.last + 1):
        word = scope.source.word(index)
        if depth == 0 and word in words:
            return index
        depth += {"(": 1, ")": -1}.get(word, 0)
    return None


def node_span(node: exp.Expr, scope: Scope) -> ir.Span:
    """The span of ``node``; a node with no recorded token is located by its keyword."""
    covered = token_range(node, scope.source)
    if covered is None:
        word = _ANCHOR_WORDS.get(type(node), "")
        if isinstance(node, exp.Boolean):
            word = "TRUE" if node.this else "FALSE"
        anchor = find_word(scope, {word}) if word else None
        covered = (scope.first, scope.first) if anchor is None else (anchor, anchor)
    return scope.source.token_span(*covered)


# --------------------------------------------------------------------------------------------------
# Error messages


def located(head: str, span: ir.Span, source: Source, tail: str) -> str:
    """The one message format: ``<head> (line L, col C: "<fragment>"). <tail>``."""
    return f'{head} ({span.describe()}: "{fragment(source.text, span)}"). {tail}'


def unsupported(construct: str, where: exp.Expr | ir.Span, scope: Scope,
                supported: str = SUPPORTED) -> UnsupportedQueryError:
    """``<construct> is not supported (line L, col C: "..."). <what is supported>``."""
    span = where if isinstance(where, ir.Span) else node_span(where, scope)
    return UnsupportedQueryError(located(f"{construct} is not supported", span, scope.source, supported))


def invalid(problem: str, where: exp.Expr, scope: Scope, advice: str) -> SqlSyntaxError:
    """A statement that is not valid SQL for its own table and outputs, located like the others."""
    return SqlSyntaxError(located(problem, node_span(where, scope), scope.source, advice))


def describe(node: exp.Expr, scope: Scope) -> str:
    """A short name for the construct ``node`` is, for messages: 'arithmetic', 'function LOWER()'; a
    hyphenated name written without quotes (``hours-per-week``, read as a subtraction) says to quote it."""
    hyphenated = _hyphenated_name(node, scope)
    if hyphenated is not None:
        return (f"arithmetic ({hyphenated} reads as a subtraction of columns; a column whose name has hyphens is "
                f'written in double quotes: "{hyphenated}")')
    for kinds, name in _NAMES:
        if isinstance(node, kinds):
            return name
    if isinstance(node, exp.Func):
        kind = "aggregate" if isinstance(node, exp.AggFunc) else "function"
        meta = node.meta
        name = scope.source.text[meta["start"]:meta["end"] + 1] if "start" in meta else node.sql_name()
        return f"{kind} {name.upper()}()"
    return f"the {type(node).__name__} expression"


def _hyphenated_name(node: exp.Expr, scope: Scope) -> str | None:
    """The text of a subtraction of plain columns written without spaces (``hours-per-week``), else None."""
    if not isinstance(node, exp.Sub) or not all(isinstance(leaf, exp.Column) for leaf in _subtracted(node)):
        return None
    span = node_span(node, scope)
    text = scope.source.text[span.start:span.end]
    return text if text and not any(c.isspace() for c in text) else None


def _subtracted(node: exp.Expr) -> list[exp.Expr]:
    """The operands of a chain of subtractions, left to right."""
    return [*_subtracted(node.this), node.expression] if isinstance(node, exp.Sub) else [node]


def unparen(node: exp.Expr) -> exp.Expr:
    """``node`` without the parentheses around it."""
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def is_empty(value: object) -> bool:
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


def tokenize(text: str) -> tuple[Token, ...]:
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
        source = Source.of(text, ())
        span = source.span(offset, len(text))
        message = located(f"SQL syntax error: {reason}", span, source,
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


def statement_ranges(tokens: Sequence[Token]) -> list[tuple[int, int]]:
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


def parse_trees(source: Source) -> list[tuple[exp.Expr, Scope]]:
    """Parse each statement's tokens with sqlglot.

    Raises:
        SqlSyntaxError: sqlglot cannot parse a statement.
    """
    parser = _Parser(dialect=_DIALECT)
    trees = []
    for first, last in statement_ranges(source.tokens):
        try:
            tree = parser.parse(list(source.tokens[first:last + 1]), source.text)[0]
        except ParseError as err:
            raise _syntax_error(err, source) from err
        if tree is not None:
            trees.append((tree, Scope(source, first, last)))
    return trees


def _syntax_error(err: ParseError, source: Source) -> SqlSyntaxError:
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
    return SqlSyntaxError(located(f"SQL syntax error: {description}", span, source, _SYNTAX_ADVICE))


def bind_parameters(tokens: Sequence[Token], parameters: Sequence[object] | None) -> dict[int, ir.Value]:
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
    if isinstance(value, int) and not isinstance(value, bool) and not representable(value):
        raise ParameterError(f"parameters[{index}] is an integer outside the range of a double "
                             f"(±{sys.float_info.max:.4g}); "
                             "pass a number within the column's bounds.")
    if isinstance(value, (int, float, str, dt.date)) and not isinstance(value, (bool, dt.datetime)):
        return value
    raise ParameterError(
        f"parameters[{index}] has type {type(value).__name__}; a parameter must be an int, float, "
        "str or datetime.date.")



def representable(value: float) -> bool:
    """A finite double can hold ``value`` (|value| ≤ 1.797…e308): every domain compares numbers as doubles.

    >>> representable(10**308), representable(10**309), representable(float("inf"))
    (True, False, False)
    """
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= sys.float_info.max
