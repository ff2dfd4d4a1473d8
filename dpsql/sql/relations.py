"""A private table joined to its privacy unit's table, as one relation a batch is answered over.

The schema declares ``tables.visits.privacy_unit = { column = "person_id", max_rows = k, table =
"people" }`` where ``people`` has ``privacy_unit = { column = "person_id", max_rows = 1 }`` (one row
per unit). ``FROM visits v [LEFT] JOIN people p USING (person_id)`` (or ``ON v.person_id =
p.person_id``; ``people JOIN visits`` is the same INNER join) is then the relation whose rows are the
rows of ``visits`` extended with the columns of their person's row: an INNER JOIN drops visits
without a person, a LEFT JOIN keeps them with NULL person columns (their outside cells). Its
columns are the declared columns of both tables (a name both declare is known as
``<table>.<name>`` and must be qualified in the SQL); its privacy unit is ``visits.person_id``
with ``max_rows = k``, so the engine's per-unit cap (``dpsql.backends.cell_sql``: at most k rows
per unit, chosen by a salted hash of each row's values) is applied AFTER the join, to the joined
rows. The join itself is generated from this declaration, never from the SQL text, whose ON/USING
must name the declared key. A column declared ``out_of_domain = "exclude"`` filters joined rows
(so under LEFT JOIN an excluded column of ``people`` also drops the visits without a person): a
public filter of each row, which changes no bound below.

Sensitivity (the same bound as for any table with a privacy unit). Neighbouring databases differ
in one person u: u's row of ``people`` and all of u's rows of ``visits`` are added or removed.
A joined row holds one visit and the people rows of that visit's unit, so only joined rows whose
unit is u change; the cap keeps at most k rows of each unit, chosen from that unit's own rows
only, so at most k capped rows change. Every cell-data vector is a sum over capped rows (one count
per row, a SUM value clamped to its measure bounds per row), so it changes by at most k in L1
(counts) and by at most k·max|bound| per summed column: the sensitivity the noise is calibrated
to. This does not rely on ``people`` really holding one row per unit: if the data broke that
declaration, a visit would join several people rows, but they all carry the visit's unit, and the
cap still keeps at most k joined rows per unit (the declaration ``max_rows = 1`` on the unit table
bounds statements over ``people`` alone). A join between private tables that do not share the
unit, a self-join, or a join on any other condition would let one person's rows meet an
unbounded number of rows of other people, so those are refused.

Privacy: answering a batch over the relation is an exact rewrite to cells of that relation (the
same measurement, the same cost as a table with this privacy unit); nothing here reads data.
"""

from __future__ import annotations

from dataclasses import replace

from dpsql import schema as sch
from dpsql.errors import InvalidQueryError, SchemaError, UnsupportedQueryError
from dpsql.sql import ir

__all__ = ["explain_join", "joined_relation", "resolve"]

_UNBOUNDED = ("one person's rows could be matched to any number of other rows, so no contribution bound (and no "
              "sensitivity) holds")


def joined_relation(batch: ir.Batch, schema: sch.Schema) -> sch.Table | None:
    """The relation of a batch whose statements join a table to its unit table; None when no statement joins.

    Raises:
        UnsupportedQueryError: statements over different relations (e.g. ``people`` alone beside ``visits JOIN
            people``), a self-join, tables that do not share a declared privacy unit, a RIGHT-side fact table
            under LEFT JOIN, or an ON/USING that is not the declared key.
        SchemaError: a table is not declared.
        InvalidQueryError: (later, by :func:`resolve`) a bare column both tables declare.
    """
    joined = [statement for statement in batch.statements if statement.joins]
    if not joined:
        return None
    relation = _relation(joined[0], schema)
    for statement in batch.statements:
        reads = _relation(statement, schema).name if statement.joins else statement.table.lower()
        if reads != relation.name:
            raise UnsupportedQueryError(
                f"a batch must query one relation; the statement at {statement.span.describe()} reads '{reads}' and "
                f"the one at {joined[0].span.describe()} reads '{relation.name}'. Their rows and per-unit caps "
                "differ: send one batch per relation."
            )
    for statement in joined:
        _check_key(statement, relation)
    return relation


def resolve(relation: sch.Table, column: ir.Column) -> sch.Column:
    """The relation's column a (possibly qualified) column reference names.

    Raises:
        SchemaError: the table it names (or neither table) declares no such column.
        InvalidQueryError: a bare name both tables declare.
    """
    join = relation.join
    assert join is not None
    name, where = column.name.lower(), column.span.describe()
    if column.qualified_table is not None:
        member = join.fact if column.qualified_table.lower() == join.fact.name else join.unit
        found = _relation_name(relation, member.name, name)
        if found is None:
            member.column(column.name, where)  # raises: not declared in that table
            raise SchemaError(f"Column '{column.name}' ({where}) is the key of table '{member.name}'; declare it as "
                              f"a column of table '{join.fact.name}' to use it.")
        return relation.columns[found]
    matches = sorted({found for member in (join.fact, join.unit)
                      if (found := _relation_name(relation, member.name, name)) is not None})
    if len(matches) > 1:
        raise InvalidQueryError(f"Column '{column.name}' ({where}) is ambiguous: both table '{join.fact.name}' and "
                                f"table '{join.unit.name}' declare it. Qualify it: {join.fact.name}.{column.name} or "
                                f"{join.unit.name}.{column.name} (or the tables' aliases).")
    if not matches:
        declared = ", ".join(sorted(relation.columns)) or "none"
        raise SchemaError(f"Column '{column.name}' is not in the schema of table '{join.fact.name}' nor of table "
                          f"'{join.unit.name}' ({where}). Declared columns: {declared}. Declare its domain in the "
                          "schema or drop it from the query.")
    return relation.columns[matches[0]]


def explain_join(table: sch.Table) -> list[str]:
    """EXPLAIN's line on a joined relation (none for a declared table): the join and the cap after it."""
    join = table.join
    if join is None:
        return []
    fact_key, unit_key = join.fact.privacy_unit.column, join.unit.privacy_unit.column
    kept = "; its rows without one are kept with NULL" if join.outer else "; its rows without one are dropped"
    return [f"Join: each row of '{join.fact.name}' extended with the '{join.unit.name}' row of its unit "
            f"({join.fact.name}.{fact_key} = {join.unit.name}.{unit_key}, generated from the schema){kept} "
            f"'{join.unit.name}' columns. At most {table.privacy_unit.max_rows} joined rows per unit are kept (the cap "
            "after the join), so one unit changes each count by at most that many rows."]


# ==================================================================================== the relation
def _relation(statement: ir.Statement, schema: sch.Schema) -> sch.Table:
    """The relation of ``FROM a JOIN b``: which table is the fact and which the unit table, from the schema."""
    join = statement.joins[0]
    left = schema.table(statement.table, (statement.table_span or statement.span).describe())
    where = join.span.describe()
    if join.table.lower() not in schema.tables:
        raise SchemaError(f"JOIN {join.table} ({where}): '{join.table}' is neither a table of the schema nor a public "
                          f"table (declared tables: {', '.join(sorted(schema.tables))}; public tables: "
                          f"{', '.join(sorted(schema.public)) or 'none'}). Declare a lookup table with [tables.<name>] "
                          "public = true, columns and rows, or a table with rows per person with privacy_unit.table.")
    right = schema.table(join.table, join.table_span.describe())
    if left.name == right.name:
        raise UnsupportedQueryError(f"a self-join of '{left.name}' ({where}) is not supported: each row would be "
                                    f"paired with other rows of the same table, and {_UNBOUNDED}. Ask each "
                                    "condition of the pair as a statement of its own, over the one table.")
    if left.privacy_unit.table == right.name:
        return _build(left, right, outer=join.kind == "left")
    if right.privacy_unit.table == left.name:
        if join.kind == "left":
            raise UnsupportedQueryError(
                f"'{left.name}' LEFT JOIN '{right.name}' ({where}) would keep the units without a row of "
                f"'{right.name}', whose rows are the ones capped per unit. Write FROM {right.name} LEFT JOIN "
                f"{left.name} (or an INNER JOIN in either order).")
        return _build(right, left, outer=False)
    if left.privacy_unit.table is not None and left.privacy_unit.table == right.privacy_unit.table:
        raise UnsupportedQueryError(
            f"a join between '{left.name}' and '{right.name}' ({where}) is not supported: both hold many rows per unit "
            f"of '{left.privacy_unit.table}', and the join would pair each of a unit's rows in one with each of its "
            f"rows in the other. Join each of them to '{left.privacy_unit.table}', in separate batches.")
    raise UnsupportedQueryError(
        f"a join between '{left.name}' and '{right.name}' ({where}) is not supported: they do not share a declared "
        f"privacy unit, and {_UNBOUNDED}. If each row of one belongs to a unit of the other (one row per unit), "
        f'declare it: tables.<table>.privacy_unit = {{ column = "<key>", max_rows = N, table = "<unit table>" }}.'
    )


def _build(fact: sch.Table, unit: sch.Table, *, outer: bool) -> sch.Table:
    """The relation's columns (a name both tables declare becomes ``<table>.<name>``), its unit and its join."""
    fact_key, unit_key = fact.privacy_unit.column, unit.privacy_unit.column
    assert fact_key is not None and unit_key is not None  # checked when the schema was loaded
    unit_columns = {name: column for name, column in unit.columns.items() if name != unit_key}  # = the fact's key
    shared = (set(fact.columns) | {fact_key}) & set(unit_columns)
    columns: dict[str, sch.Column] = {}
    sources: dict[str, tuple[str, str]] = {}
    for member, declared in ((fact, fact.columns), (unit, unit_columns)):
        for name, column in declared.items():
            key = f"{member.name}.{name}" if name in shared else name
            columns[key] = replace(column, name=key)
            sources[key] = (member.name, name)
    unit_name = f"{fact.name}.{fact_key}" if fact_key in shared else fact_key
    sources.setdefault(unit_name, (fact.name, fact_key))
    kind = "LEFT JOIN" if outer else "JOIN"
    return sch.Table(name=f"{fact.name} {kind} {unit.name}", columns=columns,
                     privacy_unit=sch.PrivacyUnit(column=unit_name, max_rows=fact.privacy_unit.max_rows),
                     join=sch.UnitJoin(fact=fact, unit=unit, outer=outer, sources=sources))


def _relation_name(relation: sch.Table, table: str, name: str) -> str | None:
    """The relation's column read from ``table``'s column ``name`` (the unit table's key is the fact's key)."""
    join = relation.join
    assert join is not None
    if table == join.unit.name and name == join.unit.privacy_unit.column:
        table, name = join.fact.name, join.fact.privacy_unit.column or name
    found = next((key for key, source in join.sources.items() if source == (table, name)), None)
    return found if found in relation.columns else None


# ==================================================================================== the key
def _check_key(statement: ir.Statement, relation: sch.Table) -> None:
    """The statement's USING/ON names exactly the declared key pair (fact key = unit key)."""
    join, declared = statement.joins[0], relation.join
    assert declared is not None
    fact_key, unit_key = declared.fact.privacy_unit.column, declared.unit.privacy_unit.column
    pair = {(declared.fact.name, fact_key), (declared.unit.name, unit_key)}
    if join.using:
        found = {(declared.fact.name, join.using[0].lower()), (declared.unit.name, join.using[0].lower())}
        text = f"USING ({join.using[0]})"
    else:
        found = {_key_side(column, relation) for column in join.on}
        text = "ON " + " = ".join(f"{c.qualifier + '.' if c.qualifier else ''}{c.name}" for c in join.on)
    if found != pair:
        spelled = f"USING ({fact_key})" if fact_key == unit_key else \
            f"ON {declared.fact.name}.{fact_key} = {declared.unit.name}.{unit_key}"
        raise UnsupportedQueryError(
            f"the join condition {text} ({join.span.describe()}) is not the declared key: "
            f"tables.{declared.fact.name}.privacy_unit joins {declared.fact.name}.{fact_key} to "
            f"{declared.unit.name}.{unit_key}, and on any other columns {_UNBOUNDED}. Write {spelled}."
        )


def _key_side(column: ir.Column, relation: sch.Table) -> tuple[str, str]:
    """(table, column) of one side of ON; a bare name is the key of the table whose key it is."""
    join = relation.join
    assert join is not None
    name = column.name.lower()
    if column.qualified_table is not None:
        return column.qualified_table.lower(), name
    owners = [member.name for member in (join.fact, join.unit) if member.privacy_unit.column == name]
    return (owners[0], name) if len(owners) == 1 else ("", name)
