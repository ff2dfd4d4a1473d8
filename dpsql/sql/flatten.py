"""WITH (common table expressions) and UNION ALL, flattened to plain statements of the batch.

Exact rewrites (same queries, same cost) before the statement is translated:

- a CTE that is a filtered view of the table, ``WITH v AS (SELECT * | columns FROM t WHERE p)``, is
  inlined: ``... FROM v WHERE q`` reads ``FROM t`` with ``WHERE (p) AND (q)``;
- a CTE that is an aggregate statement, queried as ``SELECT <its outputs> FROM v [WHERE <on
  outputs>] [ORDER BY] [LIMIT]``, becomes that statement, the outer WHERE its HAVING (on the noisy
  answers, ``dpsql.sql.derived``) and the outer ORDER BY/LIMIT its own;
- ``s1 UNION ALL s2 ...`` becomes one statement per part, measured jointly with the rest of the
  batch and returned as one table (:func:`dpsql.answers.derived.merge_unions`): the parts' rows in
  order, names from the first part; ORDER BY/LIMIT after the union apply to the whole.

Anything else (RECURSIVE, column lists, a CTE over an aggregate CTE, UNION without ALL, ...) is
refused naming the shape and the rewrite that works.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlglot import exp

from dpsql.errors import InvalidQueryError
from dpsql.sql import ir
from dpsql.sql.predicates import parse_value
from dpsql.sql.source import (
    Scope,
    fragment,
    invalid,
    is_empty,
    located,
    node_span,
    token_range,
    unparen,
    unsupported,
)

__all__ = ["MAX_LIMIT", "expand_weights", "flatten", "row_count"]

#: A LIMIT or OFFSET count (DuckDB's own bound, a signed 64-bit integer; Arrow slices rows by it).
MAX_LIMIT = 2**63 - 1

_CTE_SUPPORTED = ("WITH takes CTEs that filter the table (SELECT * or columns FROM table WHERE ...) or that are one "
                  "aggregate statement queried as SELECT <its outputs> FROM cte [WHERE ...] [ORDER BY] [LIMIT]; "
                  "otherwise write the statement without WITH.")
_UNION_SUPPORTED = ("UNION ALL joins supported statements with the same number of output columns; ORDER BY after it "
                    "takes output names of the first statement or positions, and LIMIT a count.")


@dataclass(frozen=True, slots=True)
class _Cte:
    body: exp.Select
    aggregate: bool
    columns: frozenset[str] | None  # a view's projected columns (None: SELECT *)


def flatten(tree: exp.Expr, scope: Scope, union: int) -> list[tuple[exp.Expr, Scope, ir.UnionPart | None]]:
    """The statements one parsed tree stands for (CTEs inlined, UNION ALL split), each with its
    scope and, for UNION ALL parts, its place in the union. Other trees are returned unchanged."""
    ctes = _ctes(tree, scope)
    if isinstance(tree, exp.Union):
        parts = _union_parts(tree, scope)
        order = _union_order(tree, scope)
        limit = row_count(tree.args.get("limit"), "LIMIT", scope, _UNION_SUPPORTED)
        offset = row_count(tree.args.get("offset"), "OFFSET", scope, _UNION_SUPPORTED) or 0
        span = node_span(tree, scope)
        return [(_inline(part, ctes, scope), _part_scope(part, scope),
                 ir.UnionPart(union=union, part=i, parts=len(parts), order_by=order, limit=limit, span=span,
                              offset=offset))
                for i, part in enumerate(parts)]
    if isinstance(tree, exp.Select):
        return [(_inline(tree, ctes, scope), scope, None)]
    return [(tree, scope, None)]


def expand_weights(batch: ir.Batch, weights: Sequence[float] | None) -> Sequence[float] | None:
    """One weight per user statement → one per statement of the batch (each UNION ALL part its
    statement's weight); weights already one per batch statement are returned unchanged."""
    if weights is None or isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        return weights
    owners = _owners(batch)
    if len(weights) == len(batch.statements) or len(weights) != owners[-1] + 1:
        return weights
    return [weights[owner] for owner in owners]


def _owners(batch: ir.Batch) -> list[int]:
    """The user statement (0-based) of each batch statement."""
    owners, count = [], -1
    for statement in batch.statements:
        count += statement.union is None or statement.union.part == 0
        owners.append(count)
    return owners


# ------------------------------------------------------------------------------------------------ UNION ALL
def _union_parts(node: exp.Expr, scope: Scope) -> list[exp.Select]:
    """The SELECTs of a UNION ALL chain, in text order."""
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select) and not node.args.get("alias"):
        return [node.this]
    if isinstance(node, exp.Select):
        return [node]
    if isinstance(node, exp.Union):
        if node.args.get("distinct") or node.args.get("by_name"):
            what = "UNION BY NAME" if node.args.get("by_name") else "UNION without ALL (it removes duplicate rows)"
            raise unsupported(what, _keyword_span(node, scope), scope, "Use UNION ALL of statements whose rows do not "
                              "repeat, e.g. statements over disjoint groups or filters.")
        return _union_parts(node.this, scope) + _union_parts(node.expression, scope)
    if isinstance(node, exp.SetOperation):
        raise unsupported(type(node).__name__.upper(), _keyword_span(node, scope), scope, _UNION_SUPPORTED)
    raise unsupported(f"a {type(node).__name__} in UNION ALL", node, scope, _UNION_SUPPORTED)


def _keyword_span(node: exp.Expr, scope: Scope) -> ir.Span:
    """The set operation's keyword (after its left part)."""
    left = token_range(node.this, scope.source) if isinstance(node, exp.SetOperation) else None
    index = left[1] + 1 if left is not None else scope.first
    while scope.source.word(index) == ")":
        index += 1
    return scope.source.token_span(index, index)


def _part_scope(part: exp.Select, scope: Scope) -> Scope:
    covered = token_range(part, scope.source)
    return scope if covered is None else replace(scope, first=covered[0], last=covered[1])


def _union_order(tree: exp.Union, scope: Scope) -> tuple[tuple[str | int, bool], ...]:
    order = tree.args.get("order")
    if order is None:
        return ()
    keys: list[tuple[str | int, bool]] = []
    for item in order.expressions:
        key = unparen(item.this)
        if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit() and int(key.this) > 0:
            keys.append((int(key.this), bool(item.args.get("desc"))))
        elif isinstance(key, exp.Column) and isinstance(key.this, exp.Identifier) and not key.table:
            keys.append((key.name, bool(item.args.get("desc"))))
        else:
            raise unsupported("this ORDER BY after UNION ALL", item, scope, _UNION_SUPPORTED)
    return tuple(keys)


def row_count(clause: exp.Limit | exp.Offset | None, word: str, scope: Scope, supported: str) -> int | None:
    """The count of a LIMIT or OFFSET clause (``word``): a non-negative integer (a literal or a bound
    ``?``) up to :data:`MAX_LIMIT`, else refused at the count, naming it; None without the clause."""
    if clause is None:
        return None
    for key, value in clause.args.items():
        if key != "expression" and not is_empty(value):
            raise unsupported(f"{word} {key.upper()}", clause, scope, supported)
    node = clause.expression
    value = parse_value(node, scope, word).value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise unsupported(f"{word} {fragment(scope.source.text, node_span(node, scope))}", node, scope, supported)
    if value > MAX_LIMIT:
        raise InvalidQueryError(located(f"{word} {value:.3g} is above MAX_LIMIT = 2^63 − 1", node_span(node, scope),
                                        scope.source, f"Drop the {word} or use a smaller count."))
    return value


# ------------------------------------------------------------------------------------------------ WITH
def _ctes(tree: exp.Expr, scope: Scope) -> dict[str, _Cte]:
    """The tree's CTEs by name (lower case), each resolved against the ones before it; the WITH
    clause is taken off the tree."""
    clause = tree.args.get("with_") or tree.args.get("with")
    if clause is None:
        return {}
    if clause.args.get("recursive"):
        raise unsupported("WITH RECURSIVE", clause, scope, _CTE_SUPPORTED)
    found: dict[str, _Cte] = {}
    for cte in clause.expressions:
        alias = cte.args.get("alias")
        if alias is None or alias.columns or cte.args.get("materialized") is not None:
            raise unsupported("WITH with a column list or MATERIALIZED", cte, scope, _CTE_SUPPORTED)
        body = cte.this
        if not isinstance(body, exp.Select):
            raise unsupported(f"WITH {alias.name} AS (a {type(body).__name__.upper()})", cte, scope, _CTE_SUPPORTED)
        body = _inline(body, found, scope)
        found[alias.name.lower()] = _describe_cte(body, alias.name, scope)
    tree.set("with_" if "with_" in tree.args else "with", None)
    return found


def _describe_cte(body: exp.Select, name: str, scope: Scope) -> _Cte:
    if body.args.get("group") or any(isinstance(n, exp.AggFunc) for e in body.expressions for n in e.walk()):
        if body.args.get("limit") or body.args.get("order") or body.args.get("offset"):
            raise unsupported(f"ORDER BY, LIMIT or OFFSET inside the aggregate CTE {name}", body, scope,
                              "Put ORDER BY, LIMIT and OFFSET on the query that reads the CTE.")
        return _Cte(body=body, aggregate=True, columns=None)
    for key in ("group", "having", "order", "limit", "offset", "distinct"):
        if body.args.get(key):
            raise unsupported(f"{key.upper()} in the CTE {name}", body, scope, _CTE_SUPPORTED)
    columns: set[str] = set()
    for item in body.expressions:
        if isinstance(item, exp.Star):
            return _Cte(body=body, aggregate=False, columns=None)
        value = item.this if isinstance(item, exp.Alias) else item
        renamed = isinstance(item, exp.Alias) and item.alias.lower() != value.name.lower()
        if not isinstance(value, exp.Column) or renamed:
            raise unsupported(f"a computed or renamed column in the CTE {name}", item, scope,
                              _CTE_SUPPORTED + " Select columns under their own names.")
        columns.add(value.name.lower())
    return _Cte(body=body, aggregate=False, columns=frozenset(columns))


def _inline(select: exp.Select, ctes: dict[str, _Cte], scope: Scope) -> exp.Select:
    """``select`` with a CTE in its FROM replaced by what it stands for."""
    clause = select.args.get("from_") or select.args.get("from")
    table = clause.this if clause is not None else None
    if not isinstance(table, exp.Table) or table.args.get("db") or table.name.lower() not in ctes:
        return select
    cte = ctes[table.name.lower()]
    return _from_aggregate(select, cte, table, scope) if cte.aggregate else _from_view(select, cte, table, scope)


def _from_view(select: exp.Select, cte: _Cte, table: exp.Table, scope: Scope) -> exp.Select:
    """The outer statement reading the view's table, its WHERE and the view's joined by AND."""
    if cte.columns is not None:
        for column in select.find_all(exp.Column):
            if isinstance(column.this, exp.Identifier) and column.name.lower() not in cte.columns:
                raise unsupported(f"column '{column.name}', which the CTE {table.name} does not select,", column,
                                  scope, "Select it in the CTE, or read the table directly.")
    source = cte.body.args.get("from_") or cte.body.args.get("from")
    if source is None:
        raise unsupported(f"the CTE {table.name} without FROM", cte.body, scope, _CTE_SUPPORTED)
    inner = source.this.copy()
    inner.set("alias", table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name)))
    result = select.copy()
    result.set("from_" if "from_" in result.args else "from", exp.From(this=inner))
    view_where = cte.body.args.get("where")
    if view_where is not None:
        condition = view_where.this.copy()
        for column in condition.find_all(exp.Column):
            column.set("table", None)  # the view's own qualifiers name the one table
        outer = result.args.get("where")
        joined = condition if outer is None else exp.And(this=exp.Paren(this=condition),
                                                         expression=exp.Paren(this=outer.this))
        result.set("where", exp.Where(this=joined))
    return result


def _from_aggregate(select: exp.Select, cte: _Cte, table: exp.Table, scope: Scope) -> exp.Select:
    """The CTE's statement, selecting the outer outputs; the outer WHERE its HAVING, the outer
    ORDER BY and LIMIT its own."""
    for key in ("group", "having", "distinct"):
        if select.args.get(key):
            raise unsupported(f"{key.upper()} over the aggregate CTE {table.name}", select.args[key], scope,
                              _CTE_SUPPORTED)
    for node in select.expressions:
        if any(isinstance(n, exp.AggFunc) for n in node.walk()):
            raise unsupported(f"an aggregate over the aggregate CTE {table.name}", node, scope, _CTE_SUPPORTED)
    outputs = _outputs(cte.body)
    result = cte.body.copy()
    items: list[exp.Expr] = []
    for node in select.expressions:
        if isinstance(node, exp.Star):
            items.extend(item.copy() for item in cte.body.expressions)
            continue
        value = node.this if isinstance(node, exp.Alias) else node
        span = node_span(value, scope)
        name = node.alias if isinstance(node, exp.Alias) else (
            value.name if isinstance(value, exp.Column) else " ".join(scope.source.text[span.start:span.end].split()))
        items.append(exp.Alias(this=_substitute(value, outputs, table, scope), alias=exp.to_identifier(name)))
    result.set("expressions", items)
    where = select.args.get("where")
    if where is not None:
        condition = _substitute(where.this, outputs, table, scope)
        having = result.args.get("having")
        joined = condition if having is None else exp.And(this=exp.Paren(this=having.this),
                                                          expression=exp.Paren(this=condition))
        result.set("having", exp.Having(this=joined))
    for key in ("order", "limit", "offset"):
        if select.args.get(key) is not None:
            result.set(key, select.args[key])
    return result


def _outputs(body: exp.Select) -> dict[str, exp.Expr]:
    """The aggregate CTE's outputs by name (lower case): AS names and plain column names."""
    found = {}
    for item in body.expressions:
        if isinstance(item, exp.Alias):
            found[item.alias.lower()] = item.this
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Identifier):
            found[item.name.lower()] = item
    return found


def _substitute(node: exp.Expr, outputs: dict[str, exp.Expr], table: exp.Table, scope: Scope) -> exp.Expr:
    """``node`` with each column (an output name of the CTE) replaced by the output's expression."""
    def swap(found: exp.Expr) -> exp.Expr:
        if isinstance(found, exp.Column) and isinstance(found.this, exp.Identifier):
            if found.name.lower() not in outputs:
                raise invalid(f"column '{found.name}' is not an output of the CTE {table.name}", found, scope,
                              f"Use its outputs: {', '.join(outputs)} (name aggregates with AS).")
            return outputs[found.name.lower()].copy()
        return found
    return node.copy().transform(swap)
