"""The token bucket: a burst back to back, then the sustained rate, on a fake clock."""

from services.slack_notifier.rate import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_burst_then_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock, sleep=clock.sleep)
    assert bucket.available() == 3
    for _ in range(3):
        bucket.take()
    assert clock.slept == []
    assert bucket.available() == 0
    bucket.take()
    assert clock.slept == [0.5]


def test_tokens_refill_up_to_the_burst_only() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1.0, burst=2, clock=clock, sleep=clock.sleep)
    bucket.take()
    bucket.take()
    clock.now += 0.5
    assert bucket.available() == 0
    clock.now += 60
    assert bucket.available() == 2
