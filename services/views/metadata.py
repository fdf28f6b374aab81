"""JDBC's DatabaseMetaData over the views: what a tool that browses a database through the
PostgreSQL JDBC driver (Metabase, DataGrip, DBeaver's generic mode, a report writer) asks to
list schemas, tables, columns and primary keys. The driver asks each with a query on
`pg_catalog`, which the store does not have; each is told by its shape and answered from the
views' descriptions, its name patterns (`LIKE`, bound as parameters or written as literals)
applied as PostgreSQL applies them. Each view is a VIEW of schema `public` whose primary key is
the view's key.

Written against the queries of the PostgreSQL JDBC driver 42.7 (`getSchemas`, `getTables`,
`getColumns`, `getPrimaryKeys`); `answer` gives None for any other query.
"""

import re
from collections.abc import Sequence

from services.views.sql import Column, Params, Result, pg_column

__all__ = ["CATALOG", "answer", "like"]

CATALOG = "views"  # current_database(), the JDBC catalog
_SCHEMA = "public"
_TABLES = re.compile(
    r'AS "TABLE_CAT", n\.nspname AS "TABLE_SCHEM", c\.relname AS "TABLE_NAME".* '
    r"FROM pg_catalog\.pg_namespace n, pg_catalog\.pg_class c"
)
_SCHEMAS = re.compile(
    r'^SELECT nspname AS "TABLE_SCHEM", current_database\(\) AS "TABLE_CATALOG" FROM pg_catalog'
)
_COLUMNS = re.compile(
    r"^SELECT \* FROM \(SELECT current_database\(\) AS current_database, n\.nspname,c\.relname,a\.attname,"
)
_KEYS = re.compile(r'^SELECT result\.TABLE_CAT AS "TABLE_CAT".*con\.contype = \'p\'')
_SHAPES = {"schemas": _SCHEMAS, "tables": _TABLES, "columns": _COLUMNS, "keys": _KEYS}
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


def _result(names: list[str], kinds: list[str], rows: Sequence[tuple[str | None, ...]]) -> Result:
    return Result(tuple(pg_column(n, k) for n, k in zip(names, kinds, strict=True)), list(rows))


def answer(
    text: str, tables: dict[str, tuple[Column, ...]], keys: dict[str, list[str]], params: Params | None
) -> Result | None:
    """The answer to one of the JDBC driver's metadata queries (`text`: its words joined by one
    space), or None for any other query."""
    kind = next((k for k, shape in _SHAPES.items() if shape.search(text)), None)
    if kind is None:
        return None
    text = text.split(" WHERE ", 1)[1] if " WHERE " in text else ""  # the filters, not the CASEs
    if kind == "schemas":
        shown = _matches(text, "nspname", _SCHEMA, params)
        return _result(
            ["TABLE_SCHEM", "TABLE_CATALOG"], ["string"] * 2, [(_SCHEMA, CATALOG)] if shown else []
        )
    if kind == "tables":
        return _tables(text, sorted(tables), params)
    if kind == "columns":
        return _columns(text, tables, params)
    return _keys(text, keys, params)


def _tables(text: str, names: list[str], params: Params | None) -> Result:
    """getTables: the views, when the types asked include VIEW (`c.relkind = 'v'`)."""
    shown = [
        name
        for name in names
        if "c.relkind = 'v'" in text
        and _matches(text, "n.nspname", _SCHEMA, params)
        and _matches(text, "c.relname", name, params)
    ]
    columns = ["TABLE_CAT", "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE", "REMARKS"]
    columns += ["TYPE_CAT", "TYPE_SCHEM", "TYPE_NAME", "SELF_REFERENCING_COL_NAME", "REF_GENERATION"]
    rows = [(CATALOG, _SCHEMA, name, "VIEW", None, "", "", "", "", "") for name in shown]
    return _result(columns, ["string"] * len(columns), rows)


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
    if _matches(text, "n.nspname", _SCHEMA, params):
        for view in sorted(tables):
            if not _matches(text, "c.relname", view, params):
                continue
            for number, column in enumerate(tables[view], start=1):
                if _matches(text, "attname", column.name, params):
                    size = str(column.size)
                    row = (
                        CATALOG,
                        _SCHEMA,
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
    return _result(names, kinds, rows)


def _keys(text: str, keys: dict[str, list[str]], params: Params | None) -> Result:
    """getPrimaryKeys: a view's key columns, in the key's order."""
    names = ["TABLE_CAT", "TABLE_SCHEM", "TABLE_NAME", "COLUMN_NAME", "KEY_SEQ", "PK_NAME"]
    rows = []
    if _matches(text, "n.nspname", _SCHEMA, params):
        for view in sorted(keys):
            if _matches(text, "ct.relname", view, params):
                for seq, column in enumerate(keys[view], start=1):
                    rows.append((CATALOG, _SCHEMA, view, column, str(seq), f"{view}_pkey"))
    return _result(names, ["string"] * 4 + ["int", "string"], rows)
