"""The aggregation benchmark's input and arguments (the measurement itself runs Spark: by hand)."""

import json
import subprocess
import sys
from pathlib import Path

from enrichment_job.views.transforms import FIELDS, REQUIRED
from infra.bench.aggregation import write_batches
from infra.bench.store import ROWS


def test_each_batch_is_a_file_of_enriched_ratings_with_every_field_the_views_read(tmp_path: Path) -> None:
    write_batches(tmp_path, 3, 50)
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["00000.json", "00001.json", "00002.json"]
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert len(records) == 150
    assert len({r["rating_id"] for r in records}) == 150
    assert all(set(FIELDS) <= r.keys() and all(r[k] is not None for k in REQUIRED) for r in records)
    assert all(1 <= r["user_id"] <= ROWS for r in records)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "infra.bench.aggregation", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_help_names_the_settings_it_varies_and_starts_nothing() -> None:
    run = _run("--help")
    assert run.returncode == 0
    assert "--source-tasks" in run.stdout and "VIEWS_JOB_SHUFFLE_PARTITIONS" in run.stdout


def test_too_few_batches_for_the_warm_up_is_refused_before_spark_starts() -> None:
    run = _run("--batches", "5", "--warm-up", "4")
    assert run.returncode == 2
    assert "--batches must exceed --warm-up" in run.stderr
