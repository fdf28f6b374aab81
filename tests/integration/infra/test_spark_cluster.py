"""The stack's Spark cluster runs only the applications that have its shared secret: a local
user without it cannot submit work that would run as the stack's user."""

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

StackEnv = dict[str, str]

APPLICATION = """
import sys
from pyspark.sql import SparkSession
builder = SparkSession.builder.master(sys.argv[1]).appName(sys.argv[2])
spark = builder.config("spark.ui.enabled", "false").getOrCreate()
print("sum", spark.sparkContext.parallelize(range(10), 2).sum(), flush=True)
spark.stop()
"""


def _application(stack_env: StackEnv, name: str, tmp_path: Path, with_secret: bool) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    env |= {"JAVA_HOME": stack_env["JAVA_HOME"], "SPARK_LOCAL_IP": "127.0.0.1"}
    if with_secret:
        env["SPARK_CONF_DIR"] = stack_env["SPARK_CONF_DIR"]
    with (tmp_path / f"{name}.log").open("w") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-c", APPLICATION, stack_env["SPARK_MASTER_URL"], name],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )


def _registered(stack_env: StackEnv, name: str) -> bool:
    """Whether the master lists an application of that name, running or done."""
    with urllib.request.urlopen(f"{stack_env['SPARK_MASTER_UI_URL']}/json/", timeout=5) as answer:  # noqa: S310 - the local master
        state = json.load(answer)
    return any(app["name"] == name for app in [*state["activeapps"], *state["completedapps"]])


def test_the_cluster_runs_an_application_with_its_secret_and_refuses_one_without(
    stack_env: StackEnv, tmp_path: Path
) -> None:
    assert Path(stack_env["SPARK_CONF_DIR"], "spark-defaults.conf").stat().st_mode & 0o077 == 0
    outsider = f"outsider-{uuid.uuid4().hex[:8]}"
    refused = _application(stack_env, outsider, tmp_path, with_secret=False)
    log = tmp_path / f"{outsider}.log"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and "Failed to connect to master" not in log.read_text():
            assert refused.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        assert "Expected SaslMessage" in log.read_text(), log.read_text()[-3000:]  # the master's refusal
        assert not _registered(stack_env, outsider), "an application without the secret registered"
        assert "sum 45" not in log.read_text()
    finally:
        refused.kill()
        refused.wait(30)
    member = f"member-{uuid.uuid4().hex[:8]}"
    admitted = _application(stack_env, member, tmp_path, with_secret=True)
    try:
        assert admitted.wait(180) == 0, (tmp_path / f"{member}.log").read_text()[-3000:]
    finally:
        admitted.kill()
    assert "sum 45" in (tmp_path / f"{member}.log").read_text()
    assert _registered(stack_env, member)
