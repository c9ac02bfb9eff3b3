"""Hermes-style tool calls in free text (tool_choice "auto" with ``--tool-call-parser hermes``), whole and streamed.

A model trained on the Hermes format (Hermes 2/3, Qwen 2.5/3 and others whose chat template renders ``tools``)
writes each call as a block ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (``"parameters"`` is taken
for ``"arguments"``, as some models write it), after some text or none:

- the text before the first block is the message's ``content``, trailing whitespace dropped (None when nothing
  else is left); the text between and after blocks is dropped;
- each block is one call: a known function's name and its arguments (an object) written as JSON text;
- with ``parallel`` False only the first call is kept;
- an output without a block is its own content (None when empty); an output with a block that does not parse, is
  not closed or names a function that is not among the tools is returned whole as content, with no call.

parse_output reads a finished output. StreamParser reads the same output as it is generated and says what a
stream may send: content as it comes, except for trailing whitespace and a trailing beginning of ``<tool_call>``
(held until what follows decides them), and each call once its ``</tool_call>`` has come. Whatever the pieces, it
ends with the same content and calls as parse_output, but for one case a stream cannot take back: a bad block after
a call was sent. The stream then sends the text from that block on as content (parse_output gives the whole output
as content, with no call).
"""

from __future__ import annotations

from collections.abc import Collection

from scheduler_svc.http import tool_calls_common
from scheduler_svc.http.tool_calls_common import ParsedCall, ParsedOutput, StreamDelta, call_of_json

START = "<tool_call>"
END = "</tool_call>"


def parse_block(body: str, names: Collection[str]) -> ParsedCall | None:
    """The call in the text between ``<tool_call>`` and ``</tool_call>``; None unless it is a JSON object with a
    ``name`` among ``names`` and an object of ``arguments`` (or ``parameters``)."""
    return call_of_json(body, names)


def parse_output(text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
    """The content and calls of a finished output (see the module's docstring)."""
    first = text.find(START)
    if first < 0:
        return ParsedOutput(text or None)
    calls: list[ParsedCall] = []
    start = first
    while start >= 0:
        end = text.find(END, start + len(START))
        call = parse_block(text[start + len(START):end], names) if end >= 0 else None
        if call is None:
            return ParsedOutput(text)
        calls.append(call)
        start = text.find(START, end + len(END))
    return ParsedOutput(text[:first].rstrip() or None, tuple(calls[:1] if not parallel else calls))


def held_suffix(text: str) -> int:
    """How many characters at the end of ``text`` must wait for what follows: the longest end of it that begins
    ``<tool_call>`` (but is not all of it), and the whitespace before that."""
    return tool_calls_common.held_suffix(text, START)


def stream_parser(names: Collection[str], parallel: bool = True) -> StreamParser:
    """A parser of one output as it is generated (the parser interface of tool_calls_common)."""
    return StreamParser(names, parallel)


class StreamParser:
    """Reads an output piece by piece; feed() and finish() return what the stream may send."""

    def __init__(self, names: Collection[str], parallel: bool = True) -> None:
        self._names = names
        self._parallel = parallel
        self._pending = ""
        """Output not sent yet (before the first block: held content; after: the blocks not closed yet)."""
        self._in_calls = False
        """Whether a ``<tool_call>`` has come (the pending text starts at or before it)."""
        self._failed = False
        """A block did not parse: the rest of the output is content."""
        self.calls_sent = 0

    def feed(self, text: str) -> StreamDelta:
        """One more piece of the output."""
        if self._failed:
            return StreamDelta(text)
        self._pending += text
        return self._calls() if self._in_calls else self._content()

    def finish(self) -> StreamDelta:
        """The output has ended: what was held. An unclosed block (or, before any call, the whitespace held before
        a block) goes out as content; text after the last call is dropped."""
        pending, self._pending = self._pending, ""
        if self._failed or (self._in_calls and self.calls_sent and START not in pending):
            return StreamDelta()
        return StreamDelta(pending)

    def _content(self) -> StreamDelta:
        start = self._pending.find(START)
        if start < 0:
            sendable = len(self._pending) - held_suffix(self._pending)
            return StreamDelta(self._take(sendable))
        content = self._take(len(self._pending[:start].rstrip()))
        self._in_calls = True
        return StreamDelta(content).then(self._calls())

    def _calls(self) -> StreamDelta:
        """Every block closed in the pending text, as calls (or, at a bad one, the rest as content)."""
        sent: list[ParsedCall] = []
        self._drop_between_blocks()
        while (block := self._closed_block()) is not None:
            start, end = block
            call = parse_block(self._pending[start + len(START):end], self._names)
            if call is None:
                self._failed = True
                return StreamDelta(self._take(len(self._pending)), tuple(sent))
            if self._parallel or self.calls_sent == 0:
                sent.append(call)
                self.calls_sent += 1
            self._pending = self._pending[end + len(END):]
            self._drop_between_blocks()
        return StreamDelta(calls=tuple(sent))

    def _drop_between_blocks(self) -> None:
        """Once a call was sent, the text after it is dropped up to the next block (or what may begin one)."""
        if not self.calls_sent:
            return
        start = self._pending.find(START)
        keep = start if start >= 0 else len(self._pending) - held_suffix(self._pending)
        self._pending = self._pending[keep:].lstrip()

    def _closed_block(self) -> tuple[int, int] | None:
        """Where the pending text's first block starts and where its ``</tool_call>`` is, once that has come."""
        start = self._pending.find(START)
        end = self._pending.find(END, start + len(START)) if start >= 0 else -1
        return (start, end) if end >= 0 else None

    def _take(self, size: int) -> str:
        taken, self._pending = self._pending[:size], self._pending[size:]
        return taken
