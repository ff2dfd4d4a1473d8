"""The small typed IR a batch of aggregate SQL statements is parsed into.

Frozen dataclasses only; no numpy, no sqlglot. Every node carries the ``Span`` of the SQL text it
came from, so errors raised later (by the compiler, against the schema) can point into the text.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Literal as TypingLiteral

if TYPE_CHECKING:
    from dpsql.sql.derived import Outputs
    from dpsql.sql.flatten import UnionPart
    from dpsql.sql.group_keys import GroupKey


@dataclass(frozen=True, slots=True, kw_only=True)
class Span:
    """Where a node is in the batch text: 1-based line and column, 0-based [start, end) offsets."""

    line: int
    column: int
    start: int
    end: int

    def describe(self) -> str:
        """'line L, col C' for error messages."""
        return f"line {self.line}, col {self.column}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """A column reference, optionally qualified by a table name or alias."""

    name: str
    qualifier: str | None
    span: Span
    qualified_table: str | None = None  # in a statement with JOIN: the table the qualifier names (alias resolved)


Value = int | float | str | dt.date


@dataclass(frozen=True, slots=True, kw_only=True)
class Literal:
    """A constant: number, string or date (DATE '2020-01-01', or a string compared with a date column)."""

    value: Value
    span: Span


ComparisonOperator = TypingLiteral["=", "<>", "<", "<=", ">", ">="]


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """``column op literal``; a ``literal op column`` in the text is normalised to this form."""

    column: Column
    operator: ComparisonOperator
    value: Literal
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Between:
    """``column [NOT] BETWEEN low AND high`` (inclusive)."""

    column: Column
    low: Literal
    high: Literal
    negated: bool
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class InList:
    """``column [NOT] IN (literal, ...)``."""

    column: Column
    values: tuple[Literal, ...]
    negated: bool
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Not:
    operand: Predicate
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class And:
    operands: tuple[Predicate, ...]
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Or:
    operands: tuple[Predicate, ...]
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class IsNull:
    """``column IS [NOT] NULL``: TRUE on the column's outside cell (NULL and out-of-domain values, which
    dpsql reads as NULL), FALSE on its declared cells; never UNKNOWN (:mod:`dpsql.sql.filters`)."""

    column: Column
    negated: bool
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Like:
    """``column [NOT] LIKE|ILIKE pattern [ESCAPE e]`` on a categorical column of strings: the IN list
    of the declared values the pattern matches (:mod:`dpsql.sql.filters`)."""

    column: Column
    pattern: Literal
    escape: str | None
    case_insensitive: bool
    negated: bool
    span: Span


Predicate = Comparison | Between | InList | Not | And | Or | IsNull | Like

AggregateFunction = TypingLiteral["count", "sum", "avg", "quantile"]
QuantileKind = TypingLiteral["cont", "disc", "min", "max"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantileSpec:
    """An order statistic (``dpsql.sql.quantiles``): MEDIAN and PERCENTILE_CONT/QUANTILE_CONT ("cont",
    fraction p), PERCENTILE_DISC/QUANTILE_DISC ("disc"), MIN ("min", p = 0) and MAX ("max", p = 1)."""

    fraction: float
    kind: QuantileKind


@dataclass(frozen=True, slots=True, kw_only=True)
class Aggregate:
    """COUNT(*) (column None), COUNT(col), SUM(col) or AVG(col), with its output name.

    ``alias`` is the AS name, or a default: ``count``, ``sum_<col>``, ``avg_<col>``, made unique
    within the statement by a numeric suffix. An order statistic has function ``quantile`` and
    its ``quantile`` spec.
    """

    function: AggregateFunction
    column: Column | None
    alias: str
    span: Span
    #: ``FILTER (WHERE p)`` (or a conditional aggregate rewritten to it): the rows counted are those
    #: where WHERE ∧ p is TRUE.
    filter: Predicate | None = None
    #: A constant factor on the answer and its standard error (``SUM(CASE WHEN p THEN k ELSE 0 END)``
    #: is k·COUNT(*) FILTER (WHERE p)).
    scale: float = 1.0
    quantile: QuantileSpec | None = None
    distinct: bool = False  # COUNT(DISTINCT <privacy unit column>) (dpsql.sql.units)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupColumn:
    """A selected GROUP BY column, with its output name (the column name, or its AS alias).

    ``key``: a CASE or date-part key on ``column`` (:mod:`dpsql.sql.group_keys`); None: the column itself.
    """

    column: Column
    alias: str
    span: Span
    key: GroupKey | None = None


SelectItem = GroupColumn | Aggregate

JoinKind = TypingLiteral["inner", "left"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Join:
    """``[INNER | LEFT [OUTER]] JOIN table [[AS] alias] USING (column) | ON column = column`` after FROM.

    ``using`` holds the USING column names; ``on`` the two columns of an ON equality (empty for USING). Whether
    the join is one dpsql can answer is decided against the schema (:mod:`dpsql.sql.relations`).
    """

    table: str
    alias: str | None
    kind: JoinKind
    using: tuple[str, ...]
    on: tuple[Column, ...]
    span: Span
    table_span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderItem:
    """ORDER BY key: an output name (alias or group column name) or a 1-based select position."""

    key: str | int
    descending: bool
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Statement:
    """One ``SELECT ... FROM table [WHERE] [GROUP BY] [ORDER BY] [LIMIT]`` statement."""

    text: str
    table: str
    table_alias: str | None
    select: tuple[SelectItem, ...]
    where: Predicate | None
    group_by: tuple[Column, ...]
    order_by: tuple[OrderItem, ...]
    limit: int | None
    span: Span
    table_span: Span | None = None
    #: Per GROUP BY entry, its CASE/date-part key on that column (None: the plain column); () when all are plain.
    group_keys: tuple[GroupKey | None, ...] = ()
    #: The JOIN after FROM (``dpsql.sql.joins``): a public table's, rewritten away against the schema by
    #: ``public_joins.resolve``, or the privacy unit's table (``dpsql.sql.relations``).
    joins: tuple[Join, ...] = ()
    #: Outputs computed from the aggregates, HAVING, ORDER BY and LIMIT over them (``dpsql.sql.derived``);
    #: then ``select`` holds the group columns and every measured aggregate, and order_by/limit are empty.
    outputs: Outputs | None = None
    #: This statement's place in a UNION ALL, whose parts are returned as one table (``dpsql.sql.flatten``).
    union: UnionPart | None = None

    @property
    def aggregates(self) -> tuple[Aggregate, ...]:
        return tuple(item for item in self.select if isinstance(item, Aggregate))


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """The statements of one batch, in text order, and the whole text."""

    statements: tuple[Statement, ...]
    text: str
