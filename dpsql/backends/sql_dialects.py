"""What differs between SQL engines in the cell query: a few functions and the names of types.

The cell query (:mod:`dpsql.backends.cell_sql`) is one sqlglot tree for every engine; sqlglot
renders quoting, casts, ``GROUPING SETS`` and ``NULLS LAST`` in each engine's dialect. What it
cannot translate, because the engines' functions mean different things, is asked of a
:class:`SqlDialect`:

- the 1-based position of a value in the declared categories (0 or NULL when absent);
- whether a double is NaN;
- the number of days between two dates (months and years are counted from EXTRACT, which
  every engine has);
- a BIGINT hash of a text (the privacy-unit salt for text units): the first 15 hex digits of
  its MD5, which every engine computes alike;
- a SUM that never overflows or wraps (DuckDB's HUGEINT, PostgreSQL's NUMERIC, Spark's DECIMAL(38, 0)
  under ANSI mode, which errs on overflow);
- ROUND half away from zero on a double (PostgreSQL rounds a double half to even and Spark rounds
  through BigDecimal, so both get an exact form from truncation);
- the family of a database type name (integer, decimal, float, boolean, date, timestamp, text).

Each method returns a new tree; the arguments are never modified. The same declared schema
gives, on every engine, the same cell of every row and the same clamped sums: DuckDB is then an
exact oracle for the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

from sqlglot import exp

TypeFamily = Literal["integer", "decimal", "float", "boolean", "date", "timestamp", "text", "other"]


def call(name: str, *args: exp.Expression) -> exp.Expression:
    """A function call rendered verbatim in every dialect (no sqlglot rewriting)."""
    return exp.Anonymous(this=name, expressions=list(args))


def integer(value: int) -> exp.Expression:
    return exp.Literal.number(int(value))


class SqlDialect:
    """The portable forms; an engine's dialect overrides what it has a faster or needed form of.

    Attributes:
        name: the sqlglot dialect the cell query is rendered in.
    """

    name = ""
    #: Whether several grouping sets over uncapped rows run faster as a UNION ALL of one GROUP BY per set
    #: (each aggregated in parallel) than as GROUPING SETS (:func:`dpsql.backends.cell_sql._grouping_sets`).
    sets_by_union = False
    #: Type families whose columns can hold NaN (tested by :meth:`is_nan`; NaN is no value, like NULL).
    nan_families: frozenset[TypeFamily] = frozenset({"float"})
    _INTEGER_TYPES: frozenset[str] = frozenset()
    _TEXT_PREFIXES: tuple[str, ...] = ()

    def position(self, values: Sequence[exp.Expression], value: exp.Expression) -> exp.Expression:
        """The 1-based position of ``value`` among ``values``; 0 or NULL when absent (a CASE: portable)."""
        case = exp.Case()
        for k, literal in enumerate(values, start=1):
            case = case.when(exp.EQ(this=value.copy(), expression=literal.copy()), integer(k), copy=False)
        return case.else_(integer(0), copy=False)

    def is_nan(self, value: exp.Expression) -> exp.Expression:
        """Whether the double ``value`` is NaN (NULL or false for NULL; callers test NULL first)."""
        return call("isnan", value.copy())

    def day_difference(self, start: exp.Expression, end: exp.Expression) -> exp.Expression:
        """Whole days from date ``start`` to date ``end``."""
        raise NotImplementedError

    def date_difference(self, unit: str, start: exp.Expression, end: exp.Expression) -> exp.Expression:
        """Unit boundaries crossed from date ``start`` to date ``end``: days, or calendar months or years
        (a change of month or year counts one, whatever the day), as BIGINT."""
        if unit == "day":
            return exp.cast(self.day_difference(start, end), "BIGINT")

        def months(day: exp.Expression) -> exp.Expression:
            year = exp.Extract(this=exp.var("YEAR"), expression=day.copy())
            if unit == "year":
                return year
            return exp.Add(this=exp.Mul(this=year, expression=integer(12)),
                           expression=exp.Extract(this=exp.var("MONTH"), expression=day.copy()))

        return exp.cast(exp.paren(exp.Sub(this=months(end), expression=exp.paren(months(start)))), "BIGINT")

    def text_hash(self, text: exp.Expression) -> exp.Expression:
        """A BIGINT in [0, 2^60): the first 15 hex digits of MD5(text) (UTF-8), read as a number."""
        raise NotImplementedError

    def exact_sum(self, value: exp.Expression) -> exp.Expression:
        """SUM of a BIGINT column that is exact for any number of rows, or raises; never wraps around."""
        return exp.Sum(this=value)

    def round_half_away(self, value: exp.Expression) -> exp.Expression:
        """ROUND(value) to an integer, halves away from zero, exactly on a double."""
        return exp.Round(this=value)

    def type_family(self, type_name: str) -> TypeFamily:
        """The kind of values a column of this database type holds."""
        name = type_name.strip().upper()
        if name in self._INTEGER_TYPES:
            return "integer"
        if name.startswith(("DECIMAL", "NUMERIC")):
            return "decimal"
        if name in ("FLOAT", "DOUBLE", "REAL", "DOUBLE PRECISION", "FLOAT4", "FLOAT8"):
            return "float"
        if name in ("BOOLEAN", "BOOL"):
            return "boolean"
        if name == "DATE":
            return "date"
        if name.startswith("TIMESTAMP"):
            return "timestamp"
        if name.startswith(self._TEXT_PREFIXES):
            return "text"
        return "other"

    def is_plain_text(self, type_name: str) -> bool:
        """Whether the type is the engine's text type itself (compared to text literals without a cast)."""
        return False


class DuckDBDialect(SqlDialect):
    """DuckDB: ``list_position``, ``isnan``, ``date_diff``; SUM of BIGINT is HUGEINT (128 bits), ROUND is
    half away from zero."""

    name = "duckdb"
    _INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
                                "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"})
    _TEXT_PREFIXES = ("VARCHAR", "ENUM")

    def position(self, values: Sequence[exp.Expression], value: exp.Expression) -> exp.Expression:
        return call("list_position", exp.Array(expressions=[v.copy() for v in values]), value.copy())

    def day_difference(self, start: exp.Expression, end: exp.Expression) -> exp.Expression:
        return call("date_diff", exp.Literal.string("day"), start.copy(), end.copy())

    def date_difference(self, unit: str, start: exp.Expression, end: exp.Expression) -> exp.Expression:
        return call("date_diff", exp.Literal.string(unit), start.copy(), end.copy())

    def text_hash(self, text: exp.Expression) -> exp.Expression:
        digits = exp.DPipe(this=exp.Literal.string("0x"), expression=_md5_prefix(text))
        return exp.cast(digits, "BIGINT")

    def is_plain_text(self, type_name: str) -> bool:
        return type_name.strip().upper().startswith("VARCHAR")


class SparkDialect(SqlDialect):
    """Apache Spark (ANSI mode): ``array_position``, ``isnan``, ``datediff``, ``conv``; SUM over
    DECIMAL(38, 0), which raises on overflow in ANSI mode; rounding by truncating casts."""

    name = "spark"
    _INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "BYTE", "SHORT", "LONG"})
    _TEXT_PREFIXES = ("STRING", "VARCHAR", "CHAR")

    def position(self, values: Sequence[exp.Expression], value: exp.Expression) -> exp.Expression:
        return call("array_position", exp.Array(expressions=[v.copy() for v in values]), value.copy())

    def day_difference(self, start: exp.Expression, end: exp.Expression) -> exp.Expression:
        return call("datediff", end.copy(), start.copy())

    def text_hash(self, text: exp.Expression) -> exp.Expression:
        return exp.cast(call("conv", _md5_prefix(text), integer(16), integer(10)), "BIGINT")

    def exact_sum(self, value: exp.Expression) -> exp.Expression:
        return exp.Sum(this=exp.cast(value, exp.DataType.build("DECIMAL(38, 0)")))

    def round_half_away(self, value: exp.Expression) -> exp.Expression:
        """CAST(v AS BIGINT) + CAST(2·(v − CAST(v AS BIGINT)) AS BIGINT) (:func:`_half_away_by_fraction`; the
        cast truncates, |v| ≤ 2^53), not ROUND, which converts every double to a BigDecimal."""
        return _half_away_by_fraction(value, lambda v: exp.cast(v, "BIGINT"))

    def type_family(self, type_name: str) -> TypeFamily:
        if type_name.strip().upper() == "TIMESTAMP_NTZ":
            return "timestamp"
        return super().type_family(type_name)

    def is_plain_text(self, type_name: str) -> bool:
        return type_name.strip().upper() == "STRING"


class PostgresDialect(SqlDialect):
    """PostgreSQL: categories by CASE (``array_position`` needs the array's exact element type),
    NaN by equality (NaN = NaN is true there), dates subtract to days, ``::bit(60)::bigint``
    reads hex; SUM of BIGINT is NUMERIC; ROUND on a double is half to even, so TRUNC-based here.
    NUMERIC holds NaN too (and ±Infinity, beyond any bound), so NaN is tested there as well; an ENUM
    column (``type_family("enum")``, as the adapter names enum types) holds text. ``md5`` hashes the
    text in the database's encoding: the text-unit salt equals DuckDB's (UTF-8) in UTF8 databases;
    in another encoding non-ASCII units keep other (equally valid) rows under ``max_rows``."""

    name = "postgres"
    sets_by_union = True  # GROUPING SETS aggregate in the leader process alone; GROUP BY in parallel workers
    nan_families: frozenset[TypeFamily] = frozenset({"float", "decimal"})
    _INTEGER_TYPES = frozenset({"SMALLINT", "INTEGER", "BIGINT", "INT2", "INT4", "INT8", "INT"})
    _TEXT_PREFIXES = ("TEXT", "CHARACTER", "VARCHAR", "CHAR", "BPCHAR", "NAME", "CITEXT")

    def is_nan(self, value: exp.Expression) -> exp.Expression:
        return exp.EQ(this=value.copy(), expression=exp.cast(exp.Literal.string("NaN"), "DOUBLE"))

    def day_difference(self, start: exp.Expression, end: exp.Expression) -> exp.Expression:
        return exp.paren(exp.Sub(this=end.copy(), expression=start.copy()))

    def text_hash(self, text: exp.Expression) -> exp.Expression:
        digits = exp.DPipe(this=exp.Literal.string("x"), expression=_md5_prefix(text))
        bits = exp.cast(digits, exp.DataType.build("BIT(60)", dialect="postgres"))
        return exp.cast(bits, "BIGINT")

    def round_half_away(self, value: exp.Expression) -> exp.Expression:
        """TRUNC(v) + TRUNC(2·(v − TRUNC(v))), exactly (:func:`_half_away_by_fraction`), v written three times."""
        return _half_away_by_fraction(value, lambda v: call("trunc", v))

    def type_family(self, type_name: str) -> TypeFamily:
        return "text" if type_name.strip().upper() == "ENUM" else super().type_family(type_name)

    def is_plain_text(self, type_name: str) -> bool:
        return bool(re.fullmatch(r"(TEXT|CHARACTER VARYING.*|VARCHAR.*)", type_name.strip().upper()))


def _half_away_by_fraction(value: exp.Expression,
                           truncate: Callable[[exp.Expression], exp.Expression]) -> exp.Expression:
    """round(v), halves away from zero, as t + truncate(2·(v − t)) with t = truncate(v) (toward zero).

    Exact for every double v with |v| ≤ 2^53: v − t is v's fraction f, computed without rounding (for
    |v| ≥ 1, t and v are within a factor of two, so Sterbenz's lemma applies; below 1, t = 0); 2·f is exact
    (a power of two) and lies in (−2, 2), so its truncation is ±1 exactly where |f| ≥ ½, else 0.
    """
    whole = truncate(value.copy())
    doubled = exp.Mul(this=exp.paren(exp.Sub(this=value.copy(), expression=whole.copy())),
                      expression=exp.cast(exp.Literal.string("2.0"), "DOUBLE"))
    return exp.paren(exp.Add(this=whole, expression=truncate(doubled)))


def _md5_prefix(text: exp.Expression) -> exp.Expression:
    return exp.Substring(this=exp.MD5(this=text.copy()), start=integer(1), length=integer(15))


DUCKDB = DuckDBDialect()
SPARK = SparkDialect()
POSTGRES = PostgresDialect()

#: The dialects dpsql generates cell queries for, by sqlglot name.
DIALECTS: dict[str, SqlDialect] = {d.name: d for d in (DUCKDB, SPARK, POSTGRES)}
