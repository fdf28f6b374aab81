"""Which allocator Arrow's buffers come from, in every process of the product that uses Arrow.

pyarrow's default allocator on Linux is mimalloc. On hosts where touching fresh memory is dear
(virtual machines whose page faults go through the hypervisor, the CI machine among them) it
gives new memory back and takes it again batch after batch: a fresh start's read of the CDC
topic spent three times the CPU it spends with jemalloc, the allocator Arrow used by default
before. So a process of the product takes jemalloc, unless `ARROW_DEFAULT_MEMORY_POOL` says
otherwise (`jemalloc`, `mimalloc` or `system`, Arrow's own variable): as set, it is kept. The
choice is also left in the environment, so that the processes this one starts (Spark's Python
workers, a second views process) allocate the same way."""

import os

import pyarrow as pa

__all__ = ["POOL_VARIABLE", "PREFERRED", "choose_pool"]

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
PREFERRED = "jemalloc"


def choose_pool() -> str:
    """Arrow's allocator for this process and its children: `ARROW_DEFAULT_MEMORY_POOL` as set
    (Arrow reads it itself), else jemalloc where this pyarrow has it. Returns its name."""
    if os.environ.get(POOL_VARIABLE):
        return _in_use()
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc: its default stays
        return _in_use()
    pa.set_memory_pool(pool)
    os.environ[POOL_VARIABLE] = PREFERRED
    return PREFERRED


def _in_use() -> str:
    return str(pa.default_memory_pool().backend_name)
