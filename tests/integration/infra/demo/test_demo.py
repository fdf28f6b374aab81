"""End to end: the unattended demo on the real stack (the job, the views job, four services, the
load generator) ends with every stage reconciled: ratings produced = enriched = Elasticsearch
documents = lake rows, alerts = Slack posts, dead letters where they belong, every row of every
view that the run touched equal to the counts recomputed from the enriched topic, and no record
that is not UTF-8. Its progress lines show what the programs' Prometheus endpoints answer."""

import json
import re
import subprocess
import sys
from pathlib import Path

StackEnv = dict[str, str]


def test_the_unattended_demo_reconciles_every_stage(stack_env: StackEnv, tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "infra.demo",
            "--duration",
            "30",
            "--rate",
            "20",
            "--customers",
            "300",
            "--plain",
            "--summary",
            str(summary),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"demo failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    figures = json.loads(summary.read_text())
    assert figures["reconciled"] is True
    checks = {c["name"]: c for c in figures["checks"]}
    produced = checks["ratings produced"]["got"]
    assert produced >= 20 * 30 * 0.9  # the load generator kept its rate
    for name in ("enriched records", "Elasticsearch documents", "lake rows"):
        assert checks[name]["got"] == produced, name
    assert checks["Slack posts (alerts covered)"]["got"] == checks["alerts (stars < 3, platinum)"]["got"]
    assert checks["enrichment-dlq"]["got"] == checks["unreadable ratings produced"]["got"] >= 1
    rows = checks["customer_ratings rows of the run's records"]
    assert rows["got"] == rows["want"] > 100, "every customer of the run has its exact row in the view"
    segments = checks["segment_hourly rows of the run's records"]
    assert segments["got"] == segments["want"] >= 4, "every segment and hour the run touched, exactly"
    created = checks["platinum_customers rows of the run's records"]  # the view the demo created in SQL
    assert created["got"] == created["want"] > 10, "every platinum customer of the run, exactly"
    for name in ("enriched records and alerts not UTF-8", "enriched records not UTF-8 (whole topic)"):
        assert checks[name]["got"] == checks[name]["want"] == 0, name
    assert "reconciled: every stage agrees" in result.stdout
    # The progress lines read the programs' Prometheus endpoints: the job's and the sinks'
    # counters grew while the load ran.
    shown = re.findall(r"load running.*: produced [\d,]+ enriched ([\d,]+) es ([\d,]+) lake", result.stdout)
    assert shown and max(int(e.replace(",", "")) for e, _ in shown) > 0, result.stdout[-2000:]
    assert max(int(es.replace(",", "")) for _, es in shown) > 0
