"""What make bench-views reads from its programs' logs."""

from pathlib import Path

from infra.bench.views import class_archives


def test_class_archives_tells_a_mapped_archive_from_one_being_recorded(tmp_path: Path) -> None:
    log = tmp_path / "views.log"
    log.write_text(
        "2026-11-28 01:39:04,528 enrichment_job INFO driver class archive: /cache/ratings-views-95.aot\n"
        "2026-11-28 01:39:05,100 enrichment_job.views INFO views queries running\n"
        "2026-11-28 01:39:05,568 enrichment_job INFO driver class archive: written at the stop\n"
    )
    assert class_archives(log) == ["mapped", "recording"]
    assert class_archives(tmp_path / "job.log") == []  # no log: no driver (the views in the job)
