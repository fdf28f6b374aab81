"""The views' reading of Spark's offset log (where a batch's records begin and end), through
the state folder's file system."""

from pathlib import Path

import pytest

from enrichment_job.runtime.spark_internals import batch_ends, batch_starts, local_checkpoint_files
from enrichment_job.runtime.state_dir import ObjectStoreSettings, StateDir

METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1795461102505,"conf":{}}'


def _state(tmp_path: Path) -> StateDir:
    return StateDir(tmp_path.as_uri(), ObjectStoreSettings())


def _log(state: StateDir, batch_id: int, *sources: str) -> None:
    state.write_text(f"checkpoints/q/offsets/{batch_id}", "\n".join(["v1", METADATA, *sources]))


def test_the_ends_of_the_topic_in_the_batch_per_partition(tmp_path: Path) -> None:
    state = _state(tmp_path)
    _log(state, 7, '{"asgard.demo.customers":{"0":443961},"ratings":{"0":12,"1":0,"3":225838}}')
    assert batch_ends(state, "checkpoints/q", 7, "ratings") == {0: 12, 1: 0, 3: 225838}
    assert batch_ends(state, "checkpoints/q", 7, "asgard.demo.customers") == {0: 443961}


def test_a_topic_not_in_the_batch_has_no_ends(tmp_path: Path) -> None:
    state = _state(tmp_path)
    _log(state, 0, "-", '{"asgard.demo.customers":{"0":5}}')
    assert batch_ends(state, "checkpoints/q", 0, "ratings") == {}


def test_a_missing_or_unknown_file_stops_the_batch_naming_it(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with pytest.raises(RuntimeError, match=r"batch 3's offsets from file://.*/checkpoints/q/offsets/3"):
        batch_ends(state, "checkpoints/q", 3, "ratings")
    state.write_text("checkpoints/q/offsets/4", "v2\n{}\n{}")
    with pytest.raises(RuntimeError, match="not a checkpoint file of a known version"):
        batch_ends(state, "checkpoints/q", 4, "ratings")


def test_a_batch_starts_where_the_one_before_ended(tmp_path: Path) -> None:
    state = _state(tmp_path)
    _log(state, 6, '{"ratings":{"0":10,"1":0}}')
    _log(state, 7, '{"ratings":{"0":12,"1":4}}')
    assert batch_starts(state, "checkpoints/q", 7, "ratings") == {0: 10, 1: 0}


def test_the_first_batch_starts_at_the_offsets_the_source_wrote_at_the_query_start(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.write_text("checkpoints/q/sources/0/0", '\x00v1\n{"ratings":{"0":40,"2":7}}')
    assert batch_starts(state, "checkpoints/q", 0, "ratings") == {0: 40, 2: 7}
    assert batch_starts(state, "checkpoints/q", 0, "other") == {}
    state.write_text("checkpoints/q/sources/0/0", "v9\n{}")
    with pytest.raises(
        RuntimeError, match=r"initial offsets from file://.*/sources/0/0: not a checkpoint file"
    ):
        batch_starts(state, "checkpoints/q", 0, "ratings")


def test_the_private_checkpoint_file_manager_is_only_for_local_state(tmp_path: Path) -> None:
    assert set(local_checkpoint_files(_state(tmp_path))) == {"spark.sql.streaming.checkpointFileManagerClass"}
    assert local_checkpoint_files(StateDir("s3a://bucket/job", ObjectStoreSettings())) == {}
