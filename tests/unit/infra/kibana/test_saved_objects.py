"""The Kibana saved objects: the NDJSON parses, references resolve, and every field a saved object
uses is mapped in the index template the es_sink installs."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from services.es_sink.config import packaged_template

ROOT = Path(__file__).resolve().parents[4]
OBJECTS = [json.loads(line) for line in (ROOT / "infra/kibana/ratings.ndjson").read_text().splitlines()]
TEMPLATE = json.loads(packaged_template())
PROPERTIES: dict[str, Any] = TEMPLATE["template"]["mappings"]["properties"]
MAPPED = set(PROPERTIES) | {f"{f}.{sub}" for f, p in PROPERTIES.items() for sub in p.get("fields", {})}
BY_ID = {o["id"]: o for o in OBJECTS}
KQL_FIELD = re.compile(r"([A-Za-z_][\w.]*)\s*(?::|<=|>=|<|>)")


def of_type(kind: str) -> list[dict[str, Any]]:
    return [o for o in OBJECTS if o["type"] == kind]


def search_source(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(obj["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"]))


def used_fields(obj: dict[str, Any]) -> set[str]:
    attrs = obj["attributes"]
    fields = set(attrs.get("columns", [])) | {field for field, _ in attrs.get("sort", [])}
    if "timeFieldName" in attrs:
        fields.add(attrs["timeFieldName"])
    if "visState" in attrs:
        aggs = json.loads(attrs["visState"])["aggs"]
        fields |= {a["params"]["field"] for a in aggs if "field" in a["params"]}
    if "kibanaSavedObjectMeta" in attrs:
        fields |= set(KQL_FIELD.findall(search_source(obj)["query"]["query"]))
    return fields


def test_every_object_has_an_id_a_type_and_attributes() -> None:
    assert len(BY_ID) == len(OBJECTS)
    assert {o["type"] for o in OBJECTS} == {"index-pattern", "search", "visualization", "dashboard"}
    assert all(o["attributes"].get("title") for o in OBJECTS)


def test_the_data_views_read_the_aliases_by_rating_time() -> None:
    titles = {o["attributes"]["title"]: o["attributes"]["timeFieldName"] for o in of_type("index-pattern")}
    assert titles == {"ratings": "rating_time", "unhappy-platinum": "rating_time"}


def test_the_live_feed_shows_the_newest_first() -> None:
    feed = BY_ID["ratings-live-feed"]["attributes"]
    assert feed["columns"] == ["full_name", "club_status", "stars", "channel", "message"]
    assert feed["sort"] == [["rating_time", "desc"]]


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: o["id"])
def test_every_field_used_is_in_the_mapping(obj: dict[str, Any]) -> None:
    assert used_fields(obj) <= MAPPED


def test_the_visualizations_use_the_expected_aggregations() -> None:
    def aggs(vis_id: str) -> list[tuple[str, str | None]]:
        state = json.loads(BY_ID[vis_id]["attributes"]["visState"])
        return [(a["type"], a["params"].get("field")) for a in state["aggs"]]

    assert aggs("ratings-over-time") == [("count", None), ("date_histogram", "rating_time")]
    assert aggs("median-stars-by-club-status") == [("percentiles", "stars"), ("terms", "club_status")]
    assert aggs("median-stars-by-region") == [("percentiles", "stars"), ("terms", "region")]
    assert aggs("ratings-by-channel") == [("count", None), ("terms", "channel")]
    assert aggs("unhappy-platinum-count") == [("count", None)]


def test_the_alert_panels_read_the_alerts_so_they_agree_with_slack_whatever_the_rule() -> None:
    for panel in ("unhappy-platinum-count", "alerts-live-feed"):
        obj = BY_ID[panel]
        assert [r["id"] for r in obj["references"]] == ["unhappy-platinum-data-view"]
        assert search_source(obj)["query"]["query"] == ""  # no rule recomputed on the ratings
    feed = BY_ID["alerts-live-feed"]["attributes"]
    assert feed["columns"] == ["full_name", "email", "stars", "message"]
    assert feed["sort"] == [["rating_time", "desc"]]


def test_the_donut_and_the_metric_use_kibana_8_settings_for_legend_and_label() -> None:
    donut = json.loads(BY_ID["ratings-by-channel"]["attributes"]["visState"])["params"]
    assert donut["legendDisplay"] == "show" and "addLegend" not in donut and donut["isDonut"]
    metric = json.loads(BY_ID["unhappy-platinum-count"]["attributes"]["visState"])["params"]["metric"]
    assert metric["labels"] == {"show": True}


# What each aggregation takes, as the index template maps a field.
_TAKES = {
    "terms": {"keyword", "boolean", "integer", "long"},
    "date_histogram": {"date"},
    "percentiles": {"integer", "long", "float", "double"},
}


@pytest.mark.parametrize("vis", of_type("visualization"), ids=lambda o: o["id"])
def test_each_aggregation_s_field_has_a_type_it_takes(vis: dict[str, Any]) -> None:
    for agg in json.loads(vis["attributes"]["visState"])["aggs"]:
        field = agg["params"].get("field")
        if field is None:
            assert agg["type"] == "count"
            continue
        assert PROPERTIES[field]["type"] in _TAKES[agg["type"]], (
            agg["type"],
            field,
            PROPERTIES[field]["type"],
        )


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: o["id"])
def test_every_reference_points_to_an_object_in_the_file(obj: dict[str, Any]) -> None:
    for ref in obj["references"]:
        assert BY_ID[ref["id"]]["type"] == ref["type"]
    if "kibanaSavedObjectMeta" in obj["attributes"] and obj["type"] != "dashboard":
        ref_name = search_source(obj)["indexRefName"]
        assert [r["type"] for r in obj["references"] if r["name"] == ref_name] == ["index-pattern"]


def test_the_dashboard_shows_every_search_and_visualization() -> None:
    dashboard = of_type("dashboard")[0]
    panels = json.loads(dashboard["attributes"]["panelsJSON"])
    refs = {r["name"]: r for r in dashboard["references"]}
    assert {p["panelRefName"] for p in panels} == set(refs)
    assert {p["panelIndex"] for p in panels} == {p["gridData"]["i"] for p in panels}
    assert {refs[p["panelRefName"]]["type"] for p in panels} == {"search", "visualization"}
    shown = {refs[p["panelRefName"]]["id"] for p in panels}
    assert shown == {o["id"] for o in OBJECTS if o["type"] in ("search", "visualization")}


def test_the_import_script_posts_the_file_with_the_xsrf_header() -> None:
    script = (ROOT / "infra/kibana/import.sh").read_text()
    assert "/api/saved_objects/_import?overwrite=true" in script
    assert "kbn-xsrf" in script
    assert "file=@" in script
    assert "/api/status" in script
