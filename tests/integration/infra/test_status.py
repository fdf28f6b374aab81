import os
import pwd
import subprocess
import sys
from pathlib import Path

from infra.stack.components import component_ports, os_user
from infra.stack.settings import StackSettings
from infra.stack.supervise import Supervisor

StackEnv = dict[str, str]


def test_status_shows_every_component_healthy_with_port_memory_and_log(stack_env: StackEnv) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "infra.stack", "status"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    settings = StackSettings()
    for name, ports in component_ports(settings).items():
        line = lines[name]
        assert " RUNNING " in line and " ok: " in line, line
        assert all(f"={port}" in line for port in ports.values()), line
        assert "MiB" in line and str(settings.logs_dir / f"{name}.log") in line, line


def test_env_masks_secrets(stack_env: StackEnv) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "infra.stack", "env"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "APP_DB_PASSWORD=****" in out
    assert stack_env["APP_DB_PASSWORD"] not in out
    assert stack_env["S3_SECRET_KEY"] not in out
    assert f"KAFKA_BOOTSTRAP_SERVERS={stack_env['KAFKA_BOOTSTRAP_SERVERS']}" in out


def _process_tree_owners(pid: int) -> set[str]:
    """The users that the process and every process below it run as."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    owners, todo = set(), [pid]
    while todo:
        current = todo.pop()
        owners.add(pwd.getpwuid(Path(f"/proc/{current}").stat().st_uid).pw_name)
        todo.extend(children.get(current, []))
    return owners


def test_under_a_root_up_no_component_runs_as_root(stack_env: StackEnv) -> None:
    """Run as root, the stack hands every component, the Spark cluster's master and workers with
    them, to its unprivileged user; run as anyone else, everything runs as them."""
    settings = StackSettings()
    sup = Supervisor(settings)
    expected = settings.service_user if os.geteuid() == 0 else os_user()
    try:
        pids = {name: (sup.info(name) or {}).get("pid", 0) for name in component_ports(settings)}
    finally:
        sup.close()
    for name, pid in pids.items():
        assert pid > 0, name
        owners = _process_tree_owners(pid)
        assert owners == {expected}, (name, owners)
