"""The catalog ``dpsql serve`` shows: PostgreSQL's ``pg_catalog`` and ``information_schema``, built
from the DECLARED schema only.

psql (``\\dt``, ``\\d census``, ``\\d+ census``, ``\\dn``, ``\\l``), psycopg, JDBC tools (DBeaver,
Metabase, Tableau), ADBC and pandas/SQLAlchemy ask the server about tables and columns with SQL
against ``pg_catalog.*`` and ``information_schema.*``, and with small queries without FROM
(``SELECT version()``, ``current_database()``). :func:`is_catalog_query` recognises those;
:class:`Catalog` answers them from an in-memory DuckDB database holding nothing but the public
declaration (:mod:`dpsql.server.catalog_relations`: declared tables and columns with their types,
domains in words as column comments, privacy units as table comments; no row counts or sizes).

Privacy: nothing here reads the private data; the catalog database is built from the schema (the
same public declaration every analyst already sees in error messages), so any answer is a function
of the schema alone and costs no budget. Defence in depth: it is a separate in-memory DuckDB with
external access disabled, extension loading off and its configuration locked, so even a query that
slipped past :func:`is_catalog_query` can read no file and attach no database. The user's text is
never run: it is parsed (sqlglot, PostgreSQL dialect), every relation is mapped to the emulated
catalog (schemas ``dpsql_pg_catalog`` and ``dpsql_information_schema``), PostgreSQL-only syntax is
rewritten (``OPERATOR(pg_catalog.~)``, ``COLLATE pg_catalog.default``, ``::regclass`` and other reg*
casts, ``pg_catalog.f(...)``, functions DuckDB lacks -> macros ``dpsql_<name>``), and DuckDB SQL is
generated from the tree; result columns are named as PostgreSQL names them.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

import dpsql
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.schema import Schema
from dpsql.server.catalog_relations import (
    EMULATED,
    HIDDEN_RELATIONS,
    INFO,
    INFO_RELATIONS,
    MACROS,
    PG,
    PG_RELATIONS,
    SERVER_VERSION,
    catalog_rows,
)

#: Seconds one catalog query may run before it is interrupted.
DEFAULT_TIMEOUT = 5.0

#: PostgreSQL type names in casts -> DuckDB types.
_CAST_TYPES = {
    "text": "VARCHAR", "varchar": "VARCHAR", "name": "VARCHAR", "char": "VARCHAR", "bpchar": "VARCHAR",
    "int2": "SMALLINT", "int4": "INTEGER", "int8": "BIGINT", "oid": "BIGINT", "xid": "BIGINT", "bool": "BOOLEAN",
    "float4": "REAL", "float8": "DOUBLE", "numeric": "DOUBLE", "int2vector": "VARCHAR", "oidvector": "VARCHAR",
    "date": "DATE", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ",
}
#: Casts to reg* types: a name (string literal) -> its oid; an oid -> its name.
_REG_CASTS = {"regclass": "regclass", "regtype": "regtype", "regnamespace": "regnamespace", "regproc": "regproc",
              "regprocedure": "regproc", "regrole": "regrole"}



#: PostgreSQL function name -> the macro answering it (to_regtype and friends are the reg*_oid lookups).
_FUNCTIONS = {name: f"dpsql_{name}" for name in MACROS if not name.startswith("reg")} | {
    "to_regclass": "dpsql_regclass_oid", "to_regtype": "dpsql_regtype_oid",
    "to_regnamespace": "dpsql_regnamespace_oid", "to_regrole": "dpsql_regrole_oid"}
#: Table functions a catalog query may use in FROM (sqlglot's names for them).
_TABLE_FUNCTIONS = (exp.ExplodingGenerateSeries, exp.GenerateSeries, exp.Explode, exp.Unnest)
#: DuckDB functions never allowed (files, settings, the DuckDB catalog), by name prefix.
_FORBIDDEN_FUNCTIONS = ("read_", "duckdb_", "pragma_", "glob", "query", "sniff", "parquet", "getenv", "set_config",
                        "pg_read", "pg_ls", "pg_stat", "lo_", "dblink", "setseed", "which_secret",
                        "pg_sleep", "json_execute", "iceberg", "delta_scan", "sqlite", "postgres_", "mysql_")
#: Statement kinds that are never catalog queries (data changes, definitions, settings, files).
_FORBIDDEN_NODES: tuple[type[exp.Expr], ...] = tuple(
    getattr(exp, name) for name in (
        "Into", "Insert", "Update", "Delete", "Create", "Drop", "Command", "Set", "Copy", "Pragma", "Alter",
        "Merge", "Attach", "Detach", "Use", "Install", "Transaction", "Commit", "Rollback", "Describe", "Show",
        "Kill", "LoadData", "Grant", "Revoke", "Comment", "TruncateTable", "Analyze", "Lock")
    if hasattr(exp, name))

_SUPPORTED = ("Catalog queries are single SELECTs reading pg_catalog (pg_class, pg_namespace, pg_attribute, pg_type, "
              "pg_database, ...) and information_schema (tables, columns, schemata, ...), or SELECTs without FROM "
              "such as SELECT version(), current_database(), current_user.")


# ==================================================================================== recognising catalog queries
def _function_name(node: exp.Func) -> str:
    return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()


def _ancestors(node: exp.Expr) -> Iterator[exp.Expr]:
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def _cte_in_scope(table: exp.Table) -> bool:
    """Whether the unqualified ``table`` names a CTE visible where it stands: without RECURSIVE, a
    CTE's body sees only the CTEs before it (its own name there is the outer relation)."""
    name = table.name.lower()
    for parent in _ancestors(table):
        with_ = parent.args.get("with_") or parent.args.get("with")
        if not isinstance(with_, exp.With):
            continue
        recursive = bool(with_.args.get("recursive"))
        for cte in with_.expressions:
            inside = any(ancestor is cte for ancestor in _ancestors(table))
            if cte.alias_or_name.lower() == name and (recursive or not inside):
                return True
            if inside and not recursive:
                break
    return False


def _catalog_relation(table: exp.Table, private_tables: Collection[str]) -> bool:
    """Whether ``table`` is a catalog relation: schema pg_catalog or information_schema, or an
    unqualified pg_* name that is no declared table, or a CTE in scope."""
    if not isinstance(table.this, exp.Identifier) or table.args.get("catalog"):
        return False
    schema, name = table.db.lower(), table.name.lower()
    if schema:
        return schema in (PG, INFO)
    if _cte_in_scope(table):
        return True
    return name.startswith("pg_") and name not in private_tables


def _allowed_table(table: exp.Table, private_tables: Collection[str]) -> bool:
    if isinstance(table.this, _TABLE_FUNCTIONS):
        return table.db.lower() in ("", PG) and not table.args.get("catalog")
    return _catalog_relation(table, private_tables)


def _parse_one(sql: str) -> exp.Expr | None:
    """The single statement of ``sql`` (PostgreSQL dialect), or None for anything else."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="postgres") if s is not None]
    except (sqlglot.errors.SqlglotError, ValueError, TypeError, RecursionError):
        return None
    return statements[0] if len(statements) == 1 else None


def _catalog_tree(tree: exp.Expr | None, private_tables: Collection[str]) -> bool:
    if not isinstance(tree, exp.Query) or tree.find(*_FORBIDDEN_NODES) is not None:
        return False
    if not all(_allowed_table(table, private_tables) for table in tree.find_all(exp.Table)):
        return False
    return not any(_function_name(f).startswith(_FORBIDDEN_FUNCTIONS) for f in tree.find_all(exp.Func))


def is_catalog_query(sql: str, private_tables: Collection[str] = ()) -> bool:
    """Whether ``sql`` is one catalog query: a SELECT whose every relation (subqueries and CTEs
    included) is in pg_catalog or information_schema (or an unqualified pg_* name that is not in
    ``private_tables``), with no table function but generate_series/unnest, no file or settings
    function and no DDL/DML/INTO; a SELECT without FROM (``SELECT version()``, ``SELECT 1``) is
    one. Anything mixing in another table is not (the caller then treats it as a private query).
    Never raises: text that does not parse is not a catalog query."""
    try:
        return _catalog_tree(_parse_one(sql), {name.lower() for name in private_tables})
    except (sqlglot.errors.SqlglotError, ValueError, TypeError, RecursionError, AttributeError):
        return False


# ==================================================================================== rewriting to DuckDB
@dataclass(frozen=True, slots=True)
class _Session:
    """What a no-FROM function reports: the analyst and the dataset."""

    user: str
    database: str


def _fail(message: str) -> NotSupportedError:
    return NotSupportedError(f"{message} {_SUPPORTED}")


def _string(value: str) -> exp.Expr:
    return exp.Literal.string(value)


def _macro(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=list(args))


def _bind(tree: exp.Expr, params: Sequence[object]) -> exp.Expr:
    """Replace $n / %s / ? placeholders by literals of ``params`` (in order for positional ones)."""
    position = iter(range(len(params)))

    def value(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Parameter) and node.this is not None and node.this.is_int:
            index = int(node.this.name) - 1
        elif isinstance(node, exp.Placeholder) and node.this is None:
            index = next(position, len(params))
        elif isinstance(node, (exp.Parameter, exp.Placeholder)):
            raise ProgrammingError(f"the catalog query has the named parameter {node.sql()}; the server binds "
                                   "positional parameters ($1, $2, ...) only.")
        else:
            return node
        if not 0 <= index < len(params):
            raise ProgrammingError(f"the catalog query has a parameter ${index + 1} but {len(params)} value(s) "
                                   "were bound; bind one value per parameter.")
        return _literal(params[index])

    return tree.transform(value)


def _literal(value: object) -> exp.Expr:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return exp.Literal.number(value)
    if isinstance(value, (str, dt.date)):
        return _string(str(value))
    if isinstance(value, (list, tuple)):
        return exp.Array(expressions=[_literal(v) for v in value])
    raise ProgrammingError("a catalog query parameter must be NULL, a boolean, number, string, date or a list of "
                           f"them; got a {type(value).__name__}.")


_OPERATORS: dict[str, Callable[[exp.Expr, exp.Expr], exp.Expr]] = {
    "~": lambda a, b: exp.RegexpLike(this=a, expression=b),
    "~*": lambda a, b: exp.RegexpILike(this=a, expression=b),
    "!~": lambda a, b: exp.Not(this=exp.RegexpLike(this=a, expression=b)),
    "!~*": lambda a, b: exp.Not(this=exp.RegexpILike(this=a, expression=b)),
    "~~": lambda a, b: exp.Like(this=a, expression=b),
    "~~*": lambda a, b: exp.ILike(this=a, expression=b),
    "!~~": lambda a, b: exp.Not(this=exp.Like(this=a, expression=b)),
    "=": lambda a, b: exp.EQ(this=a, expression=b),
    "<>": lambda a, b: exp.NEQ(this=a, expression=b),
    "<": lambda a, b: exp.LT(this=a, expression=b),
    "<=": lambda a, b: exp.LTE(this=a, expression=b),
    ">": lambda a, b: exp.GT(this=a, expression=b),
    ">=": lambda a, b: exp.GTE(this=a, expression=b),
    "||": lambda a, b: exp.DPipe(this=a, expression=b),
}


def _rewrite(node: exp.Expr, session: _Session) -> exp.Expr:
    """The catalog query as DuckDB over the emulated relations (see the module docstring): every
    node's children first, then the node (so a replaced node's arguments are rewritten too)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expr):
            node.set(key, _rewrite(value, session))
        elif isinstance(value, list):
            node.set(key, [_rewrite(v, session) if isinstance(v, exp.Expr) else v for v in value])
    return _rewrite_node(node, session)


def _rewrite_node(node: exp.Expr, session: _Session) -> exp.Expr:
    if isinstance(node, exp.Table):
        return _rewrite_table(node)
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and node.this.name.lower() in (PG, INFO):
        return node.expression  # pg_catalog.f(...) -> f(...), already rewritten
    if isinstance(node, exp.Collate):
        return node.this  # COLLATE pg_catalog.default / "C": DuckDB compares bytes like C
    if isinstance(node, exp.Operator):
        return _rewrite_operator(node)
    if isinstance(node, exp.Cast):
        return _rewrite_cast(node)
    if isinstance(node, exp.Column) and node.db.lower() in (PG, INFO):
        node.set("db", None)  # pg_catalog.pg_class.relname -> pg_class.relname (the emulated table keeps its name)
        node.set("catalog", None)
        return node
    if isinstance(node, exp.Column) and not node.table and node.name.lower() in ("user", "current_role") \
            and not node.this.quoted:
        return _string(session.user)
    if isinstance(node, exp.Func):
        return _rewrite_function(node, session)
    if isinstance(node, (exp.EQ, exp.NEQ)):
        return _regproc_zero(node)
    return node


#: Columns of type regproc (kept as the function's name; 0 shows as '-').
_REGPROC_COLUMNS = frozenset({"typinput", "typoutput", "typreceive", "typsend", "typmodin", "typmodout", "typanalyze",
                              "typsubscript", "amhandler", "prosupport", "rngcanonical", "rngsubdiff"})


def _regproc_zero(node: exp.EQ | exp.NEQ) -> exp.Expr:
    """``typreceive != 0``: a regproc compared with oid 0 is compared with '-', its name for none."""
    for column, other in ((node.this, node.expression), (node.expression, node.this)):
        if isinstance(column, exp.Column) and column.name.lower() in _REGPROC_COLUMNS and \
                isinstance(other, exp.Literal) and not other.is_string and other.name == "0":
            other.replace(_string("-"))
    return node


def _rewrite_table(table: exp.Table) -> exp.Expr:
    if isinstance(table.this, _TABLE_FUNCTIONS):
        table.set("db", None)
        alias = table.args.get("alias")
        if isinstance(alias, exp.TableAlias) and alias.this is not None and not alias.columns:
            alias.set("columns", [exp.to_identifier(alias.name)])  # FROM unnest(a) x: x names the column too
        return table
    schema, name = table.db.lower(), table.name.lower()
    if not schema and (not name.startswith("pg_") or _cte_in_scope(table)):
        return table  # a CTE in scope (is_catalog_query admitted nothing else)
    schema = schema or PG
    known = PG_RELATIONS if schema == PG else INFO_RELATIONS
    if name not in known:
        raise _fail(f"{schema}.{name} is not provided by dpsql's catalog; provided in {schema}: "
                    f"{', '.join(sorted(known))}.")
    table.set("db", exp.to_identifier(EMULATED[schema]))
    table.set("this", exp.to_identifier(name))
    if not table.alias:
        table.set("alias", exp.TableAlias(this=exp.to_identifier(name)))  # pg_catalog.pg_class.oid still resolves
    return table


def _rewrite_operator(node: exp.Operator) -> exp.Expr:
    operator = str(node.args.get("operator", "")).lower().replace(" ", "")
    operator = operator.removeprefix("pg_catalog.")
    build = _OPERATORS.get(operator)
    if build is None:
        raise _fail(f"OPERATOR({node.args.get('operator')}) is not supported in catalog queries.")
    return build(node.this, node.expression)


def _type_name(to: exp.Expr) -> str | None:
    """The PostgreSQL name of a cast's target type when sqlglot leaves it user-defined or OID-like."""
    if isinstance(to, exp.ObjectIdentifier):
        return to.name.lower()
    if isinstance(to, exp.DataType):
        if to.this == exp.DataType.Type.USERDEFINED:
            kind = to.args.get("kind")
            if isinstance(kind, exp.Dot):
                return kind.expression.name.lower() if kind.this.name.lower() == PG else f"?{kind.sql()}"
            return kind.name.lower() if kind is not None else None
        if to.this == exp.DataType.Type.NAME:
            return "name"
    return None


def _rewrite_cast(node: exp.Cast) -> exp.Expr:
    to = node.args["to"]
    if isinstance(to, exp.DataType) and to.this == exp.DataType.Type.ARRAY and to.expressions:
        element = _type_name(to.expressions[0])
        if element is not None:
            node.set("to", exp.DataType.build(f"{_duck_type(element)}[]", dialect="duckdb"))
        return node
    name = _type_name(to)
    if name is None:
        return node
    if name in _REG_CASTS:
        kind = _REG_CASTS[name]
        value = node.this
        if _is_name(value):
            return _macro(f"dpsql_{kind}_oid", value)
        return _macro(f"dpsql_{kind}_name", exp.cast(value, exp.DataType.build("BIGINT")))
    node.set("to", exp.DataType.build(_duck_type(name), dialect="duckdb"))
    return node


def _is_name(value: exp.Expr) -> bool:
    """Whether a reg* cast's argument is a name ('census', 'public.' || t) rather than an oid."""
    while isinstance(value, exp.Paren):
        value = value.this
    if isinstance(value, exp.Literal):
        return value.is_string and not value.name.isdigit()
    return isinstance(value, (exp.DPipe, exp.Concat, exp.Lower, exp.Upper, exp.Trim))


def _duck_type(name: str) -> str:
    found = _CAST_TYPES.get(name)
    if found is None:
        raise _fail(f"casts to {name.lstrip('?')} are not supported in catalog queries.")
    return found


def _rewrite_function(node: exp.Func, session: _Session) -> exp.Expr:
    name = _function_name(node)
    if isinstance(node, (exp.CurrentUser, exp.SessionUser)) or name in ("current_user", "session_user", "user"):
        return _string(session.user)
    if isinstance(node, (exp.CurrentDatabase, exp.CurrentCatalog)) or name in ("current_database", "current_catalog"):
        return _string(session.database)
    if isinstance(node, exp.CurrentSchema) or name == "current_schema":
        return _string("public")
    if isinstance(node, exp.CurrentVersion) or name == "version":
        return _string(version_string())
    if name == "current_schemas":
        return exp.Array(expressions=[_string(PG), _string("public")])
    if name.startswith(_FORBIDDEN_FUNCTIONS):
        raise _fail(f"the function {name}() is not available in catalog queries.")
    macro = _FUNCTIONS.get(name)
    if macro is not None:
        return _macro(macro, *node.args.get("expressions", []) or [a for a in node.args.values()
                                                                   if isinstance(a, exp.Expr)])
    return node


_NAMED_FUNCTIONS: dict[type[exp.Expr], str] = {
    exp.CurrentUser: "current_user", exp.SessionUser: "session_user", exp.CurrentDatabase: "current_database",
    exp.CurrentCatalog: "current_catalog", exp.CurrentSchema: "current_schema", exp.CurrentVersion: "version",
    exp.Exists: "exists", exp.Array: "array", exp.Coalesce: "coalesce", exp.Nullif: "nullif",
    exp.Greatest: "greatest", exp.Least: "least"}


def _output_select(tree: exp.Expr) -> exp.Select | None:
    """The SELECT whose expressions name the result's columns (a set operation's leftmost)."""
    while isinstance(tree, (exp.SetOperation, exp.Subquery)):
        tree = tree.this
    return tree if isinstance(tree, exp.Select) else None


def _pg_name(node: exp.Expr) -> str | None:
    """The column name PostgreSQL gives an unaliased select expression (None: keep the alias or star)."""
    if isinstance(node, exp.Alias):
        identifier = node.args.get("alias")
        quoted = isinstance(identifier, exp.Identifier) and identifier.quoted
        return node.alias if quoted else node.alias.lower()  # AS TABLE_CAT is table_cat in PostgreSQL
    if isinstance(node, exp.Star) or isinstance(node.this, exp.Star):
        return None
    return _figure_name(node)[0]


def _figure_name(node: exp.Expr) -> tuple[str, int]:
    """PostgreSQL's FigureColname (parser/parse_target.c): a name and its strength, 2 for column and
    function names, 1 for a cast's type or "case", 0 for "?column?"; casts and CASE pass on a
    strong name of their argument (a CASE: of its ELSE)."""
    if isinstance(node, exp.Column):
        quoted = isinstance(node.this, exp.Identifier) and node.this.quoted
        return (node.name if quoted else node.name.lower()), 2  # unquoted names fold to lower case
    if isinstance(node, exp.Dot):
        return _figure_name(node.expression)
    if isinstance(node, exp.Cast):
        inner = _figure_name(node.this)
        to = node.args["to"]
        return inner if inner[1] > 1 else (_type_name(to) or _internal_type_name(to), 1)
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        inner = _figure_name(default) if isinstance(default, exp.Expr) else ("?column?", 0)
        return inner if inner[1] > 1 else ("case", 1)
    if isinstance(node, exp.Subquery):
        select = _output_select(node.this)
        first = select.expressions[0] if select is not None and select.expressions else None
        return (first.alias_or_name, 2) if isinstance(first, exp.Alias) else \
            _figure_name(first) if first is not None else ("?column?", 0)
    named = next((name for kind, name in _NAMED_FUNCTIONS.items() if isinstance(node, kind)), None)
    if named is not None:
        return named, 2
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Binary, exp.Not, exp.Paren)):
        return _function_name(node), 2
    return "?column?", 0


#: PostgreSQL's internal names of the SQL type names (``1::bigint`` is a column named int8).
_INTERNAL_NAMES = {"bigint": "int8", "int": "int4", "integer": "int4", "smallint": "int2", "double": "float8",
                   "double precision": "float8", "real": "float4", "float": "float8", "boolean": "bool",
                   "char": "bpchar", "decimal": "numeric"}


def _internal_type_name(to: exp.Expr) -> str:
    written = to.sql(dialect="postgres").lower().split("(")[0]
    return _INTERNAL_NAMES.get(written, written)


def _name_columns(tree: exp.Expr, names: Sequence[str | None]) -> None:
    """Alias the output select's expressions with PostgreSQL's column names."""
    select = _output_select(tree)
    if select is None:
        return
    select.set("expressions", [expression if name is None else
                               exp.alias_(expression.unalias() if isinstance(expression, exp.Alias) else expression,
                                          name, quoted=True)
                               for expression, name in zip(select.expressions, names, strict=True)])


def _duckdb_sql(tree: exp.Expr, session: _Session) -> str:
    """The DuckDB text of a bound catalog query: rewritten, its columns named as PostgreSQL would."""
    select = _output_select(tree)
    names = [] if select is None else [_pg_name(expression) for expression in select.expressions]
    rewritten = _rewrite(tree, session)
    _name_columns(rewritten, names)
    return rewritten.sql(dialect="duckdb")


def version_string() -> str:
    """What ``SELECT version()`` returns: clients read the leading "PostgreSQL N"."""
    return f"PostgreSQL {SERVER_VERSION} (dpsql {dpsql.__version__} differential privacy server)"


class Catalog:
    """The declared schema as PostgreSQL's catalog, answering catalog queries without the data.

    Thread safety: one locked-down in-memory DuckDB database; every :meth:`answer` runs on its own
    ``cursor()`` (DuckDB cursors are independent connections to the same database), so calls from
    many threads run concurrently. Each query is interrupted after ``timeout`` seconds.
    """

    def __init__(self, schema: Schema, database: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.schema = schema
        self.database = database
        self.timeout = timeout
        self._private = frozenset(schema.tables) | frozenset(schema.public)
        self._connection = _build(schema, database)

    def is_catalog_query(self, sql: str) -> bool:
        """:func:`is_catalog_query` knowing the declared table names (an unqualified pg_* name that is
        a declared table is the table)."""
        return is_catalog_query(sql, self._private)

    def answer(self, sql: str, *, user: str, params: Sequence[object] = ()) -> pa.Table:
        """The catalog query ``sql`` answered from the declared schema, as an Arrow table.

        ``user`` is the authenticated analyst (``current_user``); ``params`` bind $1.. placeholders.
        Raises NotSupportedError for a query that is no catalog query or asks for a relation,
        function or cast the catalog does not provide, ProgrammingError when DuckDB rejects it.
        """
        tree = _parse_one(sql)
        if tree is None or not _catalog_tree(tree, self._private):
            raise _fail("This statement is not a catalog query (it reads a declared table, changes something or "
                        "is not one SELECT).")
        try:
            duck = _duckdb_sql(_bind(tree, params), _Session(user=user, database=self.database))
        except RecursionError:
            raise ProgrammingError("the catalog query is nested too deeply to translate; simplify it.") from None
        return self._run(duck)

    def _run(self, duck: str) -> pa.Table:
        cursor = self._connection.cursor()
        timer = threading.Timer(self.timeout, cursor.interrupt)
        timer.start()
        try:
            return cursor.sql(duck).to_arrow_table()
        except duckdb.InterruptException:
            raise ProgrammingError(f"the catalog query ran longer than {self.timeout:g} s and was stopped; "
                                   "ask for fewer rows.") from None
        except duckdb.Error as err:
            raise ProgrammingError(f"the catalog query failed: {str(err).splitlines()[0]}. {_SUPPORTED}") from None
        finally:
            timer.cancel()
            cursor.close()


def _build(schema: Schema, database: str) -> duckdb.DuckDBPyConnection:
    """The catalog database: emulated relations filled from the schema, macros, then locked."""
    connection = duckdb.connect(":memory:", config={
        "enable_external_access": False, "autoload_known_extensions": False, "autoinstall_known_extensions": False,
        "allow_community_extensions": False, "threads": 1, "memory_limit": "256MB", "lock_configuration": True})
    relations = {(EMULATED[PG], name): spec for name, spec in PG_RELATIONS.items()}
    relations |= {(EMULATED[INFO], name): spec for name, spec in INFO_RELATIONS.items()}
    relations |= {(EMULATED[PG], name): spec for name, spec in HIDDEN_RELATIONS.items()}
    for namespace in EMULATED.values():
        connection.execute(f"CREATE SCHEMA {namespace}")
    for (namespace, name), spec in relations.items():
        connection.execute(f"CREATE TABLE {namespace}.{name} ({spec})")
    batches: dict[tuple[str, str, tuple[str, ...]], list[list[Any]]] = {}
    for namespace, name, row in catalog_rows(schema, database):
        batches.setdefault((namespace, name, tuple(row)), []).append(list(row.values()))
    for (namespace, name, columns), values in batches.items():
        marks = ", ".join("?" for _ in columns)
        connection.executemany(f"INSERT INTO {namespace}.{name} ({', '.join(columns)}) VALUES ({marks})", values)
    for name, body in MACROS.items():
        connection.execute(f"CREATE MACRO dpsql_{name}{body}")
    return connection
