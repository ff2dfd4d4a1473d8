"""The small typed IR a batch of aggregate SQL statements is parsed into.

Frozen dataclasses only; no numpy, no sqlglot. Every node carries the ``Span`` of the SQL text it
came from, so errors raised later (by the compiler, against the schema) can point into the text.
Every node type of a statement is defined here, those of its GROUP BY keys, derived outputs and
UNION ALL parts too: the modules that parse them (:mod:`dpsql.sql.group_keys`,
:mod:`dpsql.sql.derived`, :mod:`dpsql.sql.flatten`, ...) import this one, and it imports none of them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal as TypingLiteral


# ==================================================================================== columns, constants, predicates
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


# ==================================================================================== aggregates
#: VARIANCE and VAR_SAMP are "var_samp", STDDEV and STDDEV_SAMP "stddev_samp" (DuckDB's meanings).
AggregateFunction = TypingLiteral["count", "sum", "avg", "quantile", "var_samp", "var_pop", "stddev_samp", "stddev_pop"]
QuantileKind = TypingLiteral["cont", "disc", "min", "max"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantileSpec:
    """An order statistic (``dpsql.sql.quantiles``): MEDIAN and PERCENTILE_CONT/QUANTILE_CONT ("cont",
    fraction p), PERCENTILE_DISC/QUANTILE_DISC ("disc"), MIN ("min", p = 0) and MAX ("max", p = 1)."""

    fraction: float
    kind: QuantileKind


@dataclass(frozen=True, slots=True, kw_only=True)
class Aggregate:
    """COUNT(*) (column None), COUNT(col), SUM(col), AVG(col), or a variance or standard deviation of
    col, with its output name.

    ``alias`` is the AS name, or a default: ``count``, ``sum_<col>``, ``avg_<col>``, ``stddev_<col>``, made unique
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


# ==================================================================================== GROUP BY keys
# A key on one column whose groups are read from the schema and the SQL (:mod:`dpsql.sql.group_keys`).
DatePart = TypingLiteral["year", "month", "trunc_year", "trunc_month"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseBranch:
    """``WHEN predicate THEN label`` (label None: ``THEN NULL``)."""

    predicate: Predicate
    label: Literal | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseKey:
    """``CASE WHEN ... END`` over one column; ``default`` is the ELSE label (None: NULL)."""

    column: Column
    branches: tuple[CaseBranch, ...]
    default: Literal | None
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class DateKey:
    """``EXTRACT(YEAR|MONTH FROM d)``/``year(d)``/``month(d)`` (int64) or ``date_trunc(...)`` (date)."""

    column: Column
    part: DatePart
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class LookupKey:
    """A public table's column read through a foreign key (:mod:`dpsql.sql.public_joins`): ``labels``
    maps key values to labels, in the public rows' order; ``keep_missing`` (LEFT JOIN) puts the other
    key values and NULL keys in a NULL group, else (INNER JOIN) in no group."""

    column: Column
    labels: tuple[tuple[object, object], ...]
    keep_missing: bool
    span: Span


#: The rounding step of an arithmetic bin: FLOOR, CEIL, TRUNC (and an integer's ``//``), ROUND (half away
#: from zero), a CAST to an integer (half to even, as DuckDB casts), or none (an affine relabelling).
BinStep = TypingLiteral["floor", "ceil", "trunc", "round", "rint", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BinKey:
    """An arithmetic bin of one column: ``outer_scale · step(inner_scale · x + inner_shift) + outer_shift``
    (``FLOOR(age / 5) * 5``, ``age // 10``, ``CAST(income / 1000 AS INTEGER)``), exact rationals;
    ``integral``: the label is an integer (``//``, a CAST), else a double as DuckDB returns it."""

    column: Column
    step: BinStep
    inner_scale: Fraction
    inner_shift: Fraction
    outer_scale: Fraction
    outer_shift: Fraction
    integral: bool
    span: Span
    text: str = ""  # as written, for messages


GroupKey = CaseKey | DateKey | LookupKey | BinKey


# ==================================================================================== select items, joins, ORDER BY
@dataclass(frozen=True, slots=True, kw_only=True)
class GroupColumn:
    """A selected GROUP BY column, with its output name (the column name, or its AS alias).

    ``key``: a CASE or date-part key on ``column`` (:mod:`dpsql.sql.group_keys`); None: the column itself.
    ``rolled_up``: a key the statement's grouping set rolls up (``dpsql.sql.grouping_sets``): NULL in
    every row, ``<alias>_upper`` too.
    """

    column: Column
    alias: str
    span: Span
    key: GroupKey | None = None
    rolled_up: bool = False


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


# ==================================================================================== derived outputs
# Arithmetic, constants and HAVING over a statement's measured aggregates (:mod:`dpsql.sql.derived`
# parses them, :mod:`dpsql.answers.derived` evaluates them).
ArithmeticOperator = TypingLiteral["+", "-", "*", "/"]
#: Functions applied to released values (post-processing): rounding to ``digits`` decimals (ROUND, a
#: CAST to DECIMAL(p, s)), to integers (CEIL, FLOOR, TRUNC, a CAST to an integer type: half to even),
#: ABS, GREATEST/LEAST (NULLs skipped), COALESCE, NULLIF, and a CAST to a floating-point type.
OutputFunction = TypingLiteral["round", "ceil", "floor", "trunc", "cast_integer", "cast_real", "abs", "greatest",
                               "least", "coalesce", "nullif"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateLeaf:
    """An aggregate as parsed, before the statement's measured aggregates are numbered."""

    aggregate: Aggregate
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateRef:
    """The ``index``-th aggregate of the statement's ``select`` (``Statement.aggregates``)."""

    index: int
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Constant:
    """A number (in arithmetic) or a string/date (compared in HAVING)."""

    value: Value
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Negate:
    operand: Expression
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Arithmetic:
    operator: ArithmeticOperator
    left: Expression
    right: Expression
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputRef:
    """HAVING: an output column of the statement, by its name."""

    name: str
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRef:
    """HAVING: the ``position``-th GROUP BY column (its output value: a bin's lower bound)."""

    position: int
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """An output function of expressions (``digits``: ROUND's decimals, a DECIMAL's scale)."""

    function: OutputFunction
    operands: tuple[Expression, ...]
    span: Span
    digits: int = 0


WindowFunction = TypingLiteral["sum", "count", "avg"]
FrameKind = TypingLiteral["rows", "range"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """A window frame: ``start`` and ``end`` rows from the current one (negative: PRECEDING; None:
    UNBOUNDED); a RANGE frame's 0 is the current row with its peers (equal ORDER BY keys)."""

    kind: FrameKind
    start: int | None
    end: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """``function(argument) OVER (PARTITION BY ... ORDER BY ... frame)`` over the statement's released
    groups (``dpsql.sql.windows``); ``argument`` is one aggregate; ``order_by``
    holds (column, descending) pairs; the keys are GROUP BY columns."""

    function: WindowFunction
    argument: Expression
    partition_by: tuple[Column, ...]
    order_by: tuple[tuple[Column, bool], ...]
    frame: Frame
    span: Span


Expression = AggregateLeaf | AggregateRef | Constant | Negate | Arithmetic | OutputRef | GroupRef | Call | Window


@dataclass(frozen=True, slots=True, kw_only=True)
class Compare:
    """HAVING ``left op right``."""

    operator: ComparisonOperator
    left: Expression
    right: Expression
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Range:
    """HAVING ``operand [NOT] BETWEEN low AND high``."""

    operand: Expression
    low: Expression
    high: Expression
    negated: bool
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Among:
    """HAVING ``operand [NOT] IN (values)``."""

    operand: Expression
    values: tuple[Expression, ...]
    negated: bool
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class NullTest:
    """HAVING ``operand IS [NOT] NULL``."""

    operand: Expression
    negated: bool
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Connective:
    """HAVING: AND (``all_of``) or OR of conditions."""

    all_of: bool
    operands: tuple[Condition, ...]
    span: Span


@dataclass(frozen=True, slots=True, kw_only=True)
class Negation:
    """HAVING ``NOT condition``."""

    operand: Condition
    span: Span


Condition = Compare | Range | Among | NullTest | Connective | Negation


@dataclass(frozen=True, slots=True, kw_only=True)
class DerivedItem:
    """An output computed from the statement's aggregates; ``plain`` for a lone aggregate."""

    expression: Expression
    alias: str
    span: Span
    plain: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstantItem:
    """A constant output column."""

    value: Value
    alias: str
    span: Span


OutputItem = GroupColumn | DerivedItem | ConstantItem


@dataclass(frozen=True, slots=True, kw_only=True)
class Outputs:
    """A statement's outputs over its measured aggregates: applied, in this order, after answering:
    the output columns, HAVING (on the noisy values), ORDER BY, OFFSET, LIMIT."""

    items: tuple[OutputItem, ...]
    having: Condition | None
    order_by: tuple[OrderItem, ...]
    limit: int | None
    offset: int = 0


# ==================================================================================== statements
@dataclass(frozen=True, slots=True, kw_only=True)
class UnionPart:
    """Statement ``part`` of ``parts`` of the UNION ALL that is user statement ``union`` of the
    batch; ``order_by`` ((output name or 1-based position, descending), ...), ``offset`` and ``limit``
    apply to the concatenated rows. ``grouping_set``: the part is this grouping set (as written, e.g.
    ``(sex)`` or ``()``) of a GROUP BY ROLLUP, CUBE or GROUPING SETS at ``span`` (``dpsql.sql.grouping_sets``);
    None: a part of a UNION ALL."""

    union: int
    part: int
    parts: int
    order_by: tuple[tuple[str | int, bool], ...]
    limit: int | None
    span: Span
    offset: int = 0
    grouping_set: str | None = None

    @property
    def construct(self) -> str:
        """What the parts were written as, for messages."""
        return "UNION ALL" if self.grouping_set is None else "GROUP BY ROLLUP/CUBE/GROUPING SETS"


@dataclass(frozen=True, slots=True, kw_only=True)
class Statement:
    """One ``SELECT ... FROM table [WHERE] [GROUP BY] [ORDER BY] [LIMIT] [OFFSET]`` statement (``offset``:
    rows skipped after ORDER BY, before LIMIT counts)."""

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
    offset: int = 0

    @property
    def aggregates(self) -> tuple[Aggregate, ...]:
        return tuple(item for item in self.select if isinstance(item, Aggregate))


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """The statements of one batch, in text order, and the whole text."""

    statements: tuple[Statement, ...]
    text: str
