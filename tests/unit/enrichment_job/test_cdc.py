"""Change events into versions, on a local Spark: re-sends skipped, and a binlog that started
over (RESET MASTER, a restore, a failover) told apart from a re-send and reported."""

import json
import logging
from typing import Any

import pytest

from enrichment_job.cdc import ingest
from enrichment_job.table import CdcState

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
RAW = "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"


def _event(cid: int, binlog_file: int, pos: int, ts_ms: int) -> bytes:
    row = {"id": cid, "first_name": "Ada", "last_name": "L", "club_status": "gold"}
    source = {
        "ts_ms": ts_ms,
        "file": f"mariadb-bin.{binlog_file:06d}",
        "pos": pos,
        "row": 0,
        "table": "customers",
    }
    return json.dumps({"before": row, "after": row, "op": "u", "ts_ms": ts_ms, "source": source}).encode()


def _ingest(spark: Any, events: list[bytes]) -> Any:
    raw = spark.createDataFrame([(b"k", v, "cdc", 0, 100 + i, None) for i, v in enumerate(events)], RAW)
    state = CdcState(clock_ms=50_000, position=(5, 1_000, 0), cdc_to={0: 100})
    return ingest(raw, state, "customers", "dlq")


def test_a_resend_of_recent_positions_is_skipped_quietly(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    result = _ingest(
        spark, [_event(7, 5, 900, 49_000), _event(7, 5, 1_000, 50_000), _event(7, 5, 1_100, 51_000)]
    )
    assert (result.duplicates, result.regressions, result.changes) == (2, 0, 1)
    assert "earlier binlog file" not in caplog.text


def test_changes_from_an_earlier_binlog_file_are_reported_loudly(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="enrichment_job"):
        result = _ingest(spark, [_event(7, 1, 4, 60_000), _event(8, 1, 400, 61_000)])
    assert (result.duplicates, result.regressions, result.changes) == (2, 2, 0)
    expected = "2 CDC events came from an earlier binlog file than the furthest position read, (5, 1000, 0)"
    assert expected in caplog.text
    assert "RESET MASTER" in caplog.text
