"""One root exception for the services; each subclass tells the consumer loop what to do."""


class ServiceError(Exception):
    """Root of every error a service raises on purpose."""


class ConfigError(ServiceError):
    """A setting is missing or invalid: the service stops before it consumes anything."""


class RecordError(ServiceError):
    """This one record cannot be handled (unreadable, rejected by the sink): dead-letter it.

    The message is the reason written to the dead-letter topic; the loop adds the original bytes.
    """


class SinkUnavailable(ServiceError):
    """The downstream is down or overloaded (connection error, 429, 5xx): pause, back off, retry
    the same batch. Sinks are idempotent, so retrying a batch that partly landed is safe."""


class FatalSinkError(ServiceError):
    """The downstream refuses for a reason retrying cannot fix (bad credentials, missing channel):
    the service stops with this message and commits nothing more."""
