"""The views query service against the real Kafka: rows and markers produced in transactions as
the views job writes them, read back over HTTP and Server-Sent Events."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.services import alive, ends_within
from support.views_api import SEGMENT_COLUMNS, Events, Service, Views, customer

from infra.bench.views import changelog_process

StackEnv = dict[str, str]


def test_pull_by_key_composite_keys_filters_and_freshness(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    views.write(
        [customer(i, i, "platinum" if i % 3 == 0 else "gold") for i in range(1, 31)],
        [{"club_status": "platinum", "channel": "web", "hour": "2026-11-24T03", "ratings": 7}],
    )
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    assert service.get("/views/customer_ratings/7") == (200, customer(7, 7))
    status, row = service.get("/views/segment_hourly/platinum/web/2026-11-24T03")
    assert (status, row["ratings"]) == (200, 7)
    status, scan = service.get("/views/customer_ratings?club_status=platinum&limit=4")
    assert status == 200 and len(scan["rows"]) == 4
    assert all(r["club_status"] == "platinum" for r in scan["rows"])
    assert len(service.get("/views/customer_ratings?customer_matched=true")[1]["rows"]) == 30
    assert service.get("/views/customer_ratings?ratings=12")[1]["rows"] == [customer(12, 12, "platinum")]
    catalog = {v["name"]: v for v in service.get("/views")[1]["views"]}
    assert catalog["customer_ratings"]["rows"] == 30 and catalog["segment_hourly"]["rows"] == 1
    assert catalog["customer_ratings"]["key"] == ["user_id"]
    assert catalog["segment_hourly"]["columns"] == SEGMENT_COLUMNS
    fresh = catalog["customer_ratings"]["freshness"]
    assert fresh["enriched_to"] == {"0": 10} and fresh["max_rating_time"] == 1_795_000_000_001
    assert fresh["applied_at_ms"] >= fresh["written_at_ms"] - 60_000
    with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/metrics", timeout=10) as response:
        scraped = response.read().decode()
    assert 'ratings_views_rows{view="customer_ratings"} 30.0' in scraped
    assert 'ratings_views_rows{view="segment_hourly"} 1.0' in scraped
    assert "ratings_views_caught_up 1.0" in scraped
    assert 'ratings_views_loading{view="customer_ratings"} 0.0' in scraped
    lag = 'ratings_views_rating_lag_seconds{view="customer_ratings"} '
    behind = [float(line.removeprefix(lag)) for line in scraped.splitlines() if line.startswith(lag)]
    assert behind and behind[0] >= time.time() - 1_795_000_000.001 - 5
    cli = [sys.executable, "-m", "services.views.cli", "--url", f"http://127.0.0.1:{service.port}"]
    shown = subprocess.run(
        [*cli, "show", "customer_ratings", "7"], capture_output=True, text=True, check=True
    )
    assert json.loads(shown.stdout) == customer(7, 7)
    listed = subprocess.run([*cli, "list"], capture_output=True, text=True, check=True)
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == [
        "customer_ratings",
        "segment_hourly",
    ]
    missing = subprocess.run([*cli, "show", "nope", "1"], capture_output=True, text=True, check=False)
    assert missing.returncode == 1 and "view 'nope' does not exist" in missing.stderr
    assert service.stop() == 0


def test_psql_gives_what_http_gives_for_a_key_a_range_with_a_limit_and_nothing(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    views.write(
        [customer(i, i, "platinum" if i % 3 == 0 else "gold") for i in range(1, 31)],
        [{"club_status": "platinum", "channel": "web", "hour": "2026-11-24T03", "ratings": 7}],
    )
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    _, row = service.get("/views/customer_ratings/7")
    names = list(row)
    asked = service.psql(f"SELECT {', '.join(names)} FROM customer_ratings WHERE user_id = 7")  # noqa: S608 (the view's own column names)
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.splitlines() == ["|".join(_pg_text(row[n]) for n in names)]
    _, scan = service.get("/views/customer_ratings?club_status=platinum&limit=4")  # in key order
    ranged = service.psql(
        "SELECT user_id FROM customer_ratings WHERE club_status = 'platinum' ORDER BY user_id LIMIT 4"
    )
    assert ranged.stdout.split() == [str(r["user_id"]) for r in scan["rows"]] == ["3", "6", "9", "12"]
    _, between = service.get("/views/customer_ratings?user_id.between=10,14&order=desc&limit=3")
    ranged = service.psql(
        "SELECT user_id FROM customer_ratings WHERE user_id BETWEEN 10 AND 14 ORDER BY 1 DESC LIMIT 3"
    )
    assert ranged.stdout.split() == [str(r["user_id"]) for r in between["rows"]] == ["14", "13", "12"]
    rest = service.get(
        f"/views/customer_ratings?user_id.between=10,14&order=desc&limit=3&after={between['next']}"
    )
    assert [r["user_id"] for r in rest[1]["rows"]] == [11, 10] and rest[1]["next"] is None
    assert service.get("/views/customer_ratings?ratings.gte=29")[1]["rows"] == [
        customer(29, 29),
        customer(30, 30, "platinum"),
    ]
    assert service.get("/views/customer_ratings?user_id.gte=5000") == (200, {"rows": [], "next": None})
    assert service.psql("SELECT * FROM customer_ratings WHERE user_id >= 5000").stdout == ""
    assert service.get("/views/customer_ratings?limit=100000")[0] == 400
    segment = service.psql("SELECT ratings FROM segment_hourly WHERE hour = '2026-11-24T03'")
    assert segment.stdout.split() == ["7"]
    assert service.get("/views/customer_ratings/4242")[0] == 404
    none = service.psql("SELECT * FROM customer_ratings WHERE user_id = 4242")
    assert none.returncode == 0 and none.stdout == ""
    write = service.psql("DELETE FROM customer_ratings")
    assert write.returncode != 0 and "25006" in write.stderr, write.stderr
    assert service.get("/views/customer_ratings/7") == (200, row)
    # An application's driver (the extended protocol, parameters bound): the same rows, typed
    with psycopg.connect(host="127.0.0.1", port=service.pg_port, user="app", dbname="views") as conn:
        pulled = conn.execute("SELECT * FROM customer_ratings WHERE user_id = %s", (7,))
        assert [dict(zip([d.name for d in pulled.description or []], r, strict=True)) for r in pulled] == [
            row
        ]
        listed = conn.execute(
            "SELECT user_id FROM customer_ratings WHERE user_id BETWEEN %s AND %s ORDER BY 1 DESC LIMIT %s",
            (10, 14, 3),
        )
        assert [r for (r,) in listed] == [r["user_id"] for r in between["rows"]]
        assert conn.execute("SELECT * FROM customer_ratings WHERE user_id = %s", (4242,)).fetchall() == []
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM customer_ratings WHERE user_id = %s", (7,))
    # As tools write it: the schema named, a cast; and what they read to list views and columns
    with psycopg.connect(host="127.0.0.1", port=service.pg_port, user="app", dbname="views") as conn:
        full = 'SELECT ratings FROM "public"."customer_ratings" WHERE user_id = %s::integer'
        assert conn.execute(full, ("7",)).fetchone() == (row["ratings"],)
        listed = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1"
        )
        assert [name for (name,) in listed] == ["customer_ratings", "segment_hourly"]
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
            " ORDER BY ordinal_position",
            ("customer_ratings",),
        )
        assert [name for (name,) in columns] == names
    assert service.stop() == 0


def _three_customers_served(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> tuple[Service, dict[str, Any]]:
    """A service over customer_ratings' rows of customers 1 to 3, healthy; customer 2's row."""
    views.write([customer(i, i) for i in range(1, 4)])
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    return service, service.get("/views/customer_ratings/2")[1]


def _no_subscriber_left(service: Service) -> None:
    deadline = time.monotonic() + 10
    while _subscribers(service) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _subscribers(service) == 0


def test_subscribe_over_the_wire_protocol_gives_the_rows_then_the_changes_until_cancelled(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    service, row = _three_customers_served(stack_env, views, tmp_path)
    columns = list(row)
    with psycopg.connect(
        host="127.0.0.1", port=service.pg_port, user="app", dbname="views", autocommit=True
    ) as conn:
        got: list[tuple[str | None, ...]] = []
        with (
            pytest.raises(psycopg.errors.QueryCanceled),
            conn.cursor().copy("COPY (SUBSCRIBE customer_ratings) TO STDOUT") as copy,
        ):
            for line in copy.rows():
                got.append(line)
                if len(got) == 3:  # the snapshot: then a change, written to the changelog topic
                    views.write([customer(2, 20, "platinum")])
                if len(got) == 4:
                    conn.cancel_safe()
        assert sorted(got[:3]) == [
            ("upsert", str(i), *(_pg_text(customer(i, i)[c]) or None for c in columns[1:])) for i in (1, 2, 3)
        ]
        changed = customer(2, 20, "platinum")
        assert got[3] == ("upsert", "2", *(_pg_text(changed[c]) or None for c in columns[1:]))
        assert conn.execute("SELECT ratings FROM customer_ratings WHERE user_id = 2").fetchone() == (20,)
    _no_subscriber_left(service)  # the subscriber left the service when the client cancelled
    assert service.stop() == 0


def test_a_cursor_for_subscribe_fetches_the_rows_then_a_change_written_meanwhile(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    service, row = _three_customers_served(stack_env, views, tmp_path)
    with psycopg.connect(host="127.0.0.1", port=service.pg_port, user="app", dbname="views") as conn:
        conn.execute("DECLARE c CURSOR FOR SUBSCRIBE customer_ratings")  # psycopg began a transaction
        snapshot = conn.execute("FETCH ALL c WITH (timeout = '5s')").fetchall()
        assert sorted(snapshot) == sorted(("upsert", *customer(i, i).values()) for i in (1, 2, 3))
        assert _subscribers(service) == 1
        views.write([customer(2, 20, "platinum")])  # to the changelog topic, meanwhile
        changed = conn.execute("FETCH ALL c WITH (timeout = '20s')").fetchall()
        assert changed == [("upsert", *customer(2, 20, "platinum").values())]
        assert (
            list(row)
            == [d.name for d in conn.execute("FETCH 1 c WITH (timeout = '0s')").description or []][1:]
        )
        conn.commit()  # the cursor ends with its transaction
    _no_subscriber_left(service)
    assert service.stop() == 0


def _subscribers(service: Service) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return float(
        next(line.split()[-1] for line in text.splitlines() if line.startswith("ratings_views_subscribers "))
    )


def _pg_text(value: Any) -> str:
    """A JSON value as psql prints it unaligned: null empty, booleans t/f, a whole double
    without Python's ".0" (PostgreSQL writes 4, not 4.0)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_bad_requests_get_a_4xx_naming_the_problem(stack_env: StackEnv, views: Views, tmp_path: Path) -> None:
    views.write([customer(1, 1)])
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    cases = {
        "/views/nope/1": (404, "view 'nope' does not exist"),
        "/views/nope": (404, "view 'nope' does not exist"),
        "/views/customer_ratings/abc": (400, "key column user_id: 'abc' is not a int"),
        "/views/customer_ratings/1/2": (400, "keyed by user_id"),
        "/views/segment_hourly/platinum/web": (400, "keyed by club_status, channel, hour"),
        "/views/customer_ratings/999": (404, "no row of view 'customer_ratings'"),
        "/views/customer_ratings?colour=red": (400, "unknown column 'colour'"),
        "/views/customer_ratings?ratings=many": (400, "filter ratings: 'many' is not a long"),
        "/views/customer_ratings?customer_matched=yes": (400, "not true or false"),
        "/views/customer_ratings?limit=0": (400, "limit: '0'"),
        "/views/customer_ratings?limit=5000": (400, "limit: '5000'"),
        "/views/customer_ratings?limit=%C2%B2": (400, "limit: '²'"),  # a digit, but not one int() reads
        "/views/customer_ratings?average_stars=nan": (400, "filter average_stars: 'nan' is not a double"),
        "/views/customer_ratings/4_2": (400, "key column user_id: '4_2' is not a int"),
        "/views/customer_ratings/changes?key=x": (400, "is not a int"),
        "/elsewhere": (404, "no such path"),
    }
    for path, (status, text) in cases.items():
        got, body = service.get(path)
        assert got == status, (path, body)
        assert text in body["error"], (path, body)
    request = urllib.request.Request(f"http://127.0.0.1:{service.port}/views", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)  # noqa: S310
    assert refused.value.code == 405 and "error" in json.loads(refused.value.read())
    assert "internal error" not in service.log.read_text()
    assert service.stop() == 0


def test_sse_sends_the_snapshot_then_each_change_in_order_and_nothing_twice(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    views.write([customer(1, 1), customer(2, 1)])
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    everything = Events(service.port, "/views/customer_ratings/changes")
    one = Events(service.port, "/views/customer_ratings/changes?key=2")
    filtered = Events(service.port, "/views/customer_ratings/changes?ratings.gte=2")  # as a scan filters
    everything.start()
    one.start()
    filtered.start()
    assert [e for e, _ in everything.wait(3)] == ["snapshot", "snapshot", "live"]
    assert {d["row"]["user_id"] for e, d in everything.events if e == "snapshot"} == {1, 2}
    views.write([customer(2, 2)])
    views.write([customer(2, 2)])  # the same row again (a replay): no change
    views.write([customer(1, 2), customer(2, 3)])
    changes = [d for e, d in everything.wait(6) if e == "change"]
    per_key: dict[int, list[int]] = {}
    for c in changes:  # in order per key (keys in other partitions may interleave)
        per_key.setdefault(c["key"]["user_id"], []).append(c["row"]["ratings"])
    assert per_key == {1: [2], 2: [2, 3]}
    mine = [d["row"]["ratings"] for e, d in one.wait(4) if e in ("snapshot", "change")]
    assert mine == [1, 2, 3]
    views.write([customer(1, 1)])  # back under the filter: removed for the filtered subscriber
    events = filtered.wait(5)
    assert events[0][0] == "live", events  # no row matched at first: no snapshot
    per_user: dict[int, list[int | None]] = {}
    for e, d in events[1:]:
        assert e == "change"
        per_user.setdefault(d["key"]["user_id"], []).append(d["row"] and d["row"]["ratings"])
    assert per_user == {2: [2, 3], 1: [2, None]}, events
    time.sleep(1.5)
    assert everything.comments >= 1, "a heartbeat comment while nothing changes"
    assert service.stop() == 0  # ends the streams
    everything.close()
    one.close()
    filtered.close()


def _subscribe_status(port: int) -> int:
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/views/customer_ratings/changes")
        return conn.getresponse().status
    finally:
        conn.close()


def test_subscribers_past_the_cap_get_a_503_and_a_place_left_is_free_again(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    views.write([customer(1, 1)])
    service = Service(stack_env, views, tmp_path)
    service.env["VIEWS_MAX_SUBSCRIBERS"] = "1"
    service.start()
    service.wait_healthy()
    first = Events(service.port, "/views/customer_ratings/changes")
    first.start()
    assert [e for e, _ in first.wait(2)] == ["snapshot", "live"]
    status, body = service.get("/views/customer_ratings/changes")
    assert status == 503 and "VIEWS_MAX_SUBSCRIBERS" in body["error"], body
    assert first.conn.sock is not None
    first.conn.sock.shutdown(socket.SHUT_RDWR)  # gone: the server finds out at its next heartbeat (1 s)
    first.close()
    deadline = time.monotonic() + 15
    while (status := _subscribe_status(service.port)) != 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert status == 200
    assert service.stop() == 0


def test_a_restart_answers_as_before_and_reads_only_the_tail(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    for batch in range(5):
        views.write([customer(i, batch + 1) for i in range(1, 201)])
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    before = service.get("/views/customer_ratings?limit=1000")[1]["rows"]
    assert len(before) == 200 and {r["ratings"] for r in before} == {5}
    assert service.stop() == 0
    views.write([customer(7, 6)])
    service.start()
    service.wait_healthy()
    after = service.get("/views/customer_ratings?limit=1000")[1]["rows"]
    assert after == [customer(7, 6) if r["user_id"] == 7 else r for r in before]
    # Every partition that had records resumed where the local copy stopped (segment_hourly had
    # none): the restart read the one new row and the two markers, not the 1,000 rows before.
    restarted = service.log.read_text().split("6 partitions (0 resumed", 1)[1]
    assert "6 partitions (5 resumed from the local copy" in restarted
    assert "caught up with the changelog topics (3 records applied)" in restarted
    assert service.stop() == 0


def test_until_the_topics_are_read_to_their_end_health_pulls_and_sql_refuse_rather_than_answer_from_part(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    for start in range(0, 60_000, 10_000):
        views.write([customer(i, 1) for i in range(start, start + 10_000)])
    service = Service(stack_env, views, tmp_path).start()
    health, pulls, counts = [], [], []  # what each was answered, in order, while the service loads
    deadline = time.monotonic() + 60
    while not pulls or pulls[-1] != 200:
        assert time.monotonic() < deadline, f"the last row never served: {pulls[-5:]}\n{service.tail()}"
        try:
            health.append(service.get("/health")[0])
            pulls.append(service.get("/views/customer_ratings/59999")[0])  # the last row written
        except OSError:  # not listening yet
            time.sleep(0.05)
            continue
        asked = service.psql("SELECT count(*) FROM customer_ratings")
        if asked.returncode != 2:  # 2: psql could not connect (the port opens just after HTTP's)
            counts.append(
                asked.stdout.strip() or asked.stderr.split("ERROR:", 1)[-1].split(":", 1)[0].strip()
            )
    assert health[0] == 503 and service.wait_healthy()[-1] == 200
    assert pulls[0] == 503 and set(pulls) == {503, 200}, pulls  # never a 404 for a row not read yet
    assert counts[0] == "57P03" and set(counts) <= {"57P03", "60000"}, counts  # never part of the view
    assert service.get("/views")[1]["views"][0]["rows"] == 60_000
    assert service.stop() == 0


def test_a_failed_changelog_process_stops_the_service_with_exit_code_1(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    service = Service(stack_env, views, tmp_path)
    service.env["VIEWS_CHANGELOG_TOPICS"] = json.dumps([views.customers, f"{views.customers}-missing"])
    service.start()
    assert service.wait_exit(60) == 1
    log = service.tail(80)
    assert "the changelog process failed" in log and "-missing" in log
    assert "stopped: reading the changelog topics failed" in log


def test_the_changelog_process_ends_with_the_server_either_way(
    stack_env: StackEnv, views: Views, tmp_path: Path
) -> None:
    views.write([customer(1, 1)])
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    assert service.proc is not None
    changelog = _changelog_process(service.proc.pid)
    os.kill(changelog, signal.SIGKILL)  # the changelog process dies: the server stops, and says why
    assert service.wait_exit(30) == 1
    assert "the changelog process ended (exit code -9)" in service.tail()

    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    assert service.proc is not None
    changelog = _changelog_process(service.proc.pid)
    os.kill(service.proc.pid, signal.SIGKILL)  # the server dies alone: no changelog process left over
    service.proc.wait(30)
    assert ends_within(changelog, 10), "the changelog process outlived the server"

    # a service manager's stop: SIGTERM to every process of the service at once
    service = Service(stack_env, views, tmp_path).start()
    service.wait_healthy()
    assert service.proc is not None
    changelog = _changelog_process(service.proc.pid)
    os.killpg(service.proc.pid, signal.SIGTERM)
    assert service.wait_exit(30) == 0, service.tail()
    this_run = service.tail(400).rsplit("serving on", 1)[1]  # the log holds the runs before too
    assert "ERROR" not in this_run, this_run
    assert "stopped" in this_run
    assert not alive(changelog)


def _changelog_process(server: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if (pid := changelog_process(server)) is not None:
            return pid
        time.sleep(0.1)
    pytest.fail(f"no changelog process under the service's {server}")
