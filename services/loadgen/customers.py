"""Fake customers and the changes a real customer database sees, drawn from a seeded Random."""

import random
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CHANGE_WEIGHTS",
    "COMMENTS",
    "FIRST",
    "GENDERS",
    "LAST",
    "REGIONS",
    "STATUSES",
    "STATUS_WEIGHTS",
    "Change",
    "ChangeKind",
    "Customer",
    "fake_customer",
    "next_change",
    "step_status",
]

STATUSES = ("bronze", "silver", "gold", "platinum")
STATUS_WEIGHTS = (50, 25, 15, 10)
REGIONS = ("EMEA", "APAC", "NA", "LATAM")
GENDERS = ("Female", "Male", "Non-binary", None)
FIRST = ("Rica", "Ruthie", "Mariejeanne", "Hashim", "Hansiain", "Robinet", "Fay", "Jori", "Ibby", "Dagny")
LAST = ("Blaisdell", "Brockherst", "Cocklie", "Rumke", "Coda", "Leheude", "Huxley", "Snow", "Ennis", "Ngo")
COMMENTS = ("", "", "prefers email", "VIP since 2019", "called support twice", "travels weekly")


@dataclass(frozen=True)
class Customer:
    first_name: str
    last_name: str
    email: str
    gender: str | None
    club_status: str
    region: str
    comments: str

    def row(self) -> tuple[str | None, ...]:
        return (
            self.first_name,
            self.last_name,
            self.email,
            self.gender,
            self.club_status,
            self.region,
            self.comments,
        )


def fake_customer(rnd: random.Random, n: int) -> Customer:
    first, last = rnd.choice(FIRST), rnd.choice(LAST)
    return Customer(
        first_name=first,
        last_name=last,
        email=f"{first.lower()}.{last.lower()}.{n}@example.com",
        gender=rnd.choice(GENDERS),
        club_status=rnd.choices(STATUSES, STATUS_WEIGHTS)[0],
        region=rnd.choice(REGIONS),
        comments=rnd.choice(COMMENTS),
    )


ChangeKind = Literal["upgrade", "downgrade", "email", "insert", "delete"]
CHANGE_WEIGHTS: dict[ChangeKind, int] = {
    "upgrade": 35,
    "downgrade": 25,
    "email": 25,
    "insert": 10,
    "delete": 5,
}


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    customer_id: int | None  # None for an insert
    new_customer: Customer | None = None
    email: str | None = None


def next_change(rnd: random.Random, ids: list[int], n: int) -> Change:
    kind = rnd.choices(list(CHANGE_WEIGHTS), list(CHANGE_WEIGHTS.values()))[0]
    if kind == "insert" or not ids:
        return Change("insert", None, new_customer=fake_customer(rnd, n))
    target = rnd.choice(ids)
    if kind == "email":
        return Change("email", target, email=f"changed.{n}.{target}@example.com")
    return Change(kind, target)


def step_status(status: str, kind: ChangeKind) -> str:
    """One club level up or down, staying within bronze..platinum."""
    i = STATUSES.index(status) if status in STATUSES else 0
    i = min(i + 1, len(STATUSES) - 1) if kind == "upgrade" else max(i - 1, 0)
    return STATUSES[i]
