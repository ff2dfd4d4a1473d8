"""The declared, public schema: tables, attribute domains, measure bounds and the privacy unit.

Nothing here is ever read from the private data. Each attribute's domain is a list of *base
cells*, the finest grid a query may cut:

- categorical: one base cell per declared value;
- integer / numeric: half-open intervals [b_k, b_{k+1}) between the boundaries b_0 < … < b_K
  (the last one closed at ``upper``); the grid step is ``resolution`` if declared, else
  ``bin_width``; explicit ``edges`` give a non-uniform grid;
- date: the same over day numbers, with boundaries at the starts of days, months or years.

GROUP BY reports *bins*: ``bin_width`` (or ``edges``) groups of base cells. Predicates may only
cut at base boundaries, so a range endpoint inside a base cell is an error that names the
boundaries around it. Every attribute also has one *outside* cell for NULL and out-of-domain
values: predicates on the attribute never match it (as SQL's NULL never satisfies a comparison)
except ``IS NULL``, which matches exactly it (so IS NULL also counts out-of-domain values);
statements that do not touch the attribute count it, and GROUP BY shows it as a NULL group only
when the column declares ``other = true``. ``out_of_domain = "clamp"`` (ordered attributes) puts
values outside [lower, upper] into the first or last bin instead. ``out_of_domain = "exclude"``
leaves every row whose value is NULL or outside the domain out of the table, for every
statement: a public, data-independent filter (adding or removing a row still changes at most one
row), for clean columns whose outside cell would only hold noise.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dpsql import public_tables
from dpsql.domains import EPOCH as EPOCH
from dpsql.domains import Categorical as Categorical
from dpsql.domains import DateUnit as DateUnit
from dpsql.domains import Domain as Domain
from dpsql.domains import Grid as Grid
from dpsql.domains import Ordered as Ordered
from dpsql.domains import OrderedKind as OrderedKind
from dpsql.errors import SchemaError

#: Largest number of base cells one attribute may declare.
MAX_BASE_CELLS = 2**22


@dataclass(frozen=True, slots=True, kw_only=True)
class Truncation:
    """A measure whose SUMs are truncated at a privately chosen threshold θ ≤ its outer bound.

    ``method``: "svt" (AboveThreshold on the grid), "recursive" (race to the top over 2^j) or
    "auto"; ``share``: the fraction of the batch's budget spent on choosing θ.
    """

    method: Literal["svt", "recursive", "auto"]
    share: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """A declared column: its domain, whether GROUP BY shows the outside cell, measure bounds."""

    table: str
    name: str
    domain: Domain
    other: bool = False
    measure_bounds: tuple[float, float] | None = None
    outside_excluded: bool = False  # out_of_domain = "exclude": rows outside the domain are filtered out
    truncation: Truncation | None = None  # truncate = ...: SUMs clip at a private threshold θ
    rounded_value_cells: bool = False  # value_cells = "rounded": SUM/AVG may be read as midpoint-rounded value cells
    references: str | None = None  # "table.column" of a public table (dpsql.public_tables): a foreign key

    @property
    def key(self) -> str:
        return f"tables.{self.table}.columns.{self.name}"

    @property
    def bounds(self) -> tuple[float, float]:
        """The declared measure bounds [lower, upper] a SUM clamps to (SchemaError if none: only
        integer and numeric columns declared with lower/upper can be summed)."""
        if self.measure_bounds is None:
            raise SchemaError(f"{self.key} has no measure bounds: declare it integer or numeric with lower and upper "
                              "to SUM or AVG it.")
        return self.measure_bounds

    @property
    def ordered_domain(self) -> Ordered:
        """The column's domain when it is ordered (SchemaError for a categorical column)."""
        if not isinstance(self.domain, Ordered):
            raise SchemaError(f"{self.key} is categorical; "
                              "an ordered (integer, numeric or date) column is needed here.")
        return self.domain


def measure_quantum(column: Column) -> float:
    """The quantum a SUM over ``column`` is counted in: 1 for integers, else a power of two.

    For numeric columns it is 2^(ceil(log2(max(|lo|, |hi|))) - 24) over the measure bounds, so a
    clamped value keeps about 7 significant digits and per-row values stay below 2^24 in
    magnitude: sums are exact int64.

    >>> columns = Schema.load({"tables": {"t": {"columns": {
    ...     "n": {"type": "integer", "lower": 0, "upper": 9},
    ...     "x": {"type": "numeric", "lower": -3, "upper": 100}}}}}).table("t").columns
    >>> measure_quantum(columns["n"]), measure_quantum(columns["x"]) == 2.0**-17
    (1.0, True)

    Raises:
        SchemaError: the column has no measure bounds (categorical or date).
    """
    if column.measure_bounds is None or not isinstance(column.domain, Ordered):
        raise SchemaError(f"{column.key} cannot be summed: only integer and numeric columns have measure bounds.")
    if column.domain.kind == "integer":
        return 1.0
    magnitude = max(abs(column.measure_bounds[0]), abs(column.measure_bounds[1]))
    if magnitude == 0:
        return 1.0
    mantissa, exponent = math.frexp(magnitude)  # magnitude = mantissa * 2**exponent, 0.5 <= mantissa < 1
    ceil_log2 = exponent - 1 if mantissa == 0.5 else exponent
    return math.ldexp(1.0, ceil_log2 - 24)


def square_bound(column: Column) -> float:
    """The most one row adds to a sum of squares of ``column``: 0 ≤ clamp(x, lo, hi)² ≤ max(lo², hi²)."""
    low, high = column.bounds
    return max(low * low, high * high)


def square_quantum(column: Column) -> float:
    """The quantum a sum of squares of ``column`` (VARIANCE, STDDEV) is counted in: 1 for an integer
    column whose squares stay below 2^53 (exact doubles), else 2^(ceil(log2(max(lo², hi²))) - 24), as
    :func:`measure_quantum` for a numeric column with bounds [0, max(lo², hi²)]: a row's square keeps
    about 7 significant digits (rounded half away from zero: at most half a quantum per row).

    >>> columns = Schema.load({"tables": {"t": {"columns": {
    ...     "n": {"type": "integer", "lower": -9, "upper": 5},
    ...     "x": {"type": "numeric", "lower": -3, "upper": 100}}}}}).table("t").columns
    >>> square_quantum(columns["n"]), square_quantum(columns["x"]) == 2.0**-10
    (1.0, True)
    """
    measure_quantum(column)  # SchemaError when the column cannot be summed
    bound = square_bound(column)
    if (column.ordered_domain.kind == "integer" and bound <= 2.0**53) or bound == 0:
        return 1.0
    mantissa, exponent = math.frexp(bound)
    return math.ldexp(1.0, (exponent - 1 if mantissa == 0.5 else exponent) - 24)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyUnit:
    """Whose privacy is protected: each row (column None), or each distinct ``column`` value with at most ``max_rows``
    rows kept. ``table``: the *unit table* whose privacy-unit column ``column`` refers to (one row per unit, declared
    ``max_rows = 1``); this table may then be joined to it (:mod:`dpsql.sql.relations`)."""

    column: str | None = None
    max_rows: int = 1
    table: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitJoin:
    """How a joined relation's rows are made: ``fact``'s rows (many per unit) extended with the columns of the one
    ``unit`` row of their unit (``fact.privacy_unit.column = unit.privacy_unit.column``); ``outer``: LEFT JOIN (a fact
    row without a unit row is kept with NULL unit columns). ``sources`` maps each column of the relation to the
    (table, declared column) it is read from. Built by :func:`dpsql.sql.relations.joined_relation`."""

    fact: Table
    unit: Table
    outer: bool
    sources: Mapping[str, tuple[str, str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    name: str
    columns: Mapping[str, Column]
    privacy_unit: PrivacyUnit = field(default_factory=PrivacyUnit)
    join: UnitJoin | None = None  # a relation of two declared tables joined on the privacy unit (never declared)

    def privacy_parts(self) -> dict[str, Any]:
        """The parts of this table's declaration that decide what a batch reads and what one privacy
        unit can change, as plain JSON values (floats as exact ``float.hex`` strings).

        Included: the table's name (which data are read), the privacy unit (its column and
        ``max_rows``: the unit protected and the sensitivity multiplier), and per column its name,
        type, base grid (categorical values; ordered boundaries, which encode lower, upper,
        resolution or edges, and the date unit), ``out_of_domain`` (drop, clamp or exclude: which
        rows and values are counted), the measure bounds (the clamp behind every SUM/AVG
        sensitivity) and the truncation settings (method and budget share of the threshold θ).
        Left out: GROUP BY bins (``bin_width`` over a finer ``resolution``) and ``other``, which only
        choose which sums of the same base cells are reported, so they change neither a
        sensitivity nor the rows read.
        """
        unit = {"column": self.privacy_unit.column, "max_rows": self.privacy_unit.max_rows}
        if self.privacy_unit.table is not None:  # only when declared, so other tables' fingerprints are unchanged
            unit["table"] = self.privacy_unit.table
        return {"table": self.name,
                "privacy_unit": unit,
                "columns": {name: _column_parts(column) for name, column in sorted(self.columns.items())}}

    def fingerprint(self) -> str:
        """SHA-256 (hex) of ``privacy_parts`` as canonical JSON: equal across processes and platforms."""
        return _sha256_json(self.privacy_parts())

    def column(self, name: str, where: str = "") -> Column:
        """The declared column ``name`` (case-insensitive); SchemaError naming the table otherwise."""
        found = self.columns.get(name.lower())
        if found is None:
            place = f" ({where})" if where else ""
            raise SchemaError(
                f"Column '{name}' is not in the schema of table '{self.name}'{place}. Declared columns: "
                f"{', '.join(sorted(self.columns)) or 'none'}. Declare its domain in the schema "
                "or drop it from the query."
            )
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class Schema:
    tables: Mapping[str, Table]
    #: Public tables, rows inline (dpsql.public_tables): joined by lookup, never read from the database.
    public: Mapping[str, public_tables.PublicTable] = field(default_factory=dict)

    def table(self, name: str, where: str = "") -> Table:
        """The declared table ``name`` (case-insensitive); SchemaError otherwise."""
        found = self.tables.get(name.lower())
        if found is None:
            place = f" ({where})" if where else ""
            raise SchemaError(
                f"Table '{name}' is not in the schema{place}. "
                f"Declared tables: {', '.join(sorted(self.tables)) or 'none'}."
            )
        return found

    def canonical(self) -> str:
        """Every table's ``privacy_parts`` as canonical JSON (sorted keys, no whitespace, ASCII): the
        text whose SHA-256 is ``fingerprint``; the ledger keeps it to name what differs."""
        parts = {"format": "dpsql-schema-privacy/1",
                 "tables": {name: table.privacy_parts() for name, table in sorted(self.tables.items())}}
        return _canonical_json(parts)

    def fingerprint(self) -> str:
        """SHA-256 (hex) of ``canonical()``: the whole schema's privacy-relevant parts (see
        ``Table.privacy_parts``). A connection's schema may declare several tables; any one of them
        changing changes the fingerprint."""
        return hashlib.sha256(self.canonical().encode("ascii")).hexdigest()

    @classmethod
    def load(cls, source: str | Path | Mapping[str, Any] | Schema) -> Schema:
        """A Schema from a TOML file path, a TOML string, a dict, or an existing Schema."""
        if isinstance(source, Schema):
            return source
        if isinstance(source, Mapping):
            return _schema_from_dict(source)
        text = str(source)
        if isinstance(source, Path) or ("\n" not in text and "=" not in text and not text.lstrip().startswith("[")):
            try:
                text = Path(text).read_text()
            except OSError as err:
                raise SchemaError(f"cannot read the schema file '{source}': {err.strerror or err}. "
                                  "Pass the path of a TOML schema, TOML text or a dict.") from err
        try:
            return _schema_from_dict(tomllib.loads(text))
        except tomllib.TOMLDecodeError as err:
            raise SchemaError(f"the schema is not valid TOML: {err}.") from err


def _column_parts(column: Column) -> dict[str, Any]:
    """One column's privacy-relevant declaration (see ``Table.privacy_parts``)."""
    domain = column.domain
    if isinstance(domain, Categorical):
        grid: dict[str, Any] = {"type": "categorical", "values": list(domain.values)}
    else:
        grid = {"type": domain.kind, "unit": domain.unit, **_grid_parts(domain)}
    policy = "exclude" if column.outside_excluded else "clamp" if getattr(domain, "clamp", False) else "drop"
    bounds = None if column.measure_bounds is None else [float(b).hex() for b in column.measure_bounds]
    truncation = None if column.truncation is None else {"method": column.truncation.method,
                                                         "share": float(column.truncation.share).hex()}
    return {"name": column.name, **grid, "out_of_domain": policy, "measure_bounds": bounds, "truncate": truncation}


def _grid_parts(domain: Ordered) -> dict[str, Any]:
    """The base grid, compactly: a uniform grid (or a date grid) is fixed by its first and last
    boundaries, step and number of cells; explicit edges are listed as declared."""
    if domain.uniform_step is None and domain.kind != "date":
        return {"edges": [float(b).hex() for b in domain.boundaries]}
    step = None if domain.uniform_step is None else float(domain.uniform_step).hex()
    return {"lower": float(domain.lower).hex(), "top": float(domain.upper).hex(), "step": step, "cells": domain.size}


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(_canonical_json(value).encode("ascii")).hexdigest()


# ==================================================================================== parsing
def _schema_from_dict(data: Mapping[str, Any]) -> Schema:
    tables = data.get("tables")
    if not isinstance(tables, Mapping) or not tables:
        raise SchemaError("the schema needs a [tables.<name>] section for at least one table.")
    public = public_tables.load(tables)
    declared = {name.lower(): _table(name, spec) for name, spec in tables.items() if not public_tables.is_public(spec)}
    _check_unit_tables(declared)
    public_tables.check_references((column for table in declared.values() for column in table.columns.values()),
                                   public)
    return Schema(tables=declared, public=public)


def _table(name: str, spec: Any) -> Table:
    key = f"tables.{name}"
    if not isinstance(spec, Mapping):
        raise SchemaError(f"{key} must be a table of settings.")
    _only(key, spec, {"columns", "privacy_unit"})
    columns = spec.get("columns")
    if not isinstance(columns, Mapping) or not columns:
        raise SchemaError(f"{key} declares no columns; add [{key}.columns.<column>] sections.")
    declared = {column.lower(): _column(name, column, column_spec) for column, column_spec in columns.items()}
    return Table(name=name.lower(), columns=declared, privacy_unit=_privacy_unit(key, spec.get("privacy_unit", "row")))


def _privacy_unit(key: str, spec: Any) -> PrivacyUnit:
    if spec == "row":
        return PrivacyUnit()
    if isinstance(spec, Mapping) and {"column", "max_rows"} <= set(spec) <= {"column", "max_rows", "table"}:
        rows = spec["max_rows"]
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise SchemaError(f"{key}.privacy_unit.max_rows must be a positive integer; got {rows!r}.")
        table = spec.get("table")
        if table is not None and (not isinstance(table, str) or not table):
            raise SchemaError(f"{key}.privacy_unit.table must name the declared table with one row per unit; "
                              f"got {table!r}.")
        return PrivacyUnit(column=str(spec["column"]).lower(), max_rows=rows,
                           table=None if table is None else table.lower())
    raise SchemaError(f'{key}.privacy_unit must be "row" or {{ column = "...", max_rows = N }} (optionally with '
                      f'table = "<unit table>"); got {spec!r}.')


def _check_unit_tables(tables: Mapping[str, Table]) -> None:
    """Each ``privacy_unit.table`` names another declared table whose own privacy unit is a column with
    ``max_rows = 1`` (one row per unit) and no unit table of its own."""
    for table in tables.values():
        name = table.privacy_unit.table
        if name is None:
            continue
        key = f"tables.{table.name}.privacy_unit.table"
        unit = tables.get(name)
        if unit is None or unit is table:
            problem = "this table itself" if unit is table else "no declared table"
            raise SchemaError(f"{key} names '{name}', {problem}; name the table with one row per privacy unit "
                              f"(declared: {', '.join(sorted(tables))}).")
        declared = unit.privacy_unit
        if declared.column is None or declared.max_rows != 1 or declared.table is not None:
            raise SchemaError(f"{key} names '{name}', so tables.{name}.privacy_unit must be "
                              f'{{ column = "<its unit column>", max_rows = 1 }} without a table of its own: '
                              f"the unit table holds one row per unit; got {declared.column!r} with max_rows = "
                              f"{declared.max_rows}{', table = ' + repr(declared.table) if declared.table else ''}.")


_COMMON = {"type", "other", "out_of_domain", "references"}
_KEYS = {
    "categorical": _COMMON | {"values"},
    "integer": _COMMON | {"lower", "upper", "bin_width", "edges", "resolution", "measure_lower", "measure_upper",
                          "truncate", "truncation_share", "value_cells"},
    "numeric": _COMMON | {"lower", "upper", "bin_width", "edges", "resolution", "measure_lower", "measure_upper",
                          "truncate", "truncation_share", "value_cells"},
    "date": _COMMON | {"lower", "upper", "unit", "bin_width"},
}


def _column(table: str, name: str, spec: Any) -> Column:
    key = f"tables.{table}.columns.{name}"
    if not isinstance(spec, Mapping):
        raise SchemaError(f"{key} must be a table of settings.")
    kind = spec.get("type")
    if kind not in _KEYS:
        raise SchemaError(f'{key}.type must be one of "categorical", "integer", "numeric", "date"; got {kind!r}.')
    _only(key, spec, _KEYS[kind])
    other = spec.get("other", False)
    if not isinstance(other, bool):
        raise SchemaError(f"{key}.other must be true or false; got {other!r}.")
    policy = spec.get("out_of_domain", "drop")
    if policy not in ("drop", "clamp", "exclude") or (policy == "clamp" and kind == "categorical"):
        allowed = '"drop" or "exclude"' if kind == "categorical" else '"drop", "clamp" or "exclude"'
        raise SchemaError(f"{key}.out_of_domain must be {allowed}; got {policy!r}.")
    if policy == "exclude" and other:
        raise SchemaError(f'{key}: other = true reports the NULL/outside group, which out_of_domain = "exclude" '
                          "always empties; choose one of the two.")
    if kind == "categorical":
        domain: Domain = _categorical(key, spec)
    elif kind == "date":
        domain = _dates(key, spec, clamp=policy == "clamp")
    else:
        domain = _numbers(key, kind, spec, clamp=policy == "clamp")
    bounds = _measure(key, spec, domain)
    return Column(table=table.lower(), name=name.lower(), domain=domain, other=other, measure_bounds=bounds,
                  outside_excluded=policy == "exclude", truncation=_truncation(key, spec, bounds),
                  rounded_value_cells=_value_cells(key, spec), references=spec.get("references"))


def _value_cells(key: str, spec: Mapping[str, Any]) -> bool:
    """``value_cells = "exact"`` (default: a SUM/AVG is read as value cells only where each cell
    holds one value) or ``"rounded"`` (also where values are rounded to their cell's midpoint,
    a bias the planner weighs and the results report as ``bias_bound``)."""
    setting = spec.get("value_cells", "exact")
    if setting not in ("exact", "rounded"):
        raise SchemaError(f'{key}.value_cells must be "exact" or "rounded"; got {setting!r}.')
    return setting == "rounded"


def _truncation(key: str, spec: Mapping[str, Any], bounds: tuple[float, float] | None) -> Truncation | None:
    """``truncate = "svt" | "recursive" | "auto"`` and ``truncation_share`` (default 0.1)."""
    if "truncate" not in spec:
        if "truncation_share" in spec:
            raise SchemaError(f'{key}.truncation_share needs truncate = "svt", "recursive" or "auto".')
        return None
    method = spec["truncate"]
    if method not in ("svt", "recursive", "auto"):
        raise SchemaError(f'{key}.truncate must be "svt", "recursive" or "auto"; got {method!r}.')
    share = spec.get("truncation_share", 0.1)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
        raise SchemaError(f"{key}.truncation_share must be a number between 0 and 1 (the batch budget's share "
                          f"spent on choosing the threshold); got {share!r}.")
    assert bounds is not None  # integer and numeric columns always have measure bounds
    if max(abs(bounds[0]), abs(bounds[1])) == 0:
        raise SchemaError(f"{key}: truncation needs a non-zero outer bound (upper or lower).")
    return Truncation(method=method, share=float(share))

def _only(key: str, spec: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise SchemaError(f"{key} has unknown setting(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}.")


def _categorical(key: str, spec: Mapping[str, Any]) -> Categorical:
    values = spec.get("values")
    if not isinstance(values, list) or not values:
        raise SchemaError(f"{key}.values must be a non-empty list of the column's possible values.")
    if any(isinstance(v, bool) or not isinstance(v, (str, int)) for v in values):
        raise SchemaError(f"{key}.values must hold strings or integers; got {values!r}.")
    if len(set(values)) != len(values):
        raise SchemaError(f"{key}.values lists a value twice.")
    return Categorical(values=tuple(values))


def _number(key: str, spec: Mapping[str, Any], name: str) -> float:
    value = spec.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SchemaError(f"{key}.{name} must be a finite number; got {value!r}.")
    return float(value)


def _numbers(key: str, kind: OrderedKind, spec: Mapping[str, Any], *, clamp: bool) -> Ordered:
    if "edges" in spec:
        return _explicit_edges(key, kind, spec, clamp=clamp)
    lower, upper = _number(key, spec, "lower"), _number(key, spec, "upper")
    if upper < lower or (upper == lower and kind == "numeric"):
        raise SchemaError(f"{key}: upper ({spec['upper']}) must be greater than lower ({spec['lower']}).")
    width = _number(key, spec, "bin_width") if "bin_width" in spec else 1.0
    step = _number(key, spec, "resolution") if "resolution" in spec else width
    if width <= 0 or step <= 0 or (kind == "integer" and not (width.is_integer() and step.is_integer())):
        integers = " integers" if kind == "integer" else ""
        raise SchemaError(f"{key}: bin_width and resolution must be positive{integers}.")
    ratio = width / step
    if not math.isclose(ratio, round(ratio), rel_tol=1e-9):
        raise SchemaError(f"{key}: bin_width ({width:g}) must be a whole multiple of resolution ({step:g}).")
    top = upper + 1 if kind == "integer" else upper  # integers: the last cell is [upper, upper + 1)
    cells = math.ceil((top - lower) / step - 1e-9)
    _check_cells(key, cells)
    return Ordered(kind=kind, grid=Grid(lower=lower, step=step, cells=cells, top=top, per_bin=round(ratio)),
                   clamp=clamp)


def _explicit_edges(key: str, kind: OrderedKind, spec: Mapping[str, Any], *, clamp: bool) -> Ordered:
    edges = spec["edges"]
    if "resolution" in spec or "bin_width" in spec or not isinstance(edges, list) or len(edges) < 2:
        raise SchemaError(f"{key}.edges must be a list of at least two increasing numbers, "
                          "without bin_width or resolution.")
    values = [float(e) for e in edges if not isinstance(e, bool) and isinstance(e, (int, float))]
    if len(values) != len(edges) or any(b <= a for a, b in itertools.pairwise(values)):
        raise SchemaError(f"{key}.edges must be strictly increasing numbers; got {edges!r}.")
    _check_cells(key, len(values) - 1)
    return Ordered(kind=kind, boundaries=tuple(values), bin_starts=tuple(range(len(values) - 1)), uniform_step=None,
                   clamp=clamp)


def _dates(key: str, spec: Mapping[str, Any], *, clamp: bool) -> Ordered:
    lower, upper = (_date(key, spec, name) for name in ("lower", "upper"))
    unit = spec.get("unit", "day")
    if unit not in ("day", "month", "year"):
        raise SchemaError(f'{key}.unit must be "day", "month" or "year"; got {unit!r}.')
    width = spec.get("bin_width", 1)
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise SchemaError(f"{key}.bin_width must be a positive integer number of {unit}s; got {width!r}.")
    if upper < lower:
        raise SchemaError(f"{key}: upper ({upper}) must not be before lower ({lower}).")
    if unit == "day":  # a uniform grid of whole days
        cells = (upper - lower).days + 1
        _check_cells(key, cells)
        first = float((lower - EPOCH).days)
        return Ordered(kind="date", grid=Grid(lower=first, step=1.0, cells=cells, top=first + cells, per_bin=width),
                       unit=unit, clamp=clamp)
    starts = _unit_starts(_unit_floor(lower, unit), upper, unit)
    _check_cells(key, len(starts) - 1)
    boundaries = tuple(float((day - EPOCH).days) for day in starts)
    return Ordered(kind="date", boundaries=boundaries, bin_starts=tuple(range(0, len(starts) - 1, width)),
                   uniform_step=None, unit=unit, clamp=clamp)


def _date(key: str, spec: Mapping[str, Any], name: str) -> dt.date:
    value = spec.get(name)
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError as err:
        raise SchemaError(f"{key}.{name} must be a date such as 2020-01-31; got {value!r}.") from err


def _unit_floor(day: dt.date, unit: DateUnit) -> dt.date:
    return day if unit == "day" else day.replace(day=1) if unit == "month" else day.replace(month=1, day=1)


def _unit_starts(first: dt.date, last: dt.date, unit: DateUnit) -> list[dt.date]:
    """Start dates of every unit from ``first`` through the unit holding ``last``, plus the next start."""
    starts = [first]
    while starts[-1] <= last:
        current = starts[-1]
        if unit == "day":
            starts.append(current + dt.timedelta(days=1))
        elif unit == "month":
            starts.append(current.replace(year=current.year + current.month // 12, month=current.month % 12 + 1))
        else:
            starts.append(current.replace(year=current.year + 1))
        if len(starts) > MAX_BASE_CELLS + 1:
            break
    return starts


def _check_cells(key: str, cells: int) -> None:
    if cells > MAX_BASE_CELLS:
        raise SchemaError(f"{key} declares {cells:,} base cells; the limit is {MAX_BASE_CELLS:,}. "
                          "Use a coarser resolution.")


def _measure(key: str, spec: Mapping[str, Any], domain: Domain) -> tuple[float, float] | None:
    """Clamping bounds for SUM/AVG: measure_lower/measure_upper, else the domain's lower/upper."""
    if not isinstance(domain, Ordered) or domain.kind == "date":
        return None
    lower = _number(key, spec, "measure_lower") if "measure_lower" in spec else domain.lower
    upper = _number(key, spec, "measure_upper") if "measure_upper" in spec else (
        domain.upper - 1 if domain.kind == "integer" and "edges" not in spec else domain.upper)
    if upper < lower:
        raise SchemaError(f"{key}: measure_upper ({upper:g}) must not be below measure_lower ({lower:g}).")
    return (lower, upper)
