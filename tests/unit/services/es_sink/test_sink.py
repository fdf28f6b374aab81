"""The one outcome table, applied to whole requests and to each bulk item, through the sink with a
fake client: connection errors, 429 and 5xx retry the batch; 400-class document errors become dead
letters with the reason; 401/403 stop the service naming the credential settings."""

import json
from typing import Any

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import ApiError, ConnectionError, ConnectionTimeout
from support.services import enriched_record

from foundation.enriched import EnrichedRating
from foundation.errors import FatalSinkError, SinkUnavailable
from services.core.records import Incoming
from services.es_sink.config import EsSinkSettings
from services.es_sink.outcomes import Outcome, outcome, reason
from services.es_sink.sink import BULK_FILTER, EsSink, byte_bounded, load_template

SETTINGS = EsSinkSettings()


class FakeMessage:
    def __init__(self, topic: str, offset: int) -> None:
        self._topic, self._offset = topic, offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


class FakeResponse:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


class FakeIndices:
    def __init__(self) -> None:
        self.templates: dict[str, dict[str, Any]] = {}

    def put_index_template(self, name: str, **body: Any) -> None:
        self.templates[name] = body


class FakeClient:
    """Answers bulk requests with canned bodies or raises the given error."""

    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer
        self.indices = FakeIndices()
        self.requests: list[list[dict[str, Any]]] = []

    def bulk(self, operations: list[bytes], filter_path: list[str]) -> FakeResponse:
        assert filter_path == BULK_FILTER
        self.requests.append([json.loads(line) for line in operations])
        if isinstance(self.answer, Exception):
            raise self.answer
        return FakeResponse(self.answer)

    def close(self) -> None:
        pass


def api_error(status: int, kind: str) -> ApiError:
    meta = ApiResponseMeta(
        status=status,
        http_version="1.1",
        headers=HttpHeaders(),
        duration=0.0,
        node=NodeConfig("http", "localhost", 9200),
    )
    return ApiError(
        kind, meta, {"error": {"type": kind, "reason": "test", "root_cause": []}, "status": status}
    )


def incoming(n: int, topic: str = "ratings-with-customer-data") -> list[Incoming[EnrichedRating]]:
    return [
        Incoming(EnrichedRating.model_validate(enriched_record(i)), FakeMessage(topic, i))  # type: ignore[arg-type]
        for i in range(n)
    ]


def sink(client: FakeClient) -> EsSink:
    return EsSink(SETTINGS, client, load_template(SETTINGS))  # type: ignore[arg-type]


def item(status: int, error: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": {"status": status, **({"error": error} if error else {})}}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, Outcome.OK),
        (201, Outcome.OK),
        (400, Outcome.REJECT),
        (401, Outcome.FATAL),
        (403, Outcome.FATAL),
        (404, Outcome.FATAL),
        (413, Outcome.FATAL),
        (422, Outcome.REJECT),
        (429, Outcome.RETRY),
        (500, Outcome.RETRY),
        (502, Outcome.RETRY),
        (503, Outcome.RETRY),
        (504, Outcome.RETRY),
    ],
)
def test_the_outcome_table(status: int, expected: Outcome) -> None:
    assert outcome(status) is expected


def test_the_reason_names_the_error_type_and_its_cause() -> None:
    error = {
        "type": "document_parsing_exception",
        "reason": "failed to parse field [create_ts]",
        "caused_by": {"type": "illegal_argument_exception", "reason": "bad date"},
    }
    assert reason(error) == (
        "document_parsing_exception: failed to parse field [create_ts] "
        "(caused by illegal_argument_exception: bad date)"
    )


def test_a_clean_batch_installs_the_templates_once_and_indexes_everything() -> None:
    client = FakeClient({"errors": False})
    es = sink(client)
    assert es.write(incoming(3)) == []
    assert es.write(incoming(3)) == []
    assert set(client.indices.templates) == {"ratings", "unhappy-platinum"}
    assert client.indices.templates["unhappy-platinum"]["index_patterns"] == ["unhappy-platinum-*"]
    assert [op["create"]["_id"] for op in client.requests[0][::2]] == ["0", "1", "2"]


def test_alerts_go_to_the_alert_indices() -> None:
    client = FakeClient({"errors": False})
    sink(client).write(incoming(1, topic="unhappy-platinum-customers"))
    assert client.requests[0][0]["create"]["_index"].startswith("unhappy-platinum-")


@pytest.mark.parametrize(
    "error",
    [
        ConnectionError("connection refused"),
        ConnectionTimeout("timed out"),
        api_error(429, "es_rejected_execution_exception"),
        api_error(503, "unavailable_shards_exception"),
    ],
)
def test_an_unreachable_or_overloaded_cluster_retries_the_batch(error: Exception) -> None:
    with pytest.raises(SinkUnavailable):
        sink(FakeClient(error)).write(incoming(2))


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_stop_the_service_naming_the_settings(status: int) -> None:
    with pytest.raises(FatalSinkError, match=r"ES_SINK_USERNAME.*ES_SINK_API_KEY"):
        sink(FakeClient(api_error(status, "security_exception"))).write(incoming(1))


def test_a_template_install_refused_stops_the_service() -> None:
    class Refusing(FakeIndices):
        def put_index_template(self, name: str, **body: Any) -> None:
            raise api_error(403, "security_exception")

    client = FakeClient({"errors": False})
    client.indices = Refusing()
    with pytest.raises(FatalSinkError, match="ES_SINK_PASSWORD"):
        sink(client).write(incoming(1))


def test_documents_elasticsearch_cannot_parse_become_dead_letters_with_the_reason() -> None:
    bad = {"type": "document_parsing_exception", "reason": "failed to parse field [create_ts]"}
    client = FakeClient({"errors": True, "items": [item(201), item(400, bad), item(200)]})
    records = incoming(3)
    rejected = sink(client).write(records)
    assert [r.message for r in rejected] == [records[1].message]
    assert rejected[0].reason == "document_parsing_exception: failed to parse field [create_ts]"


@pytest.mark.parametrize("status", [429, 500, 503])
def test_one_item_the_cluster_could_not_take_retries_the_whole_batch(status: int) -> None:
    bad = {"type": "es_rejected_execution_exception", "reason": "queue full"}
    client = FakeClient(
        {"errors": True, "items": [item(400, {"type": "x", "reason": "y"}), item(status, bad)]}
    )
    with pytest.raises(SinkUnavailable, match="1 of 2 documents"):
        sink(client).write(incoming(2))


def test_an_item_refused_for_permissions_stops_the_service() -> None:
    client = FakeClient(
        {"errors": True, "items": [item(403, {"type": "security_exception", "reason": "no"})]}
    )
    with pytest.raises(FatalSinkError, match="ES_SINK_API_KEY"):
        sink(client).write(incoming(1))


def test_a_bulk_request_is_split_by_bytes_between_documents_never_inside_one() -> None:
    sizes_of_sources = [100, 300, 50, 900, 10]
    docs = [(f'{{"index":{{"_id":{i}}}}}'.encode(), b"x" * size) for i, size in enumerate(sizes_of_sources)]
    operations = [line for doc in docs for line in doc]
    parts = byte_bounded(operations, 500)
    assert [line for part in parts for line in part] == operations  # nothing lost, order kept
    assert all(len(part) % 2 == 0 for part in parts)  # an action always with its source
    sizes = [sum(len(line) + 1 for line in part) for part in parts]
    assert [len(part) // 2 for part in parts] == [2, 1, 1, 1]
    assert all(size <= 500 for size, part in zip(sizes, parts, strict=True) if len(part) > 2)
    assert sizes[2] > 500  # the 900-byte document goes alone: it cannot be split
    assert byte_bounded([], 500) == []
