"""The largest Kafka record the product writes: the one bound that every process's producer and
every size check against it share."""

__all__ = ["MAX_RECORD_BYTES"]

# librdkafka's default message.max.bytes, the largest record a producer sends (the broker's own
# default limit, message.max.bytes, is about the same): key, value, headers and framing.
MAX_RECORD_BYTES = 1_000_000
