"""psql's describe commands over the views: `\\d` lists them, `\\d NAME` gives a view's columns
and their types. psql asks them with queries on `pg_catalog`, which the store does not have;
each one psql sends for these commands is told by its shape and answered from the views'
descriptions. Each view shows as a view of schema `public`, owned by `views`.

Written against psql 15's queries (Debian 12's postgresql-client). The JDBC driver's metadata
queries are `metadata`'s. Any other query on `pg_catalog` is refused with SQLSTATE 0A000:
`GET /views` gives the same description.

A view's SQL (as its file declares it, headers and all) is what `\\d+ NAME` shows as its
definition and `\\sv NAME` prints. Materialize's commands for the same are answered too:
`SHOW VIEWS` (and `SHOW MATERIALIZED VIEWS`: the views are materialized, kept by the views
job), `SHOW CREATE [MATERIALIZED] VIEW NAME` and `SHOW COLUMNS FROM NAME`.
"""

import re

from services.views import metadata
from services.views.sql import (
    DATABASE,
    IDENTIFIER,
    SCHEMA,
    VERSION,
    Column,
    Params,
    Result,
    SqlError,
    identifier,
    pg_column,
    select_list,
)

_TEXT = pg_column("name", "string")


_PATTERN = re.compile(r"OPERATOR\(pg_catalog\.~\) '\^\((.*?)\)\$'")
_TYPE_INFO = re.compile(r"\bFROM\s+pg_type\s+t\s+WHERE\s+t\.oid\s*=", re.IGNORECASE)
_VERSION = re.compile(r"SELECT pg_catalog\.version\(\) ?;?", re.IGNORECASE)
_CURRENT_CATALOG = re.compile(r"\s*SELECT\s+current_catalog\s*;?\s*", re.IGNORECASE)
_VIEWDEF = re.compile(r"SELECT pg_catalog\.pg_get_viewdef\('(\d+)'")
_NAME = rf'(?:(?:public|"public")\.)?{IDENTIFIER}'
_REGCLASS = re.compile(rf"SELECT '{_NAME}'::pg_catalog\.regclass::pg_catalog\.oid ?;?")
_SHOW = re.compile(r"\s*SHOW\s+(?:MATERIALIZED\s+VIEWS|VIEWS|CREATE\s|COLUMNS\s)", re.IGNORECASE)
_SHOW_VIEWS = re.compile(
    r"SHOW (?:MATERIALIZED )?VIEWS(?: (?:FROM|IN) (?:public|\"public\"))? ?;?", re.IGNORECASE
)
_SHOW_CREATE = re.compile(rf"SHOW CREATE (?:MATERIALIZED )?VIEW {_NAME} ?;?", re.IGNORECASE)
_SHOW_COLUMNS = re.compile(rf"SHOW COLUMNS (?:FROM|IN) {_NAME} ?;?", re.IGNORECASE)
_SOURCE = re.compile(  # psql's \sv NAME, then
    r"SELECT nspname, relname, relkind, pg_catalog\.pg_get_viewdef\(c\.oid, true\), "
    r".* WHERE c\.oid = (\d+) ?;?"
)
_ROLES = "SELECT r.rolname, r.rolsuper, r.rolinherit"  # psql's \du
_ROLE = {  # the one role, by the names of \du's columns (\du+ has one more, the description)
    "rolname": metadata.OWNER,
    "rolsuper": "f",
    "rolinherit": "t",
    "rolcreaterole": "f",
    "rolcreatedb": "f",
    "rolcanlogin": "t",
    "rolconnlimit": "-1",
    "memberof": "{}",
    "rolreplication": "f",
    "rolbypassrls": "f",
}
_QUOTED = r"'((?:[^']|'')*)'"
_COMPLETE_RELATIONS = re.compile(  # psql's tab completion of a relation's name
    r"SELECT c\.relname, NULL::pg_catalog\.text FROM pg_catalog\.pg_class c WHERE "  # noqa: S608 (a pattern)
    rf"(?:c\.relkind IN \(([^)]*)\) AND )?\(c\.relname\) LIKE {_QUOTED} .* UNION ALL "
    r"SELECT NULL::pg_catalog\.text, n\.nspname FROM pg_catalog\.pg_namespace n "
    rf"WHERE n\.nspname LIKE {_QUOTED}"
)
_COMPLETE_COLUMNS = re.compile(  # ... and of a column's, once the query names its view
    r"SELECT a\.attname, NULL::pg_catalog\.text FROM pg_catalog\.pg_attribute a, "  # noqa: S608 (a pattern)
    rf"pg_catalog\.pg_class c WHERE .*\(a\.attname\) LIKE {_QUOTED} AND c\.relname = {_QUOTED}"
)
_COMMENTS = 'SELECT DISTINCT tt.nspname AS "Schema", tt.name AS "Name", tt.object AS "Object"'  # \dd
_PRIVILEGES = re.compile(
    r'SELECT n\.nspname as "Schema", c\.relname as "Name", CASE c\.relkind .* AS "Access privileges"'
)
# Catalogs that hold nothing of the user's here (functions, extensions, operators, casts,
# languages, tablespaces...): psql's lists of them (\df, \dx, \do, \dC, \dL, \db...) are empty.
_NOTHING_HERE = frozenset(
    "pg_proc pg_aggregate pg_extension pg_operator pg_conversion pg_event_trigger pg_foreign_server "
    "pg_foreign_data_wrapper pg_user_mappings pg_publication pg_subscription pg_language pg_am "
    "pg_tablespace pg_cast pg_default_acl pg_ts_config pg_ts_dict pg_ts_parser pg_ts_template "
    "pg_collation pg_opclass pg_opfamily pg_statistic_ext pg_constraint pg_description "
    "pg_largeobject_metadata pg_db_role_setting".split()
)
_LITERAL = re.compile(r"'(?:[^']|'')*'")
_UNKNOWN_SQL = "-- kept by the views job from the enriched topic; GET /views gives its freshness"
_OID = re.compile(r"(?:c\.oid|a\.attrelid|attrelid|ev_class|tgrelid|inhrelid|conrelid|polrelid) = '(\d+)'")


def asks(sql: str) -> bool:
    """Whether `sql` is a query of PostgreSQL's catalog (which `answer` answers or refuses)."""
    return (
        "pg_catalog." in sql
        or _SHOW.match(sql) is not None
        or _TYPE_INFO.search(sql) is not None
        or _CURRENT_CATALOG.fullmatch(sql) is not None
    )


def answer(
    sql: str,
    tables: dict[str, tuple[Column, ...]],
    keys: dict[str, list[str]] | None = None,
    params: Params | None = None,
    definitions: dict[str, str | None] | None = None,
) -> Result:
    """The answer to one of psql's describe queries, to one of the JDBC driver's metadata
    queries (`metadata`; `keys`: each view's key columns, `params`: the statement's bound
    parameters), to Materialize's SHOW commands (`definitions`: each view's SQL, None where it
    is not known), to `SELECT pg_catalog.version()` (SQLAlchemy's first question) or
    `current_catalog`, or to psycopg's look-up of a type by name (none here: the views' columns
    are of built-in types); SqlError for any other catalog query."""
    text = " ".join(sql.split())
    definitions = definitions or {}
    if _SHOW.match(text):
        return _shown(text, tables, definitions)
    if (regclass := _REGCLASS.fullmatch(text)) is not None:  # psql's \sv NAME, first
        oid = metadata.oids(list(tables))[_view(regclass, tables)]
        return metadata.result(["oid"], [(str(oid),)], ["long"])
    found = metadata.answer(text, tables, keys or {}, params)
    if found is not None or (found := _listed(text)) is not None:
        return found
    return _other(text, tables, definitions)


def _other(text: str, tables: dict[str, tuple[Column, ...]], definitions: dict[str, str | None]) -> Result:
    """version(), current_catalog, psycopg's look-up of a type, psql's other commands (\\du,
    \\dp, Tab completion, the lists of kinds of objects the views have none of) and its
    describe queries."""
    if _VERSION.fullmatch(text):
        return metadata.result(["version"], [(VERSION,)])
    if _CURRENT_CATALOG.fullmatch(text):
        return metadata.result(["current_catalog"], [(DATABASE,)])
    if _TYPE_INFO.search(text):
        names = ["name", "oid", "array_oid", "regtype", "delimiter"]
        return metadata.result(names, [], ["string", "long", "long", "string", "string"])
    if (found := _psql_extras(text, tables)) is not None:
        return found
    main = _main_catalog(text)
    if (
        main in _NOTHING_HERE
        or text.startswith(_COMMENTS)
        or (main == "pg_type" and "t.typtype = 'd'" in text)
    ):
        return metadata.result([metadata.column_name(item) for item in select_list(text)], [])
    return _described(text, tables, definitions)


def _view(asked: re.Match[str], tables: dict[str, tuple[Column, ...]]) -> str:
    """The view a statement names (its first group), or 42P01."""
    name = identifier(asked.group(1))
    if name not in tables:
        raise SqlError("42P01", f'relation "{name}" does not exist')
    return name


def _shown(text: str, tables: dict[str, tuple[Column, ...]], definitions: dict[str, str | None]) -> Result:
    """Materialize's SHOW [MATERIALIZED] VIEWS, SHOW CREATE [MATERIALIZED] VIEW and SHOW COLUMNS."""
    if _SHOW_VIEWS.fullmatch(text):
        return metadata.result(["name"], [(name,) for name in sorted(tables)])
    if (create := _SHOW_CREATE.fullmatch(text)) is not None:
        name = _view(create, tables)
        sql = definitions.get(name)
        created = f"CREATE MATERIALIZED VIEW {SCHEMA}.{name} AS\n{sql}" if sql is not None else None
        return metadata.result(["name", "create_sql"], [(f"{DATABASE}.{SCHEMA}.{name}", created)])
    if (columns := _SHOW_COLUMNS.fullmatch(text)) is not None:
        rows = [(c.name, "t", metadata.format_type(c), None) for c in tables[_view(columns, tables)]]
        return metadata.result(
            ["name", "nullable", "type", "comment"], rows, ["string", "boolean", "string", "string"]
        )
    raise SqlError(
        "0A000",
        "SHOW of the views: SHOW [MATERIALIZED] VIEWS, SHOW CREATE VIEW <view> or SHOW COLUMNS FROM <view>",
    )


# psql's \l (the one database), \dn (the one schema) and \dT (no type of the user's): the row
# each shows, its columns named by the query (\l+ and \dn+ ask for more, shown empty).
_LISTS: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    (
        'SELECT d.datname as "Name", pg_catalog.pg_get_userbyid(d.datdba)',
        (DATABASE, metadata.OWNER, "UTF8", "C", "C", "", "libc"),
    ),
    ('SELECT n.nspname AS "Name", pg_catalog.pg_get_userbyid(n.nspowner)', (SCHEMA, metadata.OWNER)),
    ('SELECT n.nspname as "Schema", pg_catalog.format_type(t.oid, NULL) AS "Name"', None),
)


def _listed(text: str) -> Result | None:
    for start, row in _LISTS:
        if text.startswith(start):
            names = [metadata.column_name(item) for item in select_list(text)]
            rows = [tuple([*row, *[""] * len(names)][: len(names)])] if row is not None else []
            return metadata.result(names, rows)
    return None


def _described(
    text: str, tables: dict[str, tuple[Column, ...]], definitions: dict[str, str | None]
) -> Result:
    by_name = metadata.oids(list(tables))
    oids = {oid: name for name, oid in by_name.items()}
    if 'as "Owner"' in text and "FROM pg_catalog.pg_class c" in text and "c.relkind IN" in text:
        return _listing(text, sorted(tables))
    found = _PATTERN.search(text)
    if found and text.startswith("SELECT c.oid, n.nspname, c.relname"):
        try:
            pattern = re.compile(_psql_pattern(found.group(1)))
        except re.error as err:
            raise SqlError("2201B", f"invalid regular expression: {err}") from None
        rows = [(str(by_name[n]), SCHEMA, n) for n in sorted(tables) if pattern.fullmatch(n)]
        return metadata.result(["oid", "nspname", "relname"], rows, ["long", "string", "string"])
    oid = _OID.search(text)
    name = oids.get(int(oid.group(1))) if oid else None
    if name is not None and text.startswith("SELECT c.relchecks, c.relkind"):
        return _table_info(text)
    if name is not None and "FROM pg_catalog.pg_attribute a" in text and text.startswith("SELECT a.attname"):
        return _attributes(text, tables[name])
    if (defined := _definition(text, oids, definitions)) is not None:
        return defined
    if name is not None:  # rules, triggers, policies... of a view: none
        return Result((_TEXT,), [])
    raise SqlError(
        "0A000",
        "this catalog query is not served (psql's \\d commands, JDBC's and SQLAlchemy's metadata and "
        "information_schema.tables and .columns are); GET /views describes the views",
    )


def _definition(text: str, oids: dict[int, str], definitions: dict[str, str | None]) -> Result | None:
    """psql's \\sv NAME and the definition \\d+ NAME shows: the view's SQL."""
    source = _SOURCE.fullmatch(text)
    if source and int(source.group(1)) in oids:
        name = oids[int(source.group(1))]
        names = ["nspname", "relname", "relkind", "pg_get_viewdef", "reloptions", "checkoption"]
        sql = (definitions.get(name) or _UNKNOWN_SQL).strip()
        return metadata.result(names, [(SCHEMA, name, "v", sql, "{}", None)])
    viewdef = _VIEWDEF.match(text)
    if viewdef and int(viewdef.group(1)) in oids:
        sql = (definitions.get(oids[int(viewdef.group(1))]) or _UNKNOWN_SQL).strip()
        return metadata.result(["pg_get_viewdef"], [(" " + sql,)])
    return None


def _psql_extras(text: str, tables: dict[str, tuple[Column, ...]]) -> Result | None:
    """psql's \\du (the one role, `views`, which may log in), \\dp (SELECT on each view to the
    owner and to PUBLIC, as JDBC's getTablePrivileges says) and its tab completion of a view's
    name (`FROM cu<Tab>`, `\\d cu<Tab>`) and of a view's column (`WHERE cl<Tab>`)."""
    count = _select_items(text)
    if text.startswith(_ROLES):
        columns = [metadata.column_name(item) for item in select_list(text)]
        return metadata.result(columns, [tuple(_ROLE.get(name) for name in columns)])
    if _PRIVILEGES.match(text):
        found = _PATTERN.search(text)
        pattern = re.compile(_psql_pattern(found.group(1))) if found else None
        acl = f"{metadata.OWNER}=r/{metadata.OWNER}\n=r/{metadata.OWNER}"
        rows = [
            tuple([SCHEMA, n, "view", acl, "", ""][:count])
            for n in sorted(tables)
            if pattern is None or pattern.fullmatch(n)
        ]
        return metadata.result(
            ["Schema", "Name", "Type", "Access privileges", "Column privileges", "Policies"][:count], rows
        )
    if (relations := _COMPLETE_RELATIONS.match(text)) is not None:
        kinds, typed, schemas = relations.groups()
        views = [n for n in sorted(tables) if (kinds is None or "'v'" in kinds) and _like(typed).fullmatch(n)]
        found_rows: list[tuple[str | None, ...]] = [(n, None) for n in views]
        if _like(schemas).fullmatch(SCHEMA):
            found_rows.append((None, SCHEMA))
        return metadata.result(["relname", "nspname"], found_rows)
    if (attributes := _COMPLETE_COLUMNS.match(text)) is not None:
        typed, view = attributes.group(1), attributes.group(2).replace("''", "'")
        names = [c.name for c in tables.get(view, ()) if _like(typed).fullmatch(c.name)]
        return metadata.result(["attname", "text"], [(n, None) for n in names])
    return None


def _like(pattern: str) -> re.Pattern[str]:
    """A LIKE pattern (as a literal's text, backslash its escape) as a regular expression."""
    out, chars = [], iter(pattern.replace("''", "'"))
    for char in chars:
        if char == "\\":
            out.append(re.escape(next(chars, "\\")))
        else:
            out.append({"%": ".*", "_": "."}.get(char, re.escape(char)))
    return re.compile("".join(out), re.DOTALL)


def _main_catalog(text: str) -> str | None:
    """The catalog table the query's main FROM names (`pg_proc` for \\df's), if one of pg_catalog's."""
    masked, depth = _LITERAL.sub("''", text), 0
    for i, char in enumerate(masked):
        depth += (char == "(") - (char == ")")
        if depth == 0 and masked.startswith(" FROM pg_catalog.", i):
            return masked[i + 17 :].split(" ", 1)[0].split(",", 1)[0]
    return None


def _psql_pattern(pattern: str) -> str:
    """psql sends `\\d cust*` as the regular expression `^(cust.*)$`: the same in Python's."""
    return pattern.replace("''", "'")


def _listing(text: str, names: list[str]) -> Result:
    """`\\d` (and `\\dv`): the views; `\\dm` too, as what they are (materialized views: a
    Materialize user's first try); `\\dt`, `\\di`, `\\ds`: none of those kinds."""
    kinds = text.split("c.relkind IN (", 1)[1].split(")", 1)[0]
    kind = "view" if "'v'" in kinds else "materialized view"
    shown = names if "'v'" in kinds or "'m'" in kinds else []
    rows: list[tuple[str | None, ...]] = [(SCHEMA, n, kind, metadata.OWNER) for n in shown]
    if "pg_catalog.obj_description" in text or '"Size"' in text:  # \d+ asks for more columns
        rows = [(*row, "permanent", "", "0 bytes", "") for row in rows]
        more = ["Persistence", "Access method", "Size", "Description"]
        return metadata.result(["Schema", "Name", "Type", "Owner", *more], rows)
    return metadata.result(["Schema", "Name", "Type", "Owner"], rows)


def _table_info(text: str) -> Result:
    """relchecks, relkind, relhasindex, relhasrules, relhastriggers, relrowsecurity,
    relforcerowsecurity, relhasoids, relispartition, reloptions, reltablespace, reloftype,
    relpersistence, relreplident, amname: a view, with none of them."""
    values = ["0", "v", "f", "f", "f", "f", "f", "f", "f", "", "0", "", "p", "d", None]
    names = [f"c{i}" for i in range(len(values))]
    count = _select_items(text)
    return metadata.result(names[:count], [tuple(values[:count])])


def _attributes(text: str, columns: tuple[Column, ...]) -> Result:
    """attname, format_type, default, attnotnull, attcollation, attidentity, attgenerated
    (then, for `\\d+`, storage, compression, statistics target, description)."""
    count = _select_items(text)
    rows = []
    for column in columns:
        storage = "x" if column.pg_type == "text" else "p"  # extended, plain
        row = [column.name, metadata.format_type(column), None, "f", None, "", "", storage, None, None, None]
        rows.append(tuple(row[:count]))
    return metadata.result([f"c{i}" for i in range(count)], rows)


def _select_items(text: str) -> int:
    """How many items the query's select list has."""
    return len(select_list(text))
