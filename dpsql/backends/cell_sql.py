"""The SQL that computes cell data, built from the declared schema alone as sqlglot expressions.

Every query a backend runs for the engine comes from here: the per-cell GROUP BY (or GROUPING SETS
for several cell sets or marginals) with the privacy-unit cap, the truncation selectors' profile,
and the checks that the database's column types can hold each declared use. The expressions are
rendered in the backend's dialect (``exp.sql(dialect)``); their Arrow results are decoded into
:class:`~dpsql.backends.base.CellData` and dense marginal tables by :mod:`dpsql.backends.cell_results`, and a
set inside a finer one is summed from its cells here (:func:`marginal_cell_data`). Nothing here opens a database:
the adapters of :mod:`dpsql.backends.sql_backend` (DuckDB, Spark, PostgreSQL) run these queries, each
in its own :class:`~dpsql.backends.sql_dialects.SqlDialect`. Where rows go (cells, the outside cell,
measures, the cap) is described in :mod:`dpsql.backends.sql_backend`; no user SQL and no value read
from the data reaches a query.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from sqlglot import exp

from dpsql.backends.base import CellData, IntArray, Squared
from dpsql.backends.sql_dialects import SqlDialect, TypeFamily, call, integer
from dpsql.errors import DomainTooLargeError, InternalError, ProgrammingError, SchemaError
from dpsql.schema import EPOCH, Categorical, Column, Ordered, Table, square_bound

_NUMBER_FAMILIES = frozenset({"integer", "decimal", "float"})
#: Largest per-row |measure| / quantum: beyond 2**53 doubles no longer hold every integer.
_MAX_SCALED_MEASURE = 2.0**53
#: Most boundaries searched with a CASE tree (explicit edges, or a grid that is not lower + k*step).
_MAX_EDGES = 2**16


@dataclass(frozen=True, slots=True)
class DatabaseColumn:
    """A column as the database has it: its real name, its type's name and the family of that type."""

    name: str
    type_name: str
    family: TypeFamily


@dataclass(frozen=True, slots=True)
class SourceTable:
    """Where a declared table's rows are read: the database's reference to it (or, for a joined
    relation, the join as a subquery: :func:`joined_source`), its columns (keyed by lower-case
    name) and the dialect the queries over it are rendered in."""

    reference: exp.Table | exp.Subquery
    columns: Mapping[str, DatabaseColumn]
    dialect: SqlDialect


def raise_problems(table: Table, catalog: Mapping[str, DatabaseColumn], binned: Sequence[Column],
                    measures: Sequence[Column | Squared]) -> None:
    """SchemaError listing every missing column and every type that cannot hold its column's use."""
    summed = [_column_of(m) for m in measures]
    problems = _missing(table, catalog, [c.name for c in [*binned, *summed]])
    for column in dict.fromkeys(binned):
        if column.name in catalog:
            problems.append(_type_problem(column, catalog[column.name]) or "")
    for column in summed:
        if column.name in catalog:
            problems.append(_measure_problem(column, catalog[column.name]) or "")
    if any(problems):
        raise SchemaError(" ".join(p for p in problems if p))


def _missing(table: Table, catalog: Mapping[str, DatabaseColumn], names: Sequence[str]) -> list[str]:
    unit = table.privacy_unit.column
    wanted = dict.fromkeys([*names, *([unit] if unit else [])])
    missing = [name for name in wanted if name not in catalog]
    if not missing:
        return []
    listed = ", ".join(f"'{name}'" + (" (the privacy unit)" if name == unit else "") for name in missing)
    return [(f"Column(s) {listed} of table '{table.name}' are declared in the schema but missing from the "
             f"database table, which has: {', '.join(c.name for c in catalog.values())}. The schema and the "
             "database disagree: fix the column names in the schema or create a view that provides them.")]


def _type_problem(column: Column, db: DatabaseColumn) -> str | None:
    """Why the database column cannot hold the declared domain, or None."""
    domain = column.domain
    if isinstance(domain, Categorical):
        try:
            _category_literals(domain, db)
        except ValueError as err:
            return f"{column.key}: {err}"
        return None
    allowed = ("date", "timestamp") if domain.kind == "date" else tuple(_NUMBER_FAMILIES)
    if db.family in allowed:
        return None
    return (f"{column.key} is declared {domain.kind} but the database column '{db.name}' has type {db.type_name}. "
            f"Declare a domain that fits the type, or create a view that casts the column.")


def _measure_problem(column: Column, db: DatabaseColumn) -> str | None:
    if column.measure_bounds is None:
        return f"{column.key} cannot be summed: only integer and numeric columns have measure bounds."
    if db.family not in _NUMBER_FAMILIES:
        return (f"{column.key} is summed but the database column '{db.name}' has type {db.type_name}, "
                "not a number type. Create a view that casts the column.")
    return None


def check_quantum(measure: Column | Squared, quantum: float) -> None:
    column = _column_of(measure)
    squared = isinstance(measure, Squared)
    what, rule = (f"SUM({column.name}²)", "square_quantum") if squared else (f"SUM({column.name})", "measure_quantum")
    if isinstance(quantum, bool) or not isinstance(quantum, (int, float)) or not math.isfinite(quantum) or quantum <= 0:
        raise ProgrammingError(f"The quantum for {what} must be a finite number > 0; got {quantum!r}. "
                               f"Use {rule}(column).")
    if column.measure_bounds is None:
        return  # refused by raise_problems
    largest = square_bound(column) if squared else max(map(abs, column.measure_bounds))
    if largest / quantum > _MAX_SCALED_MEASURE:
        raise ProgrammingError(f"The quantum {quantum!r} for {what} is too small for measure bounds "
                               f"{column.measure_bounds}: values would exceed 2^53 quanta. "
                               f"Use {rule}(column).")


def _column_of(measure: Column | Squared) -> Column:
    return measure.column if isinstance(measure, Squared) else measure


# ================================================================================ joined relations
#: Aliases of the two tables inside the join (the relation's columns are named by the schema, never these).
_FACT, _UNIT = "dpsql_fact", "dpsql_unit_table"


def joined_source(relation: Table, source_of: Callable[[Table], SourceTable]) -> SourceTable:
    """The rows of a relation declared by ``relation.join`` (:mod:`dpsql.sql.relations`) as a subquery:

    ``SELECT f.c AS c, ..., u.d AS d, ..., f.key AS key FROM fact f [LEFT] JOIN unit u ON f.key = u.key``,
    each relation column read from the table and column of ``join.sources``. Every other query then reads
    it like a table, so the privacy-unit cap of :func:`_rows` applies to the joined rows. Built from the
    schema only; ``source_of`` gives each member table's reference and catalog (no row is read).

    Raises:
        SchemaError: a declared column or key is missing from its database table, a column's type cannot
            hold its domain, or the two keys' types are of different families (the join would compare
            values of different kinds).
    """
    join = relation.join
    if join is None:
        raise InternalError(f"'{relation.name}' is not a joined relation.")
    members = {join.fact.name: (join.fact, source_of(join.fact), _FACT),
               join.unit.name: (join.unit, source_of(join.unit), _UNIT)}
    for table, source, _ in members.values():  # each table's columns and types, named as declared
        raise_problems(table, source.columns, list(table.columns.values()), [])
    (fact, fact_source, _), (unit, unit_source, _) = members.values()
    fact_key = fact_source.columns[fact.privacy_unit.column or ""]
    unit_key = unit_source.columns[unit.privacy_unit.column or ""]
    if fact_key.family != unit_key.family:
        raise SchemaError(f"tables.{fact.name}.privacy_unit joins '{fact_key.name}' ({fact_key.type_name}) to "
                          f"tables.{unit.name}'s unit column '{unit_key.name}' ({unit_key.type_name}): the keys "
                          "must have types of one family. Create a view that casts one of them.")
    projections = [exp.alias_(exp.column(members[owner][1].columns[name].name, table=members[owner][2], quoted=True),
                              key, quoted=True)
                   for key, (owner, name) in join.sources.items()]
    on = exp.EQ(this=exp.column(fact_key.name, table=_FACT, quoted=True),
                expression=exp.column(unit_key.name, table=_UNIT, quoted=True))
    rows = (exp.select(*projections).from_(fact_source.reference.copy().as_(_FACT, quoted=True))
            .join(unit_source.reference.copy().as_(_UNIT, quoted=True), on=on,
                  join_type="left" if join.outer else "inner"))
    catalog = {key: DatabaseColumn(key, members[owner][1].columns[name].type_name,
                                   members[owner][1].columns[name].family)
               for key, (owner, name) in join.sources.items()}
    return SourceTable(reference=rows.subquery("dpsql_joined", copy=False), columns=catalog,
                       dialect=fact_source.dialect)


# ================================================================================ SQL generation
def table_ref(name: str) -> exp.Table:
    """A table reference from a dotted name (``people``, ``db.people``, ``catalog.db.people``), each part
    quoted as an identifier (so it is matched as a name, never read as SQL)."""
    parts = [exp.to_identifier(part, quoted=True) for part in name.split(".")]
    if len(parts) > 3 or any(not part.name for part in parts):
        raise SchemaError(f"'{name}' is not a table name: give NAME, DATABASE.NAME or CATALOG.DATABASE.NAME.")
    return exp.Table(this=parts[-1], db=parts[-2] if len(parts) > 1 else None,
                     catalog=parts[-3] if len(parts) > 2 else None)


def _ref(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def _double(value: float) -> exp.Expression:
    """A DOUBLE literal that round-trips exactly (a bare 0.1 would be a DECIMAL in DuckDB)."""
    return exp.cast(exp.Literal.string(repr(float(value))), "DOUBLE")


def _date(day_number: float) -> exp.Expression:
    return exp.cast(exp.Literal.string((EPOCH + dt.timedelta(days=int(day_number))).isoformat()), "DATE")


def _cell_index(column: Column, db: DatabaseColumn, dialect: SqlDialect) -> exp.Expression:
    """The BIGINT cell index of a row for ``column``: 0..size-1, or size for the outside cell."""
    if isinstance(column.domain, Categorical):
        return _categorical_index(column.domain, db, dialect)
    return _ordered_index(column.domain, db, dialect)


def _category_literals(domain: Categorical, db: DatabaseColumn) -> list[exp.Expression]:
    """The declared values as literals of the column's type; ValueError if the type cannot hold them."""
    family = db.family
    converted: list[object]
    literals: list[exp.Expression]
    if family == "boolean":
        words = {"true": True, "1": True, "false": False, "0": False}
        keys = [str(v).lower() for v in domain.values]
        if any(k not in words for k in keys):
            raise ValueError(f"the database column '{db.name}' is BOOLEAN; declare values \"true\" and \"false\".")
        flags = [words[k] for k in keys]
        converted, literals = list(flags), [exp.Boolean(this=v) for v in flags]
    elif family in _NUMBER_FAMILIES:
        pattern = r"[+-]?\d+" if family == "integer" else r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
        if any(isinstance(v, str) and not re.fullmatch(pattern, v.strip()) for v in domain.values):
            raise ValueError(f"declares text values but the database column '{db.name}' has type {db.type_name}. "
                             "Declare values of that type, or create a view that casts the column.")
        if family == "integer":
            integers = [int(v) for v in domain.values]
            converted, literals = list(integers), [integer(v) for v in integers]
        else:
            numbers = [float(v) for v in domain.values]
            converted, literals = list(numbers), [_double(v) for v in numbers]
    else:
        texts = [str(v) for v in domain.values]
        converted, literals = list(texts), [exp.Literal.string(v) for v in texts]
    if len(set(converted)) != len(converted):
        raise ValueError(f"two declared values are the same value of the database type {db.type_name}; "
                         "list each value once.")
    return literals


def _categorical_index(domain: Categorical, db: DatabaseColumn, dialect: SqlDialect) -> exp.Expression:
    value: exp.Expression = _ref(db.name)
    if db.family not in ("boolean", "integer") and not dialect.is_plain_text(db.type_name):
        value = exp.cast(value, "DOUBLE" if db.family in _NUMBER_FAMILIES else "VARCHAR")
    position = dialect.position(_category_literals(domain, db), value)
    found = exp.Nullif(this=position, expression=integer(0))  # 0 or NULL when absent, depending on the engine
    return exp.Sub(this=exp.Coalesce(this=found, expressions=[integer(domain.size + 1)]), expression=integer(1))


def _ordered_index(domain: Ordered, db: DatabaseColumn, dialect: SqlDialect) -> exp.Expression:
    if db.family == "integer" and _integer_grid(domain):
        return _integer_grid_index(domain, db)
    outside, last = domain.size, domain.size - 1
    if domain.kind == "date":
        value = exp.cast(_ref(db.name), "DATE")
        lower, top = _date(domain.lower), _date(domain.upper)
    else:
        value = exp.cast(_ref(db.name), "DOUBLE")
        lower, top = _double(domain.lower), _double(domain.upper)
    beyond = exp.GT if domain.closed_top else exp.GTE
    case = exp.Case().when(exp.Not(this=_has_value(db, dialect)), integer(outside))
    return (case.when(exp.LT(this=value.copy(), expression=lower), integer(0 if domain.clamp else outside))
            .when(beyond(this=value.copy(), expression=top), integer(last if domain.clamp else outside))
            .else_(_index_in_range(domain, value, db.family, dialect), copy=False))


def _integer_grid(domain: Ordered) -> bool:
    """Whether an integer column bins on ``domain`` by integer arithmetic alone: a number grid whose
    lower bound, step and top are integers within ±2^53 (where every double is the integer it reads)
    and whose boundaries are min(lower + step·k, top)."""
    step = domain.uniform_step
    return (domain.kind != "date" and step is not None and _grid_is_arithmetic(domain)
            and all(float(v).is_integer() and abs(v) <= _MAX_SCALED_MEASURE
                    for v in (domain.lower, domain.upper, step)))


def _integer_grid_index(domain: Ordered, db: DatabaseColumn) -> exp.Expression:
    """The cell of an integer column's value on an integer grid, with no cast to DOUBLE:

    ``CASE WHEN v >= lower AND v < top THEN LEAST((v - lower) DIV step, K - 1) ... ELSE K END``
    (``v <= top`` where the last boundary is included). ``v - lower`` is computed in BIGINT and only for
    values in range, so it is at most top - lower < 2^54 and never overflows; its integer quotient is
    ⌊(v - lower)/step⌋ (the difference is ≥ 0), the cell :meth:`Ordered.locate` gives. Below lower and
    above top rows go to the first and last cell (clamp) or outside, as NULL does (no branch holds).
    """
    outside, last = domain.size, domain.size - 1
    value = _ref(db.name)
    lower, top, step = (_int_literal(int(v)) for v in (domain.lower, domain.upper, domain.uniform_step or 1))
    beyond, within = (exp.GT, exp.LTE) if domain.closed_top else (exp.GTE, exp.LT)
    offset: exp.Expression = exp.cast(value.copy(), "BIGINT")
    if domain.lower != 0:
        offset = exp.Sub(this=offset, expression=lower.copy())
    unit_steps = domain.uniform_step == 1
    quotient = offset if unit_steps else exp.cast(exp.IntDiv(this=exp.paren(offset), expression=step), "BIGINT")
    exact_top = unit_steps and not domain.closed_top and domain.lower + domain.size == domain.upper
    index = quotient if exact_top else call("least", quotient, integer(last))  # v < top: at most K - 1 already
    in_range = exp.and_(exp.GTE(this=value.copy(), expression=lower.copy()),
                        within(this=value.copy(), expression=top.copy()))
    case = exp.Case().when(in_range, index, copy=False)
    if domain.clamp:
        case = (case.when(exp.LT(this=value.copy(), expression=lower.copy()), integer(0))
                .when(beyond(this=value.copy(), expression=top.copy()), integer(last)))
    return case.else_(integer(outside), copy=False)


def _int_literal(value: int) -> exp.Expression:
    """An integer literal, parenthesised when negative (so ``v - -5`` never reads as a comment)."""
    return exp.paren(integer(value)) if value < 0 else integer(value)


def _index_in_range(domain: Ordered, value: exp.Expression, family: TypeFamily,
                    dialect: SqlDialect) -> exp.Expression:
    """The base cell of a value known to lie in [lower, upper]."""
    if domain.kind == "date":
        return dialect.date_difference(domain.unit or "day", _date(domain.lower), value)
    if domain.uniform_step is not None and _grid_is_arithmetic(domain):
        exact = family == "integer" and all(float(b).is_integer() for b in (domain.lower, domain.uniform_step))
        return _grid_index(domain, value, corrected=not exact)
    if domain.size + 1 > _MAX_EDGES:
        raise DomainTooLargeError(f"The backend bins at most {_MAX_EDGES} explicit boundaries; this domain has "
                                  f"{domain.size + 1}. Use a uniform grid (bin_width/resolution).")
    return _bisect(value, domain.boundaries, 0, domain.size)


def _grid_is_arithmetic(domain: Ordered) -> bool:
    """Whether boundaries are exactly min(lower + step*k, top) in IEEE doubles, as the SQL recomputes them."""
    step = domain.uniform_step or 0.0
    k = np.arange(domain.size + 1, dtype=np.float64)
    return step > 0 and bool(np.array_equal(np.minimum(domain.lower + step * k, domain.upper),
                               np.asarray(domain.boundaries, dtype=np.float64)))


def _grid_index(domain: Ordered, value: exp.Expression, *, corrected: bool) -> exp.Expression:
    """floor((v - lower) / step), corrected by one cell where the division rounded across a boundary.

    The correction recomputes the boundaries as LEAST(lower + step * k, top) with the IEEE
    operations the schema used, so the index agrees exactly with ``domain.boundaries``. Integer
    values on an integer grid need none: the quotient is exact below 2^52.
    """
    step_value = domain.uniform_step or 1.0
    lower, step, top, last = _double(domain.lower), _double(step_value), _double(domain.upper), domain.size - 1

    def boundary(k: exp.Expression) -> exp.Expression:
        offset = exp.Mul(this=step.copy(), expression=exp.cast(k, "DOUBLE"))
        return call("least", exp.Add(this=lower.copy(), expression=offset), top.copy())

    quotient = exp.Div(this=exp.paren(exp.Sub(this=value.copy(), expression=lower.copy())), expression=step.copy())
    k0 = call("least", exp.cast(call("floor", quotient), "BIGINT"), integer(last))
    if not corrected:
        return k0
    down = exp.Case().when(exp.LT(this=value.copy(), expression=boundary(k0.copy())), integer(1)).else_(integer(0))
    above_next = exp.GTE(this=value.copy(), expression=boundary(exp.Add(this=k0.copy(), expression=integer(1))))
    up = (exp.Case().when(exp.and_(exp.LT(this=k0.copy(), expression=integer(last)), above_next), integer(1))
          .else_(integer(0)))
    return exp.Add(this=exp.Sub(this=k0, expression=down), expression=up)


def _bisect(value: exp.Expression, boundaries: Sequence[float], low: int, high: int) -> exp.Expression:
    """A CASE tree finding k in [low, high) with boundaries[k] <= value < boundaries[k+1]."""
    if high - low == 1:
        return integer(low)
    middle = (low + high) // 2  # the subtrees are new, so they are attached without sqlglot's default deep copy
    return (exp.Case().when(exp.LT(this=value.copy(), expression=_double(boundaries[middle])),
                            _bisect(value, boundaries, low, middle), copy=False)
            .else_(_bisect(value, boundaries, middle, high), copy=False))


def _measure_value(measure: Column | Squared, db: DatabaseColumn, quantum: float, dialect: SqlDialect, *,
                   absent_as_zero: bool = False) -> exp.Expression:
    """round(clamp(v, lo, hi) / quantum) as BIGINT (a :class:`Squared` measure: round(clamp(v, lo, hi)² /
    quantum), the square taken of the clamped DOUBLE); NULL where the row has no value, or 0 with ``absent_as_zero``.

    Either adds nothing to a SUM (COALESCE(SUM, 0) is the same), but 0 keeps every branch a bounded
    number: DuckDB then derives min/max statistics for the column and, where they times the table's
    row count cannot pass int64, sums it in int64 (``sum_no_overflow``) instead of HUGEINT.
    """
    lo, hi = _column_of(measure).measure_bounds or (0.0, 0.0)  # checked by _measure_problem
    value = exp.cast(_ref(db.name), "DOUBLE")
    clamped = call("least", call("greatest", value, _double(lo)), _double(hi))
    if isinstance(measure, Squared):
        clamped = exp.Mul(this=exp.paren(clamped), expression=exp.paren(clamped.copy()))
    scaled = exp.cast(dialect.round_half_away(exp.Div(this=clamped, expression=_double(quantum))), "BIGINT")
    return exp.Case().when(_has_value(db, dialect), scaled).else_(integer(0) if absent_as_zero else exp.null())


def _has_value(db: DatabaseColumn, dialect: SqlDialect) -> exp.Expression:
    """Whether a row has a value in the column: not NULL and, in a floating-point column, not NaN.

    The one definition every generated query uses. NaN (in a float column, or in any column of a family
    in ``dialect.nan_families``, e.g. PostgreSQL's NUMERIC) is not a value, like NULL: COUNT(col)
    does not count it, SUM and AVG leave it out, and its cell is the outside cell (predicates are
    UNKNOWN on it, GROUP BY shows it only with ``other``, ``out_of_domain`` = "exclude" drops it).
    Never NULL itself, so it can be projected as a flag.
    """
    present = exp.Not(this=_ref(db.name).is_(exp.null()))
    if db.family in dialect.nan_families:  # parenthesised: NOT and AND must not re-associate around it
        return exp.paren(exp.and_(present, exp.Not(this=dialect.is_nan(_ref(db.name)))))
    return exp.paren(present)


def _rows(table: Table, source: SourceTable, cells: Sequence[Column], sums: Mapping[Column | Squared, float],
          counts: Sequence[Column], *, summed_only: bool = False,
          units: bool = False) -> tuple[exp.Select, list[str], list[str], list[str]]:
    """(rows, cell names, sum names, count names): one row per (capped) table row with its cell
    indices, scaled measures and has-a-value flags — the input of every aggregate query.

    With ``summed_only`` (the measures are only summed) a row without a value has measure 0 rather
    than NULL, unless a privacy unit is capped: the cap orders a unit's rows by their values, NULLs last.
    With ``units`` the kept rows also carry their unit (``dpsql_unit``), which the cap's order never reads.
    """
    catalog, dialect = source.columns, source.dialect
    unit = table.privacy_unit.column
    absent_as_zero = summed_only and unit is None
    cell_names = [f"dpsql_cell_{i}" for i in range(len(cells))]
    sum_names = [f"dpsql_sum_{i}" for i in range(len(sums))]
    count_names = [f"dpsql_nonnull_{i}" for i in range(len(counts))]
    projections = ([exp.alias_(_cell_index(c, catalog[c.name], dialect), n, quoted=True)
                    for c, n in zip(cells, cell_names)]
                   + [exp.alias_(_measure_value(c, catalog[c.name], q, dialect, absent_as_zero=absent_as_zero), n,
                                 quoted=True)
                      for (c, q), n in zip(sums.items(), sum_names)]
                   + [exp.alias_(_has_value(catalog[c.name], dialect), n, quoted=True)
                      for c, n in zip(counts, count_names)])
    projections = projections or [exp.alias_(integer(0), "dpsql_row", quoted=True)]  # COUNT(*) alone reads no column
    kept: list[exp.Expression] = [exp.NEQ(this=_cell_index(c, catalog[c.name], dialect),
                                          expression=integer(c.domain.size))
                                  for c in table.columns.values() if c.outside_excluded]
    if unit is None:
        rows = exp.select(*projections).from_(source.reference.copy())
    else:  # rows without a unit are dropped: no one's contribution bound covers them
        unit_column = catalog[unit]
        unit_ref = _ref(unit_column.name)
        rows = exp.select(*projections, exp.alias_(unit_ref, "dpsql_unit", quoted=True),
                          exp.alias_(_unit_salt(unit_column, dialect), "dpsql_salt", quoted=True))
        rows = rows.from_(source.reference.copy())
        kept.append(unit_ref.copy().is_(exp.null()).not_())
    if kept:
        rows = rows.where(exp.and_(*kept))
    if unit is not None:
        rows = _cap_per_unit(rows, cell_names + sum_names + count_names, table.privacy_unit.max_rows, count_names,
                             units=units)
    return rows, cell_names, sum_names, count_names


def build_query(table: Table, source: SourceTable, cells: Sequence[Column], sums: Mapping[Column | Squared, float],
                counts: Sequence[Column], grouping: Sequence[tuple[int, ...]] | None = None, *,
                units: bool = False) -> exp.Query:
    """SELECT cell indices, COUNT(*), SUMs and COUNTs ... GROUP BY the cell indices (or, given
    ``grouping``, by GROUPING SETS of cell column positions: :func:`_grouping_sets`), over the capped rows;
    with ``units`` also COUNT(DISTINCT unit) per cell (``dpsql_units``: a unit counts once in each cell
    where it has a kept row)."""
    rows, cell_names, sum_names, count_names = _rows(table, source, cells, sums, counts, summed_only=True,
                                                     units=units)
    aggregates = [exp.alias_(exp.Count(this=exp.Star()), "dpsql_rows", quoted=True)]
    if units:
        aggregates.append(exp.alias_(exp.Count(this=exp.Distinct(expressions=[_ref("dpsql_unit")])), "dpsql_units",
                                     quoted=True))
    # exact sums (|sum| < 2^53 per row · 2^63 rows): HUGEINT (int64 where DuckDB proves it cannot overflow),
    # NUMERIC or DECIMAL(38, 0), never cast down
    aggregates += [exp.alias_(exp.Coalesce(this=source.dialect.exact_sum(_ref(n)), expressions=[integer(0)]), n,
                              quoted=True) for n in sum_names]
    aggregates += [exp.alias_(exp.Count(this=exp.Case().when(_ref(n), integer(1))), n, quoted=True)
                   for n in count_names]
    if grouping is not None:
        return _grouping_sets(table, rows, cell_names, aggregates, grouping, source.dialect)
    query = exp.select(*[_ref(n) for n in cell_names], *aggregates).from_(rows.subquery("dpsql_rows", copy=False))
    return query.group_by(*[_ref(n) for n in cell_names]) if cell_names else query


def _grouping_sets(table: Table, rows: exp.Select, cell_names: Sequence[str], aggregates: Sequence[exp.Expr],
                   grouping: Sequence[tuple[int, ...]], dialect: SqlDialect) -> exp.Query:
    """SELECT cell columns, aggregates FROM rows GROUP BY GROUPING SETS (one per entry of ``grouping``).

    Where the dialect aggregates one set at a time in parallel but grouping sets serially
    (:attr:`SqlDialect.sets_by_union`) and the rows are a plain projection of the table (no per-unit
    cap, whose window would then be computed once per set), the same rows as a UNION ALL of one
    GROUP BY per set, each with the cell columns outside its set NULL, as GROUPING SETS has them.
    """
    if not dialect.sets_by_union or table.privacy_unit.column is not None or len(grouping) < 2:
        query = exp.select(*[_ref(n) for n in cell_names], *aggregates).from_(rows.subquery("dpsql_rows", copy=False))
        sets = [exp.Tuple(expressions=[_ref(cell_names[i]) for i in positions]) for positions in grouping]
        query.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=sets)]))
        return query
    branches: list[exp.Select] = []
    for positions in grouping:
        cells = [_ref(n) if i in positions else exp.alias_(exp.cast(exp.null(), "BIGINT"), n, quoted=True)
                 for i, n in enumerate(cell_names)]
        branch = exp.select(*cells, *[a.copy() for a in aggregates]).from_(rows.subquery("dpsql_rows"))
        branches.append(branch.group_by(*[_ref(cell_names[i]) for i in positions]) if positions else branch)
    union: exp.Query = branches[0]
    for branch in branches[1:]:
        union = exp.union(union, branch, distinct=False)
    return union


#: Most declared cells (outside cells included) of a finest grouping set that coarser sets are summed
#: from in numpy rather than aggregated by the database: its result has at most this many rows.
MAX_FINEST_CELLS = 2**22


def finest_sets(sets: Sequence[tuple[int, ...]], sizes: Sequence[int]) -> dict[tuple[int, ...], tuple[int, ...]]:
    """Per grouping set (sorted column positions), the set the database aggregates it at: the smallest
    (fewest declared cells) of the sets containing it whose declared cells, the product of ``sizes``
    over its columns, are at most ``MAX_FINEST_CELLS``; itself when none does.

    One hash aggregation per finest set instead of one per set; the choice depends on the declared
    domains alone (public), never on the data.
    """
    distinct = list(dict.fromkeys(sets))
    cells = {s: math.prod(sizes[i] for i in s) for s in distinct}
    chosen: dict[tuple[int, ...], tuple[int, ...]] = {}
    for s in distinct:
        # maximal covering sets first: a set inside two others goes to the one that is itself not inside another
        covers = [t for t in distinct if set(s) <= set(t) and cells[t] <= MAX_FINEST_CELLS]
        tops = [t for t in covers if not any(set(t) < set(u) for u in covers)]
        chosen[s] = min(tops, key=lambda t: (cells[t], t)) if tops else s
    return chosen


def marginal_cell_data(data: CellData, keep: Sequence[int]) -> CellData:
    """The cell data over the axes ``keep`` of ``data`` (in that order): every array summed over the
    other axes, exactly (int64 where no total can pass 2^63 − 1, Python integers otherwise)."""
    if list(keep) == list(range(len(data.shape))):
        return data
    if data.units is not None:
        raise InternalError("distinct units per cell are not a sum over finer cells; read them at their own cells.")
    shape = tuple(data.shape[k] for k in keep)
    axes = np.unravel_index(data.index, data.shape) if data.shape else ()
    index = (np.ravel_multi_index(tuple(axes[k] for k in keep), shape) if shape
             else np.zeros(data.index.size, dtype=np.int64))
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    starts = np.flatnonzero(np.r_[True, sorted_index[1:] != sorted_index[:-1]]) if index.size else \
        np.zeros(0, dtype=np.int64)

    def summed(values: IntArray) -> IntArray:
        ordered = values[order]
        if ordered.dtype != object and ordered.size and \
                int(np.abs(ordered.astype(np.float64)).max()) * ordered.size >= 2**62:
            ordered = ordered.astype(object)  # the int64 total might wrap: Python integers are exact
        out = np.add.reduceat(ordered, starts) if ordered.size else ordered
        out = np.ascontiguousarray(out)
        out.setflags(write=False)
        return out

    new_index = np.ascontiguousarray(sorted_index[starts], dtype=np.int64)
    new_index.setflags(write=False)
    return CellData(shape=shape, index=new_index, counts=summed(data.counts),
                    sums=MappingProxyType({n: summed(v) for n, v in data.sums.items()}),
                    nonnull=MappingProxyType({n: summed(v) for n, v in data.nonnull.items()}),
                    squares=MappingProxyType({n: summed(v) for n, v in data.squares.items()}))


def marginals_query(table: Table, source: SourceTable, cells: Sequence[Column],
                    marginals: Sequence[tuple[int, ...]]) -> exp.Query:
    """SELECT cell indices, COUNT(*) ... GROUP BY GROUPING SETS (one per marginal: :func:`_grouping_sets`),
    over the capped rows.

    Cell indices are never NULL, so a result row's NULL pattern names its grouping set.
    """
    rows, cell_names, _, _ = _rows(table, source, cells, {}, ())
    rows_count = exp.alias_(exp.Count(this=exp.Star()), "dpsql_rows", quoted=True)
    return _grouping_sets(table, rows, cell_names, [rows_count], marginals, source.dialect)


# ============================================================================ privacy-unit cap
#: The row-choice hash works modulo this prime (2^31 - 1): every product of two residues is below
#: 2^62, so BIGINT arithmetic never overflows on any engine.
HASH_PRIME = 2**31 - 1
#: Multiplier of the polynomial hash over a row's values, and the offsets of its two squaring rounds.
_HASH_MULTIPLIER = 1_000_003
_HASH_OFFSETS = (723_471_715, 1_368_812_503)


def _residue(value: exp.Expression) -> exp.Expression:
    """((v mod P) + P) mod P: a residue in [0, P) whatever the sign (% truncates on every engine)."""
    prime = integer(HASH_PRIME)
    return exp.Mod(this=exp.paren(exp.Add(this=exp.Mod(this=value, expression=prime),
                                          expression=prime.copy())), expression=prime.copy())


def _unit_salt(unit: DatabaseColumn, dialect: SqlDialect) -> exp.Expression:
    """A residue of the row's unit: the integer itself, else the MD5 prefix of its text (:meth:`SqlDialect.text_hash`).

    Salting the row order with the unit makes each unit order its rows differently; with one order
    for everyone, the rows kept under ``max_rows`` would favour the same values in every unit.
    """
    value = _ref(unit.name)
    if unit.family == "integer":
        return _residue(exp.cast(exp.paren(exp.Mod(this=value, expression=integer(HASH_PRIME))), "BIGINT"))
    return exp.Mod(this=dialect.text_hash(exp.cast(value, "VARCHAR")), expression=integer(HASH_PRIME))


def _row_hash(names: Sequence[str], flags: Sequence[str] = ()) -> exp.Expression:
    """h = salt, then h = (h·M + residue(v)) mod P over the row's values (a flag as 0/1, NULL as 0).

    A flag (one of ``flags``, a BOOLEAN) is read by CASE: PostgreSQL has no cast from BOOLEAN to BIGINT
    (and the cast keeps its residue arithmetic in BIGINT: 1 + P overflows PostgreSQL's INTEGER).
    """
    hashed: exp.Expression = _ref("dpsql_salt")
    for name in names:
        value = exp.cast(exp.Case().when(_ref(name), integer(1)).else_(integer(0)) if name in flags else _ref(name),
                         "BIGINT")
        term = exp.Coalesce(this=_residue(value), expressions=[integer(0)])
        step = exp.Add(this=exp.Mul(this=exp.paren(hashed), expression=integer(_HASH_MULTIPLIER)), expression=term)
        hashed = exp.Mod(this=exp.paren(step), expression=integer(HASH_PRIME))
    return hashed


def _mixed(order: exp.Expression) -> exp.Expression:
    """Two rounds of h -> (h·h + c) mod P: a polynomial hash is only shifted by the salt; squaring
    makes the order of a unit's rows depend on it."""
    for offset in _HASH_OFFSETS:
        square = exp.Mul(this=order.copy(), expression=order.copy())
        order = exp.paren(exp.Mod(this=exp.paren(exp.Add(this=square, expression=integer(offset))),
                                  expression=integer(HASH_PRIME)))
    return order


def _cap_per_unit(rows: exp.Select, names: Sequence[str], max_rows: int, flags: Sequence[str] = (), *,
                  units: bool = False) -> exp.Select:
    """Keep at most ``max_rows`` rows per unit: ROW_NUMBER over the unit's rows in the order of a
    salted hash of their values, ties broken by the values themselves (NULLs last); with ``units``
    the kept rows keep their unit too (the same rows are kept either way).

    The hash uses only BIGINT ``+``, ``*`` and ``%``, so every engine keeps the same rows; rows
    that tie on every value are interchangeable, so which of them is kept changes nothing.
    """
    kept = [_ref(n) for n in names] or [_ref("dpsql_row")]  # COUNT(*) alone: the constant column of _rows
    hashed = exp.select(*kept, _ref("dpsql_unit"), exp.alias_(_row_hash(names, flags), "dpsql_order", quoted=True))
    kept += [_ref("dpsql_unit")] if units else []
    hashed = hashed.from_(rows.subquery("dpsql_unit_rows"))
    order = [exp.Ordered(this=_mixed(_ref("dpsql_order")), nulls_first=False)]
    order += [exp.Ordered(this=_ref(n), nulls_first=False) for n in names]
    window = exp.Window(this=exp.RowNumber(), partition_by=[_ref("dpsql_unit")], order=exp.Order(expressions=order))
    ranked = exp.select(*[k.copy() for k in kept], exp.alias_(window, "dpsql_rank", quoted=True))
    ranked = ranked.from_(hashed.subquery("dpsql_hashed"))
    capped = exp.select(*[k.copy() for k in kept]).from_(ranked.subquery("dpsql_ranked"))
    return capped.where(exp.LTE(this=_ref("dpsql_rank"), expression=integer(max_rows)))


def profile_query(table: Table, source: SourceTable, column: Column, quantum: float, below: Sequence[float],
                  clip: Sequence[int]) -> exp.Select:
    """The one-scan query of the truncation-threshold selectors' statistics (columns ``dpsql_rows``,
    ``dpsql_below_k``, ``dpsql_clip_j``): see ``Backend.measure_profile``."""
    rows, _, (value,), _ = _rows(table, source, [], {column: quantum}, ())
    magnitude = exp.Abs(this=_ref(value))
    aggregates = [exp.alias_(exp.Count(this=_ref(value)), "dpsql_rows", quoted=True)]
    aggregates += [exp.alias_(exp.Count(this=exp.Case().when(
                       exp.LTE(this=magnitude.copy(), expression=_double(u / quantum)), integer(1))),
                              f"dpsql_below_{k}", quoted=True)
                   for k, u in enumerate(below)]
    present = exp.Not(this=_ref(value).is_(exp.null()))  # LEAST skips NULLs, so guard them explicitly
    # exact sums, read as Python integers
    aggregates += [exp.alias_(exp.Coalesce(this=source.dialect.exact_sum(exp.Case().when(present.copy(), call(
                       "least", magnitude.copy(), integer(int(t))))), expressions=[integer(0)]),
                              f"dpsql_clip_{j}", quoted=True)
                   for j, t in enumerate(clip)]
    return exp.select(*aggregates).from_(rows.subquery("dpsql_rows", copy=False))
