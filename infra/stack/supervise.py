"""The process supervisor (supervisord) that runs the stack's components.

One supervisord per state folder, controlled over its private unix socket with XML-RPC.
"""

import configparser
import io
import logging
import resource
import subprocess
import sys
import time
from http.client import HTTPException
from pathlib import Path
from typing import Any, cast
from xmlrpc.client import Fault, ServerProxy

from supervisor.xmlrpc import SupervisorTransport

from infra.stack.components import Component
from infra.stack.errors import ComponentFailed
from infra.stack.settings import StackSettings

log = logging.getLogger("stack")
FAILED_STATES = {"BACKOFF", "EXITED", "FATAL", "UNKNOWN"}


def _dir(settings: StackSettings) -> Path:
    return settings.state_dir / "supervisor"


def socket_path(settings: StackSettings) -> Path:
    return _dir(settings) / "supervisor.sock"


def config_path(settings: StackSettings) -> Path:
    return _dir(settings) / "supervisord.conf"


def render_config(settings: StackSettings, components: list[Component]) -> str:
    """supervisord.conf: programs never start by themselves; `up` starts them in order."""
    conf = configparser.RawConfigParser()
    conf["unix_http_server"] = {"file": str(socket_path(settings)), "chmod": "0700"}
    conf["supervisord"] = {
        "logfile": str(settings.logs_dir / "supervisord.log"),
        "pidfile": str(_dir(settings) / "supervisord.pid"),
        # Elasticsearch wants 65535 open files; raise the soft limit as far as the hard one allows.
        "minfds": str(min(65535, resource.getrlimit(resource.RLIMIT_NOFILE)[1])),
        "minprocs": "4096",
    }
    conf["rpcinterface:supervisor"] = {
        "supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"
    }
    conf["supervisorctl"] = {"serverurl": f"unix://{socket_path(settings)}"}
    for comp in components:
        section = {
            "command": " ".join(_quote(arg) for arg in comp.command),
            "directory": str(comp.directory),
            "autostart": "false",
            "autorestart": "false",
            "startsecs": "3",
            "startretries": "0",
            "stopsignal": comp.stop_signal,
            "stopwaitsecs": str(comp.stop_wait_s),
            "stopasgroup": "true",
            "killasgroup": "true",
            "redirect_stderr": "true",
            "stdout_logfile": str(comp.log_file(settings)),
            "stdout_logfile_maxbytes": "50MB",
            "stdout_logfile_backups": "3",
        }
        if comp.environment:
            section["environment"] = ",".join(f"{k}={_env_quote(v)}" for k, v in comp.environment.items())
        if comp.user:
            section["user"] = comp.user
        conf[f"program:{comp.name}"] = section
    out = io.StringIO()
    conf.write(out)
    return out.getvalue()


def _env_quote(value: str) -> str:
    """A value of supervisord's `environment`: its parser (shlex, not POSIX mode) has no escapes,
    so a value with double quotes in it (a JAAS line) goes in single quotes."""
    for mark in ('"', "'"):
        if mark not in value:
            return f"{mark}{value}{mark}"
    raise ValueError("an environment value with both kinds of quotes cannot be passed to supervisord")


def _quote(arg: str) -> str:
    return f'"{arg}"' if any(c.isspace() for c in arg) else arg


class Supervisor:
    """A handle on the state folder's supervisord."""

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self._transport = SupervisorTransport(None, None, f"unix://{socket_path(settings)}")
        self._proxy = ServerProxy("http://127.0.0.1", transport=self._transport)

    @property
    def rpc(self) -> Any:
        return self._proxy.supervisor

    def running(self) -> bool:
        if not socket_path(self.settings).exists():
            return False
        try:
            state = cast(dict[str, Any], self.rpc.getState())
        except (OSError, Fault, HTTPException):
            # A failed request leaves the connection unusable (a stale socket after a machine
            # restart, or supervisord not up yet): drop it so the next call reconnects.
            self.close()
            return False
        return bool(state["statename"] == "RUNNING")

    def start_daemon(self, config: str) -> None:
        """Write the config and start supervisord, or reload it when it is already running."""
        path = config_path(self.settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.settings.logs_dir.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(config)
        if self.running():
            self._apply_changes()
            return
        socket_path(self.settings).unlink(missing_ok=True)
        supervisord = Path(sys.executable).parent / "supervisord"
        proc = subprocess.run(
            [str(supervisord), "-c", str(path)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise ComponentFailed(
                f"supervisord did not start: {(proc.stdout + proc.stderr).strip()}",
                hint=f"see {self.settings.logs_dir / 'supervisord.log'}",
            )
        deadline = time.monotonic() + 15
        while not self.running():
            if time.monotonic() > deadline:
                raise ComponentFailed(
                    "supervisord did not start", hint=f"see {self.settings.logs_dir / 'supervisord.log'}"
                )
            time.sleep(0.2)

    def _apply_changes(self) -> None:
        """What `supervisorctl update` does: replace programs whose config changed."""
        added, changed, removed = cast(list[list[str]], self.rpc.reloadConfig()[0])
        for name in changed + removed:
            self.rpc.stopProcessGroup(name)
            self.rpc.removeProcessGroup(name)
        for name in changed + added:
            self.rpc.addProcessGroup(name)

    def info(self, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self.rpc.getProcessInfo(name))
        except Fault:
            return None

    def state(self, name: str) -> str:
        info = self.info(name)
        return str(info["statename"]) if info else "ABSENT"

    def start(self, name: str) -> None:
        if self.state(name) in {"RUNNING", "STARTING"}:
            return
        self.rpc.startProcess(name, False)

    def stop(self, name: str) -> None:
        if self.state(name) in {"RUNNING", "STARTING", "BACKOFF"}:
            self.rpc.stopProcess(name, True)

    def shutdown(self) -> None:
        self.rpc.shutdown()
        deadline = time.monotonic() + 30
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.close()

    def close(self) -> None:
        """Close the connection to supervisord (it is reopened by the next call)."""
        self._transport.close()
