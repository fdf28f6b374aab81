"""The driver's class data sharing archive: the first clean stop on a host writes it, and the
next start maps it (the JVM says when it cannot, and starts without it)."""

from pathlib import Path

from support.enrichment import Job, StackEnv, Topics

GRACE_MS = 1000
REFUSED = "Unable to use shared archive"


def test_the_archive_a_clean_stop_writes_is_mapped_by_the_next_start(
    stack_env: StackEnv, topics: Topics, tmp_path: Path
) -> None:
    archives = tmp_path / "class-archives"
    extra = {"ENRICH_CLASS_ARCHIVE_DIR": str(archives)}
    first = Job(stack_env, topics, tmp_path / "first", GRACE_MS, extra).start()
    assert first.stop() == 0, first.tail()
    written = sorted(archives.glob("*.jsa"))
    assert len(written) == 1, f"{list(archives.iterdir())}\n{first.tail()}"
    assert "driver class archive: written at the stop" in first.log.read_text()

    (tmp_path / "first" / "metrics.json").unlink()  # caught up is the restart's own figure
    second = Job(stack_env, topics, tmp_path / "first", GRACE_MS, extra).start()  # the restart
    try:
        log = second.log.read_text().split("driver class archive: written at the stop", 1)[1]
        assert f"driver class archive: {written[0]}" in log
        assert REFUSED not in log, second.tail()
    finally:
        second.stop()
    assert sorted(archives.glob("*.jsa")) == written  # mapped, not written again
