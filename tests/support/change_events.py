"""Debezium change events as the MariaDB and PostgreSQL connectors write them (JSON, schemas
off), and CDC records as the job's reader hands them over (Arrow, Kafka columns)."""

import json
from typing import Any

import pyarrow as pa

from enrichment_job.customers.table import CdcState
from enrichment_job.driver.cdc import CdcResult, ingest
from enrichment_job.records.schemas import CUSTOMER_FIELDS

CDC_TOPIC = "asgard.demo.customers"


def customer_row(cid: int, **columns: Any) -> dict[str, Any]:
    """A customer row as Debezium writes it: every column of the table, null where not given."""
    row = dict.fromkeys(CUSTOMER_FIELDS.names)
    return {**row, "id": cid, "first_name": "Ada", "last_name": "L", "club_status": "silver", **columns}


def change_event(
    op: str,
    cid: int,
    ts: int,
    pos: int,
    binlog_file: int = 1,
    *,
    snapshot: str | None = None,
    gtid: int | None = None,
    **after: Any,
) -> bytes:
    """A change of customer `cid` at source.ts_ms `ts`, binlog position `pos` (`snapshot`:
    Debezium's source.snapshot; `gtid`: the sequence number of source.gtid "0-1-<gtid>"; each
    left out when None)."""
    row = customer_row(cid, **after)
    envelope = {
        "before": row if op in ("u", "d") else None,
        "after": None if op == "d" else row,
        "op": op,
        "ts_ms": ts + 5,
        "source": {
            "ts_ms": ts,
            "file": f"mariadb-bin.{binlog_file:06d}",
            "pos": pos,
            "row": 0,
            "table": "customers",
            **({"snapshot": snapshot} if snapshot is not None else {}),
            **({"gtid": f"0-1-{gtid}"} if gtid is not None else {}),
        },
    }
    return json.dumps(envelope).encode()


def heartbeat(ts: str, pos: int) -> bytes:
    """A heartbeat: the heartbeat row's `ts` (database time in ms, ISO-8601) at binlog `pos`."""
    envelope = {
        "before": {"id": 1},
        "after": {"id": 1, "ts": ts},
        "op": "u",
        "ts_ms": 0,
        "source": {
            "ts_ms": 0,
            "file": "mariadb-bin.000001",
            "pos": pos,
            "row": 0,
            "table": "debezium_heartbeat",
        },
    }
    return json.dumps(envelope).encode()


def pg_change_event(
    op: str,
    cid: int,
    commit_ms: int,
    lsn: int,
    last_commit: int | None,
    *,
    table: str = "customers",
    snapshot: str = "false",
    **after: Any,
) -> bytes:
    """A change committed at `commit_ms` as the PostgreSQL connector writes it: source.lsn, and
    source.sequence ["<last commit LSN>", "<lsn>"] (null before the connector has seen a commit)."""
    row = customer_row(cid, **after)
    sequence = json.dumps([str(last_commit) if last_commit is not None else None, str(lsn)])
    envelope = {
        "before": {"id": cid} if op == "d" else None,
        "after": None if op == "d" else row,
        "op": op,
        "ts_ms": commit_ms + 5,
        "source": {
            "connector": "postgresql",
            "ts_ms": commit_ms,
            "snapshot": snapshot,
            "db": "demo",
            "sequence": sequence,
            "schema": "public",
            "table": table,
            "txId": 700 + lsn % 100,
            "lsn": lsn,
        },
    }
    return json.dumps(envelope).encode()


def cdc_records(values: list[bytes | None], first_offset: int = 0, topic: str = CDC_TOPIC) -> pa.Table:
    """The values as CDC records of partition 0 from `first_offset` on (None: a tombstone)."""
    rows = len(values)
    return pa.table(
        {
            "key": pa.array([b"k"] * rows, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array([topic] * rows, pa.string()),
            "partition": pa.array([0] * rows, pa.int32()),
            "offset": pa.array(range(first_offset, first_offset + rows), pa.int64()),
            "timestamp": pa.array([None] * rows, pa.timestamp("ms", tz="UTC")),
        }
    )


def ingest_values(
    spark: Any,
    values: list[bytes | None],
    clock_ms: int | None = None,
    position: tuple[int, int, int, int] | None = None,
) -> CdcResult:
    """`ingest` of the values as one batch, after the given clock and position."""
    return ingest(cdc_records(values), CdcState(clock_ms, position, {}), "customers", "dlq", spark)


def versions_frame(spark: Any, values: list[bytes | None]) -> Any:
    """The customer versions of the change events, as the job's customer table holds them."""
    return spark.createDataFrame(ingest_values(spark, values).versions)


def sample_versions(spark: Any) -> pa.Table:
    """Customer 7: created at 1 s, platinum at 2 s, deleted at 3 s, re-inserted at 4 s;
    customer 8 (Late Comer, gold) created at 10 s."""
    values = [
        change_event("c", 7, 1_000, 10, last_name="Lovelace"),
        change_event("u", 7, 2_000, 20, last_name="Lovelace", club_status="platinum"),
        change_event("d", 7, 3_000, 30),
        change_event("c", 7, 4_000, 40, last_name="Again", club_status="gold"),
        change_event("c", 8, 10_000, 50, first_name="Late", last_name="Comer", club_status="gold"),
    ]
    return ingest_values(spark, values).versions
