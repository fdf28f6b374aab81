"""The claim-check of dead letters too large for Kafka: where their bytes go, once, what an
unreachable store does, and how long the store keeps them."""

import logging
import os
import time
from pathlib import Path

import pytest

from enrichment_job.kafka.claim_check import ClaimCheck, StorePruner, record_lifetime_ms
from enrichment_job.kafka.transactions import Records
from enrichment_job.runtime.state_dir import ObjectStoreSettings, StateDir
from enrichment_job.settings import JobSettings
from foundation.errors import ConfigError, SinkUnavailable
from foundation.settings import load_settings


def test_the_bytes_go_to_a_path_made_of_the_origin_and_a_rerun_overwrites_the_same_file(
    tmp_path: Path,
) -> None:
    claim = ClaimCheck(StateDir(tmp_path.as_uri(), ObjectStoreSettings()), "enrichment")
    first = claim.put("ratings", 3, 17, b"\x00" * 10)
    again = claim.put("ratings", 3, 17, b"\x00" * 10)
    assert first == again
    assert first.location == (tmp_path / "enrichment" / "ratings" / "3" / "17").as_uri()
    assert first.headers() == [("dlq.value.location", first.location.encode()), ("dlq.value.bytes", b"10")]
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["17"]


def test_an_unwritable_store_is_retried_then_stops_the_batch_naming_the_setting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")  # a folder cannot be made under a file
    store = StateDir(blocker.as_uri(), ObjectStoreSettings())
    claim = ClaimCheck(store, "enrichment", timeout_s=0.3, _first_pause_s=0.05)
    with caplog.at_level(logging.WARNING), pytest.raises(SinkUnavailable, match="ENRICH_DEAD_LETTER_STORE"):
        claim.put("ratings", 0, 1, b"x")
    assert "retrying" in caplog.text


def test_the_store_defaults_to_the_state_folder_and_takes_a_path_or_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert JobSettings(state_dir="job").dead_letters.uri == (tmp_path / "job" / "dead-letters").as_uri()
    assert JobSettings(dead_letter_store="kept").dead_letters.uri == (tmp_path / "kept").as_uri()
    s3 = JobSettings(dead_letter_store="s3a://lake/dead/", s3_endpoint="http://127.0.0.1:9000")
    assert s3.dead_letters.uri == "s3a://lake/dead"
    monkeypatch.setenv("ENRICH_DEAD_LETTER_STORE", "gs://elsewhere")
    with pytest.raises(ConfigError, match="ENRICH_DEAD_LETTER_STORE"):
        load_settings(JobSettings)


def test_dead_letters_over_the_bound_go_without_their_value_to_the_path_their_headers_give(
    tmp_path: Path,
) -> None:
    """As the CDC step's dead letters come: their headers name the stage and the origin."""
    claim = ClaimCheck(StateDir(tmp_path.as_uri(), ObjectStoreSettings()), "enrichment")
    origin = [("dlq.reason", b"unknown op"), ("dlq.stage", b"cdc"), ("dlq.topic", b"asgard.demo.customers")]
    small, large = b"{}", b"{" + b" " * 100 + b"}"
    dead = Records(
        "enrichment-dlq",
        [b"k1", b"k2"],
        [small, large],
        [
            [*origin, ("dlq.partition", b"0"), ("dlq.offset", b"5")],
            [*origin, ("dlq.partition", "0"), ("dlq.offset", "6")],
        ],
    )
    out = claim.oversized(dead, max_bytes=50)
    assert out.values == [small, None]
    assert out.keys == [b"k1", b"k2"]
    assert out.headers is not None and out.headers[0] == dead.headers[0]  # type: ignore[index]
    where = tmp_path / "cdc" / "asgard.demo.customers" / "0" / "6"
    assert dict(out.headers[1])["dlq.value.location"] == where.as_uri().encode()
    assert where.read_bytes() == large
    assert claim.oversized(dead, max_bytes=1_000) is dead  # none over: nothing written or copied


def _aged(path: Path, age_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * 10)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_the_pruner_removes_its_own_stages_files_older_than_its_age_and_the_folders_they_leave(
    tmp_path: Path,
) -> None:
    old = _aged(tmp_path / "enrichment" / "ratings" / "3" / "17", 7_200)
    old_cdc = _aged(tmp_path / "cdc" / "asgard.demo.customers" / "0" / "5", 7_200)
    young = _aged(tmp_path / "enrichment" / "ratings" / "4" / "90", 60)
    other_job = _aged(tmp_path / "views" / "customer_ratings" / "12" / "ab", 7_200)
    pruner = StorePruner(
        StateDir(tmp_path.as_uri(), ObjectStoreSettings()), ("enrichment", "cdc"), keep_ms=3_600_000
    )
    assert pruner.prune() == 2
    assert not old.exists() and not old_cdc.exists()
    assert young.exists() and other_job.exists()
    assert not (tmp_path / "enrichment" / "ratings" / "3").exists()  # emptied, removed
    assert not (tmp_path / "cdc" / "asgard.demo.customers").exists()
    assert (tmp_path / "enrichment" / "ratings" / "4").is_dir()
    assert pruner.prune() == 0


def test_a_pruner_without_an_age_keeps_everything_and_a_missing_store_is_no_error(tmp_path: Path) -> None:
    old = _aged(tmp_path / "enrichment" / "ratings" / "0" / "1", 10 * 86_400)
    assert StorePruner(StateDir(tmp_path.as_uri(), ObjectStoreSettings()), ("enrichment",)).prune() == 0
    assert old.exists()
    nowhere = StateDir((tmp_path / "not yet").as_uri(), ObjectStoreSettings())
    assert StorePruner(nowhere, ("enrichment",), keep_ms=1).prune() == 0


def test_a_record_lives_at_most_its_topics_retention_after_its_segment_closes() -> None:
    assert record_lifetime_ms({"retention.ms": "-1", "segment.ms": "604800000"}) is None
    assert record_lifetime_ms({"retention.ms": "3600000", "segment.ms": "600000"}) == 4_200_000
    assert record_lifetime_ms({}) == 2 * 604_800_000  # Kafka's defaults: a week each


def test_the_pruner_of_a_jobs_settings_takes_the_age_they_set_in_its_own_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An explicit *_DEAD_LETTER_STORE_RETENTION_MS needs no broker; -1 keeps everything."""
    settings = JobSettings(state_dir=str(tmp_path), dead_letter_store_retention_ms=1_000)
    old = _aged(tmp_path / "dead-letters" / "enrichment" / "ratings" / "0" / "1", 60)
    with caplog.at_level(logging.INFO, logger="enrichment_job"):
        pruner = StorePruner.of(settings, ("enrichment",), "enrichment-dlq", first_after_s=0)
        deadline = time.monotonic() + 10
        while old.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pruner.close()
    assert not old.exists()
    assert "ENRICH_DEAD_LETTER_STORE_RETENTION_MS" in caplog.text
    forever = JobSettings(state_dir=str(tmp_path / "b"), dead_letter_store_retention_ms=-1)
    kept = _aged(tmp_path / "b" / "dead-letters" / "enrichment" / "ratings" / "0" / "1", 86_400)
    pruner = StorePruner.of(forever, ("enrichment",), "enrichment-dlq", first_after_s=0)
    assert pruner._thread is not None
    pruner._thread.join(10)
    pruner.close()
    assert kept.exists() and pruner.keep_ms is None
