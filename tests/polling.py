"""How a test waits for something to happen: it polls for it, never sleeps a fixed time.

:func:`wait_until` calls a condition until it returns something truthy and returns that value,
or fails the test after ``timeout_s`` saying what never happened. Every test that waits for an
agent, a broker, a process or Prometheus goes through it, so a slow machine makes a test
slower, not red, and a broken one fails with the name of what it was waiting for.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.1,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``condition`` every ``interval_s`` until its result is truthy, and return it
    (``None`` and other falsy results mean "not yet").

    Exceptions of the types in ``ignoring`` count as "not yet" (a server that is still
    starting); the last one is chained to the failure. Raises :class:`AssertionError` naming
    ``what`` once ``timeout_s`` has passed without the condition holding.
    """
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
        except ignoring as e:
            last_error = e
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}") from (
                last_error
            )
        time.sleep(interval_s)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: an exited child of a dead parent is reaped by init,
    and a zombie counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True
