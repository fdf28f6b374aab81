"""What an S3 failure means for the consumer loop, in one table: retry later (SinkUnavailable) or
stop with the setting to fix (FatalSinkError). boto3 does not retry by itself here (one attempt),
so the loop is the only owner of retries."""

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, NoCredentialsError
from botocore.exceptions import ConnectionError as BotoConnectionError

from foundation.errors import FatalSinkError, RatingsError, SinkUnavailable

__all__ = ["CREDENTIALS", "S3_ERRORS", "classify"]

CREDENTIALS = "S3_SINK_ACCESS_KEY / S3_SINK_SECRET_KEY"

# S3 error code (or the HTTP status, for answers without a body such as HEAD) -> (class, setting to fix)
S3_ERRORS: dict[str, tuple[type[RatingsError], str]] = {
    "SlowDown": (SinkUnavailable, ""),
    "Throttling": (SinkUnavailable, ""),
    "ThrottlingException": (SinkUnavailable, ""),
    "RequestLimitExceeded": (SinkUnavailable, ""),
    "ServiceUnavailable": (SinkUnavailable, ""),
    "InternalError": (SinkUnavailable, ""),
    "RequestTimeout": (SinkUnavailable, ""),
    "RequestTimeTooSkewed": (SinkUnavailable, ""),
    "AccessDenied": (FatalSinkError, CREDENTIALS),
    "403": (FatalSinkError, CREDENTIALS),
    "InvalidAccessKeyId": (FatalSinkError, "S3_SINK_ACCESS_KEY"),
    "SignatureDoesNotMatch": (FatalSinkError, "S3_SINK_SECRET_KEY"),
    "NoSuchBucket": (FatalSinkError, "S3_SINK_BUCKET"),
    "404": (FatalSinkError, "S3_SINK_BUCKET"),
    "InvalidBucketName": (FatalSinkError, "S3_SINK_BUCKET"),
    "AuthorizationHeaderMalformed": (FatalSinkError, "S3_SINK_REGION"),
    "PermanentRedirect": (FatalSinkError, "S3_SINK_REGION / S3_SINK_ENDPOINT_URL"),
    "301": (FatalSinkError, "S3_SINK_REGION / S3_SINK_ENDPOINT_URL"),
}


def classify(err: BotoCoreError | ClientError, where: str) -> RatingsError:
    """The service error for a boto3 failure while writing `where` (an s3:// address)."""
    if isinstance(err, BotoConnectionError | HTTPClientError):
        return SinkUnavailable(f"S3 unreachable writing {where}: {err}")
    if isinstance(err, NoCredentialsError):
        return FatalSinkError(f"S3 has no credentials: set {CREDENTIALS}")
    if isinstance(err, ClientError):
        code = str(err.response.get("Error", {}).get("Code", ""))
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        text = str(err.response.get("Error", {}).get("Message", ""))  # never the signed request
        kind, setting = S3_ERRORS.get(code) or S3_ERRORS.get(str(status)) or _by_status(status)
        fix = f"; check {setting}" if setting else ""
        return kind(f"S3 answered {status} {code} writing {where}: {text}{fix}")
    return FatalSinkError(f"S3 client failed writing {where}: {err}")


def _by_status(status: int) -> tuple[type[RatingsError], str]:
    if status >= 500 or status in {408, 429}:
        return SinkUnavailable, ""
    return FatalSinkError, ""
