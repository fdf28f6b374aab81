"""The es_sink as the shared core runs it: settings, decoder and sink factory."""

from foundation.enriched import EnrichedRating, decode_enriched
from services.core.main import Service
from services.es_sink.config import EsSinkSettings
from services.es_sink.sink import EsSink, load_template, make_client

__all__ = ["SERVICE", "make_sink"]


def make_sink(settings: EsSinkSettings) -> EsSink:
    return EsSink(settings, make_client(settings), load_template(settings))


SERVICE: Service[EsSinkSettings, EnrichedRating] = Service(
    "es-sink", EsSinkSettings, decode_enriched, make_sink
)
