"""The enriched rating is declared once (ENRICHED_FIELDS): the services' model, the lake's wire
schema and required columns, the Elasticsearch template and the views' parse all follow it."""

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from enrichment_job.views.transforms import ENRICHED_FIELDS as VIEWS_FIELDS
from foundation.enriched import ENRICHED_FIELDS, ENRICHED_NAMES, REQUIRED_NAMES, EnrichedRating
from services.s3_sink import rows
from services.s3_sink.schema import LAKE_SCHEMA, WIRE_SCHEMA

TEMPLATE = Path(__file__).parents[3] / "services" / "es_sink" / "ratings-index-template.json"
# Elasticsearch field types a JSON value of each kind may be mapped to.
ES_TYPES = {
    int: {"long", "integer", "short", "byte", "date"},
    str: {"keyword", "text", "date"},
    bool: {"boolean"},
}
SPARK_TYPES = {int: {"IntegerType()", "LongType()"}, str: {"StringType()"}, bool: {"BooleanType()"}}
KINDS = {f.name: f.kind for f in ENRICHED_FIELDS}


def _minimal() -> dict[str, object]:
    return {"rating_id": 1, "user_id": 2, "stars": 3, "rating_time": 4, "customer_matched": False}


def test_the_services_model_is_the_declaration_and_refuses_other_fields() -> None:
    assert tuple(EnrichedRating.model_fields) == ENRICHED_NAMES
    assert {n for n, f in EnrichedRating.model_fields.items() if f.is_required()} == set(REQUIRED_NAMES)
    EnrichedRating.model_validate(_minimal())
    with pytest.raises(ValidationError, match="extra"):
        EnrichedRating.model_validate({**_minimal(), "loyalty_tier": "x"})


def test_the_lake_reads_every_declared_field_and_requires_the_required_ones() -> None:
    assert WIRE_SCHEMA.names == list(ENRICHED_NAMES)
    kinds = {pa.int64(): int, pa.string(): str, pa.bool_(): bool}
    assert {f.name: kinds[f.type] for f in WIRE_SCHEMA} == KINDS
    assert rows.REQUIRED == REQUIRED_NAMES
    lake = set(LAKE_SCHEMA.names)
    assert set(ENRICHED_NAMES) <= lake, "every declared field has a column in the Parquet files"
    for name in REQUIRED_NAMES:
        assert not LAKE_SCHEMA.field(name).nullable


def test_the_index_template_maps_every_declared_field_and_no_other() -> None:
    properties = json.loads(TEMPLATE.read_text())["template"]["mappings"]["properties"]
    assert set(properties) == set(ENRICHED_NAMES)
    for name, mapping in properties.items():
        assert mapping["type"] in ES_TYPES[KINDS[name]], (name, mapping)


def test_the_views_read_declared_fields_of_their_kind() -> None:
    for field in VIEWS_FIELDS.fields:
        assert field.name in KINDS, field.name
        assert repr(field.dataType) in SPARK_TYPES[KINDS[field.name]], field
