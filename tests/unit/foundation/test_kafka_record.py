"""What a consumer may fetch ahead of its reader is a number of bytes, in every consumer of the
services and the query service, and an operator's librdkafka setting still wins."""

import pytest

from foundation.kafka_record import FETCH_QUEUE_BACKOFF_MS, prefetch_config
from services.core.settings import ServiceSettings
from services.views.config import ViewsApiSettings


@pytest.mark.parametrize(
    ("queue_bytes", "kbytes"), [(8_000_000, 7813), (1024, 1), (1025, 2), (2_097_152, 2048)]
)
def test_the_bound_is_rounded_up_to_librdkafkas_kilobytes(queue_bytes: int, kbytes: int) -> None:
    assert prefetch_config(queue_bytes) == {
        "queued.max.messages.kbytes": kbytes,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    }


@pytest.mark.parametrize("settings_class", [ServiceSettings, ViewsApiSettings])
def test_every_consumer_of_the_services_is_bounded_in_bytes(settings_class: type) -> None:
    default = settings_class().consumer_config()
    assert default["queued.max.messages.kbytes"] == 7813  # 8 MB, not librdkafka's 64 MiB
    assert default["fetch.queue.backoff.ms"] == FETCH_QUEUE_BACKOFF_MS
    assert settings_class(fetch_queue_bytes=1_000_000).consumer_config()["queued.max.messages.kbytes"] == 977


@pytest.mark.parametrize("settings_class", [ServiceSettings, ViewsApiSettings])
def test_kafka_extra_overrides_the_bound(settings_class: type) -> None:
    extra = {"queued.max.messages.kbytes": "65536"}
    assert settings_class(kafka_extra=extra).consumer_config()["queued.max.messages.kbytes"] == "65536"


@pytest.mark.parametrize("settings_class", [ServiceSettings, ViewsApiSettings])
def test_a_bound_under_a_kilobyte_is_refused(settings_class: type) -> None:
    with pytest.raises(ValueError, match="fetch_queue_bytes"):
        settings_class(fetch_queue_bytes=100)
