"""What make bench-views reads from its programs' metrics files."""

import json
from pathlib import Path

from infra.bench.views import class_archives


def test_class_archives_tells_a_mapped_archive_from_one_being_recorded(tmp_path: Path) -> None:
    first, second = tmp_path / "metrics.json", tmp_path / "background" / "metrics.json"
    first.write_text(json.dumps({"driver": {"class_archive": "mapped"}, "totals": {}}))
    second.parent.mkdir()
    second.write_text(json.dumps({"driver": {"class_archive": "recording"}}))
    assert class_archives([first, second]) == ["mapped", "recording"]
    assert class_archives([tmp_path / "job" / "metrics.json"]) == []  # no file: no driver (views in the job)
    first.write_text(json.dumps({"totals": {}}))  # a driver of an older version
    assert class_archives([first]) == ["unknown"]
