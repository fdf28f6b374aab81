"""What the Spark cluster's daemons and executors read when `make up` runs as root and the
cluster runs as the service user: Spark's own files (SPARK_HOME), and the Python environment
the jobs' Python workers run in on the executors.

The service user cannot enter root's home (pyenv's interpreters and the download cache live
there), nor, often, the checkout (a 0700 temporary folder). So both are built in the service
folder's `lib`, as hard links to the files they come from where the file system allows (no
copy of the venv's 700 MB; a copy otherwise), and built again at `make up` when what they come
from changed:

- SPARK_HOME: the pyspark package of the stack's venv (its jars for the JVMs, its
  `python/lib` zips for the Python workers);
- the executors' Python: a venv of its own over an interpreter of the same minor version that
  the service user can run (the stack's own when it can, else the system's), with the
  packages of the stack's venv. A job on the cluster names its `bin/python` (stack.env's
  SPARK_EXECUTOR_PYTHON) as the interpreter of its executors' Python workers, and ships its
  own code (`enrichment_job`, `foundation`) with it: no copy of the product is kept here, to
  go stale when the checkout changes.
"""

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

from infra.stack.errors import PrerequisiteMissing
from infra.stack.settings import StackSettings

log = logging.getLogger("stack")

ENVIRONMENT = "executor-python"
# Of the venv's site-packages, what an executor's Python must not get: the JVMs' jars (SPARK_HOME
# has them), and the editable install's hook, which points into the checkout.
SKIPPED = ("pyspark/jars", "__editable__")


def spark_home_name() -> str:
    import pyspark  # noqa: PLC0415 - only needed when the cluster runs as the service user

    return f"pyspark-{pyspark.__version__}"


def spark_home(settings: StackSettings) -> Path:
    """The pyspark package as the service user's SPARK_HOME, linked into the service folder."""
    import pyspark  # noqa: PLC0415

    source = Path(pyspark.__file__).parent
    target = settings.service_state_dir / "lib" / spark_home_name()
    _build(target, [(source, Path())], _fingerprint([source]), lambda _: None)
    return target


def environment_dir(settings: StackSettings) -> Path:
    """Where `environment` builds the executors' Python (the interpreter is `bin/python`)."""
    return settings.service_state_dir / "lib" / ENVIRONMENT


def environment(settings: StackSettings, user: str) -> Path:
    """The executors' Python environment, built or brought up to date (its folder)."""
    return build_environment(
        environment_dir(settings), interpreter_for(settings, user), Path(sysconfig.get_paths()["purelib"])
    )


def build_environment(target: Path, interpreter: Path, site: Path) -> Path:
    """A venv at `target` over `interpreter`, with the files of `site` (the venv's site-packages)
    in its own site-packages."""
    inside = Path("lib") / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    trees = [(site, inside)]
    fingerprint = _fingerprint([interpreter, site])

    def venv(folder: Path) -> None:
        (folder / "bin").mkdir(parents=True)
        (folder / "bin" / "python").symlink_to(interpreter)
        (folder / "pyvenv.cfg").write_text(
            f"home = {interpreter.parent}\ninclude-system-site-packages = false\n"
            f"version = {sys.version_info.major}.{sys.version_info.minor}\n"
        )

    _build(target, trees, fingerprint, venv)
    return target


def interpreter_for(settings: StackSettings, user: str) -> Path:
    """An interpreter of this Python's minor version that `user` can run: STACK_SPARK_PYTHON, else
    the stack's own (its base, not the venv's), else the system's."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if settings.spark_python is not None:
        candidates = [settings.spark_python]
    else:
        own = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
        candidates = [own, Path(f"/usr/bin/python{version}"), Path(f"/usr/local/bin/python{version}")]
    tried = []
    for candidate in candidates:
        answer = _runs_as(user, candidate)
        if answer == version:
            return candidate
        tried.append(f"{candidate}: {answer}")
    raise PrerequisiteMissing(
        f"the Spark cluster runs as {user}, and its executors need a Python {version} that {user} can"
        f" run, as the jobs' drivers run {version}: none found ({'; '.join(tried)})",
        hint=f"install python{version} where every user can run it, or name one with STACK_SPARK_PYTHON",
    )


def _runs_as(user: str, python: Path) -> str:
    """The minor version `python` reports when `user` runs it, or why it did not run."""
    if not python.exists():
        return "not found"
    try:
        done = subprocess.run(
            [
                "runuser",
                "-u",
                user,
                "--",
                str(python),
                "-c",
                "import sys; print('%d.%d' % sys.version_info[:2])",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    version = done.stdout.strip()
    return version if version.count(".") == 1 else f"printed {version!r}"


def _files(root: Path) -> Iterator[Path]:
    """The files under `root` that an executor gets, relative to it, in a stable order."""
    for folder, dirs, names in os.walk(root):
        here = Path(folder).relative_to(root)
        linked = [d for d in dirs if Path(folder, d).is_symlink()]  # walked as links, not folders
        dirs[:] = sorted(d for d in dirs if d not in linked and not _skipped(here / d))
        for name in sorted([*names, *linked]):
            if not _skipped(here / name):
                yield here / name


def _skipped(relative: Path) -> bool:
    text = relative.as_posix()
    return any(text == s or text.startswith(f"{s}/") or relative.name.startswith(s) for s in SKIPPED)


def _fingerprint(sources: list[Path]) -> str:
    """What the built folder depends on: each file's path, size, modification time and inode
    (a file replaced, as git and most editors do, is a new inode: its old link is stale)."""
    digest = hashlib.sha256()
    for source in sources:
        digest.update(f"{source}\n".encode())
        if source.is_file():
            info = source.stat()
            digest.update(f"{info.st_size} {info.st_mtime_ns} {info.st_ino}\n".encode())
            continue
        for relative in _files(source):
            info = (source / relative).lstat()
            digest.update(f"{relative} {info.st_size} {info.st_mtime_ns} {info.st_ino}\n".encode())
    return digest.hexdigest()


def _build(
    target: Path, trees: list[tuple[Path, Path]], fingerprint: str, prepare: Callable[[Path], None]
) -> None:
    """`target` with each (source, place) tree's files linked at `place` inside it, unless a
    folder built from the same fingerprint is there already. Built aside, then swapped in."""
    stamp = target / ".fingerprint"
    if stamp.exists() and stamp.read_text() == fingerprint:
        return
    log.info("preparing %s for the Spark cluster's user", target)
    partial = target.with_name(target.name + ".building")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    prepare(partial)
    for source, place in trees:
        for relative in _files(source):
            _link(source / relative, partial / place / relative)
    for folder, _, _ in os.walk(partial):
        Path(folder).chmod(0o755)
    (partial / ".fingerprint").write_text(fingerprint)
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)  # a running executor keeps the files it has open
    partial.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    target.parent.chmod(0o755)


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        target.symlink_to(os.readlink(source))
        return
    try:
        os.link(source, target)
    except OSError:  # another file system, or links refused: a copy
        shutil.copy2(source, target)
        target.chmod(0o644 | (source.stat().st_mode & 0o111))
