"""Mistral tool calls in free text (tool_choice "auto" with ``--tool-call-parser mistral``), whole and streamed, as
vLLM's parser of the same name reads them from a Hugging Face tokenizer's output.

Mistral's instruct models (7B v0.3, Nemo and others of its first tool calling format) write their calls after a
``[TOOL_CALLS]`` token as a JSON array: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``:

- the text before the first ``[TOOL_CALLS]`` is the message's ``content``, trailing whitespace dropped (None when
  nothing else is left);
- each ``[TOOL_CALLS]`` is followed by whitespace and a non-empty array, each item one call: a known function's
  name and its arguments (an object, written back as JSON text; ``"parameters"`` is taken for ``"arguments"``);
  the text after an array is dropped, up to the next ``[TOOL_CALLS]``;
- with ``parallel`` False only the first call is kept;
- an output without ``[TOOL_CALLS]`` is its own content (None when empty); one with an array that does not parse,
  is empty, is cut short or holds anything but calls of the tools is returned whole as content, with no call.

vLLM's reading differs in small ways: its content keeps trailing whitespace, a second ``[TOOL_CALLS]`` is an error,
and from a bad array it returns the text after ``[TOOL_CALLS]`` as content (here: the whole output, as for the
other parsers). The later format (``[TOOL_CALLS]name[ARGS]{...}``), which vLLM reads only with a mistral_common
tokenizer, is not read: such an output is content.

StreamParser sends content as it comes until a ``[TOOL_CALLS]`` may be starting (trailing whitespace and a trailing
beginning of it are held), then each call as its item of the array closes. Whatever the pieces, it ends with the
same content and calls as parse_output, but for what a stream cannot take back: a bad item or array after a call
was sent (the stream then sends the text from there on as content).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

from scheduler_svc.tool_calls.common import (
    FAILED,
    ParsedCall,
    ParsedOutput,
    StreamDelta,
    TextCallStream,
    call_of,
    call_of_json,
    held_suffix,
)
from scheduler_svc.tool_calls.json_scan import JsonScan

MARK = "[TOOL_CALLS]"
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def array_start(text: str, mark: int) -> int:
    """Where the array of the ``[TOOL_CALLS]`` at ``mark`` should start: past it and whitespace."""
    return _SPACE.match(text, mark + len(MARK)).end()  # type: ignore[union-attr]  # the pattern matches anywhere


def parse_output(text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
    """The content and calls of a finished output (see the module's docstring)."""
    first = text.find(MARK)
    if first < 0:
        return ParsedOutput(text or None)
    calls: list[ParsedCall] = []
    mark = first
    while mark >= 0:
        pos = array_start(text, mark)
        if not text.startswith("[", pos):
            return ParsedOutput(text)
        try:
            items, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return ParsedOutput(text)
        found = [call_of(item, names) for item in items]
        if not found or None in found:
            return ParsedOutput(text)
        calls += [call for call in found if call is not None]
        mark = text.find(MARK, end)
    return ParsedOutput(text[:first].rstrip() or None, tuple(calls if parallel else calls[:1]))


# what the stream is reading
_CONTENT, _OPENING, _ARRAY, _DROPPING = range(4)


class StreamParser(TextCallStream):
    """Reads an output piece by piece; feed() and finish() return what the stream may send."""

    def __init__(self, names: Collection[str], parallel: bool = True) -> None:
        super().__init__(names, parallel)
        self._pos = 0
        """Where reading goes on (after the content)."""
        self._scan: JsonScan | None = None
        """The array being read."""
        self._items_read = 0
        """Items of that array read (as calls)."""
        self._resume = 0
        """Where the text not yet sent as calls starts (what a failure after a sent call sends as content)."""

    def finish(self) -> StreamDelta:
        """The output has ended: what was held. Held content (whitespace, the beginning of ``[TOOL_CALLS]``) and an
        array cut short go out as content; text after the last array is dropped."""
        if self._state in (_CONTENT, _OPENING, _ARRAY):
            return self._fail()
        return StreamDelta()

    def _advance(self) -> StreamDelta:
        sent = StreamDelta()
        text = self._text
        while True:
            state = self._state
            if state == _CONTENT:
                mark = text.find(MARK, self._sent)
                if mark < 0:
                    end = len(text) - held_suffix(text[self._sent:], MARK)
                    return sent.then(self._content(end))
                sent = sent.then(self._content(self._sent + len(text[self._sent:mark].rstrip())))
                self._open(mark)
            elif state == _OPENING:
                pos = array_start(text, self._pos)
                if pos == len(text):
                    return sent  # more whitespace, or the array, may come
                if text[pos] != "[":
                    return sent.then(self._fail())
                self._state, self._scan, self._items_read = _ARRAY, JsonScan(pos), 0
            elif state == _ARRAY:
                read = self._read_array()
                sent = sent.then(read)
                if self._state != _DROPPING:
                    return sent
            else:  # _DROPPING: up to the next [TOOL_CALLS]
                mark = text.find(MARK, self._pos)
                if mark < 0:
                    self._pos = max(self._pos, len(text) - len(MARK) + 1)
                    return sent
                self._open(mark)

    def _open(self, mark: int) -> None:
        self._state, self._pos, self._resume = _OPENING, mark, mark

    def _read_array(self) -> StreamDelta:
        """The calls of the array's items closed so far; at its end, the array checked whole."""
        scan = self._scan
        assert scan is not None
        scan.advance(self._text)
        calls: list[ParsedCall] = []
        for start, end in scan.items[self._items_read:]:
            call = call_of_json(self._text[start:end], self._names)
            if call is None:
                self._resume = max(self._resume, start)
                return StreamDelta(calls=tuple(calls)).then(self._fail())
            self._items_read += 1
            if self._sends_next_call():
                calls.append(call)
                self._resume = end
        if scan.bad or (scan.done and not self._whole_array(scan)):
            return StreamDelta(calls=tuple(calls)).then(self._fail())
        if scan.done:
            self._state, self._pos = _DROPPING, scan.end
        return StreamDelta(calls=tuple(calls))

    def _whole_array(self, scan: JsonScan) -> bool:
        """Whether the complete array decodes (not too deep) and has items."""
        try:
            json.loads(self._text[scan.start:scan.end])
        except (ValueError, RecursionError):
            return False
        return bool(scan.items)

    def _fail(self) -> StreamDelta:
        """The calls do not parse: before any call was sent, the whole output is content (the rest of it goes out
        now, and what follows as it comes); after one, the text not sent as calls."""
        self._state = FAILED
        if self.calls_sent:
            return StreamDelta(self._text[self._resume:])
        return self._content(len(self._text))


def stream_parser(names: Collection[str], parallel: bool = True) -> StreamParser:
    """A parser of one output as it is generated (the parser interface of common.py)."""
    return StreamParser(names, parallel)
