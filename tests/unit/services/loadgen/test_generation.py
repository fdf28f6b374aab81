"""The load is reproducible from its seed and looks like the real thing."""

import json
import random

from services.loadgen.customers import STATUSES, fake_customer, next_change, step_status
from services.loadgen.ratings import CHANNELS, bad_record, encode, fake_rating


def ratings(seed: int, n: int = 200) -> list[dict[str, object]]:
    rnd = random.Random(seed)
    return [fake_rating(rnd, i, [1, 2, 3], 0.1, 1_000) for i in range(n)]


def test_the_same_seed_gives_the_same_ratings_and_another_seed_other_ones() -> None:
    assert ratings(7) == ratings(7)
    assert ratings(7) != ratings(8)


def test_ratings_have_the_documented_fields_and_ranges() -> None:
    produced = ratings(1, 2000)
    assert {r["stars"] for r in produced} == {1, 2, 3, 4, 5}
    assert {r["channel"] for r in produced} == set(CHANNELS)
    unmatched = [r for r in produced if r["user_id"] not in (1, 2, 3)]
    assert 100 < len(unmatched) < 300  # about 10 %
    key, value = encode(produced[0])
    assert key == str(produced[0]["user_id"]).encode()
    assert json.loads(value) == produced[0]


def test_unreadable_records_are_what_the_job_must_dead_letter() -> None:
    rnd = random.Random(3)
    for _ in range(20):
        raw = bad_record(rnd)
        try:
            body = json.loads(raw)
        except ValueError:
            continue
        assert "rating_id" not in body or body["stars"] not in range(1, 6)


def test_club_status_steps_one_level_and_stays_in_range() -> None:
    assert step_status("gold", "upgrade") == "platinum"
    assert step_status("platinum", "upgrade") == "platinum"
    assert step_status("silver", "downgrade") == "bronze"
    assert step_status("bronze", "downgrade") == "bronze"


def test_changes_cover_every_kind_and_inserts_bring_new_customers() -> None:
    rnd = random.Random(5)
    changes = [next_change(rnd, [10, 11, 12], n) for n in range(500)]
    assert {c.kind for c in changes} == {"upgrade", "downgrade", "email", "insert", "delete"}
    for change in changes:
        if change.kind == "insert":
            assert change.customer_id is None and change.new_customer is not None
        else:
            assert change.customer_id in (10, 11, 12)
    assert next_change(rnd, [], 1).kind == "insert"


def test_customers_are_valid_rows() -> None:
    customer = fake_customer(random.Random(9), 17)
    assert customer.club_status in STATUSES
    assert customer.email.endswith(".17@example.com")
    assert len(customer.row()) == 7
