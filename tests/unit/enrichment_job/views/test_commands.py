"""Which version a replace replaces, from what the views job last said (its markers), without
Kafka: a replacement still backfilling holds a second one back, one refused or failed does not."""

from dataclasses import replace
from typing import Any

import pytest

from enrichment_job.views import commands
from enrichment_job.views.catalog import Entry, marker_key
from enrichment_job.views.definition import ViewFile, ViewRefused
from enrichment_job.views.settings import ViewsSettings
from foundation.view_marker import ViewMarker

SETTINGS = ViewsSettings(name="views")
V1 = Entry("by_channel", "SELECT 1", 1)
V2 = Entry("by_channel", "SELECT 2", 2, "view.by_channel.2", V1)


def _said(markers: dict[str, dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The marker under `key`, as the views job writes it (naming its view)."""
    found = markers.get(key)
    return None if found is None else {"view": "by_channel", **found}


def _markers(monkeypatch: pytest.MonkeyPatch, markers: dict[str, dict[str, Any]]) -> None:
    monkeypatch.setattr(
        commands, "last_markers", lambda _config, _topic, keys: {k: _said(markers, k) for k in keys}
    )


def test_a_first_version_is_replaced_whatever_its_state(monkeypatch: pytest.MonkeyPatch) -> None:
    _markers(monkeypatch, {})
    assert commands._serving(SETTINGS, V1) == V1


@pytest.mark.parametrize(
    ("markers", "replaced"),
    [
        ({}, None),  # not started by the job yet
        ({marker_key(SETTINGS, "by_channel"): {"created_at_ms": 1, "state": "live"}}, None),  # v1's word
        ({marker_key(SETTINGS, "by_channel"): {"created_at_ms": 2, "state": "backfilling"}}, None),
        ({marker_key(SETTINGS, "by_channel"): {"created_at_ms": 2, "state": "live"}}, V2),
        ({marker_key(SETTINGS, "by_channel", 2): {"created_at_ms": 2, "state": "refused"}}, V1),
        (
            {
                marker_key(SETTINGS, "by_channel"): {"created_at_ms": 1, "state": "live"},
                marker_key(SETTINGS, "by_channel", 2): {"created_at_ms": 2, "state": "failed"},
            },
            V1,
        ),
        (  # failed once, then ran again after a restart of the job: its later batches say so
            {
                marker_key(SETTINGS, "by_channel"): {"created_at_ms": 2, "state": "live", "written_at_ms": 9},
                marker_key(SETTINGS, "by_channel", 2): {
                    "created_at_ms": 2,
                    "state": "failed",
                    "written_at_ms": 5,
                },
            },
            V2,
        ),
    ],
)
def test_a_replacement_is_replaced_once_live_its_previous_when_it_went_wrong_else_none(
    monkeypatch: pytest.MonkeyPatch, markers: dict[str, dict[str, Any]], replaced: Entry | None
) -> None:
    _markers(monkeypatch, markers)
    assert commands._serving(SETTINGS, V2) == replaced


def test_the_list_reads_what_the_job_said_of_every_view_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[list[str]] = []
    markers = {
        marker_key(SETTINGS, "by_channel"): {"created_at_ms": 1, "state": "live"},
        marker_key(SETTINGS, "by_region", 3): {"created_at_ms": 3, "state": "refused", "error": "HAVING"},
    }

    def last_markers(_config: Any, _topic: str, keys: list[str]) -> dict[str, Any]:
        reads.append(list(keys))
        return {key: _said(markers, key) for key in keys}

    monkeypatch.setattr(commands, "last_markers", last_markers)
    said = commands._said_of(SETTINGS, [V1, Entry("by_region", "SELECT 3", 3), Entry("fresh", "SELECT 4", 4)])
    assert {name: m and (m.created_at_ms, m.state, m.error) for name, m in said.items()} == {
        "by_channel": (1, "live", None),
        "by_region": (3, "refused", "HAVING"),
        "fresh": None,
    }
    assert len(reads) == 1 and len(reads[0]) == 6


def _create_with(
    monkeypatch: pytest.MonkeyPatch,
    said: ViewMarker | None,
    here: tuple[str, ...] | ViewRefused,
    replaces: Entry | None = None,
) -> tuple[int, list[Entry | None], list[str]]:
    """A create whose views job says `said` (None: nothing in time) and whose local check gives
    `here`: its exit code, what it published to the catalog, and the checks it ran itself."""
    published: list[Entry | None] = []
    checked: list[str] = []

    def check_here(view: ViewFile) -> tuple[str, ...]:
        checked.append(view.name)
        if isinstance(here, ViewRefused):
            raise here
        return here

    monkeypatch.setattr(commands, "publish", lambda _config, _topic, _name, entry: published.append(entry))
    monkeypatch.setattr(
        commands,
        "_said",
        lambda _settings, entry: said and replace(said, created_at_ms=entry.created_at_ms),
    )
    monkeypatch.setattr(commands, "_check_here", check_here)
    monkeypatch.setattr(commands, "VERDICT_POLL_S", 0.01)
    view = ViewFile(
        "by_channel", "SELECT channel, count(*) AS n FROM enriched GROUP BY channel", "", None, None, None
    )
    code = commands._create_through_the_job(SETTINGS, view, view.sql, wait_s=0.05, replaces=replaces)
    return code, published, checked


def test_a_create_the_views_job_accepts_needs_no_spark_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    said = ViewMarker("by_channel", key=("channel",), state="backfilling")
    code, published, checked = _create_with(monkeypatch, said, ViewRefused("unused"))
    assert code == 0 and checked == []
    assert [e.name if e else None for e in published] == ["by_channel"]


def test_a_create_the_views_job_refuses_leaves_the_catalog_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    said = ViewMarker("by_channel", state="refused", error="by_channel: HAVING is not kept")
    code, published, checked = _create_with(monkeypatch, said, ("channel",))
    assert code == 1 and checked == []
    assert [e.name if e else None for e in published] == ["by_channel", None]  # then its tombstone
    assert "refused: by_channel: HAVING is not kept" in capsys.readouterr().err


def test_with_no_views_job_answering_the_create_checks_the_view_itself(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, published, checked = _create_with(monkeypatch, None, ("channel",))
    assert code == 0 and checked == ["by_channel"] and len(published) == 1
    assert "created by_channel: key (channel); no views job answered" in capsys.readouterr().out
    code, published, checked = _create_with(monkeypatch, None, ViewRefused("by_channel: no key"))
    assert code == 1 and checked == ["by_channel"]
    assert [e.name if e else None for e in published] == ["by_channel", None]


def _replace_with(
    monkeypatch: pytest.MonkeyPatch, said: ViewMarker | None, here: tuple[str, ...] | ViewRefused
) -> tuple[int, list[Entry | None], list[str]]:
    """As `_create_with`, for a replacement of V1."""
    return _create_with(monkeypatch, said, here, replaces=V1)


def test_a_replacement_the_views_job_accepts_backfills_beside_the_version_that_serves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    said = ViewMarker("by_channel", key=("channel",), state="backfilling")
    code, published, checked = _replace_with(monkeypatch, said, ViewRefused("unused"))
    assert code == 0 and checked == []  # no Spark of its own
    (entry,) = published
    assert entry is not None and entry.previous == V1 and entry.sql.startswith("SELECT channel, count")
    assert entry.topic == f"{SETTINGS.topic('by_channel')}.{entry.created_at_ms}"
    assert (
        f"replacing by_channel: key (channel); the views job backfills the new version into {entry.topic}"
        in (capsys.readouterr().out)
    )


@pytest.mark.parametrize(
    ("said", "here", "checked_here"),
    [
        (ViewMarker("by_channel", state="refused", error="by_channel: HAVING is not kept"), ("channel",), []),
        (None, ViewRefused("by_channel: HAVING is not kept"), ["by_channel"]),  # no views job answered
    ],
)
def test_a_refused_replacement_gives_the_catalog_back_to_the_version_that_serves(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    said: ViewMarker | None,
    here: tuple[str, ...] | ViewRefused,
    checked_here: list[str],
) -> None:
    code, published, checked = _replace_with(monkeypatch, said, here)
    assert code == 1 and checked == checked_here
    assert len(published) == 2 and published[0] is not None and published[0].previous == V1
    assert published[1] == V1  # the catalog names the serving version again, not a tombstone
    said_by = "(checked here: no views job answered" if checked_here else "refused: by_channel: HAVING"
    assert "by_channel: HAVING is not kept" in (err := capsys.readouterr().err) and said_by in err
