"""Packing runs of adjacent items into groups up to a weight target (order is never changed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def pack_adjacent(items: Sequence[T], weights: Callable[[T], tuple[float, ...]], targets: tuple[float, ...]) -> list[list[T]]:
    """Greedy left-to-right packing: a group grows while every summed weight stays within its target.

    An item heavier than a target alone forms its own group.
    """
    groups: list[list[T]] = []
    current: list[T] = []
    sums = [0.0] * len(targets)
    for item in items:
        w = weights(item)
        if current and any(s + x > t for s, x, t in zip(sums, w, targets)):
            groups.append(current)
            current, sums = [], [0.0] * len(targets)
        current.append(item)
        sums = [s + x for s, x in zip(sums, w)]
    if current:
        groups.append(current)
    return groups
