import logging
import time
from collections import Counter

from enrichment_job.settings import JobSettings
from enrichment_job.tasks.launch import EXECUTORS_WAIT_S, TaskJoin, sticky_placement


def test_partitions_spread_evenly_over_the_executors():
    placed = sticky_placement({}, ["1", "2", "3"], list(range(12)))
    assert sorted(placed) == list(range(12))
    assert Counter(placed.values()) == {"1": 4, "2": 4, "3": 4}


def test_a_partition_stays_on_its_executor_while_it_lives():
    before = sticky_placement({}, ["1", "2", "3"], list(range(12)))
    assert sticky_placement(before, ["1", "2", "3"], [0, 5]) == before


def test_the_partitions_of_a_lost_executor_go_to_the_others_and_no_other_moves():
    before = sticky_placement({}, ["1", "2", "3"], list(range(12)))
    after = sticky_placement(before, ["1", "3"], list(range(12)))
    assert set(after.values()) == {"1", "3"}
    assert Counter(after.values()) == {"1": 6, "3": 6}
    assert all(after[p] == e for p, e in before.items() if e != "2")


def test_an_executor_that_registers_late_takes_partitions_over_until_balanced():
    early = sticky_placement({}, ["1"], list(range(12)))
    assert set(early.values()) == {"1"}
    later = sticky_placement(early, ["1", "2", "3"], list(range(12)))
    assert Counter(later.values()) == {"1": 4, "2": 4, "3": 4}
    assert sticky_placement(later, ["1", "2", "3"], list(range(12))) == later  # then it stays


def test_a_partition_known_from_before_keeps_its_place_when_it_has_no_work():
    before = sticky_placement({}, ["1", "2"], [0, 1, 2, 3])
    assert sticky_placement(before, ["1", "2"], [1]) == before


def test_in_local_mode_min_executors_is_ignored_with_a_warning_rather_than_waited_for(spark, caplog):
    """The driver runs every task in local mode: no executor ever registers, and waiting for
    ENRICH_MIN_EXECUTORS would hold the first batch 120 s for nothing."""
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="enrichment_job"):
        join = TaskJoin(spark, JobSettings(join_in="tasks", min_executors=2), "run", {})
    join.close()
    assert time.monotonic() - started < EXECUTORS_WAIT_S / 2
    assert "ENRICH_MIN_EXECUTORS=2 ignored: in local mode" in caplog.text
