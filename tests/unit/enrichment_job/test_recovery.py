"""How a state folder continues the job name's last commit, where a run starts, and the Spark
session's UI."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from enrichment_job.app import PIPELINE_CHECKPOINT, TopicsChanged, claim_state, starting_offsets
from enrichment_job.settings import TABLE, JobSettings


def _settings(tmp_path: Path, **more: Any) -> JobSettings:
    return JobSettings(state_dir=str(tmp_path / "state"), job_name="job-a", **more)


def _marker(run: str, **fields: object) -> dict[str, object]:
    return {
        "batch_id": 41,
        "run": run,
        "ratings_topic": "ratings",
        "cdc_topic": "asgard.demo.customers",
    } | fields


def test_a_folder_goes_on_with_its_own_run_when_the_last_commit_is_its_own(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first = claim_state(settings, None)
    settings.state.write_text(f"{PIPELINE_CHECKPOINT}/metadata", "{}")
    assert claim_state(settings, _marker(first)) == first
    assert settings.state.exists(PIPELINE_CHECKPOINT)


def test_a_folder_behind_another_runs_commit_is_rebuilt_under_a_new_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    mine = claim_state(settings, None)
    settings.state.write_text(f"{PIPELINE_CHECKPOINT}/metadata", "{}")
    settings.state.write_text(f"{TABLE}/_delta_log/00000000000000000000.json", "{}")
    run = claim_state(settings, _marker("another-host"))
    assert run != mine
    assert not settings.state.exists(PIPELINE_CHECKPOINT) and not settings.state.exists(TABLE)
    assert "out of date" in caplog.text


def test_a_deleted_query_checkpoint_is_a_new_run_not_a_replay_of_batch_ids(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    mine = claim_state(settings, None)  # committed batches 0..41, then checkpoints/pipeline went
    assert claim_state(settings, _marker(mine)) != mine


def test_a_job_name_used_for_other_topics_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(TopicsChanged, match="setting ENRICH_JOB_NAME: job 'job-a' last committed reading"):
        claim_state(_settings(tmp_path), _marker("other", ratings_topic="other-ratings"))


def test_a_first_run_starts_at_the_setting_with_the_ratings_offsets_as_numbers(tmp_path: Path) -> None:
    ratings = {0: (5, 120), 1: (0, 7)}  # partition -> first and next offset now
    earliest = starting_offsets(_settings(tmp_path), None, ratings, [0])
    assert earliest == {"ratings": {"0": 5, "1": 0}, "asgard.demo.customers": {"0": -2}}
    latest = starting_offsets(_settings(tmp_path, starting_offsets="latest"), None, ratings, [0])
    assert latest == {"ratings": {"0": 120, "1": 7}, "asgard.demo.customers": {"0": -1}}


def test_a_new_run_starts_where_the_last_commit_left_both_topics(tmp_path: Path) -> None:
    marker = _marker("x", consumed_to={"0": 120, "1": 7}, cdc_to={"0": 9000})
    ratings = {0: (0, 200), 1: (0, 9), 2: (3, 50)}
    assert starting_offsets(_settings(tmp_path), marker, ratings, [0]) == {
        "ratings": {"0": 120, "1": 7, "2": 3},  # a partition it never read: from its start
        "asgard.demo.customers": {"0": 9000},
    }


_SESSION = """
import json, sys
from enrichment_job.app import build_session
from enrichment_job.settings import JobSettings
spark = build_session(JobSettings(master="local[1]", ui_enabled=True))
print(json.dumps({"url": spark.sparkContext.uiWebUrl, "kill": spark.conf.get("spark.ui.killEnabled")}))
sys.stdout.flush()
input()  # holds the UI open until the test has looked
spark.stop()
"""


def _listening(port: int) -> set[str]:
    """The local addresses listening on `port`, as /proc/net/tcp and tcp6 spell them (hex)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_spark_ui_of_a_local_job_listens_on_the_loopback_only_with_its_kill_links_off() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP" and not k.startswith("ENRICH_")}
    with subprocess.Popen(
        [sys.executable, "-c", _SESSION],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # Spark's warnings (no Delta jars here)
        text=True,
        env=env,
    ) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        try:
            started = json.loads(proc.stdout.readline())
            port = int(started["url"].rsplit(":", 1)[1])
            assert started["kill"] == "false"
            # 127.0.0.1 (as IPv4, or IPv4 on an IPv6 socket), not every interface
            assert _listening(port) and _listening(port) <= {"0100007F", "0000000000000000FFFF00000100007F"}
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.wait(60) == 0
        finally:
            proc.kill()


def test_with_log_format_json_the_driver_jvm_logs_json_lines_too() -> None:
    script = (
        "from enrichment_job.app import build_session\n"
        "from enrichment_job.settings import JobSettings\n"
        "build_session(JobSettings(master='local[1]')).stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENRICH_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    # Hadoop's warning about its native library, at least, comes from log4j
    native = [line for line in lines if line["logger"] == "NativeCodeLoader"]
    assert native and native[0]["level"] == "WARN", done.stderr
    assert not [line for line in done.stderr.splitlines() if " WARN NativeCodeLoader" in line]
