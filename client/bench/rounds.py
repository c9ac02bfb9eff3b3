"""The order configurations run in within one benchmark round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def round_order(values: Sequence[T], round_index: int) -> list[T]:
    """``values`` without repeats, as given in even rounds and reversed in odd ones: whatever the first run of a
    round pays (a cold cache, a compile) falls on each configuration in turn, not always on the same one."""
    unique = list(dict.fromkeys(values))
    return unique if round_index % 2 == 0 else unique[::-1]
