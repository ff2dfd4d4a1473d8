"""Parse a batch of aggregate SQL statements into dpsql's typed IR (:mod:`dpsql.sql.ir`).

The batch is tokenized and parsed with sqlglot (DuckDB dialect), then translated, one function per
construct, into frozen IR nodes that each carry the :class:`~dpsql.sql.ir.Span` of their source
text. The SQL is only read: it is never executed or re-emitted for execution, and ``?`` parameters
become :class:`~dpsql.sql.ir.Literal` values, never text.

This module holds the batch (:func:`parse_batch`, its memory and limits) and the statement's
structure (FROM, the select list, GROUP BY, ORDER BY, LIMIT); the text, its tokens, spans,
parameters and located messages are in :mod:`dpsql.sql.source`, and WHERE predicates with the
columns and constants in them in :mod:`dpsql.sql.predicates`.

Grammar (anything else raises :class:`~dpsql.errors.UnsupportedQueryError`)::

    batch      := query (';' query)*                -- -- and /* */ comments; blank statements skipped
    query      := [WITH cte (',' cte)*] statement (UNION ALL statement)* [ORDER BY key (',' key)*] [LIMIT count]
                                                    -- UNION ALL: one table, the parts' rows in order (sql.flatten)
    cte        := name AS '(' SELECT * | column (',' column)* FROM table [WHERE predicate] ')'  -- inlined
                | name AS '(' statement ')'         -- read as SELECT outputs FROM name [WHERE on outputs = HAVING] ...
    statement  := SELECT item (',' item)* FROM [main '.'] table [[AS] alias] [join]  -- main: DuckDB's default schema
                  [WHERE predicate]
                  [GROUP BY grouping (',' grouping)*]
                  [HAVING condition]                -- on the noisy answers: post-processing (dpsql.sql.derived)
                  [ORDER BY key [ASC | DESC] (',' key [ASC | DESC])*]
                  [LIMIT count]
    item       := column [[AS] name]                -- the column must be in GROUP BY
                | case | datepart [[AS] name]       -- the same expression must be in GROUP BY
                | aggregate [[AS] name]             -- at least one aggregate per statement (or in HAVING)
                | expression [[AS] name]            -- aggregates and numbers with + - * /, unary -, ( ), windows
                | value [[AS] name]                 -- a constant column
    window     := (SUM | AVG | COUNT) '(' aggregate ')' OVER '(' [PARTITION BY name, ...]
                  [ORDER BY name [ASC | DESC], ...] [(ROWS | RANGE) [BETWEEN] bound [AND bound]] ')'
                                                    -- over the released groups (dpsql.sql.windows); names:
                                                    -- GROUP BY columns or group keys' output names
    condition  := operand (op | [NOT] BETWEEN | [NOT] IN | IS [NOT] NULL) ... | AND | OR | NOT | ( )
                                                    -- operands: expressions, output names, GROUP BY columns, values
    aggregate  := plain [FILTER '(' WHERE predicate ')']  -- rows where WHERE AND the filter are TRUE
                | COUNT_IF(predicate)              -- = COUNT(*) FILTER (WHERE predicate)
                | SUM(CASE WHEN predicate THEN column|number [ELSE 0] END)   -- number k: k·COUNT(*) FILTER
                | COUNT(CASE WHEN predicate THEN column|constant END) | AVG(CASE WHEN predicate THEN column END)
                                                   -- IF(p, v, e) is CASE WHEN p THEN v ELSE e END
                | COUNT(DISTINCT unit_column)       -- the privacy units, when each keeps one row (dpsql.sql.units)
                | MEDIAN(column) | MIN(column) | MAX(column)       -- order statistics (dpsql.sql.quantiles)
                | PERCENTILE_CONT|PERCENTILE_DISC(p) WITHIN GROUP (ORDER BY column [ASC | DESC])
                | QUANTILE_CONT|QUANTILE_DISC|QUANTILE(column, p)  -- p: a number or ? in [0, 1]
    plain      := COUNT(*) | COUNT(constant) | COUNT(column) | SUM(column) | AVG(column)  -- COUNT(1) = COUNT(*)
    column     := [[main '.'] table_or_alias '.'] name  -- identifiers may be "quoted"; case-insensitive
    join       := [INNER | LEFT [OUTER]] JOIN table [[AS] alias] (USING (key) | ON column = column)
                                                    -- a public table of the schema (public_joins): a lookup;
                                                    -- or the table's privacy unit's table (relations)
    grouping   := group | ROLLUP '(' group, ... ')' | CUBE '(' group, ... ')' | '(' ')'  -- one statement per set,
                | GROUPING SETS '(' (group | '(' group, ... ')' | ROLLUP ... | CUBE ...), ... ')'  -- one table
                                                    -- (sql.grouping_sets); item: GROUPING|GROUPING_ID(group, ...)
    group      := column | position | alias | case | datepart  -- position/alias: of a select item (group_keys)
    case       := CASE WHEN predicate THEN label ... [ELSE label] END  -- every WHEN on one column; label:
                | CASE column WHEN value THEN label ... [ELSE label] END  --   value or NULL, all of one type
    datepart   := EXTRACT(YEAR|MONTH FROM column) | year(column) | month(column)
                | date_trunc('year'|'month', column)  -- on a date column whose base cells fit in one year/month
    predicate  := column op value | value op column -- op: = <> != < <= > >=; `5 < age` is `age > 5`
                | column [NOT] BETWEEN value AND value
                | column [NOT] IN (value (',' value)*)
                | column IS [NOT] NULL             -- the outside cell: NULL and out-of-domain values
                | column [NOT] LIKE|ILIKE 'pattern' [ESCAPE 'c']  -- categorical: IN (matching declared values)
                | NOT predicate | predicate AND predicate | predicate OR predicate | '(' predicate ')'
    value      := integer | decimal | '-' value | 'string' | DATE 'yyyy-mm-dd'
                | CAST('yyyy-mm-dd' AS DATE) | ?    -- ? binds the next parameter, in text order
                | TIMESTAMP 'yyyy-mm-dd 00:00:00'   -- midnight only (a day boundary); also CAST(... AS TIMESTAMP)
    key        := output name (also <alias>_stddev; <alias>_low, _high of order statistics) | 1-based position
    count      := non-negative integer | ?

Output names are the AS alias, the group column's name, or ``count``, ``count_<col>``,
``sum_<col>``, ``avg_<col>``, ``median_<col>``, ``percentile_cont_<col>``, ``min_<col>``, ... (the
function's name and the column's), or an expression's or constant's text as written; a repeated name
gets the suffix ``_2``, ``_3``, ... Names compare
case-insensitively, as in DuckDB. Syntax errors raise :class:`~dpsql.errors.SqlSyntaxError`; every
message gives the line, column and source fragment of the offending construct.

Example:
    >>> batch = parse_batch("SELECT sex, COUNT(*) FROM people WHERE age >= ? GROUP BY sex", [18])
    >>> statement = batch.statements[0]
    >>> [item.alias for item in statement.select]
    ['sex', 'count']
    >>> statement.where.column.name, statement.where.operator, statement.where.value.value
    ('age', '>=', 18)
    >>> statement.where.span.describe(), batch.text[statement.where.span.start:statement.where.span.end]
    ('line 1, col 40', 'age >= ?')
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace

from sqlglot import exp
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]  # re-exported there

from dpsql.errors import InvalidQueryError, ProgrammingError, SqlSyntaxError
from dpsql.sql import derived, filters, group_keys, grouping_sets, ir, windows
from dpsql.sql.flatten import flatten, row_count
from dpsql.sql.joins import is_join_clause, parse_joins
from dpsql.sql.predicates import DEFAULT_SCHEMA, OPERATORS, parse_column, parse_predicate
from dpsql.sql.quantiles import output_names, parse_quantile
from dpsql.sql.source import (
    SUPPORTED,
    Scope,
    Source,
    bind_parameters,
    describe,
    find_word,
    invalid,
    is_empty,
    located,
    node_span,
    parse_trees,
    statement_ranges,
    token_range,
    tokenize,
    unparen,
    unsupported,
)
from dpsql.sql.units import is_count_distinct, parse_count_distinct

__all__ = ["parse_batch"]


# Limits (docs/sql.md, "Limits"): bounded work before anything is planned, explain included. Each is
# checked before the work it bounds and refused with InvalidQueryError naming the limit and where.
#: Characters in one batch's SQL text.
MAX_SQL_LENGTH = 200_000
#: Nesting depth: open parentheses plus a run of prefix NOT / minus / plus signs (sqlglot's
#: recursive descent takes some 20 Python frames per level and overflows near 45).
MAX_NESTING = 32
#: Statements in one batch.
MAX_STATEMENTS = 1_000
#: Predicate atoms in one statement's WHERE clause (each comparison, BETWEEN and IN value counts one).
MAX_PREDICATE_ATOMS = 1_000

_AGGREGATE_SUPPORTED = ("Aggregates are COUNT(*), COUNT(1), COUNT(col), SUM(col), AVG(col), "
                        "VARIANCE/VAR_SAMP/VAR_POP(col) and STDDEV/STDDEV_SAMP/STDDEV_POP(col) over one plain column, "
                        "each optionally with FILTER (WHERE predicate).")
_GROUP_SUPPORTED = group_keys.KEY_SUPPORTED
_ORDER_SUPPORTED = "ORDER BY takes output names or 1-based select positions, each optionally ASC or DESC."
_LIMIT_SUPPORTED = "LIMIT and OFFSET take a non-negative integer or a ? bound to one."

_SUBQUERY_REWRITE = ("A subquery's rows depend on the data in ways the declared cells cannot express: write its "
                     "condition on this table's columns in WHERE, or name a filtered view in a WITH at the start "
                     "(WITH adults AS (SELECT * FROM people WHERE age >= 18) SELECT COUNT(*) FROM adults).")
_SET_REWRITE = ("Combine statements with UNION ALL; INTERSECT and EXCEPT would compare released rows: send the "
                "statements separately.")
#: Constructs refused wherever they appear, each with its name and the supported SQL that asks the same thing.
_FORBIDDEN: tuple[tuple[type[exp.Expr], str, str], ...] = (
    (exp.With, "WITH (common table expression) inside a statement",
     "Write the WITH at the start of the query, before its SELECT."),
    (exp.Join, "JOIN", "dpsql joins a public table by lookup, or a table with rows per person to its privacy unit's "
                       "table on the declared key (FROM visits v JOIN people p USING (person_id)); see Joins in the "
                       "SQL reference, docs/sql.md."),
    (exp.Subquery, "subquery", _SUBQUERY_REWRITE),
    (exp.Exists, "EXISTS (subquery)", _SUBQUERY_REWRITE),
    (exp.Select, "subquery", _SUBQUERY_REWRITE),
    (exp.SetOperation, "UNION/INTERSECT/EXCEPT", _SET_REWRITE),
    (exp.Window, "window function (OVER)", SUPPORTED),
    (exp.Distinct, "DISTINCT", "SELECT DISTINCT col lists values: SELECT col, COUNT(*) FROM t GROUP BY col gives "
                               "every declared value with its count; SUM(DISTINCT x) and AVG(DISTINCT x) have no "
                               "bounded sensitivity: use SUM(x) or AVG(x)."),
    (exp.Qualify, "QUALIFY", "Filter the released groups with HAVING: SELECT k, COUNT(*) FROM t GROUP BY k HAVING "
                             "COUNT(*) > 100."),
    (exp.TableSample, "SAMPLE", "dpsql answers over every row (the noise protects the people in it): drop the "
                                "sample, or narrow the rows with WHERE."),
    (exp.Lateral, "LATERAL", _SUBQUERY_REWRITE),
    (exp.Pivot, "PIVOT", "Group by both columns (GROUP BY a, b) and pivot the released table afterwards, e.g. with "
                         "pyarrow or pandas: post-processing is free."),
    (exp.Unnest, "UNNEST", "dpsql reads declared columns of scalar values: declare the nested values as a column "
                           "of a table."),
)
_FORBIDDEN_KINDS = tuple(kind for kind, _, _ in _FORBIDDEN)
_CLAUSES = frozenset({"expressions", "from_", "from", "where", "group", "having", "order", "limit", "offset", "joins"})
_CLAUSE_NAMES = {"into": "SELECT INTO", "windows": "WINDOW", "sort": "SORT BY", "cluster": "CLUSTER BY",
                 "distribute": "DISTRIBUTE BY", "locks": "FOR UPDATE", "kind": "SELECT AS STRUCT/VALUE",
                 "prewhere": "PREWHERE", "connect": "CONNECT BY", "hint": "a query hint"}
_TABLE_PARTS = {"catalog": "a catalog-qualified table name"}

_AGGREGATES: dict[type[exp.Expr], ir.AggregateFunction] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Variance: "var_samp", exp.VariancePop: "var_pop",
    exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop"}
#: The default output name's prefix where it is not the function's: STDDEV(x) is stddev_x, VARIANCE(x) variance_x.
_SPELLED: dict[type[exp.Expr], str] = {exp.Variance: "variance", exp.Stddev: "stddev"}


# --------------------------------------------------------------------------------------------------
# The batch


def parse_batch(text: str, parameters: Sequence[object] | None = None) -> ir.Batch:
    """Parse a batch of ``;``-separated aggregate SELECT statements into the IR.

    Args:
        text: The SQL (DuckDB dialect), with ``--`` and ``/* */`` comments allowed anywhere.
        parameters: Values for the ``?`` placeholders, in text order across the whole batch: each an
            int, float, str or datetime.date. They become IR literals; they never enter the text.

    Returns:
        The statements in text order; each node's span indexes into ``text``.

    Raises:
        SqlSyntaxError: the text is not valid SQL, names an unknown ORDER BY output or table
            qualifier, or holds an impossible date. The message gives line, column and fragment.
        UnsupportedQueryError: a construct outside the grammar of this module's docstring.
        ProgrammingError: wrong number or type of parameters.

    A batch parsed before (the same text and parameters) is returned from memory: the IR is
    immutable, and parsing is a tenth of a repeated batch's time.
    """
    try:
        key: tuple[object, ...] | None = (text, None if parameters is None else tuple((type(p), p) for p in parameters))
        hash(key)
    except TypeError:  # an unhashable parameter: the parser reports it
        key = None
    with _parsed_lock:
        if key is not None and key in _parsed:
            _parsed.move_to_end(key)
            return _parsed[key]
    batch = _parse_batch(text, parameters)
    if key is not None:
        with _parsed_lock:
            _parsed[key] = batch
            while len(_parsed) > PARSED_BATCHES:
                _parsed.popitem(last=False)
    return batch


#: Parsed batches kept in memory (by text and parameters).
PARSED_BATCHES = 256
_parsed: OrderedDict[tuple[object, ...], ir.Batch] = OrderedDict()
_parsed_lock = threading.Lock()


def _parse_batch(text: str, parameters: Sequence[object] | None) -> ir.Batch:
    """:func:`parse_batch` without the memory."""
    if not isinstance(text, str):
        raise ProgrammingError(f"SQL text must be a str; got {type(text).__name__}.")
    if len(text) > MAX_SQL_LENGTH:
        raise InvalidQueryError(f"the batch's SQL text has {len(text):,} characters; the limit is MAX_SQL_LENGTH = "
                                f"{MAX_SQL_LENGTH:,}. Split it into several batches.")
    source = Source.of(text, tokenize(text))
    _check_nesting(source)
    _check_statement_count(source)
    try:
        trees = parse_trees(source)
        if not trees:
            raise SqlSyntaxError("The batch holds no SQL statement. Pass one or more SELECT statements "
                                 "separated by ';'.")
        source = replace(source, parameters=bind_parameters(source.tokens, parameters))
        statements = tuple(statement for index, (tree, scope) in enumerate(trees)
                           for statement in _parse_query(tree, replace(scope, source=source), index))
    except RecursionError:  # a shape the pre-scan does not measure: refuse it, never a bare RecursionError
        raise InvalidQueryError(f"the batch nests too deeply to be read (limit MAX_NESTING = {MAX_NESTING} levels of "
                                "parentheses, NOT and signs). Flatten the expression.") from None
    return ir.Batch(statements=statements, text=text)


# --------------------------------------------------------------------------------------------------
# Limits


def _check_nesting(source: Source) -> None:
    """Refuse nesting deeper than MAX_NESTING: open parentheses plus the current run of prefix NOT/-/+.

    >>> _check_nesting(Source.of("SELECT (((1)))", tokenize("SELECT (((1)))")))
    """
    depth = run = 0
    for index, token in enumerate(source.tokens):
        kind = token.token_type
        if kind in (TokenType.NOT, TokenType.DASH, TokenType.PLUS):
            run += 1
        elif kind != TokenType.L_PAREN:
            run = 0
        depth += (kind == TokenType.L_PAREN) - (kind == TokenType.R_PAREN)
        if depth + run > MAX_NESTING:
            span = source.token_span(index, index)
            raise InvalidQueryError(located(f"the expression nests deeper than MAX_NESTING = {MAX_NESTING} levels "
                                            "(parentheses plus NOT and signs in a row)", span, source,
                                            "Flatten it: drop redundant parentheses and double NOTs, or use IN lists."))


def _check_statement_count(source: Source) -> None:
    """Refuse a batch of more than MAX_STATEMENTS statements (before any is parsed)."""
    ranges = statement_ranges(source.tokens)
    if len(ranges) > MAX_STATEMENTS:
        span = source.token_span(*ranges[MAX_STATEMENTS])
        raise InvalidQueryError(located(f"the batch has {len(ranges):,} statements; the limit is MAX_STATEMENTS = "
                                        f"{MAX_STATEMENTS:,}", span, source, "Split it into several batches."))


def _check_atom_count(where: exp.Where, scope: Scope) -> None:
    """Refuse a WHERE clause of more than MAX_PREDICATE_ATOMS atoms (each IN value counts one)."""
    atoms = sum(1 for _ in where.find_all(exp.Between, *OPERATORS))
    atoms += sum(len(node.expressions) for node in where.find_all(exp.In))
    if atoms > MAX_PREDICATE_ATOMS:
        raise InvalidQueryError(located(f"the WHERE clause has {atoms:,} predicate atoms; the limit is "
                                        f"MAX_PREDICATE_ATOMS = {MAX_PREDICATE_ATOMS:,}", node_span(where, scope),
                                        scope.source, "Use ranges (BETWEEN, <, >=) or GROUP BY instead of long lists."))


# --------------------------------------------------------------------------------------------------
# Statements


def _parse_query(tree: exp.Expr, scope: Scope, index: int) -> Iterator[ir.Statement]:
    """The statements of user statement ``index``: one, or one per UNION ALL part (``flatten``) or
    grouping set (``grouping_sets``)."""
    for part, part_scope, union in flatten(tree, scope, index):
        sets = grouping_sets.expand(part, part_scope, union, index) if isinstance(part, exp.Select) else None
        if sets is not None:
            for grouping in sets:
                parsed = _parse_statement(grouping.tree, part_scope, grouping.rolled_up)
                yield grouping_sets.restrict(parsed, grouping, part_scope)
        else:
            yield _parse_statement(part, part_scope) if union is None else replace(_parse_statement(part, part_scope),
                                                                                   union=union)


def _parse_statement(tree: exp.Expr, scope: Scope, rolled_up: frozenset[int] = frozenset()) -> ir.Statement:
    """Translate one parsed statement, checking the statement shape before its parts; ``rolled_up``: the
    GROUP BY positions its grouping set rolls up (read by GROUPING())."""
    select = _require_select(tree, scope)
    _reject_forbidden(select, scope)
    _reject_other_clauses(select, scope)
    scope = _parse_from(select, scope)  # and its JOIN (dpsql.sql.joins): a public table's or the unit table's
    group_by, keyed = _parse_group_by(select, scope)
    grouping = grouping_sets.Grouping(select=select, group_by=group_by, keys=keyed, rolled_up=rolled_up)
    items = _parse_select_list(select, group_by, keyed, scope, grouping)
    where = select.args.get("where")
    for clause in select.find_all(exp.Where):  # the WHERE clause and each FILTER (WHERE ...)
        _check_atom_count(clause, scope)
    having = select.args.get("having")
    condition = None if having is None else derived.parse_having(
        having, items, group_by, scope, lambda node: _parse_select_item(node, set(), [], scope, grouping))
    span = scope.span
    return derived.finish_statement(ir.Statement(
        text=scope.source.text[span.start:span.end],
        table=scope.table,
        table_alias=scope.alias,
        table_span=scope.table_span,
        select=(),  # set by derived.finish_statement
        where=None if where is None else parse_predicate(where.this, scope),
        group_by=group_by,
        group_keys=tuple(key for _, key in keyed) if any(key for _, key in keyed) else (),
        order_by=_parse_order_by(select, items, group_by, scope),
        limit=row_count(select.args.get("limit"), "LIMIT", scope, _LIMIT_SUPPORTED),
        offset=row_count(select.args.get("offset"), "OFFSET", scope, _LIMIT_SUPPORTED) or 0,
        span=span,
        joins=scope.joined,
    ), items, condition)


def _require_select(tree: exp.Expr, scope: Scope) -> exp.Select:
    """The statement as a SELECT; set operations, DDL, DML and commands are unsupported."""
    if isinstance(tree, exp.Select):
        return tree
    if isinstance(tree, exp.SetOperation):
        keyword = find_word(scope, {"UNION", "INTERSECT", "EXCEPT"})
        if keyword is not None:
            span = scope.source.token_span(keyword, scope.last)
            raise unsupported(scope.source.word(keyword), span, scope, _SET_REWRITE)
        raise unsupported(type(tree).__name__.upper(), scope.span, scope, _SET_REWRITE)
    if isinstance(tree, exp.Subquery):
        raise unsupported("a parenthesized query", scope.span, scope, "Write the SELECT without the parentheses.")
    raise unsupported(f"{scope.source.word(scope.first) or 'this'} statement", scope.span, scope,
                      "dpsql answers aggregate SELECT queries and opens the data read-only; run other statements "
                      "in the database itself, as its owner.")


def _reject_forbidden(select: exp.Select, scope: Scope) -> None:
    """Reject the first (in text order) subquery, CTE, window, DISTINCT, ... anywhere, and any join but
    the FROM clause's own (read by :mod:`dpsql.sql.joins`)."""
    found = []
    selected: set[int] = set()  # the select list's nodes, read at the first window (most statements have none)
    for node in select.walk():
        if not isinstance(node, _FORBIDDEN_KINDS):
            continue
        forbidden = next((name, rewrite) for kind, name, rewrite in _FORBIDDEN if isinstance(node, kind))
        if isinstance(node, exp.Window):
            selected = selected or {id(inner) for item in select.expressions for inner in item.walk()}
            if id(node) in selected and windows.is_group_window(node):
                continue  # a window over the released groups (dpsql.sql.windows)
        if node is not select and not is_join_clause(node, select) and not is_count_distinct(node):
            found.append((node_span(node, scope), forbidden, node))
    if not found:
        return
    span, (name, rewrite), node = min(found, key=lambda entry: entry[0].start)
    if isinstance(node, exp.Window):
        raise windows.refusal(node, scope, id(node) in selected)
    raise unsupported(name, span, scope, rewrite)


def _reject_other_clauses(select: exp.Select, scope: Scope) -> None:
    """Reject any SELECT clause outside the grammar (INTO, WINDOW, FOR UPDATE, ...)."""
    for key, value in select.args.items():
        if key in _CLAUSES or is_empty(value):
            continue
        where = value if isinstance(value, exp.Expr) else scope.span
        raise unsupported(_CLAUSE_NAMES.get(key, key.upper().strip("_")), where, scope)


def _parse_from(select: exp.Select, scope: Scope) -> Scope:
    """Read ``FROM table [[AS] alias]`` and its JOIN (:mod:`dpsql.sql.joins`) into the scope."""
    clause = select.args.get("from_") or select.args.get("from")
    if clause is None:
        raise unsupported("a SELECT without FROM", scope.span, scope,
                          "Name a declared table: SELECT COUNT(*) FROM <table>.")
    table = clause.this
    if not isinstance(table, exp.Table):
        raise unsupported(f"{describe(table, scope)} in FROM", table, scope)
    name = table.this
    if not isinstance(name, exp.Identifier) or scope.source.text[name.meta.get("start", 0)] == "'":
        raise unsupported("a table function or file in FROM", table, scope)
    schema = table.args.get("db")
    if schema is not None and schema.name.lower() != DEFAULT_SCHEMA:
        raise unsupported(f"the schema '{schema.name}'", table, scope,
                          f"dpsql reads the declared tables of DuckDB's default schema: write {name.name} or "
                          f"main.{name.name}.")
    for key, value in table.args.items():
        if key not in {"this", "alias", "db"} and not is_empty(value):
            raise unsupported(_TABLE_PARTS.get(key, f"table {key.upper().strip('_')}"), table, scope)
    alias = table.args.get("alias")
    if alias is not None and alias.columns:
        raise unsupported("column aliases on a table", alias, scope)
    return parse_joins(select, replace(scope, table=name.name, alias=alias.name if alias is not None else None,
                                       table_span=node_span(name, scope)))



# --------------------------------------------------------------------------------------------------
# SELECT list and GROUP BY


Keyed = tuple[tuple[exp.Expr, ir.GroupKey | None], ...]


def _parse_group_by(select: exp.Select, scope: Scope) -> tuple[tuple[ir.Column, ...], Keyed]:
    """GROUP BY columns, positions, aliases and keys (:mod:`dpsql.sql.group_keys`), a repeat kept once:
    the column of each entry, and each entry's expression with its key (None: the plain column)."""
    group = select.args.get("group")
    if group is None:
        return (), ()
    for key in ("grouping_sets", "cube", "rollup", "totals"):
        if not is_empty(group.args.get(key)):
            raise unsupported(f"GROUP BY {key.upper().replace('_', ' ')}", group, scope, _GROUP_SUPPORTED)
    columns: list[ir.Column] = []
    keyed: list[tuple[exp.Expr, ir.GroupKey | None]] = []
    for node in _group_all(select) if group.args.get("all") else group.expressions:
        node = group_keys.resolve_reference(node, select, scope)
        found = group_keys.parse_key(node, scope) if group_keys.is_key_expression(node) else None
        column = found.column if found is not None else parse_column(node, scope, "in GROUP BY", _GROUP_SUPPORTED)
        twin = next((i for i, seen in enumerate(columns) if seen.name.lower() == column.name.lower()), None)
        if twin is None:
            columns.append(column)
            keyed.append((node, found))
        elif (found is None) != (keyed[twin][1] is None) or (found is not None and keyed[twin][0] != node):
            raise unsupported(f"two GROUP BY keys on column '{column.name}'", node, scope,
                              "Group by one key per column (send the other grouping as its own statement).")
    return tuple(columns), tuple(keyed)


def _group_all(select: exp.Select) -> list[exp.Expr]:
    """GROUP BY ALL (DuckDB's): every select item that reads no aggregate and is not a constant, by its
    1-based position (so a key expression and its alias resolve as GROUP BY <position> does)."""
    return [exp.Literal.number(position) for position, item in enumerate(select.expressions, start=1)
            if not any(isinstance(n, exp.AggFunc) for n in item.walk())
            and not isinstance(unparen(item.this if isinstance(item, exp.Alias) else item), (exp.Literal, exp.Neg))]


def _parse_select_list(select: exp.Select, group_by: tuple[ir.Column, ...], keyed: Keyed,
                       scope: Scope, grouping: grouping_sets.Grouping) -> tuple[derived.ParsedItem, ...]:
    """The select items, with unique output names; at least one aggregate (here or in HAVING)."""
    grouped = {column.name.lower() for column, (_, key) in zip(group_by, keyed) if key is None}
    keys = [(node, key) for node, key in keyed if key is not None]
    items = tuple(_parse_select_item(node, grouped, keys, scope, grouping) for node in select.expressions)
    if not any(derived.measures(item) for item in items) and not derived.having_measures(select):
        raise unsupported("a SELECT without COUNT, SUM or AVG", scope.span, scope,
                          "A list of groups is released with a count: SELECT k, COUNT(*) FROM t GROUP BY k (every "
                          "declared value of k is a group, so the list itself is public).")
    return _unique_aliases(items)


def _parse_select_item(node: exp.Expr, grouped: set[str], keys: list[tuple[exp.Expr, ir.GroupKey]],
                       scope: Scope, grouping: grouping_sets.Grouping) -> derived.ParsedItem:
    """A grouped column or key, an aggregate, GROUPING() (a constant of the grouping set), or
    arithmetic/a constant (``derived``), with its AS name or default name."""
    alias = node.alias if isinstance(node, exp.Alias) else None
    value = unparen(node.this if isinstance(node, exp.Alias) else node)
    span = node_span(node, scope)
    if isinstance(value, grouping_sets.GROUPING_CALLS):
        return ir.ConstantItem(value=grouping.value(value, scope), span=span,
                               alias=alias or " ".join(scope.source.text[span.start:span.end].split()))
    key = group_keys.select_key(value, keys, scope)
    if key is not None:
        return ir.GroupColumn(column=key.column, alias=alias or group_keys.default_name(value, scope), span=span,
                              key=key)
    if derived.is_output_expression(value):
        return derived.parse_output(value, alias, span, scope,
                                    lambda leaf: _parse_select_item(leaf, grouped, keys, scope, grouping))
    value, condition, scale = filters.unwrap_aggregate(value, scope)
    if isinstance(value, exp.Column) and isinstance(value.this, exp.Identifier):
        column = parse_column(value, scope, "in SELECT", SUPPORTED)
        if column.name.lower() not in grouped:
            raise unsupported(f"selecting column '{column.name}' without grouping by it", value, scope,
                              f"A row's value is never released: group by it (... GROUP BY {column.name}) or "
                              f"aggregate it (AVG({column.name}), MEDIAN({column.name})).")
        return ir.GroupColumn(column=column, alias=alias or column.name, span=span)
    special = parse_quantile(value, alias, span, scope) or parse_count_distinct(value, alias, span, scope)
    if special is not None:
        return special if condition is None else replace(special, filter=condition)
    function = _AGGREGATES.get(type(value))
    if function is None:
        described = _describe_item(value, scope)
        raise unsupported(described, value, scope, _ITEM_REWRITES.get(described.split(" ", 1)[0], SUPPORTED))
    argument = _parse_aggregate_argument(value, function, scope)
    default = _default_alias(function, argument)
    if type(value) in _SPELLED and argument is not None:
        default = f"{_SPELLED[type(value)]}_{argument.name}"
    return ir.Aggregate(function=function, column=argument, alias=alias or default, span=span, filter=condition,
                        scale=scale)


#: What to write instead of a select item that is neither a column nor an aggregate dpsql answers, by the first
#: word of its description.
_ITEM_REWRITES = {
    "SELECT": "Ask for aggregates: SELECT COUNT(*) FROM t, or SELECT k, COUNT(*), AVG(x) FROM t GROUP BY k; no row "
              "of the table is ever released.",
    "aggregate": _AGGREGATE_SUPPORTED + " Also MEDIAN, PERCENTILE_CONT/DISC, QUANTILE_CONT/DISC, MIN and MAX of an "
                                        "ordered column, and COUNT(DISTINCT <privacy unit column>).",
}


def _describe_item(value: exp.Expr, scope: Scope) -> str:
    """Name a select item that is neither a column nor COUNT/SUM/AVG."""
    if isinstance(value, exp.Star) or (isinstance(value, exp.Column) and isinstance(value.this, exp.Star)):
        return "SELECT *"
    described = describe(value, scope)
    return described if described.startswith("aggregate") else f"{described} in the SELECT list"


def _parse_aggregate_argument(node: exp.Expr, function: ir.AggregateFunction,
                              scope: Scope) -> ir.Column | None:
    """The column of COUNT(col), SUM(col) or AVG(col); None for COUNT(*)."""
    if isinstance(node, exp.Count) and node.expressions:
        raise unsupported("COUNT of several expressions", node, scope, _AGGREGATE_SUPPORTED)
    argument = node.this
    if function == "count" and isinstance(argument, exp.Star):
        if any(not is_empty(value) for value in argument.args.values()):
            raise unsupported("COUNT(* EXCLUDE/REPLACE ...)", node, scope, _AGGREGATE_SUPPORTED)
        return None
    if function == "count" and argument is not None and filters.constant_count_argument(node, scope):
        return None  # COUNT(1): every row has the constant, as COUNT(*) counts every row
    if argument is None:
        raise unsupported(f"{function.upper()}() without an argument", node, scope, _AGGREGATE_SUPPORTED)
    return parse_column(argument, scope, f"in {function.upper()}()", _AGGREGATE_SUPPORTED)


def _default_alias(function: ir.AggregateFunction, column: ir.Column | None) -> str:
    """``count`` for COUNT(*), else ``<function>_<column>``.

    >>> age = ir.Column(name="age", qualifier=None, span=ir.Span(line=1, column=1, start=0, end=3))
    >>> _default_alias("count", None), _default_alias("sum", age)
    ('count', 'sum_age')
    """
    return function if column is None else f"{function}_{column.name}"


def _unique_aliases(items: tuple[derived.ParsedItem, ...]) -> tuple[derived.ParsedItem, ...]:
    """Give a repeated output name (case-insensitively) the suffix ``_2``, ``_3``, ..."""
    taken: set[str] = set()
    result: list[derived.ParsedItem] = []
    for item in items:
        alias, suffix = item.alias, 2
        while alias.lower() in taken:
            alias, suffix = f"{item.alias}_{suffix}", suffix + 1
        taken.add(alias.lower())
        result.append(item if alias == item.alias else replace(item, alias=alias))
    return tuple(result)


# --------------------------------------------------------------------------------------------------
# ORDER BY and LIMIT


def _parse_order_by(select: exp.Select, items: tuple[derived.ParsedItem, ...], group_by: tuple[ir.Column, ...],
                    scope: Scope) -> tuple[ir.OrderItem, ...]:
    """ORDER BY output names or positions, each ASC (default) or DESC."""
    order = select.args.get("order")
    if order is None:
        return ()
    result = []
    for node in order.expressions:
        last = (token_range(node, scope.source) or (0, 0))[1]
        if scope.source.word(last - 1) == "NULLS" or node.args.get("with_fill"):
            raise unsupported("NULLS FIRST/LAST", node, scope, _ORDER_SUPPORTED)
        key = _order_key(node.this, select, items, group_by, scope)
        result.append(ir.OrderItem(key=key, descending=bool(node.args.get("desc")), span=node_span(node, scope)))
    return tuple(result)


def _order_key(node: exp.Expr, select: exp.Select, items: tuple[derived.ParsedItem, ...],
               group_by: tuple[ir.Column, ...], scope: Scope) -> str | int:
    """A 1-based position, or the output name a name or select expression refers to."""
    target = unparen(node)
    if isinstance(target, exp.Literal) and not target.is_string:
        if not target.this.isdigit() or not 1 <= int(target.this) <= len(items):
            raise invalid(f"ORDER BY position {target.this} is out of range", target, scope,
                          f"Use a position from 1 to {len(items)}.")
        return int(target.this)
    if isinstance(target, exp.Column) and isinstance(target.this, exp.Identifier):
        return _output_name(parse_column(target, scope, "in ORDER BY", _ORDER_SUPPORTED), items, group_by,
                            target, scope)
    for raw, item in zip(select.expressions, items):
        if unparen(raw.this if isinstance(raw, exp.Alias) else raw) == target:
            return item.alias
    raise unsupported(f"{describe(target, scope)} in ORDER BY", target, scope, _ORDER_SUPPORTED)


def _output_name(column: ir.Column, items: tuple[derived.ParsedItem, ...], group_by: tuple[ir.Column, ...],
                 node: exp.Expr, scope: Scope) -> str:
    """The output an ORDER BY name refers to, spelled as that output is.

    An output name (alias, or ``<aggregate alias>_stddev`` for the noise column dpsql adds beside each
    aggregate) comes first; then a selected group column by its column name.
    """
    name = column.name.lower()
    if column.qualifier is None:
        outputs = [item.alias for item in items] + [f"{item.alias}_stddev" for item in items
                                                    if derived.has_stddev(item)]
        outputs += [name for item in items if isinstance(item, ir.Aggregate) for name in output_names(item)]
        for output in outputs:
            if output.lower() == name:
                return output
    for item in items:
        if isinstance(item, ir.GroupColumn) and item.key is None and item.column.name.lower() == name:
            return item.alias
    if any(grouped.name.lower() == name for grouped in group_by):
        raise unsupported("ORDER BY a group column that is not selected", node, scope, _ORDER_SUPPORTED)
    names = ", ".join(item.alias for item in items)
    raise invalid(f"ORDER BY '{column.name}' names no output column", node, scope,
                  f"Use an output name ({names}, or <aggregate>_stddev) or a position from 1 to {len(items)}.")
