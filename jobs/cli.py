"""Command-line pieces shared by the jobs."""

from __future__ import annotations

from typing import Any

from lamina.errors import InvalidConfig


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
