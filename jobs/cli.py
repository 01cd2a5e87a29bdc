"""Command-line pieces shared by the jobs."""

from __future__ import annotations

import logging
import sys
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
