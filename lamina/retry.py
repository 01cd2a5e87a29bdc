"""Backoff for everything Lamina retries (store calls and commits): one policy, one place."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: attempt k sleeps uniform(0, min(cap, base * 2**k))."""

    base_seconds: float = 0.05
    cap_seconds: float = 5.0
    max_attempts: int = 8

    def delays(self) -> Iterator[float]:
        """Yields the sleep before each retry (``max_attempts - 1`` of them)."""
        for attempt in range(self.max_attempts - 1):
            yield random.uniform(0, min(self.cap_seconds, self.base_seconds * (2**attempt)))

    def sleep(self, attempt: int) -> None:
        time.sleep(random.uniform(0, min(self.cap_seconds, self.base_seconds * (2**attempt))))
