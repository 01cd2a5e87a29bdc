"""Command-line pieces shared by the jobs."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from lamina.errors import InvalidArgument, InvalidConfig, LaminaError


def log_to_stderr() -> None:
    """Timestamped log lines on stderr (progress of long runs); stdout is kept for results."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


def failed(error: LaminaError) -> int:
    """Prints a job's error; returns its exit status: 2 for bad arguments or configuration, else 1."""
    print(f"error: {error}", file=sys.stderr)
    return 2 if isinstance(error, InvalidArgument) else 1


def storage_options(items: list[str]) -> dict[str, Any] | None:
    """``--storage-option key=value`` flags as a dict (None when there are none)."""
    if not items:
        return None
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise InvalidConfig(f"--storage-option {item!r}: expected key=value")
        out[k.strip()] = v.strip()
    return out


class Progress:
    """``progress(done, total)`` for the library's long calls: a bar on a terminal, else a log line
    every ``interval`` seconds (and at the end). ``enabled=False`` shows nothing."""

    def __init__(self, what: str, unit: str, enabled: bool = True, interval: float = 10.0):
        self.what, self.unit, self.enabled, self.interval = what, unit, enabled, interval
        self.tty = enabled and sys.stderr.isatty()
        self.started = self.last = time.perf_counter()
        self.log = logging.getLogger(f"lamina.{what.split()[0]}")

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        elapsed = now - self.started
        if self.tty:
            width = 30
            filled = int(width * done / max(1, total))
            sys.stderr.write(f"\r{self.what} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {self.unit} {elapsed:5.1f}s")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif now - self.last >= self.interval or done == total:
            self.last = now
            self.log.info("%s: %d/%d %s done, %.1f s", self.what, done, total, self.unit, elapsed)
