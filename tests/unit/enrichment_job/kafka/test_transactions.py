"""Producing a batch's records: every one, in order, with its headers, past a full queue."""

from typing import Any

from enrichment_job.kafka.transactions import Records, produce_all


class _Queue:
    """Stands in for the client's local queue (not for Kafka): it refuses every third record
    once, as librdkafka's full queue does, until `poll` lets it drain."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, Any]] = []
        self.refusals = 0
        self._calls = 0

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, **kw: Any) -> None:
        self._calls += 1
        if self._calls % 3 == 0:
            self.refusals += 1
            raise BufferError("Local: Queue full")
        self.sent.append((topic, key, value, kw.get("headers")))

    def poll(self, _timeout: float) -> int:
        return 0


def test_every_record_goes_once_in_order_with_its_headers_though_the_queue_refuses_some() -> None:
    plain = Records("enriched", [b"1", b"2", b"3", b"4"], [b"a", b"b", None, b"d"])
    headed = Records("dlq", [b"5", b"6"], [b"e", b"f"], [[("dlq.reason", b"bad")], None])
    queue = _Queue()
    assert produce_all(queue, [plain, headed]) == 6  # type: ignore[arg-type]
    assert queue.refusals >= 2
    assert queue.sent == [
        ("enriched", b"1", b"a", None),
        ("enriched", b"2", b"b", None),
        ("enriched", b"3", None, None),
        ("enriched", b"4", b"d", None),
        ("dlq", b"5", b"e", [("dlq.reason", b"bad")]),
        ("dlq", b"6", b"f", None),
    ]
