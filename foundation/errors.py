"""One root exception for the services; each subclass tells the consumer loop what to do."""

__all__ = ["ConfigError", "FatalSinkError", "RatingsError", "RecordError", "SinkUnavailable"]


class RatingsError(Exception):
    """Root of every error a service raises on purpose."""


class ConfigError(RatingsError):
    """A setting is missing or invalid: the service stops before it consumes anything."""


class RecordError(RatingsError):
    """This one record cannot be handled (unreadable, rejected by the sink): dead-letter it.

    The message is the reason written to the dead-letter topic; the loop adds the original bytes.
    """


class SinkUnavailable(RatingsError):
    """The downstream is down or overloaded (connection error, 429, 5xx): pause, back off, retry
    the same batch. Sinks are idempotent, so retrying a batch that partly landed is safe."""


class FatalSinkError(RatingsError):
    """The downstream refuses for a reason retrying cannot fix (bad credentials, missing channel):
    the service stops with this message and commits nothing more."""
