"""Stop-string detection over streamed text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopStringMatch:
    """A stop string found in the streamed text.

    ``start`` is the character offset of the stop string in all text fed so far; the text
    returned to the caller ends at ``start`` (or at ``start + len(stop)`` when the stop string
    is included in the output).
    """

    stop: str
    start: int


class StopStringChecker:
    """Finds stop strings in streamed text and holds back text that may be the start of one.

    The earliest match wins: the stop string that is *completed* first in the text, and among
    those ending at the same character the one that starts first. This is the match a
    character-by-character scan would see first, so the result never depends on how the text
    was split into deltas.
    """

    def __init__(self, stop: list[str], include_stop_str_in_output: bool) -> None:
        if any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop must contain only non-empty strings, got {stop!r}")
        self._stops = tuple(dict.fromkeys(stop))
        self._include_stop = include_stop_str_in_output
        self._proper_prefixes = frozenset(s[:i] for s in self._stops for i in range(1, len(s)))
        self._longest_prefix = max((len(p) for p in self._proper_prefixes), default=0)
        self._held = ""
        self._held_start = 0  # offset of the held text in everything fed so far
        self._match: StopStringMatch | None = None

    @property
    def match(self) -> StopStringMatch | None:
        """The stop string found, once one has been."""
        return self._match

    @property
    def held_back(self) -> str:
        """Text fed but not yet returned because it may be the start of a stop string."""
        return self._held

    def feed(self, delta: str) -> tuple[str, str | None]:
        """Add text; return (text safe to emit now, the matched stop string or None).

        After a match nothing more may be fed: the text after the stop string is discarded.
        """
        if self._match is not None:
            raise RuntimeError(f"feed after stop string {self._match.stop!r} was matched")
        text = self._held + delta
        found = self._earliest_match(text)
        if found is not None:
            start, stop = found
            self._match = StopStringMatch(stop=stop, start=self._held_start + start)
            self._held = ""
            end = start + len(stop) if self._include_stop else start
            return text[:end], stop
        keep = self._possible_stop_start_length(text)
        emit_len = len(text) - keep
        self._held = text[emit_len:]
        self._held_start += emit_len
        return text[:emit_len], None

    def flush(self) -> str:
        """At finish without a match: return the held-back tail (empty after a match)."""
        held, self._held = self._held, ""
        self._held_start += len(held)
        return held

    def _earliest_match(self, text: str) -> tuple[int, str] | None:
        """(start, stop string) of the match completed first in ``text``, ties to the earliest start."""
        best: tuple[int, int, str] | None = None
        for stop in self._stops:
            start = text.find(stop)
            if start < 0:
                continue
            candidate = (start + len(stop), start, stop)
            if best is None or candidate[:2] < best[:2]:
                best = candidate
        return None if best is None else (best[1], best[2])

    def _possible_stop_start_length(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of some stop string."""
        for length in range(min(len(text), self._longest_prefix), 0, -1):
            if text[-length:] in self._proper_prefixes:
                return length
        return 0
