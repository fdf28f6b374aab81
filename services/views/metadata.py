"""What tools ask to browse the views as a database: JDBC's DatabaseMetaData (a tool on the
PostgreSQL JDBC driver: Metabase, DataGrip, DBeaver's generic mode, a report writer) and
SQLAlchemy's inspector (pandas' `read_sql_table`, Superset, `Table(..., autoload_with=...)`).
Each asks with queries on `pg_catalog`, which the store does not have; each query is told by
its shape and answered from the views' descriptions, its name filters (`LIKE` or `=`, bound as
parameters or written as literals) applied as PostgreSQL applies them. Each view is a VIEW of
schema `public`; JDBC is told the view's key as its primary key, SQLAlchemy finds no
constraint, index or comment, as PostgreSQL reflects a view.

Written against the PostgreSQL JDBC driver 42.7's queries (`getSchemas`, `getCatalogs`,
`getTables`, `getColumns`, `getPrimaryKeys`, `getBestRowIdentifier` (the view's key),
`getTypeInfo` and the driver's look-ups of a type (PostgreSQL's common base types),
`getTablePrivileges` (SELECT, to the owner and to PUBLIC), `getClientInfoProperties`, and
`getIndexInfo`, `getImportedKeys`, `getExportedKeys`, `getFunctions`, `getProcedures`, their
columns, `getUDTs` and `getColumnPrivileges`, which find none, as for a view in PostgreSQL) and
SQLAlchemy 2.1's PostgreSQL dialect; `answer` gives None for any other query.
"""

import re
from collections.abc import Sequence

from services.views.sql import DATABASE, PG_TYPE_NAMES, SCHEMA, Column, Params, Result, pg_column, select_list

__all__ = [
    "BASE_TYPES",
    "FIRST_OID",
    "OWNER",
    "answer",
    "column_name",
    "format_type",
    "like",
    "oids",
    "result",
]

FIRST_OID = 16384  # PostgreSQL's first oid for user objects: the views' oids from here, by name
_TABLES = re.compile(
    r'AS "TABLE_CAT", n\.nspname AS "TABLE_SCHEM", c\.relname AS "TABLE_NAME".* '
    r"FROM pg_catalog\.pg_namespace n, pg_catalog\.pg_class c"
)
SCHEMAS = re.compile(
    r'^SELECT nspname AS "TABLE_SCHEM", current_database\(\) AS "TABLE_CATALOG" FROM pg_catalog'
)
_COLUMNS = re.compile(
    r"^SELECT \* FROM \(SELECT current_database\(\) AS current_database, n\.nspname,c\.relname,a\.attname,"
)
_KEYS = re.compile(r'^SELECT result\.TABLE_CAT AS "TABLE_CAT".*con\.contype = \'p\'')
_SHAPES = {"schemas": SCHEMAS, "tables": _TABLES, "columns": _COLUMNS, "keys": _KEYS}
_SETTING = re.compile(r"^SELECT setting FROM pg_catalog\.pg_settings WHERE name='([a-z_]+)'$")
_SETTINGS = {"max_index_keys": "32"}  # PostgreSQL's (the driver asks it before getImportedKeys)
_CATALOGS = re.compile(r'^SELECT datname AS "TABLE_CAT" FROM pg_catalog\.pg_database WHERE datallowconn')
# JDBC's queries of what a view has none of, in PostgreSQL as here: indexes (getIndexInfo),
# foreign keys (getImportedKeys, getExportedKeys), functions, procedures, user-defined types.
_NONE = re.compile(
    r'^SELECT (?:tmp\.TABLE_CAT AS "TABLE_CAT", .*tmp\.NON_UNIQUE AS "NON_UNIQUE"'
    r'|current_database\(\) AS "PKTABLE_CAT", pkn\.nspname AS "PKTABLE_SCHEM"'
    r'|current_database\(\) AS "(?:FUNCTION|PROCEDURE)_CAT"'
    r'|current_database\(\) as "TYPE_CAT", n\.nspname as "TYPE_SCHEM", t\.typname as "TYPE_NAME", '
    r'null as "CLASS_NAME"'
    r"|current_database\(\) AS current_database, n\.nspname,p\.proname,p\.prorettype,"
    r"|current_database\(\) AS current_database, n\.nspname,c\.relname,r\.rolname,c\.relacl, a\.attacl,)",
    re.IGNORECASE,
)
# PostgreSQL's common base types, (name, oid), as getTypeInfo and the driver's look-ups of a
# type by oid or by name find them: the views' own (int4, int8, float8, bool, text) among them.
BASE_TYPES = (
    ("bool", 16), ("bytea", 17), ("char", 18), ("name", 19), ("int8", 20), ("int2", 21),
    ("int4", 23), ("text", 25), ("oid", 26), ("tid", 27), ("json", 114), ("float4", 700),
    ("float8", 701), ("bpchar", 1042), ("varchar", 1043), ("date", 1082), ("time", 1083),
    ("timestamp", 1114), ("timestamptz", 1184), ("interval", 1186), ("numeric", 1700),
    ("uuid", 2950), ("jsonb", 3802),
)  # fmt: skip
_TYPE_NAMES = re.compile(
    r"^SELECT t\.typname,t\.oid FROM pg_catalog\.pg_type t JOIN pg_catalog\.pg_namespace n"
)
_TYPE_KINDS = re.compile(
    r"^SELECT typinput='pg_catalog\.array_in'::regproc as is_array, typtype, typname, pg_type\.oid "
    r"FROM pg_catalog\.pg_type\b"
)
_TYPE_BY_NAME = re.compile(
    r"^SELECT pg_type\.oid, typname FROM pg_catalog\.pg_type LEFT JOIN .* WHERE typname = "
)
_TYPE_OID = re.compile(r"\bWHERE pg_type\.oid = (?:\$([0-9]+)|([0-9]+))")
_NAME_LENGTH = re.compile(
    r"^SELECT t\.typlen FROM pg_catalog\.pg_type t, pg_catalog\.pg_namespace n WHERE .*t\.typname='name'"
)
_PRIVILEGES = re.compile(
    r"^SELECT current_database\(\) AS current_database, n\.nspname,c\.relname,r\.rolname,c\.relacl FROM "
)
_BEST_ROW = re.compile(r"^SELECT a\.attname, a\.atttypid, atttypmod FROM pg_catalog\.pg_class ct JOIN")
OWNER = "views"  # the role that owns the views, to every tool (psql's \\d, JDBC's privileges)
# SELECT (r) granted by the owner to itself and to PUBLIC (no name): anyone the service admits.
_ACL = f"{{{OWNER}=r/{OWNER},=r/{OWNER}}}"
# A name filter: `n.nspname LIKE $1`, `c.relname = 'x'`, `attname LIKE E'cust%'`...
_FILTER = r"\b{}\s+(LIKE|=)\s+(?:\$([0-9]+)|E?'((?:[^']|'')*)')"


def like(pattern: str, value: str) -> bool:
    """PostgreSQL's `value LIKE pattern`: % any run, _ any one character, \\ the next one as it
    is; case-sensitive."""
    out, escaped = [], False
    for char in pattern:
        if escaped:
            out.append(re.escape(char))
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            out.append({"%": ".*", "_": "."}.get(char) or re.escape(char))
    return re.fullmatch("".join(out), value, re.DOTALL) is not None


def _matches(text: str, column: str, value: str, params: Params | None) -> bool:
    """Whether `value` passes every filter of the query on `column`; a parameter not bound yet
    (a statement described before its Bind) passes."""
    for operator, number, literal in re.findall(_FILTER.format(re.escape(column)), text):
        pattern = (params or {}).get(number) if number else literal.replace("''", "'")
        if pattern is None:
            continue
        if not (like(str(pattern), value) if operator == "LIKE" else str(pattern) == value):
            return False
    return True


def result(
    names: list[str], rows: Sequence[tuple[str | None, ...]], kinds: list[str] | None = None
) -> Result:
    """A catalog answer: its columns by name (text unless `kinds` says), and its rows as text."""
    kinds = kinds or ["string"] * len(names)
    return Result(tuple(pg_column(n, k) for n, k in zip(names, kinds, strict=True)), list(rows))


def oids(names: list[str]) -> dict[str, int]:
    """Each view's oid, as psql's \\d and SQLAlchemy are told it: from FIRST_OID, by name."""
    return {name: FIRST_OID + i for i, name in enumerate(sorted(names))}


def answer(
    text: str, tables: dict[str, tuple[Column, ...]], keys: dict[str, list[str]], params: Params | None
) -> Result | None:
    """The answer to one of the JDBC driver's or SQLAlchemy's metadata queries (`text`: its words
    joined by one space; `keys`: each view's key columns; `params`: its bound parameters, None
    before its Bind), or None for any other query."""
    kind = next((k for k, shape in _SHAPES.items() if shape.search(text)), None)
    if kind is None:
        return _other(text) or _driver(text, tables, keys, params) or _reflected(text, tables, params)
    text = text.split(" WHERE ", 1)[1] if " WHERE " in text else ""  # the filters, not the CASEs
    if kind == "schemas":
        shown = _matches(text, "nspname", SCHEMA, params)
        return result(["TABLE_SCHEM", "TABLE_CATALOG"], [(SCHEMA, DATABASE)] if shown else [])
    if kind == "tables":
        return _tables(text, sorted(tables), params)
    if kind == "columns":
        return _columns(text, tables, params)
    return _keys(text, keys, params)


def _other(text: str) -> Result | None:
    """A setting the driver asks, the one catalog (getCatalogs), or what a view has none of."""
    if (setting := _SETTING.match(text)) is not None and setting.group(1) in _SETTINGS:
        return result(["setting"], [(_SETTINGS[setting.group(1)],)])
    if _CATALOGS.match(text):
        return result(["TABLE_CAT"], [(DATABASE,)])
    if _NONE.match(text):
        names = [column_name(item) for item in select_list(text)]
        return result(names, [])
    return None


def _tables(text: str, names: list[str], params: Params | None) -> Result:
    """getTables: the views, when the types asked include VIEW (`c.relkind = 'v'`) or none are
    named (every type: `AND (false OR ...)` is the driver's list of the types asked)."""
    every_type = "AND (false " not in text
    shown = [
        name
        for name in names
        if (every_type or "c.relkind = 'v'" in text)
        and _matches(text, "n.nspname", SCHEMA, params)
        and _matches(text, "c.relname", name, params)
    ]
    columns = ["TABLE_CAT", "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE", "REMARKS"]
    columns += ["TYPE_CAT", "TYPE_SCHEM", "TYPE_NAME", "SELF_REFERENCING_COL_NAME", "REF_GENERATION"]
    rows = [(DATABASE, SCHEMA, name, "VIEW", None, "", "", "", "", "") for name in shown]
    return result(columns, rows)


def _columns(text: str, tables: dict[str, tuple[Column, ...]], params: Params | None) -> Result:
    """getColumns: each view's columns in order, typed by their oid (the driver names the
    built-in types itself), nullable, with no default."""
    names = ["current_database", "nspname", "relname", "attname", "atttypid", "attnotnull", "atttypmod"]
    names += ["attlen", "typtypmod", "attnum", "attidentity", "attgenerated", "adsrc", "description"]
    names += ["typbasetype", "typtype"]
    kinds = (
        ["string"] * 4
        + ["long", "boolean", "int", "int", "int", "long"]
        + ["string"] * 4
        + ["long", "string"]
    )
    rows = []
    if _matches(text, "n.nspname", SCHEMA, params):
        for view in sorted(tables):
            if not _matches(text, "c.relname", view, params):
                continue
            for number, column in enumerate(tables[view], start=1):
                if _matches(text, "attname", column.name, params):
                    size = str(column.size)
                    row = (
                        DATABASE,
                        SCHEMA,
                        view,
                        column.name,
                        str(column.oid),
                        "f",
                        "-1",
                        size,
                        "-1",
                        str(number),
                    )
                    rows.append((*row, None, None, None, None, "0", "b"))
    return result(names, rows, kinds)


def _driver(
    text: str, tables: dict[str, tuple[Column, ...]], keys: dict[str, list[str]], params: Params | None
) -> Result | None:
    """The driver's type look-ups, getTablePrivileges and getBestRowIdentifier; None for any
    other query."""
    if (found := _type_lookup(text, params)) is not None:
        return found
    if _PRIVILEGES.match(text):
        rows = [
            (DATABASE, SCHEMA, name, OWNER, _ACL)
            for name in sorted(tables)
            if _matches(text, "n.nspname", SCHEMA, params) and _matches(text, "c.relname", name, params)
        ]
        return result(["current_database", "nspname", "relname", "rolname", "relacl"], rows)
    if _BEST_ROW.match(text):
        return _best_row(text, tables, keys, params)
    return None


def _type_lookup(text: str, params: Params | None) -> Result | None:
    """getTypeInfo's list of types, a type looked up by oid or by name (each base type a scalar
    of its own: not an array, `typtype` b), and the length of a name."""
    if _TYPE_NAMES.match(text):
        return result(["typname", "oid"], list(_types()), ["string", "long"])
    if _TYPE_KINDS.match(text):
        oid = _TYPE_OID.search(text)
        wanted = None if oid is None else (params or {}).get(oid.group(1)) if oid.group(1) else oid.group(2)
        rows = [
            ("f", "b", name, number) for name, number in _types() if wanted in (None, number, int(number))
        ]
        return result(
            ["is_array", "typtype", "typname", "oid"], rows, ["boolean", "string", "string", "long"]
        )
    if _TYPE_BY_NAME.match(text):
        named = [(number, name) for name, number in _types() if _matches(text, "typname", name, params)]
        return result(["oid", "typname"], named[:1], ["long", "string"])
    if _NAME_LENGTH.match(text):
        return result(["typlen"], [("64",)], ["int"])  # PostgreSQL's NAMEDATALEN
    return None


def _types() -> list[tuple[str, str]]:
    return [(name, str(oid)) for name, oid in BASE_TYPES]


def _best_row(
    text: str, tables: dict[str, tuple[Column, ...]], keys: dict[str, list[str]], params: Params | None
) -> Result:
    """getBestRowIdentifier: the view's key columns, which tell its rows apart (its primary key
    to getPrimaryKeys)."""
    rows = []
    if _matches(text, "n.nspname", SCHEMA, params):
        for view in sorted(keys):
            if view in tables and _matches(text, "ct.relname", view, params):
                oid_of = {c.name: str(c.oid) for c in tables[view]}
                rows += [(column, oid_of.get(column, "25"), "-1") for column in keys[view]]
    return result(["attname", "atttypid", "atttypmod"], rows, ["string", "long", "int"])


def _keys(text: str, keys: dict[str, list[str]], params: Params | None) -> Result:
    """getPrimaryKeys: a view's key columns, in the key's order."""
    names = ["TABLE_CAT", "TABLE_SCHEM", "TABLE_NAME", "COLUMN_NAME", "KEY_SEQ", "PK_NAME"]
    rows = []
    if _matches(text, "n.nspname", SCHEMA, params):
        for view in sorted(keys):
            if _matches(text, "ct.relname", view, params):
                for seq, column in enumerate(keys[view], start=1):
                    rows.append((DATABASE, SCHEMA, view, column, str(seq), f"{view}_pkey"))
    return result(names, rows, ["string"] * 4 + ["int", "string"])


# SQLAlchemy's inspector. Its queries name everything in full (pg_catalog.pg_class.relname) and
# bind its constants as parameters ($1::VARCHAR): the kinds of relation asked for, the names.
_SASCHEMAS = re.compile(r"^SELECT pg_catalog\.pg_namespace\.nspname FROM pg_catalog\.pg_namespace\b")
_SA_RELATIONS = re.compile(
    r"^SELECT (pg_catalog\.pg_class\.oid, )?pg_catalog\.pg_class\.relname FROM pg_catalog\.pg_class JOIN"
)
_SA_COLUMNS = re.compile(r"^SELECT pg_catalog\.pg_attribute\.attname AS name, pg_catalog\.format_type\(")
_SA_KINDS = re.compile(r"pg_catalog\.pg_class\.relkind = ANY \(ARRAY\[([^\]]*)\]\)")
_SA_NAMES = re.compile(r"pg_catalog\.pg_class\.relname IN \(([^)]*)\)")
_SASCHEMA = re.compile(r"pg_catalog\.pg_namespace\.nspname = (\$[0-9]+(?:::VARCHAR)?|'[^']*')")
_TOKEN = re.compile(r"\$([0-9]+)(?:::[A-Z]+)?|'((?:[^']|'')*)'")


def _values(listed: str, params: Params | None) -> list[str] | None:
    """The values of a list of parameters and literals; None when one is not bound yet."""
    values = []
    for number, literal in _TOKEN.findall(listed):
        value = (params or {}).get(number) if number else literal.replace("''", "'")
        if value is None:
            return None
        values.append(str(value))
    return values


def _relations(text: str, names: list[str], params: Params | None) -> list[str]:
    """The views a query of relations asks for: views among its kinds (`v`), in schema public
    (or the search path), among its names if it names some. Not bound yet: all of them."""
    kinds = _SA_KINDS.search(text)
    wanted = _values(kinds.group(1), params) if kinds else None
    if wanted is not None and "v" not in wanted:
        return []
    schema = _SASCHEMA.search(text)
    if schema is not None and (_values(schema.group(1), params) or [SCHEMA]) != [SCHEMA]:
        return []
    listed = _SA_NAMES.search(text)
    only = _values(listed.group(1), params) if listed else None
    return [name for name in names if only is None or name in only]


# Constraints, indexes, comments and storage options: a view has none, as in PostgreSQL (the
# view's key is given to JDBC tools as its primary key; SQLAlchemy's reflection of a view, as
# PostgreSQL's, has no primary key).
_SA_NONE = re.compile(
    r"^SELECT (?:attr\.conrelid, array_agg\("
    r"|pg_catalog\.pg_class\.relname, pg_catalog\.pg_(?:constraint|description)\."
    r"|pg_catalog\.pg_class\.oid, pg_catalog\.pg_class\.relname, pg_catalog\.pg_class\.reloptions"
    r"|pg_catalog\.pg_index\.indrelid, |pg_catalog\.pg_am\.oid, |pg_catalog\.pg_opclass\.oid, )"
)


_ALIAS = re.compile(r'\s+AS\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)\s*$', re.IGNORECASE)


def column_name(item: str) -> str:
    """The name a SELECT list's item gives its column: its alias, or its last name."""
    if (alias := _ALIAS.search(item)) is not None:
        name = alias.group(1)
        return name[1:-1].replace('""', '"') if name.startswith('"') else name
    return item.strip().rsplit(".", 1)[-1].strip('"')


def _reflected(text: str, tables: dict[str, tuple[Column, ...]], params: Params | None) -> Result | None:
    if _SA_NONE.search(text):
        names = [column_name(item) for item in select_list(text)]
        return result(names, [])
    if _SASCHEMAS.search(text):
        return result(["nspname"], [(SCHEMA,)])
    if (relations := _SA_RELATIONS.search(text)) is not None:
        shown = _relations(text, sorted(tables), params)
        if relations.group(1):  # with their oids, as catalog's \\d gives them
            numbered = oids(list(tables))
            return result(["oid", "relname"], [(str(numbered[n]), n) for n in shown], ["long", "string"])
        return result(["relname"], [(name,) for name in shown])
    if _SA_COLUMNS.search(text):
        names = ["name", "format_type", "default", "not_null", "table_name", "comment", "generated"]
        names += ["identity_options", "collation"]
        kinds = ["string", "string", "string", "boolean", "string", "string", "string", "string", "string"]
        rows = [
            (c.name, format_type(c), None, "f", view, None, "", None, None)
            for view in _relations(text, sorted(tables), params)
            for c in tables[view]
        ]
        return result(names, rows, kinds)
    return None


def format_type(column: Column) -> str:
    """PostgreSQL's name of a column's type, as `format_type()` gives it."""
    return PG_TYPE_NAMES.get(column.pg_type, "text")
