"""Debezium change events of a micro-batch -> customer versions, the compacted `customers`
topic's records, dead letters, and the CDC state after them (clock = watermark, position).

CDC is small next to the ratings (a heartbeat every 100 ms and the customers' changes), so the
batch's change events come to the driver in one Spark job, as Arrow columns: nothing per record
in Python, and no further job to learn the watermark or to keep the new versions.
"""

import logging
import time
from dataclasses import dataclass
from functools import cache

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from enrichment_job.batch_io import concat, to_records
from enrichment_job.kafka_out import Records
from enrichment_job.plans import Columns, select
from enrichment_job.schemas import VERSION_FIELDS
from enrichment_job.settings import JobSettings
from enrichment_job.table import CdcState
from enrichment_job.transforms import binlog_type, cdc_clock, dead_letters, parse_cdc, version_columns

log = logging.getLogger("enrichment_job")

HEADERS = "array<struct<key:string,value:binary>>"


@dataclass(frozen=True)
class CdcResult:
    state: CdcState  # after this batch
    versions: pa.Table  # new customer versions (VERSION_FIELDS), in CDC order
    customers: Records  # the compacted topic: latest row per customer, None on delete
    dead: Records  # unreadable change events
    events: int  # CDC records read (heartbeats and tombstones included)
    duplicates: int  # changes Debezium sent again, skipped
    regressions: int = 0  # of the duplicates, those in an earlier binlog file than one read

    @property
    def changes(self) -> int:
        return int(self.versions.num_rows)

    def then(self, later: "CdcResult") -> "CdcResult":
        """This result followed by `later`, which read on from this one's state."""
        return CdcResult(
            state=later.state,
            versions=concat([self.versions, later.versions]),
            customers=_concat(self.customers, later.customers),
            dead=_concat(self.dead, later.dead),
            events=self.events + later.events,
            duplicates=self.duplicates + later.duplicates,
            regressions=self.regressions + later.regressions,
        )


def _concat(first: Records, second: Records) -> Records:
    headers = None
    if first.headers is not None or second.headers is not None:
        headers = [
            *(first.headers if first.headers is not None else [None] * len(first)),
            *(second.headers if second.headers is not None else [None] * len(second)),
        ]
    return Records(first.topic, [*first.keys, *second.keys], [*first.values, *second.values], headers)


class CdcReader:
    """Reads the CDC topic from where the committed state left it to where it ends now: at most
    `max_offsets_per_trigger` records, as an Arrow table with the Kafka source's columns.

    Not Spark's batch Kafka reader: that one sets up an admin client for every read, about
    0.25 s a batch on this machine, where a consumer kept open reads the few events of a batch
    (heartbeats, changes) in milliseconds. Nothing per rating passes here."""

    def __init__(self, settings: JobSettings, group_id: str, timeout_s: float = 60) -> None:
        self.topic = settings.cdc_topic
        self.limit = settings.max_offsets_per_trigger
        self.timeout_s = timeout_s
        self.short: dict[int, int] = {}  # after `ranges`: partition -> the end the limit cut short
        self.consumer = Consumer(
            {
                **settings.producer_config(),
                "group.id": group_id,  # assign only: the group has no members and commits nothing
                "enable.auto.commit": False,
                "isolation.level": "read_committed",  # like Spark's Kafka source
                "enable.partition.eof": False,
            }
        )

    def ranges(
        self, cdc_to: dict[int, int], until: dict[int, int] | None = None
    ) -> dict[int, tuple[int, int]]:
        """partition -> [first, end) offsets to read, up to where the topic ends now (or to
        `until`, partition -> offset); partitions with nothing new are left out. Where the
        limit cut a range short, `short` then holds the partition and the end it fell short of."""
        self.short = {}
        topic = self.consumer.list_topics(self.topic, timeout=self.timeout_s).topics[self.topic]
        if topic.error is not None:
            if topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:  # Debezium has not written yet
                return {}
            raise KafkaException(topic.error)
        ranges, budget = {}, self.limit
        for p in sorted(topic.partitions):
            if until is not None and p not in until:
                continue
            low, high = self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=self.timeout_s, cached=False
            )
            if until is not None:
                high = min(high, until[p])
            first = cdc_to.get(p, low)
            if first < low:
                raise KafkaException(
                    KafkaError(
                        KafkaError.OFFSET_OUT_OF_RANGE,
                        f"{self.topic}[{p}]: offsets {first}..{low - 1} were deleted before the job "
                        "read them (retention); the customer table would miss changes",
                    )
                )
            end = min(high, first + budget)
            if end > first:
                ranges[p] = (first, end)
                budget -= end - first
            if end < high:
                self.short[p] = high
        return ranges

    def read(self, ranges: dict[int, tuple[int, int]]) -> pa.Table:
        """The records of `ranges` (key, value, topic, partition, offset, timestamp)."""
        self.consumer.assign([TopicPartition(self.topic, p, first) for p, (first, _) in ranges.items()])
        ends = {p: end for p, (_, end) in ranges.items()}
        cols: dict[str, list[object]] = {c: [] for c in ("key", "value", "partition", "offset", "timestamp")}
        deadline = time.monotonic() + self.timeout_s
        left = sum(end - first for first, end in ranges.values())
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {self.topic} {ranges} within {self.timeout_s} s")
            # Asking for exactly what is left returns as soon as it has come.
            for msg in self.consumer.consume(max(1, min(left, 100_000)), 0.1):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                p, o = msg.partition(), msg.offset()
                if p is not None and o is not None and p in ends and o < ends[p]:
                    cols["key"].append(msg.key())
                    cols["value"].append(msg.value())
                    cols["partition"].append(p)
                    cols["offset"].append(o)
                    cols["timestamp"].append(msg.timestamp()[1])
                    left -= 1
            # Done with a partition once its position passed the end (control records of
            # transactions take offsets but are never returned).
            for tp in self.consumer.position([TopicPartition(self.topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
        self.consumer.unassign()
        rows = len(cols["offset"])
        return pa.table(
            {
                "key": pa.array(cols["key"], pa.binary()),
                "value": pa.array(cols["value"], pa.binary()),
                "topic": pa.array([self.topic] * rows, pa.string()),
                "partition": pa.array(cols["partition"], pa.int32()),
                "offset": pa.array(cols["offset"], pa.int64()),
                "timestamp": pa.array(cols["timestamp"], pa.timestamp("ms", tz="UTC")),
            }
        )

    def close(self) -> None:
        self.consumer.close()


def ingest(raw: DataFrame, state: CdcState, customers_topic: str, dlq_topic: str) -> CdcResult:
    """`raw`: change events of the CDC topic (Kafka columns), read after `state`. One Spark job."""
    events = parse_cdc(raw)
    good = cdc_clock(events.where("dlq_reason IS NULL AND NOT is_tombstone"), state.clock_ms, state.position)
    readable, unreadable = _row_columns()
    unread = dead_letters(
        events.where("dlq_reason IS NOT NULL OR is_tombstone"),
        "cdc",
        keep=("partition", "offset", "is_tombstone"),
    )
    rows = select(good, readable).unionByName(select(unread, unreadable)).toArrow()
    result = _result(
        rows.sort_by([("partition", "ascending"), ("offset", "ascending")]), state, customers_topic, dlq_topic
    )
    if result.regressions:
        log.error(
            "%d CDC events came from an earlier binlog file than the furthest position read, %s, and were "
            "skipped as re-sends. If the database's binlog started over (RESET MASTER, a restore, a "
            "failover), the customer table is frozen while heartbeats still move the watermark: "
            "re-snapshot into a new CDC topic and start the job under a new ENRICH_JOB_NAME",
            result.regressions,
            state.position,
        )
    return result


@cache
def _row_columns() -> tuple[Columns, Columns]:
    """ingest's one result: change events (kind change, duplicate or beat) and unreadable ones
    (bad, tombstone), as rows of one shape."""
    change = (F.col("source.table") == "customers") & ~F.col("duplicate")
    # Cast: every field nullable, as Arrow needs for a struct that is null on other rows.
    version = F.struct(*version_columns()).cast(VERSION_FIELDS)
    none = {
        "clock_ms": F.lit(None).cast("long"),
        "furthest": F.lit(None).cast(binlog_type()),
        "regressed": F.lit(None).cast("boolean"),
        "headers": F.lit(None).cast(HEADERS),
        "version": F.lit(None).cast(VERSION_FIELDS),
    }
    readable = Columns(
        F.when(change, "change").when(F.col("duplicate"), "duplicate").otherwise("beat").alias("kind"),
        F.col("partition"),
        F.col("offset"),
        F.col("clock_ms"),
        F.col("furthest"),
        F.col("regressed"),
        F.when(change, F.col("customer_id").cast("string").cast("binary")).alias("key"),
        F.when(change & (F.col("op") != "d"), F.to_json("after").cast("binary")).alias("value"),
        none["headers"].alias("headers"),
        F.when(change, version).alias("version"),
    )
    unreadable = Columns(
        F.when(F.col("is_tombstone"), "tombstone").otherwise("bad").alias("kind"),
        F.col("partition"),
        F.col("offset"),
        none["clock_ms"].alias("clock_ms"),
        none["furthest"].alias("furthest"),
        none["regressed"].alias("regressed"),
        F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        F.col("headers"),
        none["version"].alias("version"),
    )
    return readable, unreadable


def _result(rows: pa.Table, state: CdcState, customers_topic: str, dlq_topic: str) -> CdcResult:
    kind = rows.column("kind")
    changes = rows.filter(pc.equal(kind, "change"))
    readable = rows.filter(pc.is_valid(rows.column("clock_ms")))
    clock, furthest = state.clock_ms, state.position
    if readable.num_rows:
        clock = int(pc.max(readable.column("clock_ms")).as_py())
        seen = [p for p in readable.column("furthest").to_pylist()[-1:] if p is not None]
        if seen:
            last = (int(seen[0]["file"]), int(seen[0]["pos"]), int(seen[0]["row"]))
            furthest = max(last, furthest) if furthest is not None else last
    cdc_to = dict(state.cdc_to)
    if rows.num_rows:
        ends = rows.group_by("partition").aggregate([("offset", "max")])
        for p, o in zip(
            ends.column("partition").to_pylist(), ends.column("offset_max").to_pylist(), strict=True
        ):
            cdc_to[int(p)] = int(o) + 1
    versions = (
        pa.Table.from_struct_array(changes.column("version").combine_chunks()) if changes.num_rows else None
    )
    bad = rows.filter(pc.equal(kind, "bad"))
    return CdcResult(
        state=CdcState(clock, furthest, cdc_to),
        versions=versions if versions is not None else VERSION_SCHEMA.empty_table(),
        customers=to_records(changes.select(["key", "value"]), customers_topic),
        dead=to_records(bad.select(["key", "value", "headers"]), dlq_topic),
        events=rows.num_rows,
        duplicates=int(pc.sum(pc.equal(kind, "duplicate")).as_py() or 0),
        regressions=int(pc.sum(pc.and_(pc.equal(kind, "duplicate"), rows.column("regressed"))).as_py() or 0),
    )


def _arrow_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415

    return to_arrow_schema(VERSION_FIELDS)


VERSION_SCHEMA = _arrow_schema()
