import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra.bench import scale
from infra.bench.peer import MODULE
from infra.bench.scale import machine_busy_s, summary
from infra.stack import components, executor_python, stack
from infra.stack import settings as stack_settings
from infra.stack.versions import load_versions


def test_the_summary_gives_rate_per_executor_and_the_ratio_of_most_over_fewest():
    runs = {
        "1": {"complete": True, "rate_per_s": 1000, "machine_idle_cores": 1.2},
        "2": {"complete": True, "rate_per_s": 1900, "machine_idle_cores": 0.9},
        "3": {"complete": True, "rate_per_s": 2700, "machine_idle_cores": 0.01},
    }
    out = summary(runs, void_idle=0.05)
    assert out["rate_per_s"] == {"1": 1000, "2": 1900, "3": 2700}
    assert out["rate_per_executor"] == {"1": 1000, "2": 950, "3": 900}
    assert out["ratio_3_over_1"] == 2.7
    assert out["void"] == ["3"]  # the machine had no idle CPU left


def test_an_incomplete_run_gives_no_ratio():
    out = summary({"1": {"complete": True, "rate_per_s": 1000}, "3": {"complete": False}}, void_idle=0.05)
    assert out["ratio_3_over_1"] is None
    assert out["rate_per_executor"]["3"] is None


def test_the_machine_s_cpu_counters_only_grow():
    busy, idle = machine_busy_s()
    sum(i * i for i in range(300_000))
    busy2, idle2 = machine_busy_s()
    assert busy2 >= busy and idle2 >= idle and busy > 0


def test_the_reference_s_pom_takes_its_versions_from_the_pinned_ones():
    pom = (MODULE / "pom.xml").read_text()
    dependencies = pom[pom.index("<dependencies>") : pom.index("</dependencies>")]
    versions = re.findall(r"<version>([^<]*)</version>", dependencies)
    properties = load_versions().maven_properties()
    assert versions, "the reference's POM declares its dependencies"
    for version in versions:
        assert version and version.startswith("${") and version[2:-1] in properties, version


def test_both_benchmarks_answer_help_without_a_stack():
    for module in ("infra.bench.scale", "infra.bench.versus"):
        done = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert "--out" in done.stdout and "Kafka Streams" in done.stdout


def test_as_root_the_benchmark_s_cluster_runs_as_the_stack_s_user_and_leaves_no_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "service-root"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(stack_settings, "SERVICE_ROOT", root)
    monkeypatch.setattr(stack, "SERVICE_ROOT", root)
    monkeypatch.setattr(components, "_chown_tree", lambda path, user: None)
    monkeypatch.setattr(executor_python, "spark_home", lambda settings: tmp_path / "spark-home")
    built: list[str] = []
    monkeypatch.setattr(executor_python, "environment", lambda settings, user: built.append(user))
    monkeypatch.setattr(scale.Group, "create", lambda self: self)  # no cgroups in a unit test
    monkeypatch.setattr(scale.Group, "remove", lambda self: None)
    cluster = scale.Cluster("/jdk", tmp_path / "cluster-2", workers=2, cap=0.3)
    assert built == ["ratings-stack"]  # the executors' Python, built for that user
    assert [c.name for c in cluster.components] == ["spark-master", "spark-worker-1", "spark-worker-2"]
    assert {c.user for c in cluster.components} == {"ratings-stack"}
    assert cluster.service_dir.parent == root
    assert all(c.directory.is_relative_to(cluster.service_dir) for c in cluster.components)
    assert cluster.executor_python == str(cluster.service_dir / "lib" / "executor-python" / "bin" / "python")
    cluster.stop()
    assert not cluster.service_dir.exists()
