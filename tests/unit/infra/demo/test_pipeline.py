"""The demo's (and the fault matrix's) supervision: a process that dies is restarted with
back-off; one that exits 2 (a bad setting) or 3 (fenced) is left down and reported."""

import time
from pathlib import Path

import pytest

from infra.demo import pipeline as P


def _pipeline(tmp_path: Path, code: int) -> P.Pipeline:
    (tmp_path / "exits.py").write_text(f"import sys\nsys.exit({code})\n")
    return P.Pipeline(P.DemoPaths(tmp_path / "demo"), {"job": {"PYTHONPATH": str(tmp_path)}})


def _until(condition: "object", timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not condition():  # type: ignore[operator]
        time.sleep(0.05)


def test_a_process_that_dies_is_restarted_after_a_growing_back_off(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path, 1)
    pipeline.start("job", module="exits")
    restarts: list[float] = []
    began = time.monotonic()
    while len(restarts) < 3 and time.monotonic() - began < 30:
        before = pipeline.children["job"]
        assert pipeline.supervise() == []
        if pipeline.children["job"] is not before:
            restarts.append(time.monotonic() - began)
        time.sleep(0.05)
    pipeline.stop_all()
    assert len(restarts) == 3
    gaps = [b - a for a, b in zip([0.0, *restarts], restarts, strict=False)]
    assert gaps[1] > 1.5 and gaps[2] > 3.5, gaps  # 1 s, then 2 s, then 4 s
    assert pipeline.children["job"].restarts == 3


@pytest.mark.parametrize("code", [2, 3])
def test_a_bad_setting_or_a_fenced_job_is_not_restarted(tmp_path: Path, code: int) -> None:
    pipeline = _pipeline(tmp_path, code)
    child = pipeline.start("job", module="exits")
    _until(lambda: not child.alive())
    time.sleep(1.5)
    assert pipeline.supervise() == [child]
    assert pipeline.children["job"] is child
    assert child.restarts == 0
