"""A latency hint to the Linux scheduler: a shorter time slice for the calling thread.

Since Linux 6.12 the fair scheduler (EEVDF) lets a thread ask for its own slice
(`sched_attr.sched_runtime`, 0.1 to 100 ms). A short slice gives the thread an early deadline
when it wakes, so it runs ahead of busy threads that woke before it, without any more CPU
share than its weight gives: what a request-serving loop beside batch work wants. No privilege
is needed. On older kernels the value is accepted and has no effect.
"""

import ctypes
import os
import platform
from dataclasses import dataclass

_SYS = {"x86_64": (314, 315), "aarch64": (274, 275)}  # sched_setattr, sched_getattr
_FAIR_POLICIES = (0, 3)  # SCHED_OTHER, SCHED_BATCH: the slice means nothing to the real-time ones


class _SchedAttr(ctypes.Structure):
    _fields_ = (
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
        ("sched_util_min", ctypes.c_uint32),
        ("sched_util_max", ctypes.c_uint32),
    )


@dataclass(frozen=True)
class SliceResult:
    applied: bool
    detail: str  # what the kernel now has, or why nothing was set


def request_slice(slice_us: int) -> SliceResult:
    """Asks for a `slice_us` microsecond slice for the calling thread (0: leave the kernel's
    default). Never raises: a kernel or platform that refuses is reported in the result."""
    if slice_us <= 0:
        return SliceResult(False, "the kernel's default slice")
    numbers = _SYS.get(platform.machine()) if platform.system() == "Linux" else None
    if numbers is None:
        return SliceResult(False, f"no slice hint on {platform.system()} {platform.machine()}")
    set_nr, get_nr = numbers
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _SchedAttr()
    if libc.syscall(get_nr, 0, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return SliceResult(False, f"sched_getattr: {os.strerror(ctypes.get_errno())}")
    if attr.sched_policy not in _FAIR_POLICIES:
        return SliceResult(False, f"the thread's policy ({attr.sched_policy}) is not a fair one")
    attr.size = ctypes.sizeof(attr)
    attr.sched_flags = 0
    attr.sched_runtime = slice_us * 1000
    if libc.syscall(set_nr, 0, ctypes.byref(attr), 0) != 0:
        return SliceResult(False, f"sched_setattr: {os.strerror(ctypes.get_errno())}")
    check = _SchedAttr()
    libc.syscall(get_nr, 0, ctypes.byref(check), ctypes.sizeof(check), 0)
    return SliceResult(True, f"slice {check.sched_runtime // 1000} us")
