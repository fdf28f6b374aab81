"""The catalog of views declared in SQL, without Kafka: entries, and how the follower turns
each record into a create or a drop."""

import pytest

from enrichment_job.views.catalog import Entry, Follower


def test_an_entry_round_trips_and_an_unreadable_one_is_none() -> None:
    entry = Entry("by_channel", "SELECT 1", 1_796_000_000_000)
    assert Entry.decode("by_channel", entry.encode()) == entry
    older = Entry("by_channel", "SELECT 0", 1_795_000_000_000, previous=Entry("by_channel", "S", 1))
    replacing = Entry("by_channel", "SELECT 2", 1_797_000_000_000, "view.by_channel.1797000000000", older)
    back = Entry.decode("by_channel", replacing.encode())
    assert back is not None and back.topic == replacing.topic
    assert back.previous == Entry("by_channel", "SELECT 0", 1_795_000_000_000)  # one version back only
    assert Entry.decode("x", b"not json") is None
    assert Entry.decode("x", b'{"sql": "SELECT 1"}') is None


def test_an_entry_s_changelog_is_its_own_topic_else_the_name_s_under_the_prefix() -> None:
    assert Entry("by_channel", "SELECT 1", 1).changelog("view.") == "view.by_channel"
    assert Entry("by_channel", "SELECT 1", 2, "view.by_channel.2").changelog("view.") == "view.by_channel.2"


def test_the_follower_creates_drops_and_changes_views_as_the_records_say_and_retries_a_failed_create() -> (
    None
):
    done: list[str] = []
    failing = {"broken"}

    def created(entry: Entry) -> None:
        if entry.name in failing:
            raise RuntimeError("Kafka away")
        done.append(f"create {entry.name} {entry.created_at_ms}")

    follower = Follower({}, "views-catalog", created, lambda name: done.append(f"drop {name}"))
    v1, v2 = Entry("a", "SELECT 1", 1), Entry("a", "SELECT 2", 2)
    follower._take(b"a", v1.encode())
    follower._take(b"a", v1.encode())  # read again after a restart: nothing to do
    follower._take(b"a", v2.encode())  # a new version: created (the job replaces the old one)
    follower._take(b"a", None)
    follower._take(b"a", None)  # a tombstone of a view it does not have
    assert done == ["create a 1", "create a 2", "drop a"]
    with pytest.raises(RuntimeError):
        follower._take(b"broken", Entry("broken", "SELECT 1", 3).encode())
    assert "broken" not in follower.views  # the next reading tries again
    failing.clear()
    follower._take(b"broken", Entry("broken", "SELECT 1", 3).encode())
    assert done[-1] == "create broken 3" and set(follower.views) == {"broken"}
