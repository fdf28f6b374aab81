import subprocess
import sys

from infra.stack.components import component_ports
from infra.stack.settings import StackSettings

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
