"""What a piece of a reasoning model's output adds to its thinking and to its answer, the reading of a piece in
moves, and the holding back of a piece's end that may begin a marker (the reasoning parsers' shared parts)."""

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


class PieceReader:
    """A splitter's reading of its pieces of output: each piece, after what the last one held back, is read in moves
    (``_advance``: what one move lets go, and what is left) until none is left."""

    def __init__(self) -> None:
        self._held = ""
        """The end of the last piece, which may begin a marker."""

    def feed(self, text: str) -> ReasoningDelta:
        """The thinking and answer ``text`` lets go (characters that may begin a marker are held back)."""
        pending, self._held = self._held + text, ""
        delta = ReasoningDelta()
        while pending:
            step, pending = self._advance(pending)
            delta = delta.then(step)
        return delta

    def _advance(self, text: str) -> tuple[ReasoningDelta, str]:
        raise NotImplementedError


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
