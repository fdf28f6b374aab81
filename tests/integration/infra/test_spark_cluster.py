"""The stack's Spark cluster runs only the applications that have its shared secret: a local
user without it cannot submit work that would run as the stack's user. Under a root `make up`,
the executors with their Python workers run as the service user, with the third-party packages
in the executors' Python and no copy of the product there: each job ships its own code
(runtime/test_session.py). The master and workers: test_status.py, with every component."""

import ast
import json
import os
import pwd
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from infra.stack.settings import StackSettings

StackEnv = dict[str, str]
# Where a package the product needs (pyarrow) lies in the executors' Python environment.
PYARROW = Path(
    "lib",
    f"python{sys.version_info.major}.{sys.version_info.minor}",
    "site-packages",
    "pyarrow",
    "__init__.py",
)

APPLICATION = """
import sys
from pyspark.sql import SparkSession
builder = SparkSession.builder.master(sys.argv[1]).appName(sys.argv[2])
spark = builder.config("spark.ui.enabled", "false").getOrCreate()
print("sum", spark.sparkContext.parallelize(range(10), 2).sum(), flush=True)

def where(_):
    import importlib.util, os, sys, pyarrow
    return os.geteuid(), sys.prefix, pyarrow.__file__, importlib.util.find_spec("enrichment_job") is None

print("ran", sorted(set(spark.sparkContext.parallelize(range(4), 4).map(where).collect())), flush=True)
spark.stop()
"""


def _application(stack_env: StackEnv, name: str, tmp_path: Path, with_secret: bool) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    env |= {"JAVA_HOME": stack_env["JAVA_HOME"], "SPARK_LOCAL_IP": "127.0.0.1"}
    if stack_env.get("SPARK_EXECUTOR_PYTHON"):
        env["PYSPARK_PYTHON"] = stack_env["SPARK_EXECUTOR_PYTHON"]
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
    output = (tmp_path / f"{member}.log").read_text()
    assert "sum 45" in output
    assert _registered(stack_env, member)
    ran = ast.literal_eval(next(line for line in output.splitlines() if line.startswith("ran "))[4:])
    if os.geteuid() != 0:  # the executors run as the user who made the stack, with its Python
        assert {uid for uid, _, _, _ in ran} == {os.geteuid()}
        return
    service = pwd.getpwnam(StackSettings().service_user).pw_uid
    environment = Path(stack_env["SPARK_EXECUTOR_PYTHON"]).parent.parent
    # the environment's own packages, and no product: an application that ships none has none
    assert ran == [(service, str(environment), str(environment / PYARROW), True)], output[-3000:]
