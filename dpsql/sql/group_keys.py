"""GROUP BY keys that are public functions of one declared column: a re-binning of its base cells.

A key ``f(col)`` whose value is constant on every base cell of ``col`` — a ``CASE WHEN <predicate on
col> THEN <literal> ... [ELSE <literal>] END``, ``EXTRACT(YEAR|MONTH FROM d)``, ``year(d)``,
``month(d)`` or ``date_trunc('year'|'month', d)`` — sends each base cell (and the outside cell of NULL
and out-of-domain values) to one output group, or to none. Its groups are therefore read from the
schema and the SQL text alone, never from the data, and the statement is answered from the same cell
counts as ``GROUP BY col``: each group's answer is the sum of its cells' answers.

Privacy: an exact rewrite. The statement's queries are still linear queries over the batch cells, a
row still falls in exactly one cell, so the data vectors measured and their sensitivities (one row
moves one cell count by one, a clamped sum by at most its bound) are unchanged, and the cost charged
is the one the caller passes, as for the plain GROUP BY. Nothing here reads the data.

Parse side (:func:`resolve_reference`, :func:`parse_key`, :func:`select_key`): GROUP BY ordinals and
SELECT aliases resolve to the select expression (as DuckDB does, a name that is also a column inside
that very expression stays the column); a key expression becomes a :class:`~dpsql.sql.ir.CaseKey` or
:class:`~dpsql.sql.ir.DateKey`. Compile side (:func:`key_groups`, :func:`plain_groups`,
:func:`membership`): the key's :class:`KeyGroups`, i.e. its ordered labels and the group of every base
cell; the compiler adds the group of every base cell to the axis signature, so batch cells never
straddle two groups.

CASE follows SQL: branches are tried in order, a row matching no WHEN gets the ELSE label (NULL
without ELSE); a row whose column is NULL or outside the declared domain makes every WHEN UNKNOWN,
so it goes to ELSE. Output groups: each distinct THEN/ELSE label in first-appearance order, then the
NULL group when some cell reaches no label (or ``THEN NULL``/``ELSE NULL`` is written). Date keys
map NULL to NULL, so, like the plain column, they show the NULL group only when the column declares
``other = true``.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import scipy.sparse as sp
from sqlglot import exp

from dpsql import schema as sch
from dpsql.errors import UnsupportedQueryError
from dpsql.sql import ir
from dpsql.sql.arithmetic import STEPS, step_form, stepped
from dpsql.sql.filters import Atom, atoms
from dpsql.sql.predicates import parse_column, parse_predicate, parse_value
from dpsql.sql.source import Scope, describe, invalid, node_span, unparen, unsupported

KEY_SUPPORTED = (
    "GROUP BY takes columns, 1-based select positions, SELECT aliases, CASE WHEN <predicate on one column> "
    "THEN <constant> ... [ELSE <constant>] END, EXTRACT(YEAR|MONTH FROM d), year(d), month(d), "
    "date_trunc('year'|'month', d) and arithmetic bins of one numeric column (FLOOR(age / 5) * 5, age // 10, "
    "CAST(income / 1000 AS INTEGER), CEIL, TRUNC, ROUND) whose steps fall on its cell boundaries."
)

# ==================================================================================== parse side
def resolve_reference(node: exp.Expr, select: exp.Select, scope: Scope) -> exp.Expr:
    """A GROUP BY entry with ordinals and SELECT aliases replaced by the select expression they name.

    ``GROUP BY 2`` is the second select item; ``GROUP BY b`` is the item ``... AS b`` unless ``b`` is
    also a column inside that item's expression (then, as in DuckDB, it is the column).
    """
    target = unparen(node)
    items = select.expressions
    if isinstance(target, exp.Literal) and not target.is_string:
        if not target.this.isdigit() or not 1 <= int(target.this) <= len(items):
            raise invalid(f"GROUP BY position {target.this} is out of range", target, scope,
                          f"Use a position from 1 to {len(items)}.")
        return _groupable(items[int(target.this) - 1], target, scope)
    if isinstance(target, exp.Column) and isinstance(target.this, exp.Identifier) and not target.table:
        for item in items:
            if isinstance(item, exp.Alias) and item.alias.lower() == target.name.lower():
                inner = {c.name.lower() for c in item.this.find_all(exp.Column)}
                if target.name.lower() not in inner:
                    return _groupable(item, target, scope)
    return target


def _groupable(item: exp.Expr, reference: exp.Expr, scope: Scope) -> exp.Expr:
    """The expression of a select item a GROUP BY reference names; an aggregate cannot be a key."""
    value = unparen(item.this if isinstance(item, exp.Alias) else item)
    if value.find(exp.AggFunc) is not None:
        raise unsupported("GROUP BY an aggregate (by position or alias)", reference, scope, KEY_SUPPORTED)
    return value


def is_key_expression(node: exp.Expr) -> bool:
    """Whether ``node`` is one of the key constructs (CASE, a date part, arithmetic on one column)."""
    node = unparen(node)
    return isinstance(node, (exp.Case, exp.Extract, exp.Year, exp.Month, exp.TimestampTrunc, exp.DateTrunc)) or (
        _is_arithmetic(node) and len({c.name.lower() for c in node.find_all(exp.Column)}) == 1
        and not any(isinstance(n, exp.AggFunc) for n in node.walk()))


def _is_arithmetic(node: exp.Expr) -> bool:
    return isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Neg, *STEPS, exp.Cast))


def parse_key(node: exp.Expr, scope: Scope) -> ir.GroupKey:
    """A CASE or date-part GROUP BY key; anything else is refused with the supported keys."""
    node = unparen(node)
    if isinstance(node, exp.Case):
        return _parse_case(node, scope)
    if isinstance(node, (exp.Extract, exp.Year, exp.Month, exp.TimestampTrunc, exp.DateTrunc)):
        return _parse_date_key(node, scope)
    if _is_arithmetic(node):
        return _parse_bin(node, scope)
    raise unsupported(f"{describe(node, scope)} in GROUP BY", node, scope, KEY_SUPPORTED)


def _parse_bin(node: exp.Expr, scope: Scope) -> ir.BinKey:
    """``p · step(a · x + b) + q`` (:func:`dpsql.sql.arithmetic.step_form`) as a key."""
    form = step_form(node, scope, "in GROUP BY", KEY_SUPPORTED)
    return ir.BinKey(column=parse_column(form.column, scope, "in GROUP BY", KEY_SUPPORTED), step=form.step,
                     inner_scale=form.inner_scale, inner_shift=form.inner_shift, outer_scale=form.outer_scale,
                     outer_shift=form.outer_shift, integral=form.integral, span=node_span(node, scope),
                     text=default_name(node, scope))


def default_name(node: exp.Expr, scope: Scope) -> str:
    """The output name of an unaliased key: its SQL text, whitespace collapsed (DuckDB names it so)."""
    span = node_span(node, scope)
    return " ".join(scope.source.text[span.start:span.end].split())


def select_key(value: exp.Expr, keyed: Sequence[tuple[exp.Expr, ir.GroupKey]], scope: Scope) -> ir.GroupKey | None:
    """The GROUP BY key a select expression repeats; None if it is no key expression; refused if it is
    one that the statement does not group by."""
    if not is_key_expression(value):
        return None
    for node, key in keyed:
        if node == value:
            return key
    raise unsupported("a CASE, date-part or arithmetic key in SELECT that is not in GROUP BY", value, scope,
                      "Repeat it in GROUP BY, or GROUP BY its position or alias (an alias that is also a column "
                      "inside the expression names that column, as in DuckDB: choose another alias).")


def _parse_case(node: exp.Case, scope: Scope) -> ir.CaseKey:
    """Branches in order; ``CASE col WHEN v THEN ...`` is ``CASE WHEN col = v THEN ...``."""
    operand = node.args.get("this")
    subject = None if operand is None else parse_column(operand, scope, "after CASE", KEY_SUPPORTED)
    branches = []
    for branch in node.args.get("ifs") or []:
        if subject is not None:
            value = parse_value(branch.this, scope, "a CASE WHEN")
            predicate: ir.Predicate = ir.Comparison(column=subject, operator="=", value=value,
                                                    span=node_span(branch.this, scope))
        else:
            predicate = parse_predicate(branch.this, scope)
        branches.append(ir.CaseBranch(predicate=predicate, label=_label(branch.args["true"], scope)))
    default = node.args.get("default")
    key = ir.CaseKey(column=subject or atoms(branches[0].predicate)[0].column, branches=tuple(branches),
                  default=None if default is None else _label(default, scope), span=node_span(node, scope))
    _check_one_column(key, node, scope)
    _check_label_types(key, node, scope)
    return key


def _label(node: exp.Expr, scope: Scope) -> ir.Literal | None:
    """A THEN/ELSE constant; NULL is None (the NULL group)."""
    if isinstance(unparen(node), exp.Null):
        return None
    return parse_value(node, scope, "a CASE label")


def _check_one_column(key: ir.CaseKey, node: exp.Case, scope: Scope) -> None:
    """Every WHEN must test the key's one column: a key over two columns is not one column's re-binning."""
    names = {key.column.name.lower()}
    for branch in key.branches:
        for atom in atoms(branch.predicate):
            if atom.column.name.lower() not in names:
                raise unsupported(
                    f"a CASE over two columns ('{key.column.name}' and '{atom.column.name}')", node, scope,
                    "A CASE key must test one column. Send one statement per combination (the conditions on "
                    f"'{atom.column.name}' in WHERE), or GROUP BY both columns.")


def _check_label_types(key: ir.CaseKey, node: exp.Case, scope: Scope) -> None:
    """THEN/ELSE constants of one type: strings, numbers (integers stay int64) or dates."""
    labels = [branch.label for branch in key.branches] + [key.default]
    kinds = {_kind(literal.value) for literal in labels if literal is not None}
    if len(kinds) > 1:
        raise unsupported("CASE labels of different types", node, scope,
                          "Write every THEN/ELSE constant as a string, or every one as a number, or as a date.")


def _kind(value: object) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, dt.date):
        return "date"
    return "number"


_PARTS = {"YEAR": "year", "MONTH": "month"}


def _parse_date_key(node: exp.Expr, scope: Scope) -> ir.DateKey:
    """EXTRACT(YEAR|MONTH FROM d), year(d), month(d), date_trunc('year'|'month', d)."""
    if isinstance(node, exp.Extract):
        unit, argument, truncate = node.this, node.expression, False
    elif isinstance(node, (exp.Year, exp.Month)):
        unit, argument, truncate = exp.Var(this="YEAR" if isinstance(node, exp.Year) else "MONTH"), node.this, False
    else:
        unit, argument, truncate = node.args.get("unit"), node.this, True
    name = unit.name.upper() if isinstance(unit, (exp.Var, exp.Literal)) else ""
    if name not in _PARTS:
        raise unsupported(f"a date part other than YEAR or MONTH ({name or '?'})", node, scope, KEY_SUPPORTED)
    column = parse_column(argument, scope, "in a date part", KEY_SUPPORTED)
    part = _PARTS[name]
    return ir.DateKey(column=column, part=f"trunc_{part}" if truncate else part,  # type: ignore[arg-type]
                   span=node_span(node, scope))


# ==================================================================================== compile side
@dataclass(frozen=True, slots=True, kw_only=True)
class KeyGroups:
    """A key's output groups: their labels in output order (None: the NULL group) and, per base cell
    (outside cell last), the group it belongs to (-1: none, the row is in no output row)."""

    labels: list[object]
    group_of_base: npt.NDArray[np.int64]


AtomMask = Callable[[sch.Column, Atom], npt.NDArray[np.bool_]]


def plain_groups(column: sch.Column) -> KeyGroups:
    """``GROUP BY col``: the declared bins, then the outside cell as a NULL group if ``other = true``."""
    bins = column.domain.bin_of_base()
    labels = column.domain.bin_labels()
    outside = len(labels) if column.other else -1
    return KeyGroups(labels=labels + [None] if column.other else labels,
                     group_of_base=np.append(bins, outside).astype(np.int64))


def key_groups(column: sch.Column, key: ir.GroupKey, atom_mask: AtomMask) -> KeyGroups:
    """The groups of a CASE or date key on ``column`` (``atom_mask``: base cells where an atom is TRUE,
    refusing one that splits a base cell)."""
    if isinstance(key, ir.CaseKey):
        return _case_groups(column, key, atom_mask)
    if isinstance(key, ir.LookupKey):
        return _lookup_groups(column, key)
    if isinstance(key, ir.BinKey):
        return _bin_groups(column, key)
    return _date_groups(column, key)


def bin_label(key: ir.BinKey, x: Fraction) -> Fraction:
    """The key's value at column value ``x``."""
    return key.outer_scale * stepped(key.step, key.inner_scale * x + key.inner_shift) + key.outer_shift


def _bin_groups(column: sch.Column, key: ir.BinKey) -> KeyGroups:
    """Every label the key takes on the declared domain, ascending; each base cell's label, which must
    be one value over the cell: a cell holding one value (an integer column's cells of width 1) takes
    the key at it; a wider cell [lo, hi) needs no step of the key strictly inside it (the key at lo
    equals its left limit at hi), else the bin is refused with the nearest bins that align."""
    domain = column.domain
    if not isinstance(domain, sch.Ordered) or domain.kind == "date":
        kind = "categorical" if isinstance(domain, sch.Categorical) else "a date"
        raise UnsupportedQueryError(f"the arithmetic bin at {key.span.describe()} needs an integer or numeric column; "
                                    f"{column.key} is {kind}. Group by the column itself, or by a CASE or date-part "
                                    "key.")
    bounds = [Fraction(b) for b in domain.boundaries]
    values = []
    for lo, hi in itertools.pairwise(bounds):
        value = bin_label(key, lo)
        single = domain.kind == "integer" and hi - lo == 1 and lo.denominator == 1
        if not single and key.step != "none" and _steps_inside(key, lo, hi):
            raise UnsupportedQueryError(
                f"the bin {_bin_text(key)} at {key.span.describe()} splits the cell [{_show(lo)}, {_show(hi)}) of "
                f"{column.key}, whose rows are counted per cell: bins must start on cell boundaries (here "
                f"{_show(bounds[0])} + multiples of {_show(hi - lo)}; e.g. divide by a multiple of {_show(hi - lo)}), "
                f"or declare a finer resolution for {column.key}.")
        if not single and key.step == "none" and hi - lo != 0:
            raise UnsupportedQueryError(
                f"the key {_bin_text(key)} at {key.span.describe()} is not one value per cell of {column.key} "
                f"([{_show(lo)}, {_show(hi)}) holds many values); round it: FLOOR(...), CAST(... AS INTEGER).")
        values.append(value)
    labels = sorted(set(values))
    outside = len(labels) if column.other else -1
    group = np.array([labels.index(v) for v in values] + [outside], dtype=np.int64)
    shown: list[object] = [int(v) if key.integral else float(v) for v in labels]
    return KeyGroups(labels=shown + [None] if column.other else shown, group_of_base=group)


def _steps_inside(key: ir.BinKey, lo: Fraction, hi: Fraction) -> bool:
    """Whether step(a·x + b) changes for x in (lo, hi) or at the left limit of hi: the affine maps the
    cell onto an interval of y whose open part, or whose end approached from inside, meets a step."""
    ends = sorted([key.inner_scale * lo + key.inner_shift, key.inner_scale * hi + key.inner_shift])
    start, end = ends
    rising = key.inner_scale > 0
    at_start = stepped(key.step, start) if rising else _limit(key, start, above=True)
    at_end = _limit(key, end, above=False) if rising else stepped(key.step, end)
    return at_start != at_end


def _limit(key: ir.BinKey, y: Fraction, *, above: bool) -> Fraction:
    """step at y approached from above or below: the step at a point a hair away, closer than any break
    (breaks of these steps are at multiples of ½)."""
    hair = Fraction(1, 4 * max(1, y.denominator) ** 2)
    return stepped(key.step, y + hair if above else y - hair)


def _bin_text(key: ir.BinKey) -> str:
    return key.text or key.column.name


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


def _truth(column: sch.Column, predicate: ir.Predicate, atom_mask: AtomMask) -> npt.NDArray[np.bool_]:
    """Base cells where ``predicate`` is TRUE (inside the domain every atom is TRUE or FALSE)."""
    if isinstance(predicate, ir.Not):
        return ~_truth(column, predicate.operand, atom_mask)
    if isinstance(predicate, (ir.And, ir.Or)):
        parts = [_truth(column, operand, atom_mask) for operand in predicate.operands]
        return np.logical_and.reduce(parts) if isinstance(predicate, ir.And) else np.logical_or.reduce(parts)
    return atom_mask(column, predicate)


def _case_groups(column: sch.Column, key: ir.CaseKey, atom_mask: AtomMask) -> KeyGroups:
    """First matching WHEN per base cell, else ELSE; the outside cell gets the first WHEN that is TRUE there
    (only IS NULL is: every other atom is UNKNOWN on NULL), else ELSE."""
    labels: list[object] = []
    for literal in [branch.label for branch in key.branches] + [key.default]:
        if literal is not None and literal.value not in labels:
            labels.append(literal.value)
    null = len(labels)

    def index(literal: ir.Literal | None) -> int:
        return null if literal is None else labels.index(literal.value)

    size = column.domain.size
    group = np.full(size, index(key.default), dtype=np.int64)
    open_cells = np.ones(size, dtype=bool)
    for branch in key.branches:
        hit = _truth(column, branch.predicate, atom_mask) & open_cells
        group[hit] = index(branch.label)
        open_cells &= ~hit
    reached = next((branch.label for branch in key.branches if _outside_truth(branch.predicate)), key.default)
    outside = -1 if column.outside_excluded else index(reached)
    group = np.append(group, outside)
    if (group == null).any():
        labels.append(None)
    return KeyGroups(labels=labels, group_of_base=group)


def _outside_truth(predicate: ir.Predicate) -> bool | None:
    """The predicate on the outside cell in SQL's three-valued logic (None: UNKNOWN): ``IS [NOT] NULL`` is
    TRUE (FALSE), every other atom UNKNOWN; NOT, AND and OR as Kleene's logic.

    >>> span = ir.Span(line=1, column=1, start=0, end=1)
    >>> x = ir.Column(name="x", qualifier=None, span=span)
    >>> null = ir.IsNull(column=x, negated=False, span=span)
    >>> low = ir.Comparison(column=x, operator="<", value=ir.Literal(value=3, span=span), span=span)
    >>> _outside_truth(ir.Or(operands=(low, null), span=span)), _outside_truth(ir.And(operands=(low, null), span=span))
    (True, None)
    """
    if isinstance(predicate, ir.IsNull):
        return not predicate.negated
    if isinstance(predicate, ir.Not):
        inner = _outside_truth(predicate.operand)
        return None if inner is None else not inner
    if isinstance(predicate, (ir.And, ir.Or)):
        parts = [_outside_truth(operand) for operand in predicate.operands]
        decisive = isinstance(predicate, ir.Or)  # TRUE decides an OR, FALSE an AND
        if decisive in parts:
            return decisive
        return None if None in parts else not decisive
    return None


def _lookup_groups(column: sch.Column, key: ir.LookupKey) -> KeyGroups:
    """Each base cell's one key value (categorical value, or integer of a resolution-1 grid) → its label;
    labels in public row order, those of keys outside the declared domain left out."""
    domain = column.domain
    values = list(domain.values) if isinstance(domain, sch.Categorical) else [int(b) for b in domain.boundaries[:-1]]
    mapping = dict(key.labels)
    labels: list[object] = []
    for value, label in key.labels:
        if value in values and label not in labels:
            labels.append(label)
    null = len(labels) if key.keep_missing else -1
    group = [labels.index(mapping[v]) if v in mapping else null for v in values]
    group.append(null if not column.outside_excluded else -1)
    array = np.asarray(group, dtype=np.int64)
    return KeyGroups(labels=labels + [None] if key.keep_missing and (array == null).any() else labels,
                     group_of_base=array)


def _date_groups(column: sch.Column, key: ir.DateKey) -> KeyGroups:
    """Every year/month of the declared domain, ascending (EXTRACT(MONTH): 1..12 across years)."""
    domain = column.domain
    if not isinstance(domain, sch.Ordered) or domain.kind != "date":
        raise UnsupportedQueryError(
            f"{_spelling(key)} at {key.span.describe()} needs a date column; {column.key} is "
            f"{'categorical' if isinstance(domain, sch.Categorical) else domain.kind}. Group by the column itself.")
    if key.part.endswith("month") and domain.unit == "year":
        raise UnsupportedQueryError(
            f"{_spelling(key)} at {key.span.describe()}: the base cells of {column.key} are whole years "
            f"(unit = \"year\"), so a month is not a function of the cell. Declare unit = \"month\" (or \"day\") "
            f"for {column.key}.")
    starts = [sch.EPOCH + dt.timedelta(days=int(b)) for b in domain.boundaries[:-1]]
    values: list[object] = [_part(day, key.part) for day in starts]
    labels = sorted(set(values), key=lambda v: v)  # type: ignore[arg-type,return-value]
    outside = len(labels) if column.other else -1
    group = np.array([labels.index(v) for v in values] + [outside], dtype=np.int64)
    return KeyGroups(labels=labels + [None] if column.other else labels, group_of_base=group)


def _part(day: dt.date, part: ir.DatePart) -> object:
    return {"year": day.year, "month": day.month, "trunc_year": dt.date(day.year, 1, 1),
            "trunc_month": dt.date(day.year, day.month, 1)}[part]


def _spelling(key: ir.DateKey) -> str:
    return {"year": "EXTRACT(YEAR ...)", "month": "EXTRACT(MONTH ...)", "trunc_year": "date_trunc('year', ...)",
            "trunc_month": "date_trunc('month', ...)"}[key.part]


def membership(groups: KeyGroups, cell_of_base: npt.NDArray[np.int64], cells: int) -> sp.csr_array:
    """(groups × batch cells) sparse 0/1 matrix: M[g, c] = 1 when the base cells of batch cell c are in
    group g (the axis signature holds ``group_of_base``, so every base cell of c agrees); one entry
    per batch cell at most, so O(cells) however many groups."""
    keep = (groups.group_of_base >= 0) & (cell_of_base >= 0)
    pairs = np.unique(np.stack([groups.group_of_base[keep], cell_of_base[keep]]), axis=1)
    return sp.csr_array((np.ones(pairs.shape[1]), (pairs[0], pairs[1])), shape=(len(groups.labels), cells))


def weighted_membership(groups: KeyGroups, cell_of_base: npt.NDArray[np.int64],
                        weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """:func:`membership` · diag(``weights``) as a dense (groups × cells) array, entry for entry what the
    sparse product gives: M[g, c] = w_c where batch cell c is in group g and w_c ≠ 0, else +0.0 (the
    product stores no zero, so a −0.0 weight reads +0.0). O(groups · cells), without building either
    sparse matrix."""
    keep = (groups.group_of_base >= 0) & (cell_of_base >= 0)
    columns = cell_of_base[keep]
    out = np.zeros((len(groups.labels), len(weights)))
    out[groups.group_of_base[keep], columns] = np.where(weights != 0.0, weights, 0.0)[columns]
    return out


def label_array(key: ir.GroupKey, labels: Sequence[object]) -> pa.Array:
    """Output labels typed by the key: strings, int64 (integers, EXTRACT), float64, date32 (dates)."""
    if isinstance(key, ir.DateKey):
        return pa.array(labels, type=pa.date32() if key.part.startswith("trunc") else pa.int64())
    if isinstance(key, ir.BinKey):
        return pa.array(labels, type=pa.int64() if key.integral else pa.float64())
    present = [value for value in labels if value is not None]
    if all(isinstance(value, str) for value in present):
        kind = pa.string()
    elif all(isinstance(value, dt.date) for value in present):
        kind = pa.date32()
    elif all(isinstance(value, int) for value in present):
        kind = pa.int64()
    else:
        kind = pa.float64()
    return pa.array(labels, type=kind)


def key_type(key: ir.GroupKey) -> pa.DataType:
    """The Arrow type :func:`label_array` gives a key's labels, from the key alone (its labels as written
    or declared): a rolled-up key's NULL column has the type its grouped rows have."""
    labels: list[object] = []
    if isinstance(key, ir.CaseKey):
        written = [branch.label for branch in key.branches] + [key.default]
        labels = [label.value for label in written if label is not None]
    elif isinstance(key, ir.LookupKey):
        labels = [label for _, label in key.labels]
    return label_array(key, labels).type


def keys_of(statement: ir.Statement) -> list[tuple[ir.Column, ir.GroupKey | None]]:
    """Each GROUP BY entry's column and key (None: the plain column)."""
    keys: Sequence[ir.GroupKey | None] = statement.group_keys or [None] * len(statement.group_by)
    return list(zip(statement.group_by, keys))
