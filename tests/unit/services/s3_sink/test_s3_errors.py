"""One table decides what an S3 failure means: wait and retry, or stop naming the setting to fix."""

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from foundation.errors import FatalSinkError, SinkUnavailable
from services.s3_sink.s3_errors import S3_ERRORS, classify


def client_error(code: str, status: int) -> ClientError:
    response = {"Error": {"Code": code, "Message": "told so"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "PutObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "err",
    [
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        ConnectionClosedError(endpoint_url="http://127.0.0.1:1"),
        ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"),
        ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
        client_error("SlowDown", 503),
        client_error("ServiceUnavailable", 503),
        client_error("InternalError", 500),
        client_error("Throttling", 400),
        client_error("SomethingNew", 502),
        client_error("TooManyRequests", 429),
    ],
)
def test_outages_and_throttling_are_retried(err: Exception) -> None:
    assert isinstance(classify(err, "s3://b/k"), SinkUnavailable)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "status", "setting"),
    [
        ("AccessDenied", 403, "S3_SINK_ACCESS_KEY / S3_SINK_SECRET_KEY"),
        ("InvalidAccessKeyId", 403, "S3_SINK_ACCESS_KEY"),
        ("SignatureDoesNotMatch", 403, "S3_SINK_SECRET_KEY"),
        ("NoSuchBucket", 404, "S3_SINK_BUCKET"),
        ("404", 404, "S3_SINK_BUCKET"),  # HEAD answers carry no body, only the status
        ("403", 403, "S3_SINK_ACCESS_KEY"),
        ("AuthorizationHeaderMalformed", 400, "S3_SINK_REGION"),
    ],
)
def test_refusals_stop_the_service_naming_the_setting(code: str, status: int, setting: str) -> None:
    problem = classify(client_error(code, status), "s3://b/k")
    assert isinstance(problem, FatalSinkError)
    assert setting in str(problem)
    assert "s3://b/k" in str(problem)


def test_unknown_client_errors_stop_and_missing_credentials_name_the_settings() -> None:
    assert isinstance(classify(client_error("WeirdRefusal", 400), "s3://b/k"), FatalSinkError)
    problem = classify(NoCredentialsError(), "s3://b/k")
    assert isinstance(problem, FatalSinkError)
    assert "S3_SINK_ACCESS_KEY" in str(problem)


def test_every_fatal_entry_names_a_setting() -> None:
    for code, (kind, setting) in S3_ERRORS.items():
        assert (kind is FatalSinkError) == setting.startswith("S3_SINK_"), code
