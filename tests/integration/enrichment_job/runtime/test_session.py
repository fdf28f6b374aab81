"""On the stack's Spark cluster, the executors' Python workers run the job's own code, shipped
with it, not a copy of the product their Python environment may hold (the local stack's, under
a root `make up`, is linked at `make up`: a file changed since would not be seen)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from support.enrichment import StackEnv

from infra.stack.clients import spark_job_on_cluster

WORKER_SEES = textwrap.dedent(
    """
    from enrichment_job.runtime.session import build_session
    from enrichment_job.settings import JobSettings

    spark = build_session(JobSettings(), "ships-its-code")
    try:
        def where(_):
            import enrichment_job.tasks.enrich as enrich
            return enrich.__file__

        print("WORKER", spark.sparkContext.parallelize([0], 1).map(where).collect()[0])
    finally:
        spark.stop()
    """
)


def test_the_executors_run_the_code_the_job_shipped(stack_env: StackEnv, tmp_path: Path) -> None:
    env = {**os.environ, **spark_job_on_cluster(stack_env), "ENRICH_UI_ENABLED": "false"}
    done = subprocess.run(
        [sys.executable, "-c", WORKER_SEES],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("WORKER ")]
    where = line.removeprefix("WORKER ")
    assert "ratings_product.zip" in where, where  # not the checkout's, nor the environment's copy
