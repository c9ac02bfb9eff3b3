"""What every tool call parser of tool_choice "auto" (``--tool-call-parser``) shares: the parsed message, what a
stream may send, the interface a parser offers (parsers.py maps the flag's names to parsers), and the
checks of a call written as a JSON object.

A parser reads a model's free text two ways, which must agree:

- ``parse_output(text, names, parallel)``: a finished output as a message: its content and its calls, each call
  naming one of ``names`` (the request's tools); with ``parallel`` False (``parallel_tool_calls: false``) only the
  first call is kept; an output whose calls do not parse, are cut short or name another function is its own
  content, with no call;
- ``stream_parser(names, parallel)``: an object fed the same output piece by piece, saying after each piece what a
  stream may send: content that cannot be part of a call as it comes, each call once it is complete. Whatever the
  pieces, the stream ends with the same content and calls as parse_output, but for what a stream cannot take back:
  a call already sent before the output turned out malformed (the stream then sends the rest as content).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ParsedCall:
    """One tool call: the function's name and its arguments as JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True)
class ParsedOutput:
    """A message read from the model's text: its content and its calls (none: the output is text)."""

    content: str | None
    calls: tuple[ParsedCall, ...] = ()


@dataclass(frozen=True)
class StreamDelta:
    """What a stream may send after one more piece of output: content to append, and calls (in output order)."""

    content: str = ""
    calls: tuple[ParsedCall, ...] = ()

    def then(self, later: StreamDelta) -> StreamDelta:
        """This delta followed by ``later``, as one."""
        return StreamDelta(self.content + later.content, self.calls + later.calls)


class CallStream(Protocol):
    """A parser reading one output as it is generated."""

    @property
    def calls_sent(self) -> int:
        """How many calls it has let go so far."""
        ...

    def feed(self, text: str) -> StreamDelta:
        """One more piece of the output: what may be sent now."""
        ...

    def finish(self) -> StreamDelta:
        """The output has ended: what it still held that may be sent."""
        ...


class ToolCallParser(Protocol):
    """A model's tool call syntax (each parser module is one)."""

    def parse_output(self, text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
        """The content and calls of a finished output."""
        ...

    def stream_parser(self, names: Collection[str], parallel: bool = True) -> CallStream:
        """A parser of one output as it is generated."""
        ...


def new_call_id() -> str:
    """A tool call id, ``call_`` and 24 random hex digits."""
    return f"call_{secrets.token_hex(12)}"


FAILED = -1
"""A TextCallStream's state once its calls did not parse: everything after is content."""


class TextCallStream:
    """What the llama3_json and mistral stream parsers share: the output so far, how much of it went out as content,
    the calls sent, and the state machine's state (0: reading content; FAILED: the rest is content)."""

    def __init__(self, names: Collection[str], parallel: bool = True) -> None:
        self._names = names
        self._parallel = parallel
        self._text = ""
        self._sent = 0
        """Content sent: the text before it."""
        self._state = 0
        self.calls_sent = 0

    def feed(self, text: str) -> StreamDelta:
        """One more piece of the output."""
        if self._state == FAILED:
            return StreamDelta(text)
        self._text += text
        return self._advance()

    def _advance(self) -> StreamDelta:
        raise NotImplementedError

    def _sends_next_call(self) -> bool:
        """Whether the next complete call goes out (counting it): all of them, or only the first without
        parallel calls."""
        if self._parallel or self.calls_sent == 0:
            self.calls_sent += 1
            return True
        return False

    def _content(self, end: int) -> StreamDelta:
        """The text up to ``end`` not sent yet, as content."""
        content, self._sent = self._text[self._sent:end], end
        return StreamDelta(content)


def call_of(value: Any, names: Collection[str]) -> ParsedCall | None:
    """The call a decoded JSON value writes: an object whose ``name`` is among ``names`` and whose ``arguments``
    (or, as some models write it, ``parameters``) is an object; None otherwise."""
    if not isinstance(value, dict):
        return None
    name, arguments = value.get("name"), value.get("arguments", value.get("parameters"))
    if not isinstance(name, str) or name not in names or not isinstance(arguments, dict):
        return None
    return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))


def call_of_json(text: str, names: Collection[str]) -> ParsedCall | None:
    """The call written as the JSON text ``text`` (see call_of); None when it does not parse either."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return call_of(value, names)


def held_suffix(text: str, marker: str) -> int:
    """How many characters at the end of ``text`` a stream must hold until what follows decides them: the longest
    end of it that begins ``marker`` (but is not all of it), and the whitespace before that."""
    partial = next((size for size in range(min(len(marker) - 1, len(text)), 0, -1)
                    if marker.startswith(text[-size:])), 0)
    kept = text[:len(text) - partial].rstrip()
    return len(text) - len(kept)
