"""Dead letters too large for Kafka keep their bytes in a store: the claim-check pattern.

A rating over ENRICH_MAX_RATING_BYTES cannot go to the dead-letter topic with its value and its
dlq.* headers (the record would be over Kafka's limit), and the ratings topic's retention would
take the original in the end. Its bytes are written to ENRICH_DEAD_LETTER_STORE (by default the
state folder's `dead-letters`) at a path made of the record's origin,
`<stage>/<topic>/<partition>/<offset>`, before the batch's transaction commits; the dead letter
then carries `dlq.value.location` (the file's URI) and `dlq.value.bytes`. A re-run of the batch
writes the same bytes to the same path, so the store holds one copy whatever the retries, and a
committed dead letter always points at a whole file. The views job keeps a view's row too large
for Kafka the same way (VIEWS_JOB_DEAD_LETTER_STORE), at `views/<view>/<batch>/<key digest>`.
"""

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from enrichment_job.kafka.transactions import Records
from enrichment_job.runtime.settings import SparkJobSettings
from enrichment_job.runtime.state_dir import StateDir
from foundation.errors import SinkUnavailable
from foundation.kafka_record import MAX_RECORD_BYTES

log = logging.getLogger("enrichment_job")

__all__ = ["MAX_VALUE_BYTES", "ClaimCheck", "Claimed"]


# A dead letter's value at most, with room for its headers under the largest Kafka record: where
# no setting bounds it (the views job's dead letters).
MAX_VALUE_BYTES = MAX_RECORD_BYTES - 100_000


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else value or ""


@dataclass(frozen=True)
class Claimed:
    """Where a dead letter's bytes are, as its headers say it."""

    location: str
    size: int

    @classmethod
    def of(cls, headers: Mapping[str, bytes | None]) -> "Claimed | None":
        """What a dead letter's headers say of its bytes; None for one that carries them itself."""
        location = _text(headers.get("dlq.value.location"))
        if not location:
            return None
        return cls(location, int(_text(headers.get("dlq.value.bytes")) or -1))

    def headers(self) -> list[tuple[str, bytes]]:
        return [("dlq.value.location", self.location.encode()), ("dlq.value.bytes", str(self.size).encode())]

    def local_path(self) -> Path | None:
        """The file, where the store is a local folder (a file:// location); None in an object
        store (s3a://)."""
        where = urlsplit(self.location)
        return Path(url2pathname(where.path)) if where.scheme == "file" else None


@dataclass
class ClaimCheck:
    """Writes the bytes of dead letters too large for Kafka to `store`, retrying for up to
    `timeout_s` (an outage of the store pauses the batch) before SinkUnavailable, which stops
    the job with nothing of the batch committed."""

    store: StateDir
    stage: str
    timeout_s: float = 300.0
    setting: str = "ENRICH_DEAD_LETTER_STORE"
    _first_pause_s: float = field(default=0.5, repr=False)

    @classmethod
    def of(cls, settings: SparkJobSettings, stage: str) -> "ClaimCheck":
        """The store a job's settings name (*_DEAD_LETTER_STORE), for dead letters of `stage`."""
        return cls(
            settings.dead_letters,
            stage,
            settings.dead_letter_store_timeout_s,
            settings.dead_letter_store_setting,
        )

    def oversized(self, dead: Records, max_bytes: int) -> Records:
        """`dead` (dead letters whose dlq.topic, dlq.partition and dlq.offset headers say where
        each came from) with every value over `max_bytes` put in the store: its record goes
        without it, and with headers that say where it is."""
        large = [i for i, value in enumerate(dead.values) if value is not None and len(value) > max_bytes]
        if not large:
            return dead
        values = list(dead.values)
        headers = [list(h or []) for h in (dead.headers or [None] * len(values))]
        for i in large:
            origin = {name: _text(value) for name, value in headers[i]}
            stage, topic, partition, offset = (
                origin.get(f"dlq.{name}", "") for name in ("stage", "topic", "partition", "offset")
            )
            value = values[i]
            assert value is not None
            claimed = self.put(topic, int(partition or -1), int(offset or -1), value, stage=stage or None)
            headers[i] += claimed.headers()
            values[i] = None
        return Records(dead.topic, dead.keys, values, headers)

    def put(self, topic: str, partition: int, offset: int, value: bytes, stage: str | None = None) -> Claimed:
        """Writes `value` at `<stage>/<topic>/<partition>/<offset>` (`stage`: this one's by
        default) and says where."""
        return self.keep(f"{stage or self.stage}/{topic}/{partition}/{offset}", value)

    def keep(self, relative: str, value: bytes) -> Claimed:
        """Writes `value` at `relative` in the store (again, when a re-run writes it again) and
        says where."""
        deadline = time.monotonic() + self.timeout_s
        pause = self._first_pause_s
        while True:
            try:
                self.store.write_bytes(relative, value)
                break
            except OSError as err:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SinkUnavailable(
                        f"{self.setting} ({self.store.uri}): could not write a dead letter's "
                        f"{len(value)} bytes for {self.timeout_s:.0f} s: {err}"
                    ) from err
                log.warning(
                    "%s: writing %s failed (%s); retrying in %.1f s", self.setting, relative, err, pause
                )
                time.sleep(min(pause, left))
                pause = min(pause * 2, 30.0)
        location = self.store.child(relative)
        log.warning("a dead letter's %d bytes are at %s", len(value), location)
        return Claimed(location, len(value))
