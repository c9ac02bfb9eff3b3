"""argparse value types that refuse a bad number before anything starts.

argparse reports a type's error with the option's name ("argument --concurrency: must be >= 1, got 0") and exits
with status 2, as for any other usage error.
"""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An integer >= 1 (counts: requests, prompts, tokens, rounds)."""
    return _at_least(_int(text), 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (a limit where 0 means none)."""
    return _at_least(_int(text), 0)


def positive_float(text: str) -> float:
    """A finite number > 0 (durations, intervals)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def _at_least(value: int, minimum: int) -> int:
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    return value
