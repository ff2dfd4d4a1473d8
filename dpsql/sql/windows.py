"""Window aggregates over a statement's released groups (parsed into :class:`dpsql.sql.ir.Window`).

``SUM(<aggregate>) OVER (...)``, ``AVG(<aggregate>) OVER (...)`` and ``COUNT(<aggregate>) OVER (...)``,
with ``PARTITION BY`` and ``ORDER BY`` on GROUP BY columns and a ``ROWS`` or ``RANGE`` frame, are
computed on the noisy answers of the statement's groups, as SQL computes them on the grouped rows:
shares (``COUNT(*) / SUM(COUNT(*)) OVER ()``), shares within a partition, running totals
(``SUM(COUNT(*)) OVER (ORDER BY age)``: SQL's default frame with ORDER BY is RANGE BETWEEN
UNBOUNDED PRECEDING AND CURRENT ROW, the current row's peers included) and moving sums
(``ROWS BETWEEN 2 PRECEDING AND CURRENT ROW``). They are functions of the released answers and the
public plan: post-processing, no extra privacy cost (Dwork and Roth, "The Algorithmic Foundations
of Differential Privacy", 2014, Prop. 2.1). Their standard errors are exact for sums (the
covariances between the groups' answers from their one measurement) and by the delta method for
ratios (:mod:`dpsql.answers.windows`).

dpsql returns every declared group, also one that holds no rows, so a window runs over all of them
(where SQL would not see a group without rows). Window functions over the table's rows
(``ROW_NUMBER()``, ``LAG(x)``, ``SUM(x) OVER``, on a column rather than an aggregate) would read
individual rows and stay refused.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from sqlglot import exp

from dpsql import schema as sch
from dpsql.errors import InvalidQueryError, UnsupportedQueryError
from dpsql.sql import ir
from dpsql.sql.source import Scope, describe, node_span, unsupported

__all__ = ["FRAME_SUPPORTED", "WINDOW_SUPPORTED", "WINDOW_WORK", "check_windows", "describe_windows",
           "has_windows", "is_group_window", "key_positions", "parse_window", "refusal", "windows_of"]

WINDOW_SUPPORTED = ("Windows run over the released groups: SUM, AVG or COUNT of one COUNT or SUM aggregate, OVER "
                    "([PARTITION BY group keys] [ORDER BY group keys] [ROWS/RANGE frame]), e.g. "
                    "COUNT(*) / SUM(COUNT(*)) OVER (PARTITION BY sex) or SUM(COUNT(*)) OVER (ORDER BY age).")
FRAME_SUPPORTED = ("Frames are ROWS BETWEEN {UNBOUNDED | n} PRECEDING | CURRENT ROW | n FOLLOWING AND ... , or RANGE "
                   "BETWEEN UNBOUNDED PRECEDING | CURRENT ROW AND CURRENT ROW | UNBOUNDED FOLLOWING (the default "
                   "with ORDER BY), without EXCLUDE.")
#: Most floats the covariances of one window output may read: distinct windows × (cells + groups).
WINDOW_WORK = 2**24
_FUNCTIONS: dict[type[exp.Expr], ir.WindowFunction] = {exp.Sum: "sum", exp.Avg: "avg", exp.Count: "count"}
_ROWS_WHY = ("A window function over the table's rows would read individual rows (their order, their "
             "neighbours); dpsql releases only aggregates. ")


def is_group_window(node: exp.Window) -> bool:
    """Whether a window is an aggregate of released aggregates (SUM/AVG/COUNT(<aggregate>) OVER)."""
    function = node.this
    argument = function.args.get("this") if isinstance(function, exp.Expr) and type(function) in _FUNCTIONS else None
    return isinstance(argument, exp.Expr) and not isinstance(argument, exp.Star) \
        and any(isinstance(n, exp.AggFunc) for n in argument.walk())


def refusal(node: exp.Window, scope: Scope, in_select: bool) -> UnsupportedQueryError:
    """Why a window is refused: over rows (ROW_NUMBER, LAG, SUM(column)), or outside the SELECT list."""
    if node.args.get("alias") is not None or not isinstance(node.this, exp.Expr) \
            or isinstance(node.this, exp.Identifier):
        return unsupported("a named window (OVER w, WINDOW w AS ...)", node, scope,
                           "Write the window in the OVER (...) clause.")
    if in_select and not is_group_window(node):
        function = node.this
        name = describe(function, scope)
        if isinstance(function, exp.Filter):
            return unsupported("FILTER on a window function", node, scope,
                               "Filter the aggregate inside it: SUM(COUNT(*) FILTER (WHERE ...)) OVER (...).")
        if any(isinstance(n, exp.AggFunc) for n in function.walk() if n is not function):
            return unsupported(f"{name} OVER (...) of an aggregate", node, scope, WINDOW_SUPPORTED)
        if isinstance(function, exp.Count) and isinstance(function.this, exp.Star):
            return unsupported("COUNT(*) OVER (...)", node, scope, "It counts the grouped rows (every declared "
                               "group is returned): write COUNT(COUNT(*)) OVER (...). " + WINDOW_SUPPORTED)
        name = name.split(" ", 1)[1] if name.startswith(("aggregate ", "function ")) else name
        return unsupported(f"window function {name} OVER (...) over the table's rows", node, scope,
                           _ROWS_WHY + WINDOW_SUPPORTED)
    return unsupported("a window function outside the SELECT list", node, scope,
                       "Select it with AS and refer to that name in ORDER BY. " + WINDOW_SUPPORTED)


def parse_window(node: exp.Window, scope: Scope, operand: Callable[[exp.Expr], ir.Expression]) -> ir.Window:
    """``function(<aggregate>) OVER (...)``: the aggregate read by ``operand``, the keys and the frame."""
    function = node.this
    if not is_group_window(node) or node.args.get("alias") is not None:
        raise refusal(node, scope, True)
    argument = operand(function.this)
    if not isinstance(argument, ir.AggregateLeaf):
        raise unsupported(f"{describe(function.this, scope)} inside a window function", function.this, scope,
                          WINDOW_SUPPORTED)
    partition = tuple(_key(k, scope) for k in node.args.get("partition_by") or ())
    order = node.args.get("order")
    ordered = []
    for item in (order.expressions if order is not None else ()):
        if item.args.get("nulls_first") and not item.args.get("desc"):
            raise unsupported("NULLS FIRST in a window's ORDER BY", item, scope, "NULLs sort last, as DuckDB sorts.")
        ordered.append((_key(item.this, scope), bool(item.args.get("desc"))))
    return ir.Window(function=_FUNCTIONS[type(function)], argument=argument, partition_by=partition,
                     order_by=tuple(ordered), frame=_frame(node, scope, bool(ordered)), span=node_span(node, scope))


def _key(node: exp.Expr, scope: Scope) -> ir.Column:
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
        raise unsupported(f"{describe(node, scope)} as a window key", node, scope,
                          "PARTITION BY and ORDER BY in OVER (...) name GROUP BY columns or group keys' output names.")
    return ir.Column(name=node.name, qualifier=node.table or None, span=node_span(node, scope))


def _frame(node: exp.Window, scope: Scope, ordered: bool) -> ir.Frame:
    """The frame as written, else SQL's default: RANGE UNBOUNDED PRECEDING to CURRENT ROW with ORDER BY,
    the whole partition without."""
    spec = node.args.get("spec")
    if spec is None:
        return ir.Frame(kind="range", start=None, end=0 if ordered else None)
    if spec.args.get("exclude") is not None or str(spec.args.get("kind", "")).upper() not in ("ROWS", "RANGE"):
        raise unsupported("this window frame (GROUPS or EXCLUDE)", node, scope, FRAME_SUPPORTED)
    kind: ir.FrameKind = "rows" if str(spec.args["kind"]).upper() == "ROWS" else "range"
    start = _bound(spec.args.get("start"), spec.args.get("start_side"), node, scope)
    end = _bound(spec.args.get("end"), spec.args.get("end_side"), node, scope) if spec.args.get("end") else 0
    if kind == "range" and (start not in (None, 0) or end not in (None, 0)):
        raise unsupported("a RANGE frame with an offset", node, scope, FRAME_SUPPORTED + " Use ROWS for offsets.")
    if (start is None and str(spec.args.get("start_side", "")).upper() == "FOLLOWING") \
            or (end is None and str(spec.args.get("end_side", "")).upper() == "PRECEDING"):
        raise unsupported("this window frame", node, scope, FRAME_SUPPORTED)
    return ir.Frame(kind=kind, start=start, end=end)


def _bound(value: object, side: object, node: exp.Expr, scope: Scope) -> int | None:
    """A frame bound: None for UNBOUNDED, 0 for CURRENT ROW, −n for n PRECEDING, n for n FOLLOWING."""
    text = str(value).upper() if isinstance(value, str) else ""
    if text == "UNBOUNDED":
        return None
    if text == "CURRENT ROW":
        return 0
    if isinstance(value, exp.Literal) and value.is_int:
        n = int(value.name)
        return -n if str(side).upper() == "PRECEDING" else n
    raise unsupported("this window frame bound", node, scope, FRAME_SUPPORTED + " Offsets are integer constants.")


def windows_of(expression: ir.Expression) -> list[ir.Window]:
    """The windows an expression reads."""
    if isinstance(expression, ir.Window):
        return [expression]
    if isinstance(expression, ir.Arithmetic):
        return windows_of(expression.left) + windows_of(expression.right)
    if isinstance(expression, ir.Negate):
        return windows_of(expression.operand)
    if isinstance(expression, ir.Call):
        return [w for o in expression.operands for w in windows_of(o)]
    return []


def has_windows(statement: ir.Statement) -> bool:
    """Whether a statement selects a window."""
    outputs = statement.outputs
    return outputs is not None and any(isinstance(item, ir.DerivedItem) and windows_of(item.expression)
                                       for item in outputs.items)


def key_positions(statement: ir.Statement) -> dict[str, int]:
    """The names a window key may use, lower-cased, and the GROUP BY entry each names: a plain GROUP BY
    column by its name, and every selected group column or key (CASE, bin, date part, lookup) by its
    output name (as DuckDB binds them); a column's own name comes first."""
    group = {c.name.lower(): i for i, c in enumerate(statement.group_by)}
    found = {}
    for item in statement.outputs.items if statement.outputs is not None else statement.select:
        if isinstance(item, ir.GroupColumn) and item.column.name.lower() in group:
            found[item.alias.lower()] = group[item.column.name.lower()]
    plain = {name: i for name, i in group.items() if not statement.group_keys or statement.group_keys[i] is None}
    return {**found, **plain}


def check_windows(statement: ir.Statement, table: sch.Table, groups: npt.NDArray[np.int64], cells: int) -> None:
    """Before anything is spent: the keys name GROUP BY entries (:func:`key_positions`), the argument
    is a COUNT or SUM, no HAVING (SQL would window the rows it keeps), and the covariances are within
    :data:`WINDOW_WORK`: a window reads (cells + rows) floats per distinct frame (one per partition
    without ORDER BY or a ROWS frame, else at most one per row). ``groups``: each output row's group
    per GROUP BY column."""
    outputs = statement.outputs
    found = [w for item in (outputs.items if outputs is not None else ()) if isinstance(item, ir.DerivedItem)
             for w in windows_of(item.expression)]
    if not found:
        return
    assert outputs is not None
    if outputs.having is not None:
        raise UnsupportedQueryError(
            f"a window function ({found[0].span.describe()}) with HAVING is not supported: SQL computes the window "
            "over the groups HAVING keeps, which dpsql chooses by noisy values. Drop HAVING, or filter the "
            "groups with WHERE.")
    position = key_positions(statement)
    rows = groups.shape[0]
    for window in found:
        for key in (*window.partition_by, *(c for c, _ in window.order_by)):
            if key.name.lower() not in position:
                raise UnsupportedQueryError(
                    f"the window key {key.name} ({key.span.describe()}) is not a GROUP BY column of its statement: "
                    "a window runs over the released groups, so PARTITION BY and ORDER BY name GROUP BY columns "
                    "or the output names of group keys.")
        assert isinstance(window.argument, ir.AggregateRef)
        aggregate = statement.aggregates[window.argument.index]
        if aggregate.function not in ("count", "sum"):
            raise UnsupportedQueryError(
                f"{window.function.upper()}({aggregate.function.upper()}(...)) OVER ({window.span.describe()}) is "
                "not supported: a window adds COUNT or SUM answers. For an average over a window, divide "
                "SUM(SUM(x)) OVER (...) by SUM(COUNT(x)) OVER (...).")
        keys = [position[c.name.lower()] for c in window.partition_by]
        whole = not window.order_by and window.frame.kind == "range"
        distinct = len({tuple(row) for row in groups[:, keys].tolist()}) if whole else rows
        if distinct * (cells + rows) > WINDOW_WORK:
            raise InvalidQueryError(
                f"the window at {window.span.describe()} would read {distinct:,} × ({cells:,} cells + {rows:,} "
                f"groups) floats for its standard errors, above WINDOW_WORK = {WINDOW_WORK:,}; group by fewer "
                "values or window without ORDER BY.")


def describe_windows(found: list[ir.Window]) -> str:
    """What EXPLAIN and the metadata say of an output's windows."""
    frames = "; ".join(_described(w) for w in found)
    return (f"window over the released groups ({frames}): post-processing, no extra privacy cost; every declared "
            "group is a row, also one without data; standard error from the exact covariances between the "
            "groups' answers (delta method for a ratio)")


def _described(window: ir.Window) -> str:
    parts = [f"{window.function.upper()} OVER"]
    if window.partition_by:
        parts.append("PARTITION BY " + ", ".join(c.name for c in window.partition_by))
    if window.order_by:
        parts.append("ORDER BY " + ", ".join(c.name + (" DESC" if d else "") for c, d in window.order_by))
    frame = window.frame

    def side(bound: int | None, unbounded: str) -> str:
        return unbounded if bound is None else "CURRENT ROW" if bound == 0 else \
            f"{-bound} PRECEDING" if bound < 0 else f"{bound} FOLLOWING"

    parts.append(f"{frame.kind.upper()} BETWEEN {side(frame.start, 'UNBOUNDED PRECEDING')} AND "
                 f"{side(frame.end, 'UNBOUNDED FOLLOWING')}")
    return " ".join(parts)
