"""Tool calls written as delimited blocks after some content, whole and streamed: what the hermes parser
(``<tool_call>...</tool_call>``) and the gpt-oss parser (``<|channel|>commentary to=functions.`` up to ``<|call|>``)
share. A Blocks describes the syntax; parse_blocks reads a finished output and BlockCallStream the same output as it
is generated.

The rules (each parser's module docstring says them for its syntax): the text before the first block is the content,
trailing whitespace dropped (None when blank); text between and after blocks is dropped; each block is one call
(``Blocks.parse`` judges it); with ``parallel`` False only the first call is kept; an output with a block that does
not parse, or is not ended, is its own content with no call (``ends_at_output_end``: the output's end ends the last
block, as where the end marker is a stop token). A stream sends content as it comes, except for trailing whitespace
and what may begin a block, and each call once its block has ended; it ends with parse_blocks' content and calls, but
for what it cannot take back: a bad block after a call was sent, whose text from that block on it sends as content.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput, StreamDelta, held_suffix


@dataclass(frozen=True)
class Blocks:
    """A syntax of calls as blocks: where one starts and ends, and the call in the text between."""

    start: str
    end: str
    parse: Callable[[str, Collection[str]], ParsedCall | None]
    """The call in a block's text (between ``start`` and ``end``), among the given function names; None if none."""
    ends_at_output_end: bool = False
    """Whether the output's end also ends the last block."""

    def block_end(self, text: str, start: int, ended: bool) -> int | None:
        """Where the block starting at ``start`` of ``text`` ends (its end marker, or with ``ended`` and
        ends_at_output_end the text's end); None while that is not known, or never will be."""
        end = text.find(self.end, start + len(self.start))
        if end >= 0:
            return end
        return len(text) if ended and self.ends_at_output_end else None


def parse_blocks(blocks: Blocks, text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
    """The content and calls of a finished output (see the module's docstring)."""
    first = text.find(blocks.start)
    if first < 0:
        return ParsedOutput(text or None)
    calls: list[ParsedCall] = []
    start = first
    while start >= 0:
        end = blocks.block_end(text, start, ended=True)
        call = blocks.parse(text[start + len(blocks.start):end], names) if end is not None else None
        if call is None or end is None:
            return ParsedOutput(text)
        calls.append(call)
        start = text.find(blocks.start, end + len(blocks.end)) if end < len(text) else -1
    return ParsedOutput(text[:first].rstrip() or None, tuple(calls if parallel else calls[:1]))


class BlockCallStream:
    """Reads an output piece by piece; feed() and finish() return what the stream may send."""

    def __init__(self, blocks: Blocks, names: Collection[str], parallel: bool = True) -> None:
        self._blocks = blocks
        self._names = names
        self._parallel = parallel
        self._pending = ""
        """Output not sent yet (before the first block: held content; after: the blocks not ended yet)."""
        self._in_calls = False
        """Whether a block has started (the pending text starts at or before it)."""
        self._failed = False
        """A block did not parse: the rest of the output is content."""
        self.calls_sent = 0

    def feed(self, text: str) -> StreamDelta:
        """One more piece of the output."""
        if self._failed:
            return StreamDelta(text)
        self._pending += text
        return self._calls(ended=False) if self._in_calls else self._content()

    def finish(self) -> StreamDelta:
        """The output has ended: what was held. Before any block, the held content; a block the end leaves unended
        goes out as content (with ends_at_output_end, the end ends it); text after the last call is dropped."""
        if self._failed:
            return StreamDelta()
        sent = self._calls(ended=True) if self._in_calls else StreamDelta()
        pending, self._pending = self._pending, ""
        if self._failed or (self._in_calls and self.calls_sent and self._blocks.start not in pending):
            return sent
        return sent.then(StreamDelta(pending))

    def _content(self) -> StreamDelta:
        start = self._pending.find(self._blocks.start)
        if start < 0:
            return StreamDelta(self._take(len(self._pending) - held_suffix(self._pending, self._blocks.start)))
        content = self._take(len(self._pending[:start].rstrip()))
        self._in_calls = True
        return StreamDelta(content).then(self._calls(ended=False))

    def _calls(self, ended: bool) -> StreamDelta:
        """Every block ended in the pending text, as calls (or, at a bad one, the rest as content)."""
        sent: list[ParsedCall] = []
        self._drop_between_blocks()
        while (block := self._ended_block(ended)) is not None:
            start, end = block
            call = self._blocks.parse(self._pending[start + len(self._blocks.start):end], self._names)
            if call is None:
                self._failed = True
                return StreamDelta(self._take(len(self._pending)), tuple(sent))
            if self._parallel or self.calls_sent == 0:
                sent.append(call)
                self.calls_sent += 1
            self._pending = self._pending[end + len(self._blocks.end):]
            self._drop_between_blocks()
        return StreamDelta(calls=tuple(sent))

    def _drop_between_blocks(self) -> None:
        """Once a call was sent, the text after it is dropped up to the next block (or what may begin one)."""
        if not self.calls_sent:
            return
        start = self._pending.find(self._blocks.start)
        keep = start if start >= 0 else len(self._pending) - held_suffix(self._pending, self._blocks.start)
        self._pending = self._pending[keep:].lstrip()

    def _ended_block(self, ended: bool) -> tuple[int, int] | None:
        """Where the pending text's first block starts and ends, once its end has come."""
        start = self._pending.find(self._blocks.start)
        end = self._blocks.block_end(self._pending, start, ended) if start >= 0 else None
        return (start, end) if end is not None else None

    def _take(self, size: int) -> str:
        taken, self._pending = self._pending[:size], self._pending[size:]
        return taken
