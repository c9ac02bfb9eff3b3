"""What a piece of a reasoning model's output adds to its thinking and to its answer, and the holding back of a
piece's end that may begin a marker (the reasoning parsers' shared parts)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningDelta:
    """What one piece of output adds to the thinking and to the answer ("" where nothing)."""

    reasoning: str = ""
    content: str = ""

    def then(self, other: ReasoningDelta) -> ReasoningDelta:
        """This delta followed by ``other``."""
        return ReasoningDelta(self.reasoning + other.reasoning, self.content + other.content)


def partial_marker_length(text: str, markers: Iterable[str]) -> int:
    """The length of the longest end of ``text`` that is the beginning of one of ``markers`` (shorter than it):
    what a parser holds back until the next piece tells whether a marker starts there."""
    longest = 0
    for marker in markers:
        for length in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:length]):
                longest = length
                break
    return longest
