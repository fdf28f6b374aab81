"""The watchdog ends a service whose loop stopped coming back, and only then: beats keep it
quiet, and time spent in the downstream (bounded by its own timeouts) does not count."""

import subprocess
import sys
import threading

from services.core.watchdog import STALLED_EXIT, Watchdog


def _watched(limit_s: float) -> tuple[Watchdog, list[float]]:
    stalls: list[float] = []
    return Watchdog("test", limit_s, on_stall=stalls.append), stalls


def _wait(seconds: float) -> None:
    threading.Event().wait(seconds)


def test_no_beat_for_the_limit_is_a_stall_reported_once() -> None:
    dog, stalls = _watched(0.2)
    dog.start()
    _wait(1.0)
    dog.stop()
    assert len(stalls) == 1
    assert stalls[0] >= 0.2


def test_beats_keep_it_quiet() -> None:
    dog, stalls = _watched(0.3)
    dog.start()
    for _ in range(20):
        dog.beat()
        _wait(0.05)
    dog.stop()
    assert stalls == []


def test_time_in_the_downstream_does_not_count_and_a_stall_counts_from_its_end() -> None:
    dog, stalls = _watched(0.3)
    dog.start()
    with dog.excused():
        _wait(0.8)
    assert stalls == []
    _wait(0.8)
    dog.stop()
    assert len(stalls) == 1
    assert 0.3 <= stalls[0] < 0.6  # counted from the end of the excused call, not its start (0.8 s)


def test_by_default_a_stall_writes_the_stacks_and_exits_for_a_restart() -> None:
    code = (
        "import time\n"
        "from services.core.watchdog import Watchdog\n"
        "Watchdog('stuck-service', 0.3).start()\n"
        "time.sleep(30)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == STALLED_EXIT == 1
    assert "stuck-service: the consumer loop has not come back" in done.stderr
    assert "most recent call first" in done.stderr
    assert 'File "<string>", line 4' in done.stderr  # the main thread, in its sleep
