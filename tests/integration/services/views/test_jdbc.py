"""The views' wire protocol as a JDBC tool sees it, through the real PostgreSQL JDBC driver
(the version infra/versions.toml pins): what DataGrip, DBeaver or Metabase ask to browse a
database, a prepared pull by key, a write. The driver runs in a Java program of its own
(jdbc/JdbcProbe.java) against a query service on the real Kafka."""

import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

from support.views_api import Service, Views, customer

from infra.stack.artifacts import stage_pgjdbc
from infra.stack.settings import StackSettings
from infra.stack.versions import load_versions

StackEnv = dict[str, str]
PROBE = Path(__file__).parent / "jdbc" / "JdbcProbe.java"


def _probe(stack_env: StackEnv, port: int, view: str, key: int) -> dict[str, list[list[str]]]:
    """Each call's rows (its values as the driver's getString gives them), or its error."""
    jar = stage_pgjdbc(StackSettings().cache_dir, load_versions())
    java = Path(stack_env["JAVA_HOME"]) / "bin" / "java"
    url = f"jdbc:postgresql://127.0.0.1:{port}/views?user=app"
    ran = subprocess.run(
        # the driver sends the JVM's zone as the session's TimeZone, as on a desktop outside UTC
        [str(java), "-Duser.timezone=Asia/Kolkata", "-cp", str(jar), str(PROBE), url, view, str(key)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    calls: dict[str, list[list[str]]] = defaultdict(list)
    for line in ran.stdout.splitlines():
        name, *values = line.split("\t")
        if values != ["END"]:
            calls[name].append(values)
    return calls


def _texts(row: dict[str, Any]) -> list[str]:
    """A row's values as the driver's getString gives them (booleans t and f)."""
    return ["t" if v is True else "f" if v is False else str(v) for v in row.values()]


def test_a_jdbc_tool_browses_the_views_pulls_a_row_as_http_gives_it_and_follows_a_view(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    written = [customer(i, i, "platinum" if i % 3 == 0 else "gold") for i in range(1, 11)]
    views.write(
        written,
        [{"club_status": "platinum", "channel": "web", "hour": "2026-11-24T03", "ratings": 7}],
    )
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    _, row = service.get("/views/customer_ratings/7")
    calls = _probe(stack_env, service.pg_port, "customer_ratings", 7)

    failed = {name: rows[0] for name, rows in calls.items() if rows and rows[0][0] == "ERROR"}
    assert failed.pop("write")[:2] == ["ERROR", "25006"]  # read only
    assert failed == {}  # every call a tool makes is answered
    assert calls["product"] == [["PostgreSQL", "15.0 (ratings views)"]]
    assert calls["catalogs"] == [["views"]] and calls["schemas"] == [["public", "views"]]
    # getTables with no types asked (every type) and with VIEW: the two views, as views
    for listing in ("tables", "views"):
        assert [(r[1], r[2], r[3]) for r in calls[listing]] == [
            ("public", "customer_ratings", "VIEW"),
            ("public", "segment_hourly", "VIEW"),
        ], listing
    # Columns in the order HTTP gives them, typed (JDBC's type code, PostgreSQL's type name)
    assert [(r[3], r[5]) for r in calls["columns"]] == [
        ("user_id", "int4"),
        ("ratings", "int8"),
        ("average_stars", "float8"),
        ("club_status", "text"),
        ("customer_matched", "bool"),
    ]
    assert [r[3] for r in calls["columns"]] == list(row)
    assert [(r[3], r[4]) for r in calls["primaryKeys"]] == [("user_id", "1")]
    assert [(r[1], r[3]) for r in calls["bestRowIdentifier"]] == [("user_id", "int4")]
    types = {r[0] for r in calls["typeInfo"]}
    assert {"int4", "int8", "float8", "bool", "text", "varchar", "timestamptz"} <= types
    assert sorted((r[2], r[4], r[5], r[6]) for r in calls["tablePrivileges"]) == [
        ("customer_ratings", "PUBLIC", "SELECT", "NO"),
        ("customer_ratings", "views", "SELECT", "YES"),
        ("segment_hourly", "PUBLIC", "SELECT", "NO"),
        ("segment_hourly", "views", "SELECT", "YES"),
    ]
    for none in ("columnPrivileges", "indexInfo", "importedKeys", "exportedKeys", "functions", "udts"):
        assert calls[none] == [], none
    assert calls["clientInfoProperties"][0][:2] == ["ApplicationName", "63"]
    assert calls["dbeaver"] == [["public", "app"]]
    assert calls["timeZone"] == [["Asia/Kolkata"]]
    # The pull, the first five times as unnamed statements, then as a named prepared one
    expected = [_texts(row)]
    for i in range(7):
        assert calls[f"pull{i}"] == expected, i
    # DECLARE c CURSOR FOR SUBSCRIBE, then FETCH: the view's rows, each an upsert
    assert sorted(calls["subscribed"], key=lambda r: int(r[1])) == [["upsert", *_texts(c)] for c in written]
    # COPY (...) TO STDOUT through the driver's CopyManager, as an export tool makes it
    assert calls["copied"] == [
        ["user_id,ratings"],
        *([f"{c['user_id']},{c['ratings']}"] for c in written[:3]),
    ]
    assert calls["copiedCount"] == [["3"]]
    # read with a fetch size: the driver describes its portal, then executes it 3 rows at a time
    # (past VIEWS_PG_MAX_ROWS too: test_pgwire.py sends the same messages to a capped server)
    assert calls["fetched"] == [[str(c["user_id"])] for c in written]
    assert service.get("/views/customer_ratings/7") == (200, row)  # the write changed nothing
    assert service.stop() == 0
