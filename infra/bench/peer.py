"""The benchmarks' reference engine: the Kafka Streams application in infra/bench/kstreams, built
with Maven (versions from infra/versions.toml, jars into ~/.m2, which later builds reuse) and run
as a process of its own. `versus` and `scale` start it the way they start the job."""

import os
import shutil
import subprocess
import time
from pathlib import Path

from infra.stack.settings import REPO_ROOT
from infra.stack.versions import load_versions

MODULE = REPO_ROOT / "infra" / "bench" / "kstreams"
MAIN = "bench.kstreams.EnrichJoin"


def build() -> str:
    """Compiles the reference and copies its jars: the Java class path to run it with."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("Maven (mvn) is not on PATH; it builds the Kafka Streams reference")
    props = [f"-D{k}={v}" for k, v in load_versions().maven_properties().items()]
    settings = REPO_ROOT / "infra" / "maven" / "settings.xml"
    cmd = [mvn, "-B", "-q", "-s", str(settings), "-f", str(MODULE / "pom.xml"), *props]
    proc = subprocess.run(
        [*cmd, "compile", "dependency:copy-dependencies", "-DincludeScope=runtime"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"building the Kafka Streams reference failed:\n{proc.stdout}{proc.stderr}")
    return f"{MODULE / 'target' / 'classes'}:{MODULE / 'target' / 'dependency'}/*"


def start(
    classpath: str,
    java_home: str,
    *,
    servers: str,
    topics: dict[str, str],
    cdc_topic: str,
    app_id: str,
    state_dir: Path,
    log: Path,
    threads: int = 1,
    commit_ms: int = 500,
    heap: str = "1g",
) -> subprocess.Popen[bytes]:
    """The reference, reading topics["ratings"] and `cdc_topic`, writing topics["enriched"] and
    topics["alerts"], in its own session (stop it with SIGTERM to its process group)."""
    args = {
        "bootstrap": servers,
        "ratings": topics["ratings"],
        "cdc": cdc_topic,
        "enriched": topics["enriched"],
        "alerts": topics["alerts"],
        "app": app_id,
        "stateDir": str(state_dir),
        "commitMs": str(commit_ms),
        "threads": str(threads),
    }
    java = str(Path(java_home) / "bin" / "java")
    command = [
        java,
        f"-Xmx{heap}",
        "-XX:+UseParallelGC",
        "--enable-native-access=ALL-UNNAMED",
        "-cp",
        classpath,
        MAIN,
    ]
    with log.open("wb") as out:
        return subprocess.Popen(
            [*command, *(f"{k}={v}" for k, v in args.items())],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "JAVA_HOME": java_home},
        )


def wait_running(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    """Until the reference says "state RUNNING": its customer table is loaded."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the Kafka Streams reference exited with {proc.returncode}; see {log}")
        if b"state RUNNING" in log.read_bytes():
            return
        time.sleep(0.1)
    raise SystemExit(f"the Kafka Streams reference did not start in {timeout_s:.0f} s; see {log}")
