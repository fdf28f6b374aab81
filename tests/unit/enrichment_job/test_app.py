"""The job's reading of Spark's offset log (where a batch's ratings end)."""

from pathlib import Path

import pytest

from enrichment_job.app import batch_ends

METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1795461102505,"conf":{}}'


def _log(folder: Path, batch_id: int, *sources: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch_id)).write_text("\n".join(["v1", METADATA, *sources]))
    return folder


def test_the_ends_of_the_topic_in_the_batch_per_partition(tmp_path: Path) -> None:
    offsets = _log(tmp_path, 7, '{"asgard.demo.customers":{"0":443961},"ratings":{"0":12,"1":0,"3":225838}}')
    assert batch_ends(offsets, 7, "ratings") == {0: 12, 1: 0, 3: 225838}
    assert batch_ends(offsets, 7, "asgard.demo.customers") == {0: 443961}


def test_a_topic_not_in_the_batch_has_no_ends(tmp_path: Path) -> None:
    offsets = _log(tmp_path, 0, "-", '{"asgard.demo.customers":{"0":5}}')
    assert batch_ends(offsets, 0, "ratings") == {}


def test_a_missing_or_unknown_file_stops_the_batch_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"batch 3's offsets from .*offsets/3"):
        batch_ends(tmp_path / "offsets", 3, "ratings")
    (tmp_path / "4").write_text("v2\n{}\n{}")
    with pytest.raises(RuntimeError, match="not an offset log file of a known version"):
        batch_ends(tmp_path, 4, "ratings")
