"""The S3 sink as a service of the shared core: its settings, per-message decode and writer."""

from services.core.main import Service
from services.s3_sink.config import S3SinkSettings
from services.s3_sink.rows import decode_value
from services.s3_sink.sink import S3Sink

__all__ = ["SERVICE"]

SERVICE = Service("s3-sink", S3SinkSettings, decode_value, S3Sink.from_settings)
