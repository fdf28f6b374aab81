"""The local stack as tests reach it: its clients' settings (stack.env) and its command line."""

import subprocess
import sys

import pytest

from infra.stack.secrets import read_env_file
from infra.stack.settings import StackSettings
from infra.stack.stack import stack_env_path

StackEnv = dict[str, str]


def running_stack_env(what: str, command: str, mode: tuple[str, str] | None = None) -> StackEnv:
    """stack.env of the running stack `what` (started by `command`); with `mode` (a variable of
    stack.env and its value), that stack and no other. Fails, never skips, when it is missing."""
    path = stack_env_path(StackSettings())
    if not path.exists():
        pytest.fail(f"{what} is not up ({path} is missing): run `{command}` first")
    env = read_env_file(path)
    if mode is not None and env.get(mode[0]) != mode[1]:
        pytest.fail(f"the stack of {path} is not {what}: run `{command}`")
    return env


def stack_command(command: str, expect_rc: int = 0) -> str:
    """`python -m infra.stack <command>` on the stack of this environment; its output."""
    proc = subprocess.run(
        [sys.executable, "-m", "infra.stack", command],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == expect_rc, f"`infra.stack {command}`:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr
