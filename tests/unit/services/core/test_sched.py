"""The scheduler slice hint: asked for the calling thread only, read back from the kernel, and a
no-op when not asked for."""

import os
import platform
import threading
from pathlib import Path

from services.core.sched import SliceResult, request_slice


def _in_thread(slice_us: int) -> tuple[SliceResult, str]:
    """Runs the hint in a thread of its own (the test runner's threads keep their slice) and
    returns the result with the kernel's own record of that thread's slice."""
    out: list[tuple[SliceResult, str]] = []

    def ask() -> None:
        result = request_slice(slice_us)
        sched = Path(f"/proc/self/task/{threading.get_native_id()}/sched")
        out.append((result, sched.read_text() if sched.exists() else ""))

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join()
    return out[0]


def _kernel_at_least(major: int, minor: int) -> bool:
    numbers = platform.release().split("-")[0].split(".")
    return (int(numbers[0]), int(numbers[1])) >= (major, minor)


def test_zero_leaves_the_kernel_s_default() -> None:
    result, _ = _in_thread(0)
    assert result == SliceResult(False, "the kernel's default slice")


def test_a_slice_is_set_for_the_calling_thread_only() -> None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        result, _ = _in_thread(100)
        assert not result.applied
        return
    result, sched = _in_thread(100)
    assert result.applied, result.detail
    own = Path(f"/proc/self/task/{threading.get_native_id()}/sched").read_text()
    if _kernel_at_least(6, 12):  # custom slices: the kernel then keeps and shows the value
        assert result.detail == "slice 100 us"
        assert _slice_ns(sched) == 100_000
        assert _slice_ns(own) != 100_000  # the caller's thread, not the process
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def _slice_ns(sched: str) -> int:
    line = next(line for line in sched.splitlines() if line.startswith("se.slice"))
    return int(line.split(":")[1])
