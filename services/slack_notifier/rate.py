"""A token bucket: `burst` messages back to back, then `rate` per second. The sink asks how many
posts a batch may make now (the rest is folded into a summary) and takes a token before each."""

import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    def __init__(
        self,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate, self.burst, self.clock, self.sleep = rate, burst, clock, sleep
        self._tokens = float(burst)
        self._at = clock()

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self) -> int:
        """Whole tokens now (0 means the next post waits a moment)."""
        self._refill()
        return int(self._tokens)

    def take(self) -> None:
        """One token, sleeping until there is one."""
        self._refill()
        if self._tokens < 1:
            self.sleep((1 - self._tokens) / self.rate)
            self._refill()
        self._tokens -= 1
