"""GROUP BY ROLLUP, CUBE and GROUPING SETS: one statement of the batch per grouping set, one table.

``GROUP BY ROLLUP (a, b)`` groups by the sets (a, b), (a) and (); ``CUBE (a, b)`` by all 2ⁿ subsets
of its keys; ``GROUPING SETS ((a), (b), ())`` by the sets listed; several grouping elements
(``GROUP BY a, ROLLUP (b, c)``) by the unions of one set of each (their cross product), as in the SQL
standard and DuckDB. By definition the statement is the UNION ALL of one GROUP BY per set, each
selecting NULL for the keys its set rolls up and ``GROUPING(k)`` = 1 for those (0 for a key it groups
by; ``GROUPING(a, b)`` = ``GROUPING_ID(a, b)`` = 2·GROUPING(a) + GROUPING(b)). That is how it is read:
each set becomes a statement of the batch (:func:`expand`, then :func:`restrict` once parsed),
measured jointly with the rest of the batch and returned as one table by the UNION ALL path
(:mod:`dpsql.sql.flatten`, :func:`dpsql.answers.derived.merge_unions`): the sets' rows in order, a
rolled-up key NULL (its ``<key>_upper`` too), HAVING on each row, ORDER BY, OFFSET and LIMIT over
the combined rows.

Privacy and accuracy: an exact rewrite. The parts are the marginals the GROUP BYs written out would
ask, over the same cells, so the batch's queries, their sensitivities and the cost charged are
those of the written-out statements (a statement's ``OPTIONS (epsilon = ...)`` clause is its one
cost). The planner starts its statement groups with a statement's grouping sets together where the
planning limits allow (``dpsql.engine.plan.grouping``): one measurement of their joint cells, and one
reconstruction, so that every total is the sum of its parts. Nothing here reads data.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from sqlglot import exp

from dpsql.errors import InvalidQueryError
from dpsql.sql import group_keys, ir
from dpsql.sql.derived import GROUPING_CALLS
from dpsql.sql.source import Scope, fragment, invalid, located, node_span, unparen, unsupported

__all__ = ["GROUPING_CALLS", "MAX_GROUPING_SETS", "Grouping", "GroupingSet", "expand", "restrict"]

#: Grouping sets in one statement (each is a statement of the batch): CUBE of 6 keys.
MAX_GROUPING_SETS = 64

_SUPPORTED = "GROUPING(k, ...) and GROUPING_ID(k, ...) take the statement's GROUP BY keys."
_ELEMENTS = (exp.Rollup, exp.Cube, exp.GroupingSets)


@dataclass(frozen=True, slots=True)
class GroupingSet:
    """One grouping set of a statement: the statement grouped by every distinct key (``tree``), the
    positions of those keys the set rolls up, and its place in the combined table (``union``)."""

    tree: exp.Select
    rolled_up: frozenset[int]
    union: ir.UnionPart


def expand(select: exp.Select, scope: Scope, union: ir.UnionPart | None, statement: int) -> list[GroupingSet] | None:
    """The grouping sets of a statement whose GROUP BY holds ROLLUP, CUBE, GROUPING SETS or ``()``
    (user statement ``statement`` of the batch); None for any other statement.

    Each set's tree is the statement with ``GROUP BY`` every distinct key (as written, in order of
    first appearance), so every part parses its select list, HAVING and ORDER BY alike.
    """
    group = select.args.get("group")
    if group is None or not any(isinstance(node, (*_ELEMENTS, exp.Tuple)) for node in group.expressions):
        return None
    if union is not None:
        raise unsupported("GROUP BY ROLLUP, CUBE or GROUPING SETS inside a UNION ALL", group, scope,
                          "Send the grouping sets statement on its own (it is one table already), or write each "
                          "GROUP BY as a part of the UNION ALL.")
    window = select.find(exp.Window)
    if window is not None:
        raise unsupported("a window function over ROLLUP, CUBE or GROUPING SETS", window, scope,
                          "SQL computes it over the rows of every grouping set together, totals included; ask "
                          "for the window over a plain GROUP BY of the keys you need.")
    if group.args.get("all"):
        raise unsupported("GROUP BY ALL with ROLLUP, CUBE or GROUPING SETS", group, scope,
                          "Name the plain keys beside ROLLUP, CUBE or GROUPING SETS.")
    keys: list[exp.Expr] = []
    identities: list[object] = []

    def position(node: exp.Expr) -> int:
        identity = _identity(group_keys.resolve_reference(node, select, scope))
        if identity not in identities:
            identities.append(identity)
            keys.append(node)
        return identities.index(identity)

    count = math.prod(_count(element) for element in group.expressions)
    if count > MAX_GROUPING_SETS:
        raise InvalidQueryError(located(f"the GROUP BY has {count:,} grouping sets; the limit is MAX_GROUPING_SETS = "
                                        f"{MAX_GROUPING_SETS}", node_span(group, scope), scope.source,
                                        "Group by fewer keys in CUBE, or list the sets you need with GROUPING SETS."))
    choices = [[frozenset(position(node) for node in chosen) for chosen in _sets(element)]
               for element in group.expressions]
    sets = [frozenset().union(*combination) for combination in itertools.product(*choices)]
    span = node_span(group, scope)
    found = []
    for part, kept in enumerate(sets):
        tree = select.copy()
        tree.set("group", exp.Group(expressions=[key.copy() for key in keys]))
        shown = ", ".join(fragment(scope.source.text, node_span(keys[i], scope)) for i in sorted(kept))
        found.append(GroupingSet(tree=tree, rolled_up=frozenset(range(len(keys))) - kept,
                                 union=ir.UnionPart(union=statement, part=part, parts=len(sets), order_by=(),
                                                    limit=None, span=span, grouping_set=f"({shown})")))
    return found


def _count(element: exp.Expr) -> int:
    """How many grouping sets one GROUP BY element stands for (before they are listed)."""
    if isinstance(element, exp.Rollup):
        return len(element.expressions) + 1
    if isinstance(element, exp.Cube):
        return 2 ** len(element.expressions)
    return sum(_count(item) for item in element.expressions) if isinstance(element, exp.GroupingSets) else 1


def _sets(element: exp.Expr) -> list[list[exp.Expr]]:
    """The grouping sets one GROUP BY element stands for, each a list of key expressions."""
    if isinstance(element, exp.Rollup):
        items = [_members(item) for item in element.expressions]
        return [[key for item in items[:size] for key in item] for size in range(len(items), -1, -1)]
    if isinstance(element, exp.Cube):
        items = [_members(item) for item in element.expressions]
        return [[key for i, item in enumerate(items) if mask >> (len(items) - 1 - i) & 1 == 0 for key in item]
                for mask in range(2 ** len(items))]
    if isinstance(element, exp.GroupingSets):  # a ROLLUP or CUBE inside adds its sets
        return [chosen for item in element.expressions for chosen in _sets(item)]
    return [_members(element)]


def _members(item: exp.Expr) -> list[exp.Expr]:
    """The keys of one item of a grouping element: ``(a, b)`` two, ``()`` none, ``a`` or ``(a)`` one."""
    if isinstance(item, exp.Tuple):
        return [unparen(key) for key in item.expressions]
    return [unparen(item)]


def _identity(node: exp.Expr) -> object:
    """What makes two GROUP BY keys the same: a column's name (any qualifier, any case), else the expression."""
    node = unparen(node)
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier):
        return ("column", node.name.lower())
    return node


# ================================================================================== GROUPING()
@dataclass(frozen=True, slots=True)
class Grouping:
    """The keys of the statement being read and the positions its grouping set rolls up, for GROUPING()."""

    select: exp.Select
    group_by: tuple[ir.Column, ...]
    keys: tuple[tuple[exp.Expr, ir.GroupKey | None], ...]
    rolled_up: frozenset[int] = frozenset()

    def value(self, call: exp.Func, scope: Scope) -> int:
        """GROUPING(k₁, ..., kₙ) = Σ 2ⁿ⁻ⁱ·[kᵢ rolled up] (DuckDB's, and the SQL standard's for one key)."""
        arguments = [call.this, *call.expressions] if call.this is not None else list(call.expressions)
        if not arguments:
            raise unsupported(f"{call.sql_name()}() without a key", call, scope, _SUPPORTED)
        total = 0
        for argument in arguments:
            total = 2 * total + (self._position(argument, scope) in self.rolled_up)
        return total

    def _position(self, argument: exp.Expr, scope: Scope) -> int:
        target = group_keys.resolve_reference(argument, self.select, scope)
        identity = _identity(target)
        for index, ((node, key), column) in enumerate(zip(self.keys, self.group_by)):
            if _identity(node) == identity or (key is None and identity == ("column", column.name.lower())):
                return index
        raise invalid(f"GROUPING() of {fragment(scope.source.text, node_span(argument, scope))}, which is not a "
                      "GROUP BY key", argument, scope, "GROUPING() takes the statement's GROUP BY keys (columns, "
                      "positions, aliases or key expressions as grouped).")


# ================================================================================== each set's statement
def restrict(statement: ir.Statement, grouping: GroupingSet, scope: Scope) -> ir.Statement:
    """The statement of one grouping set: grouped by its keys, the others selected as NULL
    (``GroupColumn.rolled_up``), ORDER BY, OFFSET and LIMIT moved to the combined table."""
    rolled = {statement.group_by[i].name.lower() for i in grouping.rolled_up}
    kept = [i for i in range(len(statement.group_by)) if i not in grouping.rolled_up]
    keys = [statement.group_keys[i] for i in kept] if statement.group_keys else []

    def item(found: ir.GroupColumn) -> ir.GroupColumn:
        return replace(found, rolled_up=True) if found.column.name.lower() in rolled else found

    select = tuple(item(found) if isinstance(found, ir.GroupColumn) else found for found in statement.select)
    outputs = statement.outputs
    order = statement.order_by if outputs is None else outputs.order_by
    limit, offset = (statement.limit, statement.offset) if outputs is None else (outputs.limit, outputs.offset)
    if outputs is not None:
        having = None if outputs.having is None else _regrouped(outputs.having, kept, statement, scope)
        outputs = replace(outputs, items=tuple(item(found) if isinstance(found, ir.GroupColumn) else found
                                               for found in outputs.items), having=having, order_by=(), limit=None,
                          offset=0)
    union = replace(grouping.union, order_by=tuple((o.key, o.descending) for o in order), limit=limit, offset=offset)
    return replace(statement, select=select, group_by=tuple(statement.group_by[i] for i in kept),
                   group_keys=tuple(keys) if any(k is not None for k in keys) else (), outputs=outputs,
                   order_by=(), limit=None, offset=0, union=union)


def _regrouped(condition: ir.Condition, kept: list[int], statement: ir.Statement, scope: Scope) -> ir.Condition:
    """HAVING with its GROUP BY references renumbered for the kept keys; one to a rolled-up key is refused
    (its output name reads the NULL)."""
    def expression(found: ir.Expression) -> ir.Expression:
        if isinstance(found, ir.GroupRef):
            if found.position not in kept:
                raise unsupported(f"HAVING on the GROUP BY key '{statement.group_by[found.position].name}', which a "
                                  "grouping set rolls up,", found.span, scope,
                                  "Select the key and name its output column in HAVING (NULL in the rows that roll it "
                                  "up), or move the condition to WHERE.")
            return replace(found, position=kept.index(found.position))
        if isinstance(found, ir.Arithmetic):
            return replace(found, left=expression(found.left), right=expression(found.right))
        if isinstance(found, ir.Negate):
            return replace(found, operand=expression(found.operand))
        if isinstance(found, ir.Call):
            return replace(found, operands=tuple(expression(o) for o in found.operands))
        return found

    if isinstance(condition, ir.Compare):
        return replace(condition, left=expression(condition.left), right=expression(condition.right))
    if isinstance(condition, ir.Range):
        return replace(condition, operand=expression(condition.operand), low=expression(condition.low),
                       high=expression(condition.high))
    if isinstance(condition, ir.Among):
        return replace(condition, operand=expression(condition.operand),
                       values=tuple(expression(v) for v in condition.values))
    if isinstance(condition, ir.NullTest):
        return replace(condition, operand=expression(condition.operand))
    if isinstance(condition, ir.Negation):
        return replace(condition, operand=_regrouped(condition.operand, kept, statement, scope))
    return replace(condition, operands=tuple(_regrouped(c, kept, statement, scope) for c in condition.operands))

