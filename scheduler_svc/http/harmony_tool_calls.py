"""gpt-oss tool calls (tool_choice "auto" with ``--tool-call-parser openai``, with ``--reasoning-parser
openai_gptoss``), whole and streamed.

gpt-oss writes a call as a harmony message addressed to the function, its arguments a JSON object, ended by the
``<|call|>`` stop token. The reasoning parser hands each such message on, in the content, as
``<|channel|>commentary to=functions.NAME<|message|>ARGUMENTS`` (scheduler_svc/reasoning/harmony.py; closed by
``<|call|>`` when a later message follows), so this parser reads:

- the text before the first call is the message's ``content``, trailing whitespace dropped (None when nothing else
  is left; the model's preamble, on the commentary channel, is such text); text between calls is dropped;
- each call runs to ``<|call|>`` or to the end of the output: a known function's name and its arguments (a JSON
  object; the header's ``<|constrain|>json`` and such, as the raw format writes them, are skipped);
- with ``parallel`` False only the first call is kept;
- an output without a call is its own content (None when empty); an output with a call whose arguments do not parse
  or whose function is not among the tools is returned whole as content, with no call.

A call is complete only when ``<|call|>`` or the end of the output comes, so a stream sends each call then; content
goes out as it comes, except for trailing whitespace and what may begin a call (held until what follows decides).
"""

from __future__ import annotations

import json
from collections.abc import Collection

from scheduler_svc.http import tool_calls_common
from scheduler_svc.http.tool_calls_common import ParsedCall, ParsedOutput, StreamDelta
from scheduler_svc.reasoning.delta import partial_marker_length
from scheduler_svc.reasoning.harmony import CALL_END, CALL_OPENER, MESSAGE

START = CALL_OPENER
END = CALL_END


def parse_call(body: str, names: Collection[str]) -> ParsedCall | None:
    """The call in the text after ``to=functions.`` (up to ``<|call|>`` or the output's end): ``NAME ...<|message|>``
    and a JSON object; None unless NAME is among ``names`` and the arguments are an object."""
    header, found, arguments = body.partition(MESSAGE)
    words = header.replace("<|", " <|").split()
    if not found or not words or words[0] not in names:
        return None
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    return ParsedCall(words[0], json.dumps(value, ensure_ascii=False)) if isinstance(value, dict) else None


def parse_output(text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
    """The content and calls of a finished output (see the module's docstring)."""
    first = text.find(START)
    if first < 0:
        return ParsedOutput(text or None)
    calls: list[ParsedCall] = []
    start = first
    while start >= 0:
        end = text.find(END, start)
        call = parse_call(text[start + len(START):end if end >= 0 else len(text)], names)
        if call is None:
            return ParsedOutput(text)
        calls.append(call)
        start = text.find(START, end + len(END)) if end >= 0 else -1
    return ParsedOutput(text[:first].rstrip() or None, tuple(calls if parallel else calls[:1]))


def stream_parser(names: Collection[str], parallel: bool = True) -> StreamParser:
    """A parser of one output as it is generated (the parser interface of tool_calls_common)."""
    return StreamParser(names, parallel)


class StreamParser:
    """Reads an output piece by piece; feed() and finish() return what the stream may send."""

    def __init__(self, names: Collection[str], parallel: bool = True) -> None:
        self._names = names
        self._parallel = parallel
        self._pending = ""
        """Output not sent yet (before the first call: held content; after: the calls not ended yet)."""
        self._in_calls = False
        self._failed = False
        """A call did not parse: the rest of the output is content."""
        self.calls_sent = 0

    def feed(self, text: str) -> StreamDelta:
        """One more piece of the output."""
        if self._failed:
            return StreamDelta(text)
        self._pending += text
        return self._calls(ended=False) if self._in_calls else self._content()

    def finish(self) -> StreamDelta:
        """The output has ended: the held content, or the last call (which the end of the output completes)."""
        if self._failed:
            return StreamDelta()
        if not self._in_calls:
            pending, self._pending = self._pending, ""
            return StreamDelta(pending)
        return self._calls(ended=True)

    def _content(self) -> StreamDelta:
        start = self._pending.find(START)
        if start < 0:
            return StreamDelta(self._take(len(self._pending) - tool_calls_common.held_suffix(self._pending, START)))
        content = self._take(len(self._pending[:start].rstrip()))
        self._in_calls = True
        return StreamDelta(content).then(self._calls(ended=False))

    def _calls(self, ended: bool) -> StreamDelta:
        """Every call ended in the pending text (with ``ended``, the last one too), as calls (or, at a bad one, the
        rest as content)."""
        sent: list[ParsedCall] = []
        self._drop_between_calls(ended)
        while (call_span := self._ended_call(ended)) is not None:
            start, end = call_span
            call = parse_call(self._pending[start + len(START):end], self._names)
            if call is None:
                self._failed = True
                return StreamDelta(self._take(len(self._pending)), tuple(sent))
            if self._parallel or self.calls_sent == 0:
                sent.append(call)
                self.calls_sent += 1
            self._pending = self._pending[end + len(END):] if end < len(self._pending) else ""
            self._drop_between_calls(ended)
        return StreamDelta(calls=tuple(sent))

    def _ended_call(self, ended: bool) -> tuple[int, int] | None:
        """Where the pending text's first call starts and ends, once its end has come (with ``ended``, the output's
        end ends it)."""
        start = self._pending.find(START)
        if start < 0:
            return None
        end = self._pending.find(END, start + len(START))
        if end >= 0:
            return start, end
        return (start, len(self._pending)) if ended else None

    def _drop_between_calls(self, ended: bool) -> None:
        """Once a call was sent, the text after it is dropped up to the next call (or what may begin one)."""
        if not self.calls_sent:
            return
        start = self._pending.find(START)
        if start >= 0:
            self._pending = self._pending[start:]
        elif ended:
            self._pending = ""
        else:
            self._pending = self._pending[len(self._pending) - partial_marker_length(self._pending, (START,)):]

    def _take(self, size: int) -> str:
        taken, self._pending = self._pending[:size], self._pending[size:]
        return taken
