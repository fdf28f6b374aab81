"""Ratings of a micro-batch (plus those still waiting) -> the as-of join -> enriched records,
alerts and dead letters, computed on the driver over Arrow columns.

A rating is released once its join can no longer change (the CDC watermark has passed its
rating_time and a version valid then was found, or has passed rating_time + grace) and every
earlier rating of its customer is released (order per customer); see `released`. The others
wait, on the driver as an Arrow table, and join the next batch. Each batch's Kafka transaction
carries a marker with the watermark it used and, per ratings partition, where the waiting
ratings start and how far the batch read. The watermark only grows and the table only gains
versions, so "waiting after batch N" is exactly "the ratings in those offset ranges not
releasable at N's watermark against N's table": a restart, whose table is N's (see
`CustomerTable.catch_up`), rebuilds it from Kafka (`recover`), and a re-run of batch N decides
as its first run did.

Why on the driver: a batch's records reach the driver anyway (one transactional producer
writes them), and the join of a batch is a few vectorized searches over the sorted versions
(`versions.VersionStore`): milliseconds, where the same join as a Spark job cost 0.5 to 1 s a
batch in planning, task scheduling and code generation, and most of the first minutes in JIT
compilation.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from enrichment_job.customers.versions import Picks, VersionStore
from enrichment_job.kafka.claim_check import ClaimCheck
from enrichment_job.kafka.transactions import Records
from enrichment_job.marker import BatchMarker
from enrichment_job.records import rating_values
from enrichment_job.records.json_columns import Slices, json_objects
from enrichment_job.records.rating_values import FIELDS, PARSED
from enrichment_job.records.schemas import CUSTOMER_COLUMNS
from enrichment_job.runtime.metrics import Steps
from enrichment_job.settings import JobSettings
from foundation.enriched import ENRICHED_NAMES

__all__ = ["Ratings", "RatingsResult", "released"]

log = logging.getLogger("enrichment_job")
STAGE = "enrichment"


@dataclass(frozen=True)
class RatingsResult:
    enriched: Records
    alerts: Records
    dead: Records
    waiting: pa.Table | None  # PARSED rows, in input order
    waiting_from: dict[int, int]  # partition -> first waiting offset
    new: int  # ratings of the batch (the rest had waited)


# Reads the ratings topic: partition -> [first, end) offsets -> the records (Kafka columns).
Reader = Callable[[dict[int, tuple[int, int]]], pa.Table]


class Ratings:
    """The ratings side of the pipeline: what waits between batches, and one batch's step."""

    def __init__(self, settings: JobSettings, threads: int = 1) -> None:
        """`threads`: how many write a batch's enriched records as JSON at once (the join on the
        driver: its cores; a task has one)."""
        self.settings = settings
        self.waiting: pa.Table | None = None
        self.claim_check = ClaimCheck.of(settings, STAGE)
        self._slices = Slices(threads) if threads > 1 else None

    def _parse(self, raw: pa.Table) -> pa.Table:
        settings = self.settings
        return rating_values.parse(raw, settings.max_future_ms, settings.max_rating_bytes)

    @property
    def waiting_count(self) -> int:
        return self.waiting.num_rows if self.waiting is not None else 0

    @property
    def waiting_bytes(self) -> int:
        return self.waiting.nbytes if self.waiting is not None else 0

    def full(self, max_count: int, max_bytes: int) -> bool:
        """Whether as many ratings wait as the caps allow, by count or by bytes: then a batch
        takes no new ones, and they stay in Kafka."""
        return self.waiting_count >= max_count or self.waiting_bytes >= max_bytes

    def recover(self, marker: BatchMarker, store: VersionStore, read: Reader) -> None:
        """The ratings waiting after the marker's batch, re-read from the ratings topic and
        decided again against `store`, the customer table as that batch had it."""
        starts, ends = marker.waiting_from, marker.consumed_to
        self.waiting = None
        if not starts:
            return
        parsed = self._parse(read({p: (o, ends[p]) for p, o in starts.items()}))
        readable = parsed.filter(pc.is_null(parsed.column("dlq_reason")))
        self.waiting = _waiting(self._decide(readable, store, marker.watermark_ms))
        log.info("recovered %d waiting ratings after batch %s", self.waiting_count, marker.batch_id)

    def step(
        self, raw: pa.Table, store: VersionStore, watermark_ms: int | None, steps: Steps | None = None
    ) -> RatingsResult:
        """`raw`: the batch's records of the ratings topic (Kafka columns); `store`: the
        customer table."""
        steps = steps or Steps()
        settings = self.settings
        with steps("parse"):
            parsed = self._parse(raw)
        if self.waiting is not None:  # in input order with the new ones
            parsed = pa.concat_tables([self.waiting, parsed]).combine_chunks().sort_by(rating_values.ORDER)
        with steps("join"):
            rows = self._decide(parsed, store, watermark_ms)
        with steps("records"):
            kind = rows.column("kind")
            enriched = rows.filter(pc.equal(kind, "enriched"))
            bad = rows.filter(pc.equal(kind, "bad"))
            waiting = rows.filter(pc.equal(kind, "waiting"))
            values = _json_values(enriched, list(ENRICHED), self._slices)
            enriched, values, bad = _oversized(enriched, values, bad, settings.max_rating_bytes)
            keys = pc.cast(pc.cast(enriched.column("user_id"), pa.string()), pa.binary())
            alert = _alerts(enriched, settings.alert_stars_below, settings.alert_club_status)
            starts = waiting.group_by("partition").aggregate([("offset", "min")])
            result = RatingsResult(
                enriched=Records(settings.enriched_topic, keys.to_pylist(), values.to_pylist()),
                alerts=Records(
                    settings.alerts_topic, keys.filter(alert).to_pylist(), values.filter(alert).to_pylist()
                ),
                dead=_dead_letters(bad, settings.dlq_topic, settings.max_rating_bytes, self.claim_check),
                waiting=_waiting(rows),
                waiting_from=dict(
                    zip(
                        (int(p) for p in starts.column("partition").to_pylist()),
                        (int(o) for o in starts.column("offset_min").to_pylist()),
                        strict=True,
                    )
                ),
                new=parsed.num_rows - (self.waiting_count),
            )
        return result

    def _decide(self, parsed: pa.Table, store: VersionStore, watermark_ms: int | None) -> pa.Table:
        """`parsed` (PARSED, in input order) joined, with `kind`: bad (a dead letter), enriched
        (released) or waiting."""
        grace_ms = self.settings.grace_ms
        picks = store.pick(parsed.column("user_id"), parsed.column("rating_time"), grace_ms)
        joined = _joined(parsed, picks, watermark_ms, time.time_ns() // 1_000_000)
        bad = pc.is_valid(parsed.column("dlq_reason")).to_numpy(zero_copy_only=False)
        go = released(parsed, picks.settled, watermark_ms, grace_ms)
        kind = np.where(bad, "bad", np.where(go, "enriched", "waiting"))
        return joined.append_column("kind", pa.array(kind, pa.string()))


def released(parsed: pa.Table, settled: np.ndarray, watermark_ms: int | None, grace_ms: int) -> np.ndarray:
    """Per rating (in input order): its join can no longer change, and every earlier rating of
    the same customer is released too (order).

    A join is final once the CDC table is complete past rating_time when a version valid at
    rating_time was found (`settled`), else past rating_time + grace: only a customer row created
    within the grace can still come. So the grace delays only ratings of unknown customers."""
    n = parsed.num_rows
    if watermark_ms is None or n == 0:
        return np.zeros(n, bool)
    times = parsed.column("rating_time")
    known = pc.is_valid(times).to_numpy(zero_copy_only=False)
    t = pc.fill_null(times, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    final = known & (t + grace_ms < watermark_ms)
    if grace_ms:
        final |= known & settled & (t < watermark_ms)
    # Per customer, in input order: released while no earlier rating (or this one) is not final.
    users = pc.fill_null(parsed.column("user_id"), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    part = parsed.column("partition").to_numpy(zero_copy_only=False)
    offset = parsed.column("offset").to_numpy(zero_copy_only=False)
    order = np.lexsort((offset, part, users))
    held = (~final[order]).astype(np.int64)
    sorted_users = users[order]
    starts = np.ones(n, bool)
    starts[1:] = sorted_users[1:] != sorted_users[:-1]
    running = np.cumsum(held)
    group_base = np.maximum.accumulate(np.where(starts, running - held, 0))
    out = np.empty(n, bool)
    out[order] = (running - group_base) == 0
    return out


def _joined(parsed: pa.Table, picks: Picks, watermark_ms: int | None, enriched_ms: int) -> pa.Table:
    """The enriched record's columns for every rating (null customer columns where it matched
    none), plus the Kafka columns and reason it carries. A deleted version matches no one."""
    n = parsed.num_rows
    versions = picks.table
    if versions.num_rows and pc.any(pc.is_valid(picks.index)).as_py():
        deleted = pc.fill_null(picks.take("deleted"), True)
        picks = replace(picks, index=pc.if_else(deleted, pa.nulls(n, pa.int64()), picks.index))
    matched = pc.is_valid(picks.index)
    if versions.num_rows:
        customer = {name: picks.take(name) for name in CUSTOMER_COLUMNS}
        position = [picks.take(n_) for n_ in ("source_file", "source_pos", "source_row")]
        valid_from = picks.take("valid_from")
    else:
        customer = {name: pa.nulls(n, pa.string()) for name in CUSTOMER_COLUMNS}
        position = [pa.nulls(n, pa.string()), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int32())]
        valid_from = pa.nulls(n, pa.int64())
    # As SQL's concat_ws: null names are left out. (Arrow's own null_handling="skip" drops the
    # rows where both are null, in pyarrow 26.)
    first, last = customer["first_name"], customer["last_name"]
    full_name = pc.coalesce(pc.binary_join_element_wise(first, last, " "), first, last, "")
    # MariaDB's binlog position "file:pos:row" (as Java's format "%s:%d:%d" writes a null: the
    # word null); a position without a file is PostgreSQL's: "lsn:<LSN>".
    version = pc.if_else(
        pc.is_valid(position[0]),
        pc.binary_join_element_wise(*[pc.fill_null(pc.cast(p, pa.string()), "null") for p in position], ":"),
        pc.binary_join_element_wise("lsn", pc.fill_null(pc.cast(position[1], pa.string()), "null"), ":"),
    )
    return pa.table(
        {
            **{f.name: parsed.column(f.name) for f in FIELDS},
            **customer,
            "full_name": pc.if_else(matched, full_name, pa.nulls(n, pa.string())),
            "customer_matched": matched,
            "customer_version": pc.if_else(matched, version, pa.nulls(n, pa.string())),
            "customer_valid_from": valid_from,
            "rating_kafka_ts": parsed.column("timestamp"),
            "rating_partition": parsed.column("partition"),
            "rating_offset": parsed.column("offset"),
            "cdc_watermark_ms": pa.array([watermark_ms] * n, pa.int64()),
            "enriched_ms": pa.array(np.full(n, enriched_ms, np.int64)),
            # carried, not part of the enriched record
            **{
                name: parsed.column(name)
                for name in ("key", "value", "topic", "partition", "offset", "timestamp", "dlq_reason")
            },
        }
    )


# The enriched record's fields, in order: declared once, with their JSON types, in
# foundation/enriched.py (a unit test holds the JSON written here to those types).
ENRICHED = ENRICHED_NAMES


def _json_values(table: pa.Table, names: list[str], slices: Slices | None = None) -> pa.Array:
    """Each row's `names` columns as a JSON object (binary), nulls kept (an unmatched rating's
    enriched record says club_status: null)."""
    rows = pa.StructArray.from_arrays([table.column(name).combine_chunks() for name in names], names=names)
    return json_objects(rows, nulls=True, slices=slices).cast(pa.binary())


def _oversized(
    enriched: pa.Table, values: pa.Array, bad: pa.Table, max_bytes: int
) -> tuple[pa.Table, pa.Array, pa.Table]:
    """The enriched records over `max_bytes` (a rating under the bound, joined to a customer
    whose columns are large: a long PostgreSQL `comments`) go to the dead letters with a reason
    that says why, instead of failing the batch's transaction on Kafka's record limit at every
    re-run: (enriched, values, bad) without them and with them. A readable rating's bytes are
    not kept past its parse, so its dead letter carries its fields as JSON again (every field
    a rating has: it can be produced again as it was)."""
    sizes = pc.binary_length(values)
    over = pc.greater(sizes, max_bytes)
    if not pc.any(over).as_py():
        return enriched, values, bad
    reasons = pa.array(
        [
            f"enriched record of {size} bytes over ENRICH_MAX_RATING_BYTES ({max_bytes}): "
            "the customer's columns make it too large for Kafka"
            for size in sizes.filter(over).to_pylist()
        ],
        pa.string(),
    )
    big = enriched.filter(over)
    big = big.set_column(big.schema.get_field_index("dlq_reason"), "dlq_reason", reasons)
    big = big.set_column(big.schema.get_field_index("value"), "value", _json_values(big, FIELDS.names))
    log.error("%d enriched records over ENRICH_MAX_RATING_BYTES went to the DLQ", big.num_rows)
    keep = pc.invert(over)
    return enriched.filter(keep), values.filter(keep), pa.concat_tables([bad, big.cast(bad.schema)])


def _alerts(enriched: pa.Table, stars_below: int, club_status: str) -> pa.Array:
    """True for enriched ratings that raise an alert: stars < stars_below and the club status."""
    rule = pc.and_(
        pc.less(enriched.column("stars"), stars_below), pc.equal(enriched.column("club_status"), club_status)
    )
    return pc.fill_null(rule, False)


def _dead_letters(bad: pa.Table, topic: str, max_bytes: int, claim: ClaimCheck) -> Records:
    """The ratings' own key and bytes, with the reason and origin as headers (Kafka Connect
    style). Bytes over `max_bytes` go to the claim-check store instead: with its headers the
    record might not fit in Kafka. Its headers then say where the bytes are, besides where the
    rating was (topic, partition, offset) and why."""
    headers = [
        [
            ("dlq.reason", reason.encode()),
            ("dlq.stage", STAGE.encode()),
            ("dlq.topic", source.encode()),
            ("dlq.partition", str(partition).encode()),
            ("dlq.offset", str(offset).encode()),
        ]
        for reason, source, partition, offset in zip(
            bad.column("dlq_reason").to_pylist(),
            bad.column("topic").to_pylist(),
            bad.column("partition").to_pylist(),
            bad.column("offset").to_pylist(),
            strict=True,
        )
    ]
    dead = Records(topic, bad.column("key").to_pylist(), bad.column("value").to_pylist(), headers)
    return claim.oversized(dead, max_bytes)


def _waiting(rows: pa.Table) -> pa.Table | None:
    """The waiting ratings among a step's rows (PARSED), in input order; None when none wait."""
    waiting = rows.filter(pc.equal(rows.column("kind"), "waiting"))
    return waiting.select(PARSED.names).cast(PARSED) if waiting.num_rows else None
