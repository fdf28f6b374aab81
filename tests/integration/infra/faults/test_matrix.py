"""The quick rows of the fault matrix on the real stack, under load: the enrichment job killed,
the broker restarted, hostile ratings, a second job instance, the sinks killed, the Slack
notifier killed after a post. Every row must show nothing lost and nothing doubled, every view
equal to its recount, no process exiting that the fault did not touch, and every stage resuming
unattended (`make faults` runs them all). Then the rows built to fail: the views job killed by
a row that does not declare it, and a view's rows made wrong. Each must come out not met, for
its reason: a judge that cannot fail is no judge.

Then, with the join in tasks on the stack's cluster, the faults a cluster adds: a Python worker
killed in a task, the driver killed between its CDC commit and the tasks', an executor frozen
past the network timeout whose zombie worker comes back, and forced speculation."""

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.faults.scenarios import SCENARIOS, SELF_TESTS

StackEnv = dict[str, str]


def _run_matrix(args: list[str], out: Path, timeout_s: float) -> tuple[int, str, list[dict[str, Any]]]:
    """The matrix's exit code, its output (the end of it) and its rows."""
    command = [sys.executable, "-m", "infra.faults", *args, "--drain-timeout", "300", "--out", str(out)]
    matrix = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = matrix.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # SIGINT: the matrix stops every process it started and prints the rows so far, and
        # this test shows them. Killed only if it does not stop in time.
        matrix.send_signal(signal.SIGINT)
        try:
            output, _ = matrix.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            matrix.kill()
            output, _ = matrix.communicate()
        output = f"the fault matrix overran {timeout_s:.0f} s and was interrupted\n" + output
    # Without librdkafka's reconnect lines (the broker is down for a while on purpose).
    quiet = [line for line in output.splitlines() if not line.startswith("%")]
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    return matrix.returncode, "\n".join(quiet)[-12000:], rows


@pytest.mark.long
def test_every_quick_row_of_the_fault_matrix_is_met(stack_env: StackEnv, tmp_path: Path) -> None:
    code, report, rows = _run_matrix(["--quick", "--self-test"], tmp_path / "faults.json", 2700)
    quick = [s.name for s in SCENARIOS if s.quick and "driver" in s.join_in]
    assert [r["fault"] for r in rows] == quick + [s.name for s in SELF_TESTS], report
    failed = {r["fault"]: r for r in rows if r["fault"] in quick and not r["ok"]}
    assert failed == {}, report
    tests = {r["fault"]: r for r in rows if r["fault"] not in quick}
    killed = tests["self-test-undeclared-kill"]
    assert not killed["ok"] and killed["unexpected_exits"][0].startswith("views (-9, SIGKILL)"), report
    assert killed["views_ok"] is True, report  # the views job recovers: only its exit fails the row
    wrong = tests["self-test-wrong-view"]
    assert not wrong["ok"] and wrong["views_differ"] == ["segment_hourly"], report
    assert wrong["unexpected_exits"] == [], report
    assert all(r["judged_ok"] for r in rows), report
    assert code == 0, report


@pytest.mark.long
def test_the_faults_a_cluster_adds_lose_and_double_nothing_with_the_join_in_tasks(
    stack_env: StackEnv, tmp_path: Path
) -> None:
    cluster_rows = [s.name for s in SCENARIOS if "driver" not in s.join_in]
    code, report, rows = _run_matrix(
        ["--join-in", "tasks", "--only", *cluster_rows], tmp_path / "f.json", 1500
    )
    assert [r["fault"] for r in rows] == cluster_rows, report
    assert {r["fault"]: r["notes"] for r in rows if not r["ok"]} == {}, report
    for row in rows:  # each fault happened
        assert row["not_injected"] == "" and row["lost"] == 0 and row["duplicated"] == 0, report
    assert code == 0, report
