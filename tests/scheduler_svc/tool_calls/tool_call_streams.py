"""What the tool call parsers' tests share: an output fed to a parser's stream in pieces, and an output cut into
pieces."""

from __future__ import annotations

from collections.abc import Collection

from scheduler_svc.tool_calls.common import ParsedOutput, StreamDelta, ToolCallParser

NAMES = frozenset({"get_weather", "get_time"})
"""The tools' names the parsers' tests use."""


def streamed_by(parser: ToolCallParser, pieces: list[str], names: Collection[str] = NAMES,
                parallel: bool = True) -> ParsedOutput:
    """What a client gathers from ``parser``'s stream of ``pieces``: the content deltas joined (None when there were
    none) and the calls; the stream's count of calls sent is checked against them."""
    stream = parser.stream_parser(names, parallel)
    sent = StreamDelta()
    for piece in pieces:
        sent = sent.then(stream.feed(piece))
    sent = sent.then(stream.finish())
    assert stream.calls_sent == len(sent.calls)
    return ParsedOutput(sent.content or None, sent.calls)


def split(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at the positions ``cuts`` (taken modulo its length + 1)."""
    bounds = [0, *sorted({cut % (len(text) + 1) for cut in cuts}), len(text)]
    return [text[start:end] for start, end in zip(bounds, bounds[1:])]
