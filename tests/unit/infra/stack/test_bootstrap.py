from pathlib import Path

import pytest

from infra.stack.bootstrap import TopicSpec, read_topics


def test_reads_names_partitions_and_configs(tmp_path: Path) -> None:
    path = tmp_path / "topics.txt"
    path.write_text("# comment\n\nratings  4  cleanup.policy=delete,retention.ms=10  # trailing\nplain 1 -\n")
    assert read_topics(path) == [
        TopicSpec("ratings", 4, {"cleanup.policy": "delete", "retention.ms": "10"}),
        TopicSpec("plain", 1, {}),
    ]


def test_a_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "topics.txt"
    path.write_text("ok 1 -\nbroken 3\n")
    with pytest.raises(ValueError, match=r"topics.txt:2"):
        read_topics(path)


def test_the_project_topic_list_has_the_design_topics() -> None:
    topics = {t.name: t for t in read_topics()}
    for name in (
        "ratings",
        "asgard.demo.customers",
        "customers",
        "ratings-with-customer-data",
        "unhappy-platinum-customers",
        "enrichment-dlq",
    ):
        assert name in topics
    assert topics["customers"].config["cleanup.policy"] == "compact"
    # The CDC topic keeps the whole history so a fresh job can rebuild every customer version.
    assert topics["asgard.demo.customers"].config["retention.ms"] == "-1"
