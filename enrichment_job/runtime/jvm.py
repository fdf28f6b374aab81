"""The driver JVM's class data sharing archive: the classes a job loads, kept mapped from a
file instead of read, verified and linked again at every start.

A Spark driver loads some 15,000 classes before its first query. With an archive of them
(HotSpot's AppCDS) a session starts in about half the time here, and its first queries run
sooner too. The first run of a job on a host writes the archive as its JVM exits after a clean stop
(-XX:ArchiveClassesAtExit, about 12 s at the exit here); the runs after map it
(-XX:SharedArchiveFile). On Java 25 and later the archive is an AOT cache instead
(-XX:AOTCacheOutput, then -XX:AOTCache): the classes loaded and linked, and the method profiles
of the run that wrote it, so the JIT compiles the hot code from the start rather than after
minutes of profiling. An archive belongs to
one JVM build and one class path, so its file name carries a hash of both: a new JDK, Spark,
Spark install folder (each checkout's virtualenv has its own) or jar list makes a new one. A JVM
that cannot use an archive says so and starts without it. The few archives used last are kept
(a start that maps one counts as a use); a new one replaces the one unused longest.
"""

import contextlib
import hashlib
import importlib.util
import logging
import os
import re
import subprocess
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

__all__ = [
    "AOT_CACHE_SINCE",
    "KEEP",
    "ClassArchive",
    "archive_path",
    "class_archive",
    "java_feature_version",
    "prune",
]

log = logging.getLogger("enrichment_job")


def _java_build() -> str:
    """What identifies the JVM that will run: its home and its `release` file."""
    home = os.environ.get("JAVA_HOME", "")
    try:
        return home + (Path(home) / "release").read_text()
    except OSError:
        return home


def java_feature_version() -> int:
    """The feature (major) version of the JVM that will run, from its home's `release` file (0:
    unknown)."""
    match = re.search(r'^JAVA_VERSION="(\d+)', _java_build(), re.MULTILINE)
    return int(match.group(1)) if match else 0


AOT_CACHE_SINCE = 25  # JEP 514 (one-step training) and JEP 515 (method profiles in the cache)


def _jar_stamps(jars: str) -> str:
    stamps = []
    for jar in filter(None, jars.split(",")):
        try:
            stat = Path(jar).stat()
            stamps.append(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            stamps.append(jar)
    return ",".join(stamps)


KEEP = 4  # archives per application name in a folder (about 200 MB each)


def _spark_home() -> str:
    """Where the Spark the JVM loads its classes from is installed: the archive records every
    class path entry by its absolute path, so another install of the same version cannot map it."""
    if home := os.environ.get("SPARK_HOME"):
        return home
    spec = importlib.util.find_spec("pyspark")
    return str(Path(spec.origin).parent) if spec is not None and spec.origin else ""


def archive_path(
    directory: Path, app_name: str, jars: str, java_options: str, *, on_class_path: bool = False
) -> Path:
    """The archive for this JVM build, Spark install, jar list (on the JVM's class path or not)
    and JVM options, under `directory`."""
    parts = [_java_build(), version("pyspark"), _spark_home(), _jar_stamps(jars), java_options]
    key = "\n".join([*parts, "jars on the class path"] if on_class_path else parts)
    suffix = ".aot" if java_feature_version() >= AOT_CACHE_SINCE else ".jsa"
    return directory / f"{app_name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}{suffix}"


@dataclass(frozen=True)
class ClassArchive:
    """The archive a driver JVM maps (`path` exists) or writes as it exits (`writing`)."""

    path: Path
    writing: Path | None = None

    @property
    def state(self) -> str:
        """ "mapped" (the archive was there), or "recording" (the first start with these jars and
        options: it records the archive as it runs, which costs CPU, and writes it at its stop)."""
        return "recording" if self.writing is not None else "mapped"

    @property
    def java_options(self) -> str:
        if self.path.suffix == ".aot":
            if self.writing is not None:
                # Without -Xlog, the exit lists every class it leaves out (Spark's generated
                # code, for one): some 500 warnings.
                return f"-XX:AOTCacheOutput={self.writing} -Xlog:aot=error"
            return f"-XX:AOTCache={self.path}"
        if self.writing is not None:
            return f"-XX:ArchiveClassesAtExit={self.writing}"
        return f"-XX:SharedArchiveFile={self.path}"

    def finish(self, gateway: Any, timeout_s: float = 120) -> None:
        """After `spark.stop()`, with the session's py4j gateway: when this JVM writes the
        archive, lets it exit and keeps what it wrote. Only a JVM that exited cleanly has
        written a whole archive: one cut short would crash the JVM that maps it, so it is never
        renamed into place."""
        proc: Any = getattr(gateway, "proc", None)  # the JVM, when this process started it
        if self.writing is None or proc is None:
            return
        log.info("writing the driver's class archive %s as its JVM exits", self.path)
        gateway.shutdown()
        proc.stdin.close()  # the JVM exits when its parent's pipe closes
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("the driver JVM did not exit within %.0f s; no class archive", timeout_s)
            return
        if code == 0 and self.writing.exists():
            self.writing.replace(self.path)
            prune(self.path)
        else:
            self.writing.unlink(missing_ok=True)


def prune(kept: Path, keep: int = KEEP) -> None:
    """Removes the archives of `kept`'s application beyond the `keep` last used (a start that
    maps one marks it used), and what writers that did not finish left behind."""
    app = kept.name.rsplit("-", 1)[0]
    archives = sorted(
        kept.parent.glob(f"{app}-*{kept.suffix}"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for old in archives[keep:]:
        if old != kept:
            old.unlink(missing_ok=True)
            log.info("removed the old class archive %s", old)
    # <archive>.<pid>.tmp, and the JVM's own <archive>.<pid>.tmp.config on Java 25: a JVM that
    # was killed, or failed to assemble its cache, leaves them behind.
    leftover = re.compile(rf"{re.escape(app)}-[0-9a-f]+{re.escape(kept.suffix)}\.(\d+)\.tmp(\.config)?")
    for left in kept.parent.iterdir():
        if (found := leftover.fullmatch(left.name)) and not _running(int(found[1])):
            left.unlink(missing_ok=True)
            log.info("removed %s, left by a JVM that did not finish writing it", left)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def class_archive(
    directory: Path, app_name: str, jars: str, java_options: str, *, on_class_path: bool = False
) -> ClassArchive:
    """The archive to map, or the file to write one to (none yet)."""
    path = archive_path(directory, app_name, jars, java_options, on_class_path=on_class_path)
    if path.exists():
        # Marked used, so that pruning keeps it before the archives of options tried once.
        with contextlib.suppress(OSError):  # a folder this user may read but not write
            os.utime(path)
        return ClassArchive(path)
    directory.mkdir(parents=True, exist_ok=True)
    return ClassArchive(path, path.with_name(f"{path.name}.{os.getpid()}.tmp"))
