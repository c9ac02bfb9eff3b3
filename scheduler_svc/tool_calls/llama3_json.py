"""Llama 3.x JSON tool calls in free text (tool_choice "auto" with ``--tool-call-parser llama3_json``), whole and
streamed, as vLLM's parser of the same name reads them.

Llama 3.1, 3.2 and 3.3, prompted with their JSON tool calling template, write a call as a JSON object
``{"name": ..., "parameters": {...}}`` (``"arguments"`` is taken too), maybe after ``<|python_tag|>``, several of
them separated by ``;`` (or whitespace, or nothing). The calls begin at the output's first ``{`` or
``<|python_tag|>``:

- the text before that is the message's ``content``, trailing whitespace dropped (None when nothing else is left);
- from there: an optional ``<|python_tag|>``, whitespace, then one object per call, each a known function's name
  and its arguments (an object, written back as JSON text), separated by any run of whitespace and ``;``; the text
  after the last call (whatever follows a separator run that is not a ``{``) is dropped;
- with ``parallel`` False only the first call is kept;
- an output without ``{`` or ``<|python_tag|>`` is its own content (None when empty); one whose calls do not parse
  (not JSON, not a call, cut short, a function not among the tools, nothing but text after the tag) is returned
  whole as content, with no call.

vLLM finds the objects anywhere in a finished output and drops every other text (``content`` null), but streams
calls only from an output that starts with ``{`` or the tag; here both read the same way, and the text before the
calls is kept as content, as the Hermes parser keeps it.

StreamParser sends content as it comes until a ``{`` or the tag may be starting (trailing whitespace and a
trailing beginning of the tag are held), holds an object until it is complete (or cannot be JSON: then the output
is text and goes out at once) and sends each call as its object closes. Whatever the pieces, it ends with the same
content and calls as parse_output, but for what a stream cannot take back: a bad object after a call was sent (the
stream then sends the text from that object on as content).
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

TAG = "<|python_tag|>"
_SPACE = re.compile(r"\s*")
_SEPARATORS = re.compile(r"[\s;]*")
_DECODER = json.JSONDecoder()


def calls_start(text: str, at: int = 0) -> int:
    """Where the calls begin: the first ``{`` or ``<|python_tag|>`` from ``at`` (-1: neither)."""
    found = [index for index in (text.find("{", at), text.find(TAG, at)) if index >= 0]
    return min(found, default=-1)


def first_object(text: str, start: int) -> int:
    """Where the first object should be, for calls beginning at ``start``: past the tag and whitespace."""
    pos = start + len(TAG) if text.startswith(TAG, start) else start
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches anywhere


def parse_output(text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
    """The content and calls of a finished output (see the module's docstring)."""
    start = calls_start(text)
    if start < 0:
        return ParsedOutput(text or None)
    calls: list[ParsedCall] = []
    pos = first_object(text, start)
    while pos < len(text) and text[pos] == "{":
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return ParsedOutput(text)
        call = call_of(value, names)
        if call is None:
            return ParsedOutput(text)
        calls.append(call)
        pos = _SEPARATORS.match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches anywhere
    if not calls:
        return ParsedOutput(text)
    return ParsedOutput(text[:start].rstrip() or None, tuple(calls if parallel else calls[:1]))


# what the stream is reading
_CONTENT, _OPENING, _OBJECT, _BETWEEN, _TRAILING = range(5)


class StreamParser(TextCallStream):
    """Reads an output piece by piece; feed() and finish() return what the stream may send."""

    def __init__(self, names: Collection[str], parallel: bool = True) -> None:
        super().__init__(names, parallel)
        self._pos = 0
        """Where reading goes on (after the content)."""
        self._scan: JsonScan | None = None
        """The object being read."""

    def finish(self) -> StreamDelta:
        """The output has ended: what was held. Held content (whitespace, the beginning of a tag) and calls cut
        short go out as content; text after the last call is dropped."""
        if self._state in (_CONTENT, _OPENING, _OBJECT):
            return self._fail()
        return StreamDelta()

    def _advance(self) -> StreamDelta:
        sent = StreamDelta()
        text = self._text
        while True:
            state = self._state
            if state == _CONTENT:
                start = calls_start(text, self._sent)
                if start < 0:
                    end = len(text) - held_suffix(text[self._sent:], TAG)
                    return sent.then(self._content(end))
                sent = sent.then(self._content(self._sent + len(text[self._sent:start].rstrip())))
                self._state, self._pos = _OPENING, start
            elif state == _OPENING:
                pos = first_object(text, self._pos)
                if pos == len(text):
                    return sent  # more whitespace, or the object, may come
                if text[pos] != "{":
                    return sent.then(self._fail())
                self._read_object(pos)
            elif state == _OBJECT:
                assert self._scan is not None
                self._scan.advance(text)
                if self._scan.bad:
                    return sent.then(self._fail())
                if not self._scan.done:
                    return sent
                call = call_of_json(text[self._scan.start:self._scan.end], self._names)
                if call is None:
                    return sent.then(self._fail())
                if self._sends_next_call():
                    sent = sent.then(StreamDelta(calls=(call,)))
                self._state, self._pos = _BETWEEN, self._scan.end
            elif state == _BETWEEN:
                self._pos = _SEPARATORS.match(text, self._pos).end()  # type: ignore[union-attr]  # always matches
                if self._pos == len(text):
                    return sent
                if text[self._pos] != "{":
                    self._state = _TRAILING
                    return sent
                self._read_object(self._pos)
            else:  # _TRAILING: dropped
                return sent

    def _read_object(self, pos: int) -> None:
        self._state, self._scan = _OBJECT, JsonScan(pos)

    def _fail(self) -> StreamDelta:
        """The calls do not parse: before any call was sent, the whole output is content (the rest of it goes out
        now, and what follows as it comes); after one, the text from the bad object on."""
        self._state = FAILED
        if self.calls_sent and self._scan is not None:
            return StreamDelta(self._text[self._scan.start:])
        return self._content(len(self._text))


def stream_parser(names: Collection[str], parallel: bool = True) -> StreamParser:
    """A parser of one output as it is generated (the parser interface of common.py)."""
    return StreamParser(names, parallel)
