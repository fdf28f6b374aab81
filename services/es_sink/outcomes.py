"""What an Elasticsearch answer means for the consumer loop, in one table: keep going, dead-letter
the record, retry the whole batch, or stop. Used for whole requests and for each bulk item."""

from enum import Enum
from typing import Any

from foundation.errors import FatalSinkError, SinkUnavailable

__all__ = ["CREDENTIALS", "STATUS_OUTCOMES", "Outcome", "outcome", "raise_for_request", "reason"]


class Outcome(Enum):
    OK = "ok"
    REJECT = "reject"  # this document can never be indexed: dead letter with the reason
    RETRY = "retry"  # Elasticsearch is down, overloaded or failing: retry the batch (idempotent by _id)
    FATAL = "fatal"  # credentials or permissions: retrying cannot help


CREDENTIALS = "check ES_SINK_USERNAME/ES_SINK_PASSWORD or ES_SINK_API_KEY"

# status -> outcome; anything not listed falls back by class (2xx ok, 4xx reject, 5xx retry)
STATUS_OUTCOMES: dict[int, Outcome] = {
    200: Outcome.OK,
    201: Outcome.OK,
    400: Outcome.REJECT,  # mapper_parsing_exception, document_parsing_exception, illegal_argument_exception
    401: Outcome.FATAL,
    403: Outcome.FATAL,
    404: Outcome.FATAL,  # index missing and not creatable (action.auto_create_index off)
    408: Outcome.RETRY,
    409: Outcome.RETRY,  # version conflict: another writer raced us on the same _id
    413: Outcome.FATAL,  # bulk request larger than http.max_content_length: lower ES_SINK_BULK_MAX_BYTES
    429: Outcome.RETRY,  # es_rejected_execution_exception, circuit breakers
}


def outcome(status: int) -> Outcome:
    if status in STATUS_OUTCOMES:
        return STATUS_OUTCOMES[status]
    if 200 <= status < 300:
        return Outcome.OK
    if 400 <= status < 500:
        return Outcome.REJECT
    return Outcome.RETRY


def reason(error: Any) -> str:
    """`type: reason` of an Elasticsearch error object (the caused_by chain appended)."""
    if not isinstance(error, dict):
        return str(error)
    text = f"{error.get('type', 'error')}: {error.get('reason', '')}"
    cause = error.get("caused_by")
    return f"{text} (caused by {reason(cause)})" if cause else text


def raise_for_request(status: int, detail: str) -> None:
    """A failed whole request (not a bulk item): retry or stop; a 4xx here is a bug or a limit."""
    kind = outcome(status)
    if kind is Outcome.RETRY:
        raise SinkUnavailable(f"elasticsearch answered {status}: {detail}")
    if status in (401, 403):
        raise FatalSinkError(f"elasticsearch refused the credentials ({status}: {detail}); {CREDENTIALS}")
    raise FatalSinkError(f"elasticsearch refused the request ({status}: {detail})")
