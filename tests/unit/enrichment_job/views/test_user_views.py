"""A SQL view's changed rows as records: one too large for its changelog goes to the views'
dead-letter topic with the reason (and its bytes to the claim-check store), not to Kafka's
refusal (which would stop the view on every retry)."""

import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa

from enrichment_job.kafka.claim_check import ClaimCheck, Claimed
from enrichment_job.kafka.transactions import Records
from enrichment_job.runtime.state_dir import ObjectStoreSettings, StateDir
from enrichment_job.views.catalog import marker_key
from enrichment_job.views.settings import ViewsSettings
from enrichment_job.views.user_views import Leftovers, SqlViewSink
from foundation.kafka_record import MAX_RECORD_BYTES

HOUR = 3_600_000


def _sink(state: Path | None = None) -> SqlViewSink:
    sink = object.__new__(SqlViewSink)
    sink.settings = ViewsSettings(
        max_key_bytes=64, topic_prefix="view.", dlq_topic="views-dlq", state_dir=str(state or "unused")
    )
    sink.view = SimpleNamespace(name="by_channel")  # type: ignore[assignment]
    sink.topic = "view.by_channel"
    sink.claim_check = ClaimCheck.of(sink.settings, "views")
    return sink


def test_rows_over_the_key_or_record_bound_are_dead_lettered_with_the_reason_and_the_rest_written(
    tmp_path: Path,
) -> None:
    keys = [b'{"channel":"web"}', b'{"channel":"' + b"x" * 100 + b'"}', b'{"channel":"app"}']
    values = [b'{"n":1}', b'{"n":2}', b"v" * MAX_RECORD_BYTES]
    rows, dead = _sink(tmp_path)._split(pa.table({"key": keys, "value": values}), 7)
    assert (rows.topic, rows.keys, rows.values) == ("view.by_channel", [keys[0]], [values[0]])
    assert dead.topic == "views-dlq" and len(dead) == 2
    assert dead.headers is not None
    headers = [dict(h or []) for h in dead.headers]
    reasons = [h["dlq.reason"].decode() for h in headers]  # type: ignore[union-attr]
    assert reasons[0] == "view by_channel: key of 114 bytes, over VIEWS_JOB_MAX_KEY_BYTES (64)"
    assert reasons[1].startswith("view by_channel: row of 1000017 bytes, over a Kafka record's")
    assert dead.keys[0] == keys[1][:64] and len(dead.values[1] or b"") == 65_536
    # The row too large is kept whole in the state folder's dead-letters, where its headers say.
    assert "dlq.value.location" not in headers[0]
    claimed = Claimed.of(headers[1])
    assert claimed is not None and claimed.size == MAX_RECORD_BYTES
    kept = claimed.local_path()
    assert kept is not None and kept.parent == tmp_path / "dead-letters" / "views" / "by_channel" / "7"
    assert kept.read_bytes() == values[2]


def test_a_views_marker_key_is_the_same_for_every_creation_of_its_name() -> None:
    assert marker_key(ViewsSettings(name="views"), "by_channel") == "views-sql:by_channel"


def test_a_retention_removes_the_rows_of_windows_older_than_the_newest_minus_it_once() -> None:
    sink = _sink()
    sink.view = SimpleNamespace(name="hourly", retention_ms=2 * HOUR)  # type: ignore[assignment]
    sink.windows = defaultdict(set)

    def batch(*rows: tuple[bytes, int]) -> pa.Table:
        return pa.table({"key": [k for k, _ in rows], "__window_start_ms": [w for _, w in rows]})

    def expire(table: pa.Table, written: set[bytes]) -> list[bytes]:
        """A batch's slice: the rows written (not dead letters) join their windows; then what expired."""
        sink._remember(table, Records("view.hourly", list(written), [b"{}"] * len(written)))
        return sink._expired()

    assert expire(batch((b"a0", 0), (b"b0", 0), (b"a1", HOUR)), {b"a0", b"b0", b"a1"}) == []
    assert expire(batch((b"a2", 2 * HOUR)), {b"a2"}) == []  # 0 is just 2 h before 2 h
    assert expire(batch((b"a3", 3 * HOUR), (b"big", 0)), {b"a3"}) == [b"a0", b"b0"]  # b"big": not written
    assert expire(batch((b"a3", 3 * HOUR)), {b"a3"}) == []  # each window once
    # a tombstone (no value) is no row of its window
    sink._remember(batch((b"gone", 3 * HOUR)), Records("view.hourly", [b"gone"], [None]))
    assert b"gone" not in sink.windows[3 * HOUR]
    assert set(sink.windows) == {HOUR, 2 * HOUR, 3 * HOUR}


def test_a_deleted_checkpoint_written_again_by_a_late_snapshot_is_deleted_again_until_it_is_forgotten(
    tmp_path: Path,
) -> None:
    state = StateDir(tmp_path.as_uri(), ObjectStoreSettings())
    folder = tmp_path / "checkpoints" / "sql-by_channel-1"
    (folder / "state" / "0" / "0").mkdir(parents=True)
    leftovers = Leftovers(state, linger_s=0.5)
    leftovers.remove("checkpoints/sql-by_channel-1")
    assert not folder.exists()
    (folder / "state" / "0" / "0").mkdir(parents=True)  # the state store's snapshot, after the stop
    (folder / "state" / "0" / "0" / "10.zip").write_bytes(b"snapshot")
    leftovers.sweep()
    assert not folder.exists()
    time.sleep(0.6)
    leftovers.sweep()  # past the linger: the last look
    assert leftovers.watched == {}
    folder.mkdir(parents=True)  # a folder of that name made later is another's
    leftovers.sweep()
    assert folder.exists()
