"""The catalog of ``dpsql serve`` (dpsql.server.catalog): psql's, JDBC's and psycopg's catalog queries
answered from the declared schema alone, and every other statement refused.

The psql texts below are what psql 15.18 sent to a PostgreSQL 15 server (``psql -E``) for ``\\dt``,
``\\dt+``, ``\\d census``, ``\\d+ census``, ``\\dn``, ``\\dn+``, ``\\l``, ``\\l+``, ``\\du``, ``\\dT``, ``\\dp``,
``\\dd``, ``\\db`` and ``\\dx``.
"""
# ruff: noqa: E501 (the captured psql queries are kept exactly as psql sends them)

from __future__ import annotations

import threading

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.schema import Schema
from dpsql.server.catalog import Catalog, is_catalog_query, version_string
from dpsql.server.catalog_relations import describe_domain

PSQL_DT = """\
SELECT n.nspname as "Schema",
  c.relname as "Name",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as "Type",
  pg_catalog.pg_get_userbyid(c.relowner) as "Owner"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
WHERE c.relkind IN ('r','p','')
      AND n.nspname <> 'pg_catalog'
      AND n.nspname !~ '^pg_toast'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1,2;"""

PSQL_DT_PLUS = """\
SELECT n.nspname as "Schema",
  c.relname as "Name",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as "Type",
  pg_catalog.pg_get_userbyid(c.relowner) as "Owner",
  CASE c.relpersistence WHEN 'p' THEN 'permanent' WHEN 't' THEN 'temporary' WHEN 'u' THEN 'unlogged' END as "Persistence",
  am.amname as "Access method",
  pg_catalog.pg_size_pretty(pg_catalog.pg_table_size(c.oid)) as "Size",
  pg_catalog.obj_description(c.oid, 'pg_class') as "Description"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
WHERE c.relkind IN ('r','p','')
      AND n.nspname <> 'pg_catalog'
      AND n.nspname !~ '^pg_toast'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1,2;"""

#: The 8 queries psql 15 sends for ``\\d census`` (with the oid the first one returned).
PSQL_D_CENSUS = [
    """\
SELECT c.oid,
  n.nspname,
  c.relname
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname OPERATOR(pg_catalog.~) '^(census)$' COLLATE pg_catalog.default
  AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 2, 3;""",
    """\
SELECT c.relchecks, c.relkind, c.relhasindex, c.relhasrules, c.relhastriggers, c.relrowsecurity, c.relforcerowsecurity, false AS relhasoids, c.relispartition, '', c.reltablespace, CASE WHEN c.reloftype = 0 THEN '' ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text END, c.relpersistence, c.relreplident, am.amname
FROM pg_catalog.pg_class c
 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
LEFT JOIN pg_catalog.pg_am am ON (c.relam = am.oid)
WHERE c.oid = '16384';""",
    """\
SELECT a.attname,
  pg_catalog.format_type(a.atttypid, a.atttypmod),
  (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true)
   FROM pg_catalog.pg_attrdef d
   WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef),
  a.attnotnull,
  (SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
   WHERE c.oid = a.attcollation AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
  a.attidentity,
  a.attgenerated
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = '16384' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;""",
    """\
SELECT pol.polname, pol.polpermissive,
  CASE WHEN pol.polroles = '{0}' THEN NULL ELSE pg_catalog.array_to_string(array(select rolname from pg_catalog.pg_roles where oid = any (pol.polroles) order by 1),',') END,
  pg_catalog.pg_get_expr(pol.polqual, pol.polrelid),
  pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid),
  CASE pol.polcmd
    WHEN 'r' THEN 'SELECT'
    WHEN 'a' THEN 'INSERT'
    WHEN 'w' THEN 'UPDATE'
    WHEN 'd' THEN 'DELETE'
    END AS cmd
FROM pg_catalog.pg_policy pol
WHERE pol.polrelid = '16384' ORDER BY 1;""",
    """\
SELECT oid, stxrelid::pg_catalog.regclass, stxnamespace::pg_catalog.regnamespace::pg_catalog.text AS nsp, stxname,
pg_catalog.pg_get_statisticsobjdef_columns(oid) AS columns,
  'd' = any(stxkind) AS ndist_enabled,
  'f' = any(stxkind) AS deps_enabled,
  'm' = any(stxkind) AS mcv_enabled,
stxstattarget
FROM pg_catalog.pg_statistic_ext
WHERE stxrelid = '16384'
ORDER BY nsp, stxname;""",
    """\
SELECT pubname
     , NULL
     , NULL
FROM pg_catalog.pg_publication p
     JOIN pg_catalog.pg_publication_namespace pn ON p.oid = pn.pnpubid
     JOIN pg_catalog.pg_class pc ON pc.relnamespace = pn.pnnspid
WHERE pc.oid ='16384' and pg_catalog.pg_relation_is_publishable('16384')
UNION
SELECT pubname
     , pg_get_expr(pr.prqual, c.oid)
     , (CASE WHEN pr.prattrs IS NOT NULL THEN
         (SELECT string_agg(attname, ', ')
           FROM pg_catalog.generate_series(0, pg_catalog.array_upper(pr.prattrs::pg_catalog.int2[], 1)) s,
                pg_catalog.pg_attribute
          WHERE attrelid = pr.prrelid AND attnum = prattrs[s])
        ELSE NULL END) FROM pg_catalog.pg_publication p
     JOIN pg_catalog.pg_publication_rel pr ON p.oid = pr.prpubid
     JOIN pg_catalog.pg_class c ON c.oid = pr.prrelid
WHERE pr.prrelid = '16384'
UNION
SELECT pubname
     , NULL
     , NULL
FROM pg_catalog.pg_publication p
WHERE p.puballtables AND pg_catalog.pg_relation_is_publishable('16384')
ORDER BY 1;""",
    """\
SELECT c.oid::pg_catalog.regclass
FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
WHERE c.oid = i.inhparent AND i.inhrelid = '16384'
  AND c.relkind != 'p' AND c.relkind != 'I'
ORDER BY inhseqno;""",
    """\
SELECT c.oid::pg_catalog.regclass, c.relkind, inhdetachpending, pg_catalog.pg_get_expr(c.relpartbound, c.oid)
FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
WHERE c.oid = i.inhrelid AND i.inhparent = '16384'
ORDER BY pg_catalog.pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', c.oid::pg_catalog.regclass::pg_catalog.text;""",
]

#: ``\\d+ census``: the table and column queries that differ from ``\\d census``.
PSQL_D_PLUS_CENSUS = [
    """\
SELECT c.relchecks, c.relkind, c.relhasindex, c.relhasrules, c.relhastriggers, c.relrowsecurity, c.relforcerowsecurity, false AS relhasoids, c.relispartition, pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ')
, c.reltablespace, CASE WHEN c.reloftype = 0 THEN '' ELSE c.reloftype::pg_catalog.regtype::pg_catalog.text END, c.relpersistence, c.relreplident, am.amname
FROM pg_catalog.pg_class c
 LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)
LEFT JOIN pg_catalog.pg_am am ON (c.relam = am.oid)
WHERE c.oid = '16384';""",
    """\
SELECT a.attname,
  pg_catalog.format_type(a.atttypid, a.atttypmod),
  (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true)
   FROM pg_catalog.pg_attrdef d
   WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef),
  a.attnotnull,
  (SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
   WHERE c.oid = a.attcollation AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS attcollation,
  a.attidentity,
  a.attgenerated,
  a.attstorage,
  a.attcompression AS attcompression,
  CASE WHEN a.attstattarget=-1 THEN NULL ELSE a.attstattarget END AS attstattarget,
  pg_catalog.col_description(a.attrelid, a.attnum)
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = '16384' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;""",
]

PSQL_DN = """\
SELECT n.nspname AS "Name",
  pg_catalog.pg_get_userbyid(n.nspowner) AS "Owner"
FROM pg_catalog.pg_namespace n
WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
ORDER BY 1;"""

PSQL_L = """\
SELECT d.datname as "Name",
       pg_catalog.pg_get_userbyid(d.datdba) as "Owner",
       pg_catalog.pg_encoding_to_char(d.encoding) as "Encoding",
       d.datcollate as "Collate",
       d.datctype as "Ctype",
       d.daticulocale as "ICU Locale",
       CASE d.datlocprovider WHEN 'c' THEN 'libc' WHEN 'i' THEN 'icu' END AS "Locale Provider",
       pg_catalog.array_to_string(d.datacl, E'\\n') AS "Access privileges"
FROM pg_catalog.pg_database d
ORDER BY 1;"""

PSQL_DU = """\
SELECT r.rolname, r.rolsuper, r.rolinherit,
  r.rolcreaterole, r.rolcreatedb, r.rolcanlogin,
  r.rolconnlimit, r.rolvaliduntil,
  ARRAY(SELECT b.rolname
        FROM pg_catalog.pg_auth_members m
        JOIN pg_catalog.pg_roles b ON (m.roleid = b.oid)
        WHERE m.member = r.oid) as memberof
, r.rolreplication
, r.rolbypassrls
FROM pg_catalog.pg_roles r
WHERE r.rolname !~ '^pg_'
ORDER BY 1;"""

PSQL_DT_TYPES = """\
SELECT n.nspname as "Schema",
  pg_catalog.format_type(t.oid, NULL) AS "Name",
  pg_catalog.obj_description(t.oid, 'pg_type') as "Description"
FROM pg_catalog.pg_type t
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE (t.typrelid = 0 OR (SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid))
  AND NOT EXISTS(SELECT 1 FROM pg_catalog.pg_type el WHERE el.oid = t.typelem AND el.typarray = t.oid)
      AND n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_type_is_visible(t.oid)
ORDER BY 1, 2;"""


PSQL_L_PLUS = """\
SELECT d.datname as "Name",
       pg_catalog.pg_get_userbyid(d.datdba) as "Owner",
       pg_catalog.pg_encoding_to_char(d.encoding) as "Encoding",
       d.datcollate as "Collate",
       d.datctype as "Ctype",
       d.daticulocale as "ICU Locale",
       CASE d.datlocprovider WHEN 'c' THEN 'libc' WHEN 'i' THEN 'icu' END AS "Locale Provider",
       pg_catalog.array_to_string(d.datacl, E'\\n') AS "Access privileges",
       CASE WHEN pg_catalog.has_database_privilege(d.datname, 'CONNECT')
            THEN pg_catalog.pg_size_pretty(pg_catalog.pg_database_size(d.datname))
            ELSE 'No Access'
       END as "Size",
       t.spcname as "Tablespace",
       pg_catalog.shobj_description(d.oid, 'pg_database') as "Description"
FROM pg_catalog.pg_database d
  JOIN pg_catalog.pg_tablespace t on d.dattablespace = t.oid
ORDER BY 1;"""

PSQL_DN_PLUS = """\
SELECT n.nspname AS "Name",
  pg_catalog.pg_get_userbyid(n.nspowner) AS "Owner",
  pg_catalog.array_to_string(n.nspacl, E'\\n') AS "Access privileges",
  pg_catalog.obj_description(n.oid, 'pg_namespace') AS "Description"
FROM pg_catalog.pg_namespace n
WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
ORDER BY 1;"""

PSQL_DP = """\
SELECT n.nspname as "Schema",
  c.relname as "Name",
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'S' THEN 'sequence' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' END as "Type",
  pg_catalog.array_to_string(c.relacl, E'\\n') AS "Access privileges",
  pg_catalog.array_to_string(ARRAY(
    SELECT attname || E':\\n  ' || pg_catalog.array_to_string(attacl, E'\\n  ')
    FROM pg_catalog.pg_attribute a
    WHERE attrelid = c.oid AND NOT attisdropped AND attacl IS NOT NULL
  ), E'\\n') AS "Column privileges",
  pg_catalog.array_to_string(ARRAY(
    SELECT polname
    || CASE WHEN NOT polpermissive THEN
       E' (RESTRICTIVE)'
       ELSE '' END
    || CASE WHEN polcmd != '*' THEN
           E' (' || polcmd::pg_catalog.text || E'):'
       ELSE E':'
       END
    || CASE WHEN polqual IS NOT NULL THEN
           E'\\n  (u): ' || pg_catalog.pg_get_expr(polqual, polrelid)
       ELSE E''
       END
    || CASE WHEN polwithcheck IS NOT NULL THEN
           E'\\n  (c): ' || pg_catalog.pg_get_expr(polwithcheck, polrelid)
       ELSE E''
       END    || CASE WHEN polroles <> '{0}' THEN
           E'\\n  to: ' || pg_catalog.array_to_string(
               ARRAY(
                   SELECT rolname
                   FROM pg_catalog.pg_roles
                   WHERE oid = ANY (polroles)
                   ORDER BY 1
               ), E', ')
       ELSE E''
       END
    FROM pg_catalog.pg_policy pol
    WHERE polrelid = c.oid), E'\\n')
    AS "Policies"
FROM pg_catalog.pg_class c
     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r','v','m','S','f','p')
  AND n.nspname !~ '^pg_' AND pg_catalog.pg_table_is_visible(c.oid)
ORDER BY 1, 2;"""

PSQL_DD = """\
SELECT DISTINCT tt.nspname AS "Schema", tt.name AS "Name", tt.object AS "Object", d.description AS "Description"
FROM (
  SELECT pgc.oid as oid, pgc.tableoid AS tableoid,
  n.nspname as nspname,
  CAST(pgc.conname AS pg_catalog.text) as name,  CAST('table constraint' AS pg_catalog.text) as object
  FROM pg_catalog.pg_constraint pgc
    JOIN pg_catalog.pg_class c ON c.oid = pgc.conrelid
    LEFT JOIN pg_catalog.pg_namespace n     ON n.oid = c.relnamespace
WHERE n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
UNION ALL
  SELECT pgc.oid as oid, pgc.tableoid AS tableoid,
  n.nspname as nspname,
  CAST(pgc.conname AS pg_catalog.text) as name,  CAST('domain constraint' AS pg_catalog.text) as object
  FROM pg_catalog.pg_constraint pgc
    JOIN pg_catalog.pg_type t ON t.oid = pgc.contypid
    LEFT JOIN pg_catalog.pg_namespace n     ON n.oid = t.typnamespace
WHERE n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_type_is_visible(t.oid)
UNION ALL
  SELECT o.oid as oid, o.tableoid as tableoid,
  n.nspname as nspname,
  CAST(o.opcname AS pg_catalog.text) as name,
  CAST('operator class' AS pg_catalog.text) as object
  FROM pg_catalog.pg_opclass o
    JOIN pg_catalog.pg_am am ON o.opcmethod = am.oid
    JOIN pg_catalog.pg_namespace n ON n.oid = o.opcnamespace
      AND n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_opclass_is_visible(o.oid)
UNION ALL
  SELECT opf.oid as oid, opf.tableoid as tableoid,
  n.nspname as nspname,
  CAST(opf.opfname AS pg_catalog.text) AS name,
  CAST('operator family' AS pg_catalog.text) as object
  FROM pg_catalog.pg_opfamily opf
    JOIN pg_catalog.pg_am am ON opf.opfmethod = am.oid
    JOIN pg_catalog.pg_namespace n ON opf.opfnamespace = n.oid
      AND n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_opfamily_is_visible(opf.oid)
UNION ALL
  SELECT r.oid as oid, r.tableoid as tableoid,
  n.nspname as nspname,
  CAST(r.rulename AS pg_catalog.text) as name,  CAST('rule' AS pg_catalog.text) as object
  FROM pg_catalog.pg_rewrite r
       JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
       LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  WHERE r.rulename != '_RETURN'
      AND n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
UNION ALL
  SELECT t.oid as oid, t.tableoid as tableoid,
  n.nspname as nspname,
  CAST(t.tgname AS pg_catalog.text) as name,  CAST('trigger' AS pg_catalog.text) as object
  FROM pg_catalog.pg_trigger t
       JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
       LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname <> 'pg_catalog'
      AND n.nspname <> 'information_schema'
  AND pg_catalog.pg_table_is_visible(c.oid)
) AS tt
  JOIN pg_catalog.pg_description d ON (tt.oid = d.objoid AND tt.tableoid = d.classoid AND d.objsubid = 0)
ORDER BY 1, 2, 3;"""

PSQL_DB = """\
SELECT spcname AS "Name",
  pg_catalog.pg_get_userbyid(spcowner) AS "Owner",
  pg_catalog.pg_tablespace_location(oid) AS "Location"
FROM pg_catalog.pg_tablespace
ORDER BY 1;"""

PSQL_DX = """\
SELECT e.extname AS "Name", e.extversion AS "Version", n.nspname AS "Schema", c.description AS "Description"
FROM pg_catalog.pg_extension e LEFT JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace LEFT JOIN pg_catalog.pg_description c ON c.objoid = e.oid AND c.classoid = 'pg_catalog.pg_extension'::pg_catalog.regclass
ORDER BY 1;"""


SCHEMA = {"tables": {
    "census": {"privacy_unit": {"column": "person", "max_rows": 3}, "columns": {
        "age": {"type": "integer", "lower": 0, "upper": 99, "bin_width": 5},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "income": {"type": "numeric", "lower": 0, "upper": 1000, "bin_width": 100, "resolution": 10,
                   "measure_upper": 500},
        "born": {"type": "date", "lower": "1920-01-01", "upper": "2020-12-31", "unit": "year", "bin_width": 10},
        "region_id": {"type": "categorical", "values": [1, 2, 3], "references": "regions.region_id"},
        "person": {"type": "integer", "lower": 0, "upper": 10000}}},
    "pg_data": {"columns": {"x": {"type": "integer", "lower": 0, "upper": 9}}},
    "regions": {"public": True, "columns": ["region_id", "name"], "rows": [[1, "North"], [2, "South"], [3, "East"]]}}}
CENSUS_OID = 16384  # declared tables by name from 16384 (census, pg_data), then the public regions


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog(Schema.load(SCHEMA), "people")


def rows(catalog: Catalog, sql: str, user: str = "alice") -> list[dict[str, object]]:
    return catalog.answer(sql, user=user).to_pylist()


def with_census_oid(sql: str) -> str:
    return sql.replace("'16384'", f"'{CENSUS_OID}'")


# ==================================================================================== information_schema
def test_information_schema_tables_lists_exactly_the_declared_tables(catalog: Catalog) -> None:
    found = rows(catalog, "SELECT table_catalog, table_schema, table_name, table_type FROM information_schema.tables "
                          "ORDER BY table_name")
    assert found == [{"table_catalog": "people", "table_schema": "public", "table_name": name,
                      "table_type": "BASE TABLE"} for name in ("census", "pg_data", "regions")]


def test_information_schema_columns_show_the_declared_types(catalog: Catalog) -> None:
    found = rows(catalog, "SELECT table_name, column_name, data_type, udt_name, ordinal_position, is_nullable "
                          "FROM information_schema.columns WHERE table_schema = 'public' "
                          "ORDER BY table_name, ordinal_position")
    census = [(r["column_name"], r["data_type"], r["udt_name"]) for r in found if r["table_name"] == "census"]
    assert census == [("age", "bigint", "int8"), ("sex", "text", "text"), ("income", "double precision", "float8"),
                      ("born", "date", "date"), ("region_id", "bigint", "int8"), ("person", "bigint", "int8")]
    assert [r["ordinal_position"] for r in found if r["table_name"] == "census"] == [1, 2, 3, 4, 5, 6]
    regions = [(r["column_name"], r["data_type"]) for r in found if r["table_name"] == "regions"]
    assert regions == [("region_id", "bigint"), ("name", "text")]
    assert {r["is_nullable"] for r in found} == {"YES"}


def test_information_schema_schemata(catalog: Catalog) -> None:
    found = rows(catalog, "SELECT schema_name FROM information_schema.schemata ORDER BY 1")
    assert [r["schema_name"] for r in found] == ["information_schema", "pg_catalog", "public"]


# ==================================================================================== psql
def test_psql_dt_lists_the_declared_tables(catalog: Catalog) -> None:
    assert rows(catalog, PSQL_DT) == [{"Schema": "public", "Name": name, "Type": "table", "Owner": "dpsql"}
                                      for name in ("census", "pg_data", "regions")]


def test_psql_dt_plus_shows_privacy_units_and_no_sizes(catalog: Catalog) -> None:
    found = {r["Name"]: r for r in rows(catalog, PSQL_DT_PLUS)}
    assert found["census"]["Description"] == "private table; privacy unit: each person, at most 3 rows per unit"
    assert found["pg_data"]["Description"] == "private table; privacy unit: one row"
    assert found["regions"]["Description"] == "public table (rows declared in the schema)"
    assert {r["Size"] for r in found.values()} == {None}  # sizes would describe the private data


def test_psql_d_census_every_query_runs(catalog: Catalog) -> None:
    """psql abandons ``\\d census`` when any of its queries fails, so all eight must run."""
    assert rows(catalog, PSQL_D_CENSUS[0]) == [{"oid": CENSUS_OID, "nspname": "public", "relname": "census"}]
    table = rows(catalog, with_census_oid(PSQL_D_CENSUS[1]))
    assert len(table) == 1 and table[0]["relkind"] == "r" and table[0]["relhasindex"] is False
    assert table[0]["amname"] == "heap"
    columns = rows(catalog, with_census_oid(PSQL_D_CENSUS[2]))
    assert [(c["attname"], c["format_type"], c["attnotnull"]) for c in columns] == [
        ("age", "bigint", False), ("sex", "text", False), ("income", "double precision", False),
        ("born", "date", False), ("region_id", "bigint", False), ("person", "bigint", False)]
    for footer in PSQL_D_CENSUS[3:]:  # policies, statistics, publications, inheritance, partitions: none
        assert rows(catalog, with_census_oid(footer)) == []


def test_psql_d_plus_census_shows_the_declared_domains(catalog: Catalog) -> None:
    table = rows(catalog, with_census_oid(PSQL_D_PLUS_CENSUS[0]))
    assert len(table) == 1 and table[0]["relkind"] == "r"
    columns = rows(catalog, with_census_oid(PSQL_D_PLUS_CENSUS[1]))
    assert {c["attname"]: c["col_description"] for c in columns} == {
        "age": "integer 0..99, GROUP BY bins of 5",
        "sex": "one of F, M",
        "income": "numeric 0..1000, resolution 10, GROUP BY bins of 100, SUM/AVG clamp to [0, 500]",
        "born": "date 1920-01-01..2020-12-31 by year, GROUP BY bins of 10 years",
        "region_id": "one of 1, 2, 3, references regions.region_id",
        "person": "integer 0..10000"}
    assert {c["attstorage"] for c in columns} == {"p", "x"}


def test_psql_dn_l_du_dT(catalog: Catalog) -> None:
    assert rows(catalog, PSQL_DN) == [{"Name": "public", "Owner": "dpsql"}]
    databases = rows(catalog, PSQL_L)
    assert [(d["Name"], d["Owner"], d["Encoding"]) for d in databases] == [("people", "dpsql", "UTF8")]
    assert [r["rolname"] for r in rows(catalog, PSQL_DU)] == ["dpsql"]  # analysts' names are never listed
    assert rows(catalog, PSQL_DT_TYPES) == []


def test_psql_plus_variants_and_privileges(catalog: Catalog) -> None:
    databases = rows(catalog, PSQL_L_PLUS)
    assert [(d["Name"], d["Size"], d["Tablespace"]) for d in databases] == [("people", None, "pg_default")]
    assert [(r["Name"], r["Owner"]) for r in rows(catalog, PSQL_DN_PLUS)] == [("public", "dpsql")]
    privileges = rows(catalog, PSQL_DP)
    assert [(r["Name"], r["Access privileges"], r["Policies"]) for r in privileges] == [
        ("census", None, ""), ("pg_data", None, ""), ("regions", None, "")]
    assert rows(catalog, PSQL_DD) == []
    assert [r["Name"] for r in rows(catalog, PSQL_DB)] == ["pg_default"]
    assert rows(catalog, PSQL_DX) == []


def test_psql_pattern_matches_only_the_named_table(catalog: Catalog) -> None:
    query = PSQL_D_CENSUS[0].replace("^(census)$", "^(re.*)$")
    assert [r["relname"] for r in rows(catalog, query)] == ["regions"]


# ==================================================================================== JDBC, psycopg, no-FROM queries
JDBC_GET_TABLES = """SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM, c.relname AS TABLE_NAME,  CASE n.nspname ~ '^pg_' OR n.nspname = 'information_schema'  WHEN true THEN CASE  WHEN n.nspname = 'pg_catalog' OR n.nspname = 'information_schema' THEN CASE c.relkind   WHEN 'r' THEN 'SYSTEM TABLE'   WHEN 'v' THEN 'SYSTEM VIEW'   WHEN 'i' THEN 'SYSTEM INDEX'   ELSE NULL   END  WHEN n.nspname = 'pg_toast' THEN CASE c.relkind   WHEN 'r' THEN 'SYSTEM TOAST TABLE'   WHEN 'i' THEN 'SYSTEM TOAST INDEX'   ELSE NULL   END  ELSE CASE c.relkind   WHEN 'r' THEN 'TEMPORARY TABLE'   WHEN 'p' THEN 'TEMPORARY TABLE'   WHEN 'i' THEN 'TEMPORARY INDEX'   WHEN 'S' THEN 'TEMPORARY SEQUENCE'   WHEN 'v' THEN 'TEMPORARY VIEW'   ELSE NULL   END  END  WHEN false THEN CASE c.relkind  WHEN 'r' THEN 'TABLE'  WHEN 'p' THEN 'PARTITIONED TABLE'  WHEN 'i' THEN 'INDEX'  WHEN 'S' THEN 'SEQUENCE'  WHEN 'v' THEN 'VIEW'  WHEN 'c' THEN 'TYPE'  WHEN 'f' THEN 'FOREIGN TABLE'  WHEN 'm' THEN 'MATERIALIZED VIEW'  ELSE NULL  END  ELSE NULL  END  AS TABLE_TYPE, d.description AS REMARKS,  '' as TYPE_CAT, '' as TYPE_SCHEM, '' as TYPE_NAME, '' AS SELF_REFERENCING_COL_NAME, '' AS REF_GENERATION  FROM pg_catalog.pg_namespace n, pg_catalog.pg_class c  LEFT JOIN pg_catalog.pg_description d ON (c.oid = d.objoid AND d.objsubid = 0  and d.classoid = 'pg_class'::regclass)  WHERE c.relnamespace = n.oid  AND n.nspname LIKE 'public' AND c.relname LIKE '%' AND (false  OR ( c.relkind = 'r' AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' ) )  ORDER BY TABLE_TYPE,TABLE_SCHEM,TABLE_NAME"""
JDBC_TYPE_BY_NAME = """SELECT pg_type.oid, typname   FROM pg_catalog.pg_type   LEFT   JOIN (select ns.oid as nspoid, ns.nspname, r.r           from pg_namespace as ns           join ( select s.r, (current_schemas(false))[s.r] as nspname                    from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r          using ( nspname )        ) as sp     ON sp.nspoid = typnamespace  WHERE typname = $1  ORDER BY sp.r, pg_type.oid DESC LIMIT 1"""
JDBC_TYPE_BY_OID = """SELECT n.nspname = ANY(current_schemas(true)), n.nspname, t.typname FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON t.typnamespace = n.oid WHERE t.oid = $1"""
JDBC_SCHEMAS = """SELECT nspname AS TABLE_SCHEM, NULL AS TABLE_CATALOG FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY TABLE_SCHEM"""
#: psycopg 3's TypeInfo.fetch (psycopg/_typeinfo.py); psycopg sends its %(name)s as $1.
PSYCOPG_TYPE_INFO = """SELECT
    typname AS name, oid, typarray AS array_oid,
    oid::regtype::text AS regtype, typdelim AS delimiter
FROM pg_type t
WHERE t.oid = to_regtype($1)
ORDER BY t.oid
"""


def test_jdbc_metadata_queries(catalog: Catalog) -> None:
    tables = rows(catalog, JDBC_GET_TABLES)  # unquoted aliases fold to lower case, as in PostgreSQL
    assert [(t["table_name"], t["table_type"]) for t in tables] == [
        ("census", "TABLE"), ("pg_data", "TABLE"), ("regions", "TABLE")]
    assert tables[0]["remarks"].startswith("private table; privacy unit")  # 'pg_class'::regclass resolved to 1259
    assert catalog.answer(JDBC_TYPE_BY_NAME, user="a", params=["int8"]).to_pylist() == [{"oid": 20, "typname": "int8"}]
    assert catalog.answer(JDBC_TYPE_BY_OID, user="a", params=[1043]).to_pylist() == [
        {"?column?": True, "nspname": "pg_catalog", "typname": "varchar"}]
    assert [r["table_schem"] for r in rows(catalog, JDBC_SCHEMAS)] == ["information_schema", "pg_catalog", "public"]


#: pgjdbc's DatabaseMetaData.getColumns and getPrimaryKeys.
JDBC_GET_COLUMNS = """SELECT * FROM (SELECT n.nspname,c.relname,a.attname,a.atttypid,a.attnotnull OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,a.atttypmod,a.attlen,t.typtypmod,row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS attnum, nullif(a.attidentity, '') as attidentity,nullif(a.attgenerated, '') as attgenerated,pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc,dsc.description,t.typbasetype,t.typtype  FROM pg_catalog.pg_namespace n  JOIN pg_catalog.pg_class c ON (c.relnamespace = n.oid)  JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid)  JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid)  LEFT JOIN pg_catalog.pg_attrdef def ON (a.attrelid=def.adrelid AND a.attnum = def.adnum)  LEFT JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)  LEFT JOIN pg_catalog.pg_class dc ON (dc.oid=dsc.classoid AND dc.relname='pg_class')  LEFT JOIN pg_catalog.pg_namespace dn ON (dc.relnamespace=dn.oid AND dn.nspname='pg_catalog')  WHERE c.relkind in ('r','p','v','f','m') and a.attnum > 0 AND NOT a.attisdropped  AND n.nspname LIKE 'public' AND c.relname LIKE 'census') c WHERE true  ORDER BY nspname,c.relname,attnum"""
JDBC_PRIMARY_KEYS = """SELECT result.TABLE_CAT, result.TABLE_SCHEM, result.TABLE_NAME, result.COLUMN_NAME, result.KEY_SEQ, result.PK_NAME FROM (SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,   (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, ci.relname AS PK_NAME,   information_schema._pg_expandarray(i.indkey) AS KEYS, a.attnum AS A_ATTNUM FROM pg_catalog.pg_class ct   JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid)   JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_index i ON ( a.attrelid = i.indrelid)   JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid) WHERE true  AND n.nspname = E'public' AND ct.relname = E'census' AND i.indisprimary  ) result where  result.A_ATTNUM = (result.KEYS).x  ORDER BY result.table_name, result.pk_name, result.key_seq"""


def test_jdbc_columns_and_primary_keys(catalog: Catalog) -> None:
    columns = rows(catalog, JDBC_GET_COLUMNS)
    assert [(c["attname"], c["atttypid"], c["attnum"], c["description"]) for c in columns][:2] == [
        ("age", 20, 1, "integer 0..99, GROUP BY bins of 5"), ("sex", 25, 2, "one of F, M")]
    keys = catalog.answer(JDBC_PRIMARY_KEYS, user="a")
    assert keys.num_rows == 0  # no keys are declared
    assert keys.column_names == ["table_cat", "table_schem", "table_name", "column_name", "key_seq", "pk_name"]


#: SQLAlchemy's PostgreSQL dialect (has_table): columns qualified as pg_catalog.pg_class.relname.
SQLALCHEMY_HAS_TABLE = """SELECT pg_catalog.pg_class.relname FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace WHERE pg_catalog.pg_class.relname = $1 AND pg_catalog.pg_class.relkind = ANY (ARRAY['r', 'p', 'f', 'v', 'm']) AND pg_catalog.pg_table_is_visible(pg_catalog.pg_class.oid) AND pg_catalog.pg_namespace.nspname != 'pg_catalog'"""
#: Metabase's table sync: the estimated row count comes from pg_stat_user_tables.n_live_tup.
METABASE_TABLES = """SELECT "n"."nspname" AS "schema", "c"."relname" AS "name", CASE "c"."relkind" WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW' WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS "type", "d"."description" AS "description", "stat"."n_live_tup" AS "estimated_row_count" FROM "pg_catalog"."pg_class" AS "c" INNER JOIN "pg_catalog"."pg_namespace" AS "n" ON "c"."relnamespace" = "n"."oid" LEFT JOIN "pg_catalog"."pg_description" AS "d" ON ("c"."oid" = "d"."objoid") AND ("d"."objsubid" = 0) AND ("d"."classoid" = 'pg_class'::regclass) LEFT JOIN "pg_stat_user_tables" AS "stat" ON ("n"."nspname" = "stat"."schemaname") AND ("c"."relname" = "stat"."relname") WHERE ("c"."relnamespace" = "n"."oid") AND ("n"."nspname" !~ '^pg_') AND ("n"."nspname" <> 'information_schema') AND c.relkind IN ('r', 'p', 'v', 'f', 'm') AND has_table_privilege(c.oid, 'SELECT') ORDER BY "type" ASC, "schema" ASC, "name" ASC"""
#: DBeaver's schema list and column list.
DBEAVER_SCHEMAS = """select n.oid,n.*,d.description from pg_catalog.pg_namespace n left outer join pg_catalog.pg_description d on d.objoid=n.oid and d.objsubid=0 and d.classoid='pg_namespace'::regclass order by nspname"""
DBEAVER_COLUMNS = """select c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description,dep.objid from pg_catalog.pg_attribute a inner join pg_catalog.pg_class c on (a.attrelid=c.oid) left outer join pg_catalog.pg_attrdef ad on (a.attrelid=ad.adrelid and a.attnum = ad.adnum) left outer join pg_catalog.pg_description dsc on (c.oid=dsc.objoid and a.attnum = dsc.objsubid) left outer join pg_depend dep on dep.refobjid = a.attrelid AND dep.deptype = 'i' and dep.refobjsubid = a.attnum and dep.classid = dep.refclassid where a.attnum > 0 and not a.attisdropped and c.oid=$1 order by a.attnum"""
REMARKS_BY_REGCLASS = """SELECT c.column_name, pg_catalog.col_description(('"' || c.table_schema || '"."' || c.table_name || '"')::regclass::oid, c.ordinal_position) AS remarks FROM information_schema.columns c WHERE c.table_name = 'census' ORDER BY c.ordinal_position"""


def test_bi_tool_queries(catalog: Catalog) -> None:
    assert catalog.answer(SQLALCHEMY_HAS_TABLE, user="a", params=["census"]).to_pylist() == [{"relname": "census"}]
    assert catalog.answer(SQLALCHEMY_HAS_TABLE, user="a", params=["nope"]).num_rows == 0
    tables = rows(catalog, METABASE_TABLES)
    assert [(t["name"], t["estimated_row_count"]) for t in tables] == [
        ("census", None), ("pg_data", None), ("regions", None)]  # no row counts: they describe the data
    assert [r["nspname"] for r in rows(catalog, DBEAVER_SCHEMAS)] == ["information_schema", "pg_catalog", "public"]
    columns = catalog.answer(DBEAVER_COLUMNS, user="a", params=[CENSUS_OID]).to_pylist()
    assert [(c["relname"], c["attname"], c["description"]) for c in columns][:2] == [
        ("census", "age", "integer 0..99, GROUP BY bins of 5"), ("census", "sex", "one of F, M")]
    remarks = rows(catalog, REMARKS_BY_REGCLASS)
    assert [r["remarks"] for r in remarks][:2] == ["integer 0..99, GROUP BY bins of 5", "one of F, M"]


#: The ADBC PostgreSQL driver (libadbc_driver_postgresql 1.13): its type resolver on connect, get_objects' column
#: and table queries.
ADBC_TYPES = """SELECT oid, typname, typreceive, typbasetype, typrelid, typarray FROM pg_catalog.pg_type WHERE (typreceive != 0 OR typsend != 0) AND typtype != 'r' AND typreceive::TEXT != 'array_recv'"""
ADBC_COLUMNS = """SELECT attr.attname, attr.attnum, pg_catalog.col_description(cls.oid, attr.attnum), typ.typname FROM pg_catalog.pg_attribute AS attr INNER JOIN pg_catalog.pg_class AS cls ON attr.attrelid = cls.oid INNER JOIN pg_catalog.pg_namespace AS nsp ON nsp.oid = cls.relnamespace INNER JOIN pg_catalog.pg_type AS typ ON attr.atttypid = typ.oid WHERE attr.attnum > 0 AND NOT attr.attisdropped AND nsp.nspname LIKE $1 AND cls.relname LIKE $2"""
ADBC_TABLES = """SELECT c.relname, CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' END AS reltype FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = ANY($2)"""


def test_adbc_driver_queries(catalog: Catalog) -> None:
    types = {r["typname"]: r for r in rows(catalog, ADBC_TYPES)}
    assert types["int8"]["typreceive"] == "int8recv" and types["date"]["typreceive"] == "date_recv"
    assert types["int8"]["typarray"] == 1016 and "_int8" not in types  # arrays are array_recv, left out
    columns = catalog.answer(ADBC_COLUMNS, user="a", params=["public", "census"]).to_pylist()
    assert sorted((c["attnum"], c["attname"], c["typname"]) for c in columns) == [
        (1, "age", "int8"), (2, "sex", "text"), (3, "income", "float8"), (4, "born", "date"),
        (5, "region_id", "int8"), (6, "person", "int8")]
    tables = catalog.answer(ADBC_TABLES, user="a", params=["public", ["r", "v"]]).to_pylist()
    assert sorted(t["relname"] for t in tables) == ["census", "pg_data", "regions"]


def test_psql_tab_completion_quotes_identifiers(catalog: Catalog) -> None:
    found = rows(catalog, "SELECT pg_catalog.quote_ident(c.relname) FROM pg_catalog.pg_class c WHERE "
                          "substring(pg_catalog.quote_ident(c.relname), 1, 3) = 'cen' "
                          "AND pg_catalog.pg_table_is_visible(c.oid) UNION ALL SELECT quote_ident('Mixed \"Case')")
    assert found == [{"quote_ident": "census"}, {"quote_ident": '"Mixed ""Case"'}]


def test_a_cte_may_shadow_a_catalog_name(catalog: Catalog) -> None:
    assert rows(catalog, "WITH pg_class AS (SELECT 'mine' AS relname) SELECT relname FROM pg_class") == [
        {"relname": "mine"}]


def test_macros_see_the_callers_relation(catalog: Catalog) -> None:
    """pg_table_is_visible(pg_class.oid) on an unaliased pg_class: the macro's own lookup must not
    capture the caller's column (one row per table, not an error)."""
    found = rows(catalog, "SELECT relname FROM pg_catalog.pg_class WHERE pg_table_is_visible(pg_class.oid) "
                          "AND relnamespace = 2200 ORDER BY 1")
    assert [r["relname"] for r in found] == ["census", "pg_data", "regions"]


@pytest.mark.parametrize(("name", "oid", "array", "regtype"), [
    ("text", 25, 1009, "text"), ("int8", 20, 1016, "bigint"), ("double precision", 701, 1022, "double precision"),
    ("date", 1082, 1182, "date")])
def test_psycopg_type_info(catalog: Catalog, name: str, oid: int, array: int, regtype: str) -> None:
    found = catalog.answer(PSYCOPG_TYPE_INFO, user="a", params=[name]).to_pylist()
    assert found == [{"name": found[0]["name"], "oid": oid, "array_oid": array, "regtype": regtype, "delimiter": ","}]


def test_no_from_queries_report_the_server_the_dataset_and_the_analyst(catalog: Catalog) -> None:
    found = rows(catalog, "SELECT version(), current_database(), current_schema(), current_user, session_user, 1",
                 user="bob")
    assert found == [{"version": version_string(), "current_database": "people", "current_schema": "public",
                      "current_user": "bob", "session_user": "bob", "?column?": 1}]
    assert version_string().startswith("PostgreSQL 15.")
    assert rows(catalog, "SELECT pg_catalog.current_setting('server_version_num')") == [
        {"current_setting": "150000"}]
    assert rows(catalog, "SELECT $$it's$$ || current_user AS who", user="o'brien") == [{"who": "it'so'brien"}]


def test_result_columns_are_named_as_postgresql_names_them(catalog: Catalog) -> None:
    """Names checked against PostgreSQL 15 by hand (FigureColname): function and column names,
    a cast's or CASE's argument name, else the type name or "case", else ?column?."""
    found = catalog.answer("SELECT 1, 1::bigint, 'a'::text, relname::text, CASE WHEN true THEN relname END, "
                           "CASE WHEN true THEN 1 END, (SELECT relname FROM pg_class LIMIT 1), coalesce(relname, 'x'), "
                           "relname || 'x', ARRAY[1], pg_catalog.format_type(20, NULL), n.nspname AS Schema_Name, "
                           'c.relkind AS "Kind", CASE WHEN true THEN 1 ELSE relnatts END FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LIMIT 1',
                           user="a")
    assert found.column_names == ["?column?", "int8", "text", "relname", "case", "case", "relname", "coalesce",
                                  "?column?", "array", "format_type", "schema_name", "Kind", "relnatts"]


def test_parameters_are_bound_as_literals(catalog: Catalog) -> None:
    found = catalog.answer("SELECT relname FROM pg_class WHERE relname = $1 AND relnamespace = $2", user="a",
                           params=["census'; DROP TABLE x; --", 2200]).to_pylist()
    assert found == []
    assert catalog.answer("SELECT relname FROM pg_class WHERE relname = $1", user="a",
                          params=["census"]).to_pylist() == [{"relname": "census"}]
    with pytest.raises(ProgrammingError, match=r"parameter \$2"):
        catalog.answer("SELECT $2", user="a", params=["x"])
    with pytest.raises(ProgrammingError, match=r"parameter \$1 but 0"):
        catalog.answer("SELECT $1", user="a")
    with pytest.raises(ProgrammingError, match="named parameter"):
        catalog.answer("SELECT %(name)s", user="a", params=["x"])


def test_unknown_catalog_relations_are_named(catalog: Catalog) -> None:
    with pytest.raises(NotSupportedError, match=r"pg_catalog\.pg_stats is not provided.*pg_class"):
        catalog.answer("SELECT * FROM pg_catalog.pg_stats", user="a")
    with pytest.raises(NotSupportedError, match=r"information_schema\.triggers is not provided"):
        catalog.answer("SELECT * FROM information_schema.triggers", user="a")
    with pytest.raises(ProgrammingError, match="the catalog query failed"):
        catalog.answer("SELECT no_such_column FROM pg_class", user="a")


# ==================================================================================== nothing but the schema
def test_a_catalog_never_returns_data(catalog: Catalog) -> None:
    """A populated database with the same names does not matter: the catalog never sees it, and
    nothing shown counts rows."""
    private = duckdb.connect(":memory:")
    private.execute("CREATE TABLE census AS SELECT range AS age, 'F' AS sex FROM range(1000)")
    private.execute("CREATE TABLE pg_data AS SELECT 7 AS x")
    tables = rows(catalog, "SELECT relname, reltuples, relpages FROM pg_class WHERE relnamespace = 2200 ORDER BY 1")
    assert tables == [{"relname": name, "reltuples": -1.0, "relpages": 0} for name in ("census", "pg_data", "regions")]
    assert not catalog.is_catalog_query("SELECT x FROM pg_data")  # a declared table named pg_*: private
    assert not is_catalog_query("SELECT x FROM pg_data", ["pg_data"])
    with pytest.raises(NotSupportedError, match="not a catalog query"):
        catalog.answer("SELECT x FROM pg_data", user="a")
    with pytest.raises(NotSupportedError, match="not a catalog query"):
        catalog.answer("SELECT count(*) FROM census", user="a")
    cursor = catalog._connection.cursor()  # the catalog database holds no declared relation, only the emulation
    for relation in ("census", "pg_data", "regions"):
        with pytest.raises(duckdb.CatalogException):
            cursor.execute(f"SELECT * FROM {relation}")
    schemas = {row[0] for row in cursor.execute("SELECT schema_name FROM duckdb_tables()").fetchall()}
    assert schemas == {"dpsql_pg_catalog", "dpsql_information_schema"}


PRIVATE_QUERIES = [
    "SELECT COUNT(*) FROM census",
    "SELECT sex, AVG(income) FROM census GROUP BY sex",
    "SELECT * FROM census c JOIN information_schema.tables t ON t.table_name = 'census'",
    "SELECT * FROM information_schema.tables WHERE table_name IN (SELECT sex FROM census)",
    "SELECT (SELECT count(*) FROM census), version()",
    "SELECT * FROM pg_class WHERE EXISTS (SELECT 1 FROM census WHERE age > 50)",
    "WITH x AS (SELECT age FROM census) SELECT * FROM pg_class, x",
    "WITH census AS (SELECT * FROM census) SELECT * FROM census",
    "WITH a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a",
    "SELECT * FROM pg_class UNION ALL SELECT * FROM census",
    "SELECT * FROM public.pg_class",
    "SELECT * FROM other.pg_catalog.pg_class",
    "SELECT * FROM regions",
    "SELECT * FROM census, LATERAL (SELECT * FROM pg_class) p",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, privacy_unit_column=person) COUNT(*) FROM census",
    "EXPLAIN SELECT COUNT(*) FROM census",
]


@pytest.mark.parametrize("sql", PRIVATE_QUERIES)
def test_queries_reading_a_declared_table_are_not_catalog_queries(catalog: Catalog, sql: str) -> None:
    assert not is_catalog_query(sql)
    with pytest.raises(NotSupportedError, match="not a catalog query"):
        catalog.answer(sql, user="a")


REFUSED = [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM pg_class, read_parquet('x.parquet')",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM query('SELECT 1')",
    "ATTACH 'x.duckdb' AS x",
    "COPY pg_class TO '/tmp/x.csv'",
    "COPY (SELECT * FROM pg_class) TO '/tmp/x.csv'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET search_path = public",
    "SET dpsql.epsilon = 0.5",
    "SHOW dpsql.epsilon",
    "CREATE TABLE pg_x AS SELECT 1",
    "INSERT INTO pg_class VALUES (1)",
    "DELETE FROM pg_class",
    "SELECT * INTO pg_copy FROM pg_class",
    "SELECT 1; SELECT 2",
    "WITH d AS (DELETE FROM pg_class RETURNING *) SELECT * FROM d",
    "EXPLAIN SELECT * FROM pg_class",
    "",
    "SELECT FROM WHERE",
]


@pytest.mark.parametrize("sql", REFUSED)
def test_files_settings_and_changes_are_refused(catalog: Catalog, sql: str) -> None:
    assert not is_catalog_query(sql)
    with pytest.raises((NotSupportedError, ProgrammingError)):
        catalog.answer(sql, user="a")


@pytest.mark.parametrize("statement", [
    "SELECT * FROM read_csv('/etc/passwd')", "ATTACH '/tmp/dpsql-catalog-test.duckdb' AS x",
    "COPY dpsql_pg_catalog.pg_class TO '/tmp/dpsql-catalog-test.csv'", "INSTALL httpfs", "LOAD httpfs",
    "SET enable_external_access = true", "SET lock_configuration = false"])
def test_the_catalog_database_itself_is_locked(catalog: Catalog, statement: str) -> None:
    """Defence in depth: even SQL run directly on the catalog database reads no file."""
    cursor = catalog._connection.cursor()
    with pytest.raises(duckdb.Error):
        cursor.execute(statement)


def test_a_long_catalog_query_is_interrupted() -> None:
    quick = Catalog(Schema.load(SCHEMA), "people", timeout=0.2)
    with pytest.raises(ProgrammingError, match=r"ran longer than 0\.2 s"):
        quick.answer("SELECT count(*) FROM generate_series(1, 100000000000) AS g(i), pg_class", user="a")


def test_concurrent_answers_agree(catalog: Catalog) -> None:
    """Each call runs on its own cursor: eight threads at once get the same answers."""
    results: list[list[dict[str, object]]] = []
    lock = threading.Lock()

    def ask() -> None:
        for _ in range(10):
            found = rows(catalog, PSQL_DT)
            with lock:
                results.append(found)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 80 and all(found == results[0] for found in results)


# ==================================================================================== recognition
@pytest.mark.parametrize("sql", [
    "SELECT 1", "select version()", "SELECT current_database()", "SELECT current_schema()", "SELECT current_user",
    "SELECT * FROM pg_catalog.pg_namespace", "SELECT typname FROM pg_type WHERE typname = 'int8'",
    "SELECT * FROM information_schema.columns WHERE table_name = 'census'",
    "WITH t AS (SELECT relname FROM pg_class) SELECT * FROM t",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
    "SELECT x FROM pg_catalog.generate_series(1, 3) AS x",
])
def test_catalog_queries_are_recognised(sql: str) -> None:
    assert is_catalog_query(sql)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_is_catalog_query_never_raises_on_text(text: str) -> None:
    assert is_catalog_query(text) in (True, False)


_WORDS = ["SELECT", "FROM", "WHERE", "pg_class", "census", "information_schema.tables", "(", ")", ",", "*", "1",
          "'x'", "JOIN", "ON", "=", "WITH", "AS", "UNION", "::regclass", "OPERATOR(pg_catalog.~)", ";", "$1", "--"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=20))
def test_is_catalog_query_never_raises_on_sql_like_text(words: list[str]) -> None:
    sql = " ".join(words)
    assert is_catalog_query(sql) in (True, False)
    reads_census = "FROM census" in sql or "JOIN census" in sql
    if reads_census and "--" not in words and "WITH" not in words:  # no comment hiding it, no CTE named census
        assert not is_catalog_query(sql)


_CATALOG_WORDS = ["SELECT", "FROM", "WHERE", "pg_class c", "pg_catalog.pg_type t", "information_schema.columns", "(", ")",
                  ",", "*", "1", "'x'", "JOIN", "ON", "=", "AS", "UNION", "::regclass", "::regtype", "::oid", "::text",
                  "::int2[]", "OPERATOR(pg_catalog.~)", "$1", "relname", "c.oid", "format_type(", "array(", "ANY(",
                  "CASE", "WHEN", "THEN", "END", "COLLATE pg_catalog.default", "version()", "current_user", "t.*",
                  "LIMIT", "ORDER BY", "unnest(", "generate_series(", "NULL", "||", "!~", "EXISTS", "(SELECT",
                  "WITH x AS"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_CATALOG_WORDS), min_size=1, max_size=25))
def test_answer_raises_only_dpsql_errors(catalog: Catalog, words: list[str]) -> None:
    """Whatever catalog-like text arrives, the server gets an Arrow table or a PEP 249 error."""
    try:
        catalog.answer("SELECT " + " ".join(words), user="a", params=["x"])
    except (NotSupportedError, ProgrammingError):
        pass


def test_deeply_nested_queries_are_refused_cleanly(catalog: Catalog) -> None:
    with pytest.raises(ProgrammingError, match="nested too deeply"):
        catalog.answer("SELECT " + " + ".join(["1"] * 3000), user="a")


# ==================================================================================== domains in words
@pytest.mark.parametrize(("spec", "words"), [
    ({"type": "integer", "lower": 0, "upper": 99}, "integer 0..99"),
    ({"type": "integer", "lower": 0, "upper": 99, "bin_width": 10, "resolution": 5},
     "integer 0..99, resolution 5, GROUP BY bins of 10"),
    ({"type": "integer", "edges": [0, 18, 65, 120]}, "integer with edges 0, 18, 65, 120"),
    ({"type": "numeric", "lower": 0, "upper": 1, "bin_width": 0.25, "out_of_domain": "clamp"},
     "numeric 0..1, GROUP BY bins of 0.25, values outside clamped to the domain"),
    ({"type": "categorical", "values": list("ABCDEFGHIJKLMN"), "out_of_domain": "exclude"},
     "one of A, B, C, D, E, F, G, H, I, J, K, L, ... (14 values), rows outside the domain excluded"),
    ({"type": "date", "lower": "2020-01-01", "upper": "2020-03-31", "unit": "month", "other": True},
     "date 2020-01-01..2020-03-31 by month, NULL/outside shown as a NULL group"),
])
def test_domains_in_words(spec: dict[str, object], words: str) -> None:
    column = Schema.load({"tables": {"t": {"columns": {"c": spec}}}}).table("t").columns["c"]
    assert describe_domain(column) == words
