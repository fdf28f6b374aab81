import json
import os
import re

from infra.bench.versus import known_ratings, ratings_partitions, ratio, table, tree_cpu_s


def test_the_backlog_holds_known_customers_only_keyed_by_user_id():
    ids = [3, 5, 8]
    backlog = known_ratings(ids, 500)
    assert len(backlog) == 500
    values = [json.loads(value) for _, value in backlog]
    assert {v["user_id"] for v in values} <= set(ids)
    assert [key for key, _ in backlog] == [str(v["user_id"]).encode() for v in values]
    assert len({v["rating_id"] for v in values}) == 500
    assert all(1 <= v["stars"] <= 5 for v in values)


def test_the_ratio_is_none_when_a_side_is_missing():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None
    assert ratio(3.0, 0) is None


def test_the_table_puts_both_engines_and_their_ratio_side_by_side():
    side = {"first_output_s": 9.0, "all_n_s": 10.0, "steady_per_s": 100, "cpu_s": 14.0}
    other = {"first_output_s": 3.0, "all_n_s": 5.0, "steady_per_s": 50, "cpu_s": 7.0}
    lat = {"rate_per_s": 5000, "first_minute": {"p99_ms": 800.0}, "after_first_minute": {"p99_ms": 600.0}}
    lat_peer = {
        "rate_per_s": 5000,
        "first_minute": {"p99_ms": 400.0},
        "after_first_minute": {"p99_ms": 500.0},
    }
    text = table(
        {"n": 1000, "throughput": {"job": side, "peer": other}, "latency": {"job": lat, "peer": lat_peer}}
    )
    rows = {re.split(r"\s{2,}", line)[0]: re.split(r"\s{2,}", line)[1:] for line in text.splitlines()}
    assert rows["first output after a fresh start (s)"] == ["9.0", "3.0", "3.0"]
    assert rows["all 1,000 enriched (s)"] == ["10.0", "5.0", "2.0"]
    assert rows["steady rate, middle 80 % (/s)"] == ["100", "50", "2.0"]
    assert rows["p99, first minute (ms) at 5,000/s"] == ["800.0", "400.0", "2.0"]
    assert rows["p99 after it (ms) at 5,000/s"] == ["600.0", "500.0", "1.2"]


def test_the_backlog_is_laid_out_like_the_ratings_topic():
    assert ratings_partitions() >= 1


def test_a_process_tree_s_cpu_counts_its_own():
    sum(i * i for i in range(300_000))  # some CPU of this process
    assert tree_cpu_s(os.getpid()) > 0
    assert tree_cpu_s(2**22 + 12345) == 0.0  # no such process
