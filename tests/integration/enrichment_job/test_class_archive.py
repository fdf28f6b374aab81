"""The driver's class archive (an AOT cache on Java 25, AppCDS before): the first clean stop on
a host writes it, and the next start maps it (the JVM says when it cannot, and starts without it)."""

import json
from pathlib import Path

from support.enrichment import Job, StackEnv, Topics

GRACE_MS = 1000
# What the JVM logs when it cannot use an archive: AppCDS, and the AOT cache's warnings and errors.
REFUSED = ("Unable to use shared archive", "][aot]")


def _archives(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in (".jsa", ".aot"))


def _said(state: Path) -> object:
    """What the job's metrics file says of its driver's class archive."""
    return json.loads((state / "metrics.json").read_text())["driver"]["class_archive"]


def test_the_archive_a_clean_stop_writes_is_mapped_by_the_next_start(
    stack_env: StackEnv, topics: Topics, tmp_path: Path
) -> None:
    archives = tmp_path / "class-archives"
    extra = {"ENRICH_CLASS_ARCHIVE_DIR": str(archives)}
    first = Job(stack_env, topics, tmp_path / "first", GRACE_MS, extra).start()
    assert _said(tmp_path / "first") == "recording"  # its metrics say so, for benchmarks to read
    assert first.stop() == 0, first.tail()
    written = _archives(archives)
    assert len(written) == 1, f"{list(archives.iterdir())}\n{first.tail()}"
    assert "driver class archive: written at the stop" in first.log.read_text()

    (tmp_path / "first" / "metrics.json").unlink()  # caught up is the restart's own figure
    second = Job(stack_env, topics, tmp_path / "first", GRACE_MS, extra).start()  # the restart
    try:
        # The log goes on from the first run's, whose JVM wrote the archive as it exited.
        mapped = f"driver class archive: {written[0]}"
        assert mapped in second.log.read_text(), second.tail()
        log = second.log.read_text().split(mapped, 1)[1]  # what the restart's JVM said
        assert not [line for line in log.splitlines() if any(r in line for r in REFUSED)], second.tail()
        assert _said(tmp_path / "first") == "mapped"
    finally:
        second.stop()
    assert _archives(archives) == written  # mapped, not written again
