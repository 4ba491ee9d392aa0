"""Polling instead of sleeping: tests and the demo wait for a condition, never a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], timeout: float = 20.0, what: str = "a condition", interval: float = 0.05
) -> T:
    """Call ``probe`` until it returns something truthy and return that; ``TimeoutError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
