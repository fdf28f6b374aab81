"""Arrow's allocator: jemalloc unless ARROW_DEFAULT_MEMORY_POOL says otherwise, and the choice
handed down to child processes. Each case runs in a Python of its own (the pool is global)."""

import json
import os
import subprocess
import sys

import pytest

from foundation.arrow_memory import POOL_VARIABLE

PROBE = """
import json, os, subprocess, sys
import pyarrow as pa
from foundation.arrow_memory import choose_pool
chosen = choose_pool()
child = subprocess.run(
    [sys.executable, "-c", "import pyarrow as pa; print(pa.default_memory_pool().backend_name)"],
    capture_output=True, text=True, check=True,
).stdout.strip()
print(json.dumps({"chosen": chosen, "pool": pa.default_memory_pool().backend_name, "child": child}))
"""


def _probe(pool: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != POOL_VARIABLE}
    if pool is not None:
        env[POOL_VARIABLE] = pool
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def test_a_process_takes_jemalloc_and_its_children_too():
    assert _probe(None) == {"chosen": "jemalloc", "pool": "jemalloc", "child": "jemalloc"}


@pytest.mark.parametrize("pool", ["system", "mimalloc"])
def test_the_pool_an_operator_set_is_kept(pool):
    assert _probe(pool) == {"chosen": pool, "pool": pool, "child": pool}
