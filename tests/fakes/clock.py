"""A clock the test moves: pass it where code takes ``clock: Callable[[], float]``."""

from __future__ import annotations


class FakeClock:
    """Reads ``now``; moves only when the test (or a fake it drives) says so."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
