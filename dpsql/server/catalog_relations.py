"""The relations behind dpsql serve's catalog: PostgreSQL 15's ``pg_catalog`` and
``information_schema`` as DuckDB tables, their rows from the DECLARED schema, and the macros for
PostgreSQL functions DuckDB lacks (:mod:`dpsql.server.catalog` builds and queries them).

Each relation is named like PostgreSQL's with its column names (oids as BIGINT, ``"char"``,
``name`` and regproc as VARCHAR) and defaults, so a row names only the columns that differ. The
rows are one per declared table (private and public: pg_class, pg_tables, information_schema.tables)
and one per declared column (pg_attribute, information_schema.columns), the built-in types
(pg_type), the emulated relations themselves (pg_class in pg_catalog, for ``'pg_class'::regclass``
and JDBC's joins) and a few fixed rows (pg_namespace, pg_database, the owner role, access methods,
collations, settings). The column's declared domain in words is its comment (pg_description,
``\\d+``) and the table's privacy unit the table's comment.

Privacy: every row is a function of the schema, which is public. What would describe the private
data is absent or NULL by design: no pg_statistic/pg_stats, ``reltuples = -1``, ``relpages = 0``,
sizes NULL, pg_stat_user_tables' counts NULL.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dpsql.schema import Categorical, Column, Ordered, Schema, Table

#: The PostgreSQL release whose catalog layout is emulated (clients parse ``version()``'s "PostgreSQL N").
SERVER_VERSION = "15.0"
#: The owner of every object shown (the data owner's role; analysts' names are never listed).
OWNER = "dpsql"

PG = "pg_catalog"
INFO = "information_schema"
#: The DuckDB schema holding each emulated PostgreSQL schema's relations.
EMULATED = {PG: "dpsql_pg_catalog", INFO: "dpsql_information_schema"}
_NAMESPACES = {PG: 11, "public": 2200, INFO: 13000}
_OWNER_OID = 10
_FIRST_TABLE_OID = 16384
_PG_CLASS_OID = 1259  # classoid of relations in pg_description


# ==================================================================================== types
@dataclass(frozen=True, slots=True)
class _PgType:
    """A built-in PostgreSQL type as pg_type and format_type show it."""

    oid: int
    name: str
    display: str
    length: int
    category: str
    array: int
    collation: int = 0


_TYPES = (
    _PgType(16, "bool", "boolean", 1, "B", 1000),
    _PgType(17, "bytea", "bytea", -1, "U", 1001),
    _PgType(18, "char", '"char"', 1, "Z", 1002),
    _PgType(19, "name", "name", 64, "S", 1003, 950),
    _PgType(20, "int8", "bigint", 8, "N", 1016),
    _PgType(21, "int2", "smallint", 2, "N", 1005),
    _PgType(23, "int4", "integer", 4, "N", 1007),
    _PgType(24, "regproc", "regproc", 4, "N", 1008),
    _PgType(25, "text", "text", -1, "S", 1009, 100),
    _PgType(26, "oid", "oid", 4, "N", 1028),
    _PgType(114, "json", "json", -1, "U", 199),
    _PgType(700, "float4", "real", 4, "N", 1021),
    _PgType(701, "float8", "double precision", 8, "N", 1022),
    _PgType(705, "unknown", "unknown", -2, "X", 0),
    _PgType(1042, "bpchar", "character", -1, "S", 1014, 100),
    _PgType(1043, "varchar", "character varying", -1, "S", 1015, 100),
    _PgType(1082, "date", "date", 4, "D", 1182),
    _PgType(1083, "time", "time without time zone", 8, "D", 1183),
    _PgType(1114, "timestamp", "timestamp without time zone", 8, "D", 1115),
    _PgType(1184, "timestamptz", "timestamp with time zone", 8, "D", 1185),
    _PgType(1186, "interval", "interval", 16, "T", 1187),
    _PgType(1700, "numeric", "numeric", -1, "N", 1231),
    _PgType(2205, "regclass", "regclass", 4, "N", 2210),
    _PgType(2206, "regtype", "regtype", 4, "N", 2211),
    _PgType(2249, "record", "record", -1, "P", 2287),
    _PgType(2278, "void", "void", 4, "P", 0),
    _PgType(2950, "uuid", "uuid", 16, "U", 2951),
    _PgType(3802, "jsonb", "jsonb", -1, "U", 3807),
    _PgType(4089, "regnamespace", "regnamespace", 4, "N", 4090),
)
_TYPE_BY_NAME = {t.name: t for t in _TYPES}

#: information_schema.columns' numeric_precision, numeric_precision_radix, numeric_scale, datetime_precision.
_PRECISION: dict[str, tuple[int | None, int | None, int | None, int | None]] = {
    "int8": (64, 2, 0, None), "float8": (53, 2, None, None), "date": (None, None, None, 0),
    "timestamp": (None, None, None, 6)}


def _declared_type(column: Column) -> _PgType:
    """The PostgreSQL type a declared column is shown with."""
    domain = column.domain
    if isinstance(domain, Categorical):
        integers = all(isinstance(v, int) and not isinstance(v, bool) for v in domain.values)
        return _TYPE_BY_NAME["int8" if integers else "text"]
    return _TYPE_BY_NAME[{"integer": "int8", "numeric": "float8", "date": "date"}[domain.kind]]


def _public_type(values: Sequence[object]) -> _PgType:
    """The type of a public table's column, from its declared (public) values."""
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return _TYPE_BY_NAME["int8"]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return _TYPE_BY_NAME["float8"]
    if all(isinstance(v, dt.datetime) for v in values):
        return _TYPE_BY_NAME["timestamp"]
    if all(isinstance(v, dt.date) and not isinstance(v, dt.datetime) for v in values):
        return _TYPE_BY_NAME["date"]
    return _TYPE_BY_NAME["text"]


# ==================================================================================== domains in words
def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def describe_domain(column: Column) -> str:
    """The declared domain in words, e.g. "integer 0..99, GROUP BY bins of 5" or "one of F, M"."""
    domain = column.domain
    parts = [_categorical_words(domain) if isinstance(domain, Categorical) else _ordered_words(domain)]
    if column.outside_excluded:
        parts.append("rows outside the domain excluded")
    elif isinstance(domain, Ordered) and domain.clamp:
        parts.append("values outside clamped to the domain")
    if column.other:
        parts.append("NULL/outside shown as a NULL group")
    if isinstance(domain, Ordered) and column.measure_bounds is not None:
        top = domain.upper - 1 if domain.kind == "integer" and not domain.closed_top else domain.upper
        low, high = column.measure_bounds
        if (low, high) != (domain.lower, top):  # declared measure_lower/measure_upper
            parts.append(f"SUM/AVG clamp to [{_number(low)}, {_number(high)}]")
    if column.references is not None:
        parts.append(f"references {column.references}")
    return ", ".join(parts)


def _categorical_words(domain: Categorical) -> str:
    shown = ", ".join(str(v) for v in domain.values[:12])
    more = f", ... ({domain.size} values)" if domain.size > 12 else ""
    return f"one of {shown}{more}"


def _ordered_words(domain: Ordered) -> str:
    if domain.kind == "date":
        unit = domain.unit or "day"
        first, last = domain.to_value(domain.lower), domain.to_value(domain.upper - 1)  # the grid's last day
        words = f"date {first}..{last} by {unit}"
        return words if domain.bin_starts == tuple(range(domain.size)) else \
            f"{words}, GROUP BY bins of {_bin_cells(domain)} {unit}s"
    if domain.uniform_step is None:
        return f"{domain.kind} with edges {', '.join(_number(b) for b in domain.boundaries)}"
    step = domain.uniform_step
    top = domain.upper - 1 if domain.kind == "integer" else domain.upper
    words = f"{domain.kind} {_number(domain.lower)}..{_number(top)}"
    width = step * _bin_cells(domain)
    if step != width:
        words += f", resolution {_number(step)}"
    return words if width == 1 and domain.kind == "integer" else f"{words}, GROUP BY bins of {_number(width)}"


def _bin_cells(domain: Ordered) -> int:
    return domain.bin_starts[1] - domain.bin_starts[0] if len(domain.bin_starts) > 1 else domain.size


def describe_privacy_unit(table: Table) -> str:
    """The table's privacy unit in words (its comment in ``\\dt+`` and ``obj_description``)."""
    unit = table.privacy_unit
    if unit.column is None:
        return "private table; privacy unit: one row"
    rows = "row" if unit.max_rows == 1 else "rows"
    via = f" (unit table {unit.table})" if unit.table else ""
    return f"private table; privacy unit: each {unit.column}{via}, at most {unit.max_rows} {rows} per unit"


# ==================================================================================== the emulated relations
# Each relation: its DuckDB columns (PostgreSQL 15's names; oids as BIGINT, "char" and name as VARCHAR)
# with defaults, so rows need only name the columns that differ.
PG_RELATIONS: dict[str, str] = {
    "pg_namespace": "oid BIGINT, nspname VARCHAR, nspowner BIGINT DEFAULT 10, nspacl VARCHAR[]",
    "pg_class": (
        "oid BIGINT, relname VARCHAR, relnamespace BIGINT DEFAULT 2200, reltype BIGINT DEFAULT 0, "
        "reloftype BIGINT DEFAULT 0, relowner BIGINT DEFAULT 10, relam BIGINT DEFAULT 2, relfilenode BIGINT DEFAULT 0, "
        "reltablespace BIGINT DEFAULT 0, relpages INTEGER DEFAULT 0, reltuples REAL DEFAULT -1, "
        "relallvisible INTEGER DEFAULT 0, reltoastrelid BIGINT DEFAULT 0, relhasindex BOOLEAN DEFAULT false, "
        "relisshared BOOLEAN DEFAULT false, relpersistence VARCHAR DEFAULT 'p', relkind VARCHAR DEFAULT 'r', "
        "relnatts SMALLINT, relchecks SMALLINT DEFAULT 0, relhasrules BOOLEAN DEFAULT false, "
        "relhastriggers BOOLEAN DEFAULT false, relhassubclass BOOLEAN DEFAULT false, "
        "relrowsecurity BOOLEAN DEFAULT false, relforcerowsecurity BOOLEAN DEFAULT false, "
        "relispopulated BOOLEAN DEFAULT true, relreplident VARCHAR DEFAULT 'd', relispartition BOOLEAN DEFAULT false, "
        "relrewrite BIGINT DEFAULT 0, relfrozenxid BIGINT DEFAULT 0, relminmxid BIGINT DEFAULT 0, relacl VARCHAR[], "
        "reloptions VARCHAR[], relpartbound VARCHAR"),
    "pg_attribute": (
        "attrelid BIGINT, attname VARCHAR, atttypid BIGINT, attstattarget INTEGER DEFAULT -1, attlen SMALLINT, "
        "attnum SMALLINT, attndims INTEGER DEFAULT 0, attcacheoff INTEGER DEFAULT -1, atttypmod INTEGER DEFAULT -1, "
        "attbyval BOOLEAN, attalign VARCHAR DEFAULT 'd', attstorage VARCHAR, attcompression VARCHAR DEFAULT '', "
        "attnotnull BOOLEAN DEFAULT false, atthasdef BOOLEAN DEFAULT false, atthasmissing BOOLEAN DEFAULT false, "
        "attidentity VARCHAR DEFAULT '', attgenerated VARCHAR DEFAULT '', attisdropped BOOLEAN DEFAULT false, "
        "attislocal BOOLEAN DEFAULT true, attinhcount INTEGER DEFAULT 0, attcollation BIGINT DEFAULT 0, "
        "attacl VARCHAR[], attoptions VARCHAR[], attfdwoptions VARCHAR[], attmissingval VARCHAR"),
    "pg_type": (
        "oid BIGINT, typname VARCHAR, typnamespace BIGINT DEFAULT 11, typowner BIGINT DEFAULT 10, typlen SMALLINT, "
        "typbyval BOOLEAN, typtype VARCHAR DEFAULT 'b', typcategory VARCHAR, typispreferred BOOLEAN DEFAULT false, "
        "typisdefined BOOLEAN DEFAULT true, typdelim VARCHAR DEFAULT ',', typrelid BIGINT DEFAULT 0, "
        "typsubscript VARCHAR DEFAULT '-', typelem BIGINT DEFAULT 0, typarray BIGINT DEFAULT 0, typinput VARCHAR, "
        "typoutput VARCHAR, typreceive VARCHAR, typsend VARCHAR, typmodin VARCHAR DEFAULT '-', "
        "typmodout VARCHAR DEFAULT '-', typanalyze VARCHAR DEFAULT '-', typalign VARCHAR DEFAULT 'i', "
        "typstorage VARCHAR DEFAULT 'p', typnotnull BOOLEAN DEFAULT false, typbasetype BIGINT DEFAULT 0, "
        "typtypmod INTEGER DEFAULT -1, typndims INTEGER DEFAULT 0, typcollation BIGINT DEFAULT 0, "
        "typdefaultbin VARCHAR, typdefault VARCHAR, typacl VARCHAR[]"),
    "pg_database": (
        "oid BIGINT, datname VARCHAR, datdba BIGINT DEFAULT 10, encoding INTEGER DEFAULT 6, "
        "datlocprovider VARCHAR DEFAULT 'c', datistemplate BOOLEAN DEFAULT false, datallowconn BOOLEAN DEFAULT true, "
        "datconnlimit INTEGER DEFAULT -1, datfrozenxid BIGINT DEFAULT 0, datminmxid BIGINT DEFAULT 1, "
        "dattablespace BIGINT DEFAULT 1663, datcollate VARCHAR DEFAULT 'C.UTF-8', datctype VARCHAR DEFAULT 'C.UTF-8', "
        "daticulocale VARCHAR, datcollversion VARCHAR, datacl VARCHAR[]"),
    "pg_roles": (
        "oid BIGINT, rolname VARCHAR, rolsuper BOOLEAN DEFAULT false, rolinherit BOOLEAN DEFAULT true, "
        "rolcreaterole BOOLEAN DEFAULT false, rolcreatedb BOOLEAN DEFAULT false, rolcanlogin BOOLEAN DEFAULT false, "
        "rolreplication BOOLEAN DEFAULT false, rolconnlimit INTEGER DEFAULT -1, "
        "rolpassword VARCHAR DEFAULT '********', rolvaliduntil TIMESTAMPTZ, rolbypassrls BOOLEAN DEFAULT false, "
        "rolconfig VARCHAR[]"),
    "pg_user": (
        "usename VARCHAR, usesysid BIGINT, usecreatedb BOOLEAN DEFAULT false, usesuper BOOLEAN DEFAULT false, "
        "userepl BOOLEAN DEFAULT false, usebypassrls BOOLEAN DEFAULT false, passwd VARCHAR DEFAULT '********', "
        "valuntil TIMESTAMPTZ, useconfig VARCHAR[]"),
    "pg_auth_members": "oid BIGINT, roleid BIGINT, member BIGINT, grantor BIGINT, admin_option BOOLEAN",
    "pg_am": "oid BIGINT, amname VARCHAR, amhandler VARCHAR, amtype VARCHAR",
    "pg_description": "objoid BIGINT, classoid BIGINT, objsubid INTEGER, description VARCHAR",
    "pg_shdescription": "objoid BIGINT, classoid BIGINT, description VARCHAR",
    "pg_attrdef": "oid BIGINT, adrelid BIGINT, adnum SMALLINT, adbin VARCHAR",
    "pg_collation": (
        "oid BIGINT, collname VARCHAR, collnamespace BIGINT DEFAULT 11, collowner BIGINT DEFAULT 10, "
        "collprovider VARCHAR, collisdeterministic BOOLEAN DEFAULT true, collencoding INTEGER DEFAULT -1, "
        "collcollate VARCHAR, collctype VARCHAR, colliculocale VARCHAR, collversion VARCHAR"),
    "pg_policy": ("oid BIGINT, polname VARCHAR, polrelid BIGINT, polcmd VARCHAR, polpermissive BOOLEAN, "
                  "polroles BIGINT[], polqual VARCHAR, polwithcheck VARCHAR"),
    "pg_statistic_ext": ("oid BIGINT, stxrelid BIGINT, stxname VARCHAR, stxnamespace BIGINT, stxowner BIGINT, "
                         "stxstattarget INTEGER, stxkeys VARCHAR, stxkind VARCHAR[], stxexprs VARCHAR"),
    "pg_publication": ("oid BIGINT, pubname VARCHAR, pubowner BIGINT, puballtables BOOLEAN, pubinsert BOOLEAN, "
                       "pubupdate BOOLEAN, pubdelete BOOLEAN, pubtruncate BOOLEAN, pubviaroot BOOLEAN"),
    "pg_publication_namespace": "oid BIGINT, pnpubid BIGINT, pnnspid BIGINT",
    "pg_publication_rel": "oid BIGINT, prpubid BIGINT, prrelid BIGINT, prqual VARCHAR, prattrs SMALLINT[]",
    "pg_inherits": "inhrelid BIGINT, inhparent BIGINT, inhseqno INTEGER, inhdetachpending BOOLEAN",
    "pg_index": (
        "indexrelid BIGINT, indrelid BIGINT, indnatts SMALLINT, indnkeyatts SMALLINT, indisunique BOOLEAN, "
        "indnullsnotdistinct BOOLEAN, indisprimary BOOLEAN, indisexclusion BOOLEAN, indimmediate BOOLEAN, "
        "indisclustered BOOLEAN, indisvalid BOOLEAN, indcheckxmin BOOLEAN, indisready BOOLEAN, indislive BOOLEAN, "
        "indisreplident BOOLEAN, indkey SMALLINT[], indcollation BIGINT[], indclass BIGINT[], indoption SMALLINT[], "
        "indexprs VARCHAR, indpred VARCHAR"),
    "pg_constraint": (
        "oid BIGINT, tableoid BIGINT DEFAULT 2606, conname VARCHAR, connamespace BIGINT, contype VARCHAR, "
        "condeferrable BOOLEAN, condeferred BOOLEAN, convalidated BOOLEAN, conrelid BIGINT, contypid BIGINT, "
        "conindid BIGINT, "
        "conparentid BIGINT, confrelid BIGINT, confupdtype VARCHAR, confdeltype VARCHAR, confmatchtype VARCHAR, "
        "conislocal BOOLEAN, coninhcount INTEGER, connoinherit BOOLEAN, conkey SMALLINT[], confkey SMALLINT[], "
        "conpfeqop BIGINT[], conppeqop BIGINT[], conffeqop BIGINT[], confdelsetcols SMALLINT[], conexclop BIGINT[], "
        "conbin VARCHAR"),
    "pg_proc": (
        "oid BIGINT, proname VARCHAR, pronamespace BIGINT, proowner BIGINT, prolang BIGINT, procost REAL, "
        "prorows REAL, provariadic BIGINT, prosupport VARCHAR, prokind VARCHAR, prosecdef BOOLEAN, "
        "proleakproof BOOLEAN, proisstrict BOOLEAN, proretset BOOLEAN, provolatile VARCHAR, proparallel VARCHAR, "
        "pronargs SMALLINT, pronargdefaults SMALLINT, prorettype BIGINT, proargtypes VARCHAR, "
        "proallargtypes BIGINT[], proargmodes VARCHAR[], proargnames VARCHAR[], proargdefaults VARCHAR, "
        "protrftypes BIGINT[], prosrc VARCHAR, probin VARCHAR, prosqlbody VARCHAR, proconfig VARCHAR[], "
        "proacl VARCHAR[]"),
    "pg_trigger": ("oid BIGINT, tableoid BIGINT DEFAULT 2620, tgrelid BIGINT, tgparentid BIGINT, tgname VARCHAR, "
                   "tgfoid BIGINT, tgtype SMALLINT, "
                   "tgenabled VARCHAR, tgisinternal BOOLEAN, tgconstrrelid BIGINT, tgconstrindid BIGINT, "
                   "tgconstraint BIGINT, tgdeferrable BOOLEAN, tginitdeferred BOOLEAN, tgnargs SMALLINT, "
                   "tgattr SMALLINT[], tgargs VARCHAR, tgqual VARCHAR, tgoldtable VARCHAR, tgnewtable VARCHAR"),
    "pg_rewrite": ("oid BIGINT, tableoid BIGINT DEFAULT 2618, rulename VARCHAR, ev_class BIGINT, ev_type VARCHAR, "
                   "ev_enabled VARCHAR, "
                   "is_instead BOOLEAN, ev_qual VARCHAR, ev_action VARCHAR"),
    "pg_depend": ("classid BIGINT, objid BIGINT, objsubid INTEGER, refclassid BIGINT, refobjid BIGINT, "
                  "refobjsubid INTEGER, deptype VARCHAR"),
    "pg_opclass": ("oid BIGINT, tableoid BIGINT DEFAULT 2616, opcmethod BIGINT, opcname VARCHAR, "
                   "opcnamespace BIGINT, opcowner BIGINT, opcfamily BIGINT, opcintype BIGINT, opcdefault BOOLEAN, "
                   "opckeytype BIGINT"),
    "pg_opfamily": ("oid BIGINT, tableoid BIGINT DEFAULT 2753, opfmethod BIGINT, opfname VARCHAR, "
                    "opfnamespace BIGINT, opfowner BIGINT"),
    "pg_indexes": "schemaname VARCHAR, tablename VARCHAR, indexname VARCHAR, tablespace VARCHAR, indexdef VARCHAR",
    "pg_stat_user_tables": (  # every count NULL: they would describe the private data
        "relid BIGINT, schemaname VARCHAR, relname VARCHAR, seq_scan BIGINT, seq_tup_read BIGINT, idx_scan BIGINT, "
        "idx_tup_fetch BIGINT, n_tup_ins BIGINT, n_tup_upd BIGINT, n_tup_del BIGINT, n_tup_hot_upd BIGINT, "
        "n_live_tup BIGINT, n_dead_tup BIGINT, n_mod_since_analyze BIGINT, n_ins_since_vacuum BIGINT, "
        "last_vacuum TIMESTAMPTZ, last_autovacuum TIMESTAMPTZ, last_analyze TIMESTAMPTZ, "
        "last_autoanalyze TIMESTAMPTZ, vacuum_count BIGINT, autovacuum_count BIGINT, analyze_count BIGINT, "
        "autoanalyze_count BIGINT"),
    "pg_enum": "oid BIGINT, enumtypid BIGINT, enumsortorder REAL, enumlabel VARCHAR",
    "pg_extension": ("oid BIGINT, extname VARCHAR, extowner BIGINT, extnamespace BIGINT, extrelocatable BOOLEAN, "
                     "extversion VARCHAR, extconfig BIGINT[], extcondition VARCHAR[]"),
    "pg_tablespace": "oid BIGINT, spcname VARCHAR, spcowner BIGINT DEFAULT 10, spcacl VARCHAR[], spcoptions VARCHAR[]",
    "pg_settings": ("name VARCHAR, setting VARCHAR, unit VARCHAR, category VARCHAR, short_desc VARCHAR, "
                    "extra_desc VARCHAR, context VARCHAR DEFAULT 'user', vartype VARCHAR DEFAULT 'string', "
                    "source VARCHAR DEFAULT 'default', min_val VARCHAR, max_val VARCHAR, enumvals VARCHAR[], "
                    "boot_val VARCHAR, reset_val VARCHAR, sourcefile VARCHAR, sourceline INTEGER, "
                    "pending_restart BOOLEAN DEFAULT false"),
    "pg_tables": ("schemaname VARCHAR, tablename VARCHAR, tableowner VARCHAR, tablespace VARCHAR, "
                  "hasindexes BOOLEAN DEFAULT false, hasrules BOOLEAN DEFAULT false, "
                  "hastriggers BOOLEAN DEFAULT false, rowsecurity BOOLEAN DEFAULT false"),
    "pg_views": "schemaname VARCHAR, viewname VARCHAR, viewowner VARCHAR, definition VARCHAR",
    "pg_matviews": ("schemaname VARCHAR, matviewname VARCHAR, matviewowner VARCHAR, tablespace VARCHAR, "
                    "hasindexes BOOLEAN, ispopulated BOOLEAN, definition VARCHAR"),
    "pg_sequence": ("seqrelid BIGINT, seqtypid BIGINT, seqstart BIGINT, seqincrement BIGINT, seqmax BIGINT, "
                    "seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN"),
    "pg_foreign_table": "ftrelid BIGINT, ftserver BIGINT, ftoptions VARCHAR[]",
    "pg_partitioned_table": ("partrelid BIGINT, partstrat VARCHAR, partnatts SMALLINT, partdefid BIGINT, "
                             "partattrs SMALLINT[], partclass BIGINT[], partcollation BIGINT[], partexprs VARCHAR"),
    "pg_range": ("rngtypid BIGINT, rngsubtype BIGINT, rngmultitypid BIGINT, rngcollation BIGINT, "
                 "rngsubopc BIGINT, rngcanonical VARCHAR, rngsubdiff VARCHAR"),
    "pg_language": ("oid BIGINT, lanname VARCHAR, lanowner BIGINT, lanispl BOOLEAN, lanpltrusted BOOLEAN, "
                    "lanplcallfoid BIGINT, laninline BIGINT, lanvalidator BIGINT, lanacl VARCHAR[]"),
}

INFO_RELATIONS: dict[str, str] = {
    "tables": (
        "table_catalog VARCHAR, table_schema VARCHAR DEFAULT 'public', table_name VARCHAR, "
        "table_type VARCHAR DEFAULT 'BASE TABLE', self_referencing_column_name VARCHAR, "
        "reference_generation VARCHAR, user_defined_type_catalog VARCHAR, user_defined_type_schema VARCHAR, "
        "user_defined_type_name VARCHAR, is_insertable_into VARCHAR DEFAULT 'NO', is_typed VARCHAR DEFAULT 'NO', "
        "commit_action VARCHAR"),
    "columns": (
        "table_catalog VARCHAR, table_schema VARCHAR DEFAULT 'public', table_name VARCHAR, column_name VARCHAR, "
        "ordinal_position INTEGER, column_default VARCHAR, is_nullable VARCHAR DEFAULT 'YES', data_type VARCHAR, "
        "character_maximum_length INTEGER, character_octet_length INTEGER, numeric_precision INTEGER, "
        "numeric_precision_radix INTEGER, numeric_scale INTEGER, datetime_precision INTEGER, interval_type VARCHAR, "
        "interval_precision INTEGER, character_set_catalog VARCHAR, character_set_schema VARCHAR, "
        "character_set_name VARCHAR, collation_catalog VARCHAR, collation_schema VARCHAR, collation_name VARCHAR, "
        "domain_catalog VARCHAR, domain_schema VARCHAR, domain_name VARCHAR, udt_catalog VARCHAR, "
        "udt_schema VARCHAR DEFAULT 'pg_catalog', udt_name VARCHAR, scope_catalog VARCHAR, scope_schema VARCHAR, "
        "scope_name VARCHAR, maximum_cardinality INTEGER, dtd_identifier VARCHAR, "
        "is_self_referencing VARCHAR DEFAULT 'NO', is_identity VARCHAR DEFAULT 'NO', identity_generation VARCHAR, "
        "identity_start VARCHAR, identity_increment VARCHAR, identity_maximum VARCHAR, identity_minimum VARCHAR, "
        "identity_cycle VARCHAR DEFAULT 'NO', is_generated VARCHAR DEFAULT 'NEVER', generation_expression VARCHAR, "
        "is_updatable VARCHAR DEFAULT 'NO'"),
    "schemata": ("catalog_name VARCHAR, schema_name VARCHAR, schema_owner VARCHAR DEFAULT 'dpsql', "
                 "default_character_set_catalog VARCHAR, default_character_set_schema VARCHAR, "
                 "default_character_set_name VARCHAR, sql_path VARCHAR"),
    "views": ("table_catalog VARCHAR, table_schema VARCHAR, table_name VARCHAR, view_definition VARCHAR, "
              "check_option VARCHAR, is_updatable VARCHAR, is_insertable_into VARCHAR, is_trigger_updatable VARCHAR, "
              "is_trigger_deletable VARCHAR, is_trigger_insertable_into VARCHAR"),
    "table_constraints": ("constraint_catalog VARCHAR, constraint_schema VARCHAR, constraint_name VARCHAR, "
                          "table_catalog VARCHAR, table_schema VARCHAR, table_name VARCHAR, constraint_type VARCHAR, "
                          "is_deferrable VARCHAR, initially_deferred VARCHAR, enforced VARCHAR, "
                          "nulls_distinct VARCHAR"),
    "key_column_usage": ("constraint_catalog VARCHAR, constraint_schema VARCHAR, constraint_name VARCHAR, "
                         "table_catalog VARCHAR, table_schema VARCHAR, table_name VARCHAR, column_name VARCHAR, "
                         "ordinal_position INTEGER, position_in_unique_constraint INTEGER"),
    "referential_constraints": ("constraint_catalog VARCHAR, constraint_schema VARCHAR, constraint_name VARCHAR, "
                                "unique_constraint_catalog VARCHAR, unique_constraint_schema VARCHAR, "
                                "unique_constraint_name VARCHAR, match_option VARCHAR, update_rule VARCHAR, "
                                "delete_rule VARCHAR"),
    "constraint_column_usage": ("table_catalog VARCHAR, table_schema VARCHAR, table_name VARCHAR, "
                                "column_name VARCHAR, constraint_catalog VARCHAR, constraint_schema VARCHAR, "
                                "constraint_name VARCHAR"),
    "routines": ("specific_catalog VARCHAR, specific_schema VARCHAR, specific_name VARCHAR, "
                 "routine_catalog VARCHAR, routine_schema VARCHAR, routine_name VARCHAR, routine_type VARCHAR, "
                 "data_type VARCHAR, routine_definition VARCHAR"),
    "parameters": ("specific_catalog VARCHAR, specific_schema VARCHAR, specific_name VARCHAR, "
                   "ordinal_position INTEGER, parameter_mode VARCHAR, parameter_name VARCHAR, data_type VARCHAR"),
    "sequences": ("sequence_catalog VARCHAR, sequence_schema VARCHAR, sequence_name VARCHAR, data_type VARCHAR, "
                  "start_value VARCHAR, minimum_value VARCHAR, maximum_value VARCHAR, increment VARCHAR, "
                  "cycle_option VARCHAR"),
    "enabled_roles": "role_name VARCHAR",
    "character_sets": ("character_set_catalog VARCHAR, character_set_schema VARCHAR, character_set_name VARCHAR, "
                       "character_repertoire VARCHAR, form_of_use VARCHAR, default_collate_catalog VARCHAR, "
                       "default_collate_schema VARCHAR, default_collate_name VARCHAR"),
}

def _lookup(value: str, relation: str, condition: str) -> str:
    """A scalar subquery on an emulated relation for a macro body. The relation is aliased dpsql_m
    and its columns qualified, so a macro argument such as ``pg_class.oid`` still means the
    caller's relation (macro arguments are substituted into the body)."""
    if not value.startswith("dpsql_m.") and " " not in value:
        value = f"dpsql_m.{value}"
    return f"(SELECT {value} FROM dpsql_pg_catalog.{relation} AS dpsql_m WHERE {condition})"


#: A name argument without schema and quotes, lower-cased ('"public"."census"' -> census).
_UNQUOTED = "lower(replace(split_part(s, '.', -1), '\"', ''))"

#: PostgreSQL functions answered by macros of the catalog database (name -> DuckDB macro parameters and body).
#: Sizes and row counts are NULL by design: they would describe the private data.
MACROS: dict[str, str] = {
    "format_type": "(t, m := NULL) AS " + _lookup("display", "dpsql_type_names", "dpsql_m.oid = t"),
    "pg_get_userbyid": (f"(r) AS COALESCE({_lookup('rolname', 'pg_roles', 'dpsql_m.oid = r')}, "
                        "'unknown (OID=' || CAST(r AS VARCHAR) || ')')"),
    "pg_table_is_visible": "(r) AS COALESCE(" + _lookup(
        "dpsql_m.relnamespace IN (11, 2200)", "pg_class", "dpsql_m.oid = r") + ", false)",
    "pg_type_is_visible": "(r) AS true",
    "pg_opclass_is_visible": "(r) AS true",
    "pg_opfamily_is_visible": "(r) AS true",
    "pg_tablespace_location": "(t) AS ''",
    "pg_function_is_visible": "(r) AS true",
    "col_description": "(r, n) AS " + _lookup(
        "description", "pg_description", "dpsql_m.objoid = r AND dpsql_m.objsubid = n AND dpsql_m.classoid = 1259"),
    "obj_description": "(r, c := 'pg_class') AS " + _lookup(
        "description", "pg_description", "dpsql_m.objoid = r AND dpsql_m.objsubid = 0 AND c = 'pg_class' "
        "AND dpsql_m.classoid = 1259"),
    "shobj_description": "(r, c) AS NULL",
    "pg_get_expr": "(e, r, p := NULL) AS CAST(NULL AS VARCHAR)",
    "pg_get_constraintdef": "(c, p := NULL) AS CAST(NULL AS VARCHAR)",
    "pg_get_indexdef": "(i, n := NULL, p := NULL) AS CAST(NULL AS VARCHAR)",
    "pg_get_viewdef": "(v, p := NULL) AS CAST(NULL AS VARCHAR)",
    "pg_get_statisticsobjdef_columns": "(s) AS CAST(NULL AS VARCHAR)",
    "pg_get_function_result": "(f) AS CAST(NULL AS VARCHAR)",
    "pg_get_function_arguments": "(f) AS CAST(NULL AS VARCHAR)",
    "pg_get_function_identity_arguments": "(f) AS CAST(NULL AS VARCHAR)",
    "pg_relation_is_publishable": "(r) AS false",
    "pg_encoding_to_char": "(e) AS CASE WHEN e = 6 THEN 'UTF8' ELSE 'SQL_ASCII' END",
    "pg_table_size": "(r) AS CAST(NULL AS BIGINT)",
    "pg_relation_size": "(r, f := NULL) AS CAST(NULL AS BIGINT)",
    "pg_total_relation_size": "(r) AS CAST(NULL AS BIGINT)",
    "pg_indexes_size": "(r) AS CAST(NULL AS BIGINT)",
    "pg_database_size": "(d) AS CAST(NULL AS BIGINT)",
    "pg_size_pretty": "(s) AS CAST(s AS VARCHAR) || ' bytes'",
    "array_to_string": "(a, sep, n := NULL) AS array_to_string(CAST(a AS VARCHAR[]), sep)",
    "array_upper": "(a, d) AS CASE WHEN len(a) > 0 THEN len(a) END",
    "array_lower": "(a, d) AS CASE WHEN len(a) > 0 THEN 1 END",
    "has_table_privilege": "(a, b, c := NULL) AS true",
    "has_schema_privilege": "(a, b, c := NULL) AS true",
    "has_database_privilege": "(a, b, c := NULL) AS true",
    "has_column_privilege": "(a, b, c, d := NULL) AS true",
    "pg_has_role": "(a, b, c := NULL) AS false",
    "pg_is_in_recovery": "() AS false",
    "current_setting": "(n, missing_ok := false) AS " + _lookup(
        "setting", "pg_settings", "lower(dpsql_m.name) = lower(n)"),
    "pg_backend_pid": "() AS 0",
    # information_schema._pg_expandarray(a): a set of (x, n) rows in PostgreSQL; JDBC applies it to
    # pg_index.indkey only, always empty here (no indexes), so a row's first element is enough.
    "_pg_expandarray": "(a) AS {'x': a[1], 'n': CASE WHEN len(a) > 0 THEN 1 END}",
    "pg_my_temp_schema": "() AS 0",
    "quote_ident": ("(s) AS CASE WHEN regexp_full_match(s, '[a-z_][a-z0-9_$]*') THEN s "
                    "ELSE '\"' || replace(s, '\"', '\"\"') || '\"' END"),
    "regclass_name": f"(r) AS COALESCE({_lookup('relname', 'pg_class', 'dpsql_m.oid = r')}, CAST(r AS VARCHAR))",
    "regclass_oid": "(s) AS " + _lookup("oid", "pg_class", f"dpsql_m.relname = {_UNQUOTED}"),
    "regtype_name": "(t) AS COALESCE(dpsql_format_type(t), CAST(t AS VARCHAR))",
    "regtype_oid": "(s) AS " + _lookup("oid", "dpsql_type_names",
                                       f"dpsql_m.display = lower(s) OR dpsql_m.typname = {_UNQUOTED}"),
    "regnamespace_name": (f"(n) AS COALESCE({_lookup('nspname', 'pg_namespace', 'dpsql_m.oid = n')}, "
                          "CAST(n AS VARCHAR))"),
    "regnamespace_oid": "(s) AS " + _lookup("oid", "pg_namespace", f"dpsql_m.nspname = {_UNQUOTED}"),
    "regrole_name": "(r) AS dpsql_pg_get_userbyid(r)",
    "regrole_oid": "(s) AS " + _lookup("oid", "pg_roles", "dpsql_m.rolname = s"),
    "regproc_name": "(p) AS CAST(p AS VARCHAR)",
    "regproc_oid": "(s) AS CAST(NULL AS BIGINT)",
}

#: Relations the catalog uses itself; no query names them (the pg_catalog.* names map to PG_RELATIONS only).
HIDDEN_RELATIONS = {"dpsql_type_names": "oid BIGINT, typname VARCHAR, display VARCHAR"}


# ==================================================================================== the catalog database
@dataclass(frozen=True, slots=True)
class _Relation:
    """One declared relation as the catalog shows it: name, oid, comment, columns (name, type, comment)."""

    name: str
    oid: int
    comment: str
    columns: tuple[tuple[str, _PgType, str], ...]


def _relations(schema: Schema) -> list[_Relation]:
    """The declared tables, private then public, each sorted by name, with oids from 16384."""
    found: list[_Relation] = []
    for table in sorted(schema.tables.values(), key=lambda t: t.name):
        columns = tuple((c.name, _declared_type(c), describe_domain(c)) for c in table.columns.values())
        found.append(_Relation(table.name, 0, describe_privacy_unit(table), columns))
    for public in sorted(schema.public.values(), key=lambda t: t.name):
        columns = tuple((c, _public_type(public.values(c)), "public values declared in the schema")
                        for c in public.columns)
        found.append(_Relation(public.name, 0, "public table (rows declared in the schema)", columns))
    return [_Relation(r.name, _FIRST_TABLE_OID + i, r.comment, r.columns) for i, r in enumerate(found)]


def catalog_rows(schema: Schema, database: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every emulated row as (schema, relation, {column: value})."""
    pg, info = EMULATED[PG], EMULATED[INFO]
    for name, oid in _NAMESPACES.items():
        yield pg, "pg_namespace", {"oid": oid, "nspname": name}
        yield info, "schemata", {"catalog_name": database, "schema_name": name}
    yield pg, "pg_database", {"oid": 16383, "datname": database}
    yield pg, "pg_roles", {"oid": _OWNER_OID, "rolname": OWNER}
    yield pg, "pg_user", {"usename": OWNER, "usesysid": _OWNER_OID}
    yield pg, "pg_am", {"oid": 2, "amname": "heap", "amhandler": "heap_tableam_handler", "amtype": "t"}
    yield pg, "pg_am", {"oid": 403, "amname": "btree", "amhandler": "bthandler", "amtype": "i"}
    yield pg, "pg_tablespace", {"oid": 1663, "spcname": "pg_default"}
    for oid, name, provider in ((100, "default", "d"), (950, "C", "c"), (951, "POSIX", "c")):
        yield pg, "pg_collation", {"oid": oid, "collname": name, "collprovider": provider,
                                   "collcollate": None if provider == "d" else name,
                                   "collctype": None if provider == "d" else name}
    for setting, value in _SETTINGS.items():
        yield pg, "pg_settings", {"name": setting, "setting": value, "boot_val": value, "reset_val": value}
    yield from _type_rows()
    for number, name in enumerate(sorted(PG_RELATIONS)):
        kind = "v" if name in _SYSTEM_VIEWS else "r"
        yield pg, "pg_class", {"oid": _SYSTEM_OIDS.get(name, 12000 + number), "relname": name, "relnamespace": 11,
                               "relkind": kind, "relam": 0 if kind == "v" else 2,
                               "relnatts": len(PG_RELATIONS[name].split(", "))}
    for relation in _relations(schema):
        yield from _relation_rows(relation, database)


#: The fixed oids of PostgreSQL's system catalogs (``'pg_class'::regclass`` is 1259 everywhere).
_SYSTEM_OIDS = {"pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255, "pg_class": 1259, "pg_database": 1262,
                "pg_am": 2601, "pg_attrdef": 2604, "pg_constraint": 2606, "pg_depend": 2608, "pg_description": 2609,
                "pg_index": 2610, "pg_inherits": 2611, "pg_language": 2612, "pg_namespace": 2615, "pg_rewrite": 2618,
                "pg_opclass": 2616, "pg_trigger": 2620, "pg_opfamily": 2753, "pg_enum": 3501,
                "pg_collation": 3456, "pg_extension": 3079}
_SYSTEM_VIEWS = frozenset({"pg_roles", "pg_user", "pg_settings", "pg_tables", "pg_views", "pg_matviews", "pg_indexes",
                           "pg_stat_user_tables"})

#: What pg_settings shows (read only; SET and SHOW are the server's).
_SETTINGS = {"server_version": SERVER_VERSION, "server_version_num": "150000", "server_encoding": "UTF8",
             "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "TimeZone": "UTC", "integer_datetimes": "on",
             "standard_conforming_strings": "on", "max_identifier_length": "63", "search_path": '"$user", public',
             "default_transaction_read_only": "on", "transaction_isolation": "read committed"}


#: Types whose I/O functions are named with an underscore (date_in, date_recv, ...), as in PostgreSQL.
_UNDERSCORE_IO = frozenset({"json", "date", "time", "timestamp", "timestamptz", "interval", "numeric", "record",
                            "void", "uuid", "jsonb"})


def _io_functions(name: str) -> dict[str, str]:
    """pg_type's typinput/typoutput/typreceive/typsend: clients (ADBC) recognise types by typreceive."""
    separator = "_" if name in _UNDERSCORE_IO else ""
    return {f"typ{role}": f"{name}{separator}{suffix}"
            for role, suffix in (("input", "in"), ("output", "out"), ("receive", "recv"), ("send", "send"))}


def _type_rows() -> Iterator[tuple[str, str, dict[str, Any]]]:
    pg = EMULATED[PG]
    for t in _TYPES:
        common = {"typnamespace": 11, "typdelim": ",", "typcollation": t.collation}
        functions = _io_functions(t.name)
        yield pg, "pg_type", {"oid": t.oid, "typname": t.name, "typlen": t.length, "typbyval": 0 < t.length <= 8,
                              "typtype": "p" if t.category in "PX" else "b", "typcategory": t.category,
                              "typarray": t.array, **functions, "typstorage": "x" if t.length < 0 else "p", **common}
        yield pg, "dpsql_type_names", {"oid": t.oid, "typname": t.name, "display": t.display}
        if t.array:
            yield pg, "pg_type", {"oid": t.array, "typname": f"_{t.name}", "typlen": -1, "typbyval": False,
                                  "typcategory": "A", "typelem": t.oid, "typinput": "array_in",
                                  "typoutput": "array_out", "typreceive": "array_recv", "typsend": "array_send",
                                  "typsubscript": "array_subscript_handler", "typstorage": "x", **common}
            yield pg, "dpsql_type_names", {"oid": t.array, "typname": f"_{t.name}", "display": f"{t.display}[]"}


def _relation_rows(relation: _Relation, database: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    pg, info = EMULATED[PG], EMULATED[INFO]
    yield pg, "pg_class", {"oid": relation.oid, "relname": relation.name, "relnatts": len(relation.columns)}
    yield pg, "pg_tables", {"schemaname": "public", "tablename": relation.name, "tableowner": OWNER}
    yield pg, "pg_stat_user_tables", {"relid": relation.oid, "schemaname": "public", "relname": relation.name}
    yield pg, "pg_description", {"objoid": relation.oid, "classoid": _PG_CLASS_OID, "objsubid": 0,
                                 "description": relation.comment}
    yield info, "tables", {"table_catalog": database, "table_name": relation.name}
    for number, (column, pg_type, comment) in enumerate(relation.columns, start=1):
        yield pg, "pg_attribute", {"attrelid": relation.oid, "attname": column, "atttypid": pg_type.oid,
                                   "attlen": pg_type.length, "attnum": number, "attbyval": 0 < pg_type.length <= 8,
                                   "attstorage": "x" if pg_type.length < 0 else "p",
                                   "attcollation": pg_type.collation}
        yield pg, "pg_description", {"objoid": relation.oid, "classoid": _PG_CLASS_OID, "objsubid": number,
                                     "description": comment}
        precision, radix, scale, datetime = _PRECISION.get(pg_type.name, (None, None, None, None))
        yield info, "columns", {"table_catalog": database, "table_name": relation.name, "column_name": column,
                                "ordinal_position": number, "data_type": pg_type.display,
                                "numeric_precision": precision, "numeric_precision_radix": radix,
                                "numeric_scale": scale, "datetime_precision": datetime, "udt_catalog": database,
                                "udt_name": pg_type.name, "dtd_identifier": str(number)}
