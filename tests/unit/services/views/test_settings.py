"""The query service's settings: its README lists them all, a bad one is named, --help connects
nowhere."""

import os
import re
import subprocess
import sys
from pathlib import Path

from services.views.config import ViewsApiSettings

REPO = Path(__file__).resolve().parents[4]


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VIEWS_")}
    return subprocess.run(
        [sys.executable, "-m", "services.views", *args],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_services_readme_lists_every_setting() -> None:
    readme = (REPO / "services" / "views" / "README.md").read_text()
    documented = set(re.findall(r"`(VIEWS_[A-Z0-9_]+)`", readme))
    assert documented == {f"VIEWS_{name.upper()}" for name in ViewsApiSettings.model_fields}


def test_help_lists_the_settings_and_connects_nowhere() -> None:
    done = _run({"VIEWS_BOOTSTRAP_SERVERS": "127.0.0.1:1", "VIEWS_PORT": "1"}, "--help")
    assert done.returncode == 0, done.stderr
    for name in ViewsApiSettings.model_fields:
        assert f"VIEWS_{name.upper()}=" in done.stdout
    assert "VIEWS_HOST=127.0.0.1" in done.stdout


def test_a_bad_setting_stops_it_with_exit_2_naming_the_variable() -> None:
    done = _run({"VIEWS_PORT": "70000"})
    assert done.returncode == 2
    assert "VIEWS_PORT" in done.stderr


def test_it_listens_on_loopback_and_reads_committed_records_only() -> None:
    settings = ViewsApiSettings()
    assert settings.host == "127.0.0.1"
    assert settings.consumer_config()["isolation.level"] == "read_committed"
    assert settings.view_name("test-view-1.customer_ratings") == "customer_ratings"
