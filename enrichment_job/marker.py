"""The enrichment job's batch marker: its word in the commits topic, under the job name's key,
in the same Kafka transaction as the batch's output. It is the job's memory: a restart goes on
from the last one (the CDC offsets and watermark, where each ratings partition was consumed to
and where its waiting ratings start), and a re-run of a batch it names writes nothing.

With the join on the driver, one marker says it all. With the join in tasks, the driver's marker
is the CDC marker (`join_in` "tasks": the CDC state only), and each partition's task writes a
`tasks.plan.PartitionMarker` of its own.

One encoding (`as_json`, `decode`), the same JSON as before this type: markers already in a
commits topic read back."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from enrichment_job.customers.table import CdcState
from enrichment_job.runtime.offsets import partition_offsets

__all__ = ["BatchMarker", "JoinIn"]

JoinIn = Literal["driver", "tasks"]


@dataclass(frozen=True)
class BatchMarker:
    batch_id: int
    run: str | None
    state: CdcState
    ratings_topic: str | None = None  # None: a marker from before the topics were recorded
    cdc_topic: str | None = None
    join_in: JoinIn = "driver"
    consumed_to: Mapping[int, int] = field(default_factory=dict)  # ratings partition -> offset
    waiting_from: Mapping[int, int] = field(default_factory=dict)  # where its waiting ratings start
    counts: Mapping[str, int] = field(default_factory=dict)  # what the batch did: enriched, alerts...

    @property
    def watermark_ms(self) -> int | None:
        return self.state.clock_ms

    def as_json(self) -> dict[str, Any]:
        """The marker's JSON object (what `TransactionalOutput.write` writes)."""
        body: dict[str, Any] = {"batch_id": self.batch_id}
        if self.run:
            body["run"] = self.run
        body |= {"ratings_topic": self.ratings_topic, "cdc_topic": self.cdc_topic}
        if self.join_in == "tasks":
            body["join_in"] = "tasks"
        body |= self.state.as_json()
        if self.join_in == "driver":
            body["waiting_from"] = {str(p): o for p, o in self.waiting_from.items()}
            body["consumed_to"] = {str(p): o for p, o in self.consumed_to.items()}
        return body | dict(self.counts)

    @staticmethod
    def last(found: Mapping[str, Any] | None) -> "BatchMarker | None":
        """The job name's last marker (`TransactionalOutput.marker`), None before its first commit."""
        return None if found is None else BatchMarker.decode(found)

    @staticmethod
    def decode(found: Mapping[str, Any]) -> "BatchMarker":
        """A marker from its JSON object (`TransactionalOutput.marker`)."""
        named = {"batch_id", "run", "ratings_topic", "cdc_topic", "join_in", "waiting_from", "consumed_to"}
        named |= set(CdcState().as_json())
        return BatchMarker(
            batch_id=int(found["batch_id"]),
            run=found.get("run"),
            state=CdcState.from_json(dict(found)),
            ratings_topic=found.get("ratings_topic"),
            cdc_topic=found.get("cdc_topic"),
            join_in="tasks" if found.get("join_in") == "tasks" else "driver",
            consumed_to=partition_offsets(dict(found), "consumed_to"),
            waiting_from=partition_offsets(dict(found), "waiting_from"),
            counts={k: int(v) for k, v in found.items() if k not in named and isinstance(v, int)},
        )
