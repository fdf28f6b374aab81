"""python -m infra.bench.pg_reads: --help measures nothing, and a small run reads every row of
the views server each way it measures."""

import json
import subprocess
import sys
from pathlib import Path


def test_help_says_what_it_measures_and_starts_nothing() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "infra.bench.pg_reads", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: make bench-pg")
    assert "PostgreSQL itself serving the same rows" in run.stdout
    assert "==>" not in run.stdout  # no store was filled, no server started


def test_a_small_run_reads_every_row_each_way_and_times_the_ranges(tmp_path: Path) -> None:
    out = tmp_path / "pg_reads.json"
    asked = ["--no-postgres", "--rows", "3000", "--chunk", "700", "--ranges", "10", "--out", str(out)]
    run = subprocess.run(
        [sys.executable, "-m", "infra.bench.pg_reads", *asked],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    figures = json.loads(out.read_text())
    views = figures["views_service"]
    assert figures["postgres"] is None
    assert views["export"]["rows"] == 3000
    assert views["fetchall"]["rows"] == 3000
    assert 0 < views["chunks"]["rows"] < 3000  # the filter's rows, FETCH 700 at a time
    assert views["range_rows"]["rows"] == 10 * 100
    assert views["range_count"]["rows"] == 10  # one count a query
    assert views["export"]["server_pss_mb_max"] > 0
    assert "count of a key range: p99 ms" in run.stdout
