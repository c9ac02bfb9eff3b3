"""Pythonic tool calls in free text (tool_choice "auto" with ``--tool-call-parser pythonic``), whole and streamed,
as vLLM's parser of the same name reads them.

Llama 3.2 and Llama 4 (and models tuned like ToolACE) answer with calls as a Python list of function calls, the
whole output being that list: ``[get_weather(city="Paris", unit="c"), get_time()]``. It is read with ``ast``:

- the output, surrounding whitespace aside, must be a non-empty list whose items are calls of a tool by its plain
  name, with keyword arguments only, each given once, their values literals: strings, numbers (a sign allowed,
  finite), True/False/None (or JSON's true/false/null, as vLLM takes them), lists and dicts with string keys of
  those; each call's arguments become a JSON object text;
- such an output has no content (None); with ``parallel`` False only the first call is kept;
- any other output is its own content (None when empty), with no call.

Where vLLM differs: it wants the ``[`` first (here whitespace may come before it), drops positional arguments
(here they make the output content, as a repeated keyword does) and, in recent versions, also reads tuples, sets,
f-strings without placeholders and dotted names; none of those are calls here.

StreamParser sends an output that does not start with ``[`` as content as it comes; a list is held, each call
sent once the ``,`` after it closes it (the list so far, closed there, is parsed), the last ones when the output
ends after the list's ``]``, or the output goes out as content as soon as it cannot be such a list. Whatever the
pieces, it ends with the same content and calls as parse_output, but for what a stream cannot take back: a bad item
after a call was sent (the stream then sends the text after the last call sent as content).
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Collection
from typing import Any

from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput, StreamDelta

_JSON_NAMES: dict[str, Any] = {"true": True, "false": False, "null": None}


class _NotLiteral(Exception):
    """An argument value that is not a literal."""


def parse_output(text: str, names: Collection[str], parallel: bool = True) -> ParsedOutput:
    """The content and calls of a finished output (see the module's docstring)."""
    calls = list_calls(text, names)
    if calls is None:
        return ParsedOutput(text or None)
    return ParsedOutput(None, tuple(calls if parallel else calls[:1]))


def list_calls(text: str, names: Collection[str]) -> list[ParsedCall] | None:
    """Every call of an output that is a list of calls; None for any other output."""
    body = text.strip()
    elements = list_elements(body) if body.startswith("[") else None
    if not elements:
        return None
    calls = [element_call(element, names) for element in elements]
    return None if None in calls else [call for call in calls if call is not None]


def list_elements(body: str) -> list[ast.expr] | None:
    """The items of ``body`` when it parses as a Python list display; None otherwise."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an invalid escape in a string is no call's concern
            tree = ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return tree.body.elts if isinstance(tree.body, ast.List) else None


def element_call(node: ast.expr, names: Collection[str]) -> ParsedCall | None:
    """The call an item of the list writes: a tool called by name with literal keyword arguments; None otherwise."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        return None
    name = node.func.id
    if name not in names:
        return None
    arguments: dict[str, Any] = {}
    try:
        for keyword in node.keywords:
            if keyword.arg is None or keyword.arg in arguments:
                return None
            arguments[keyword.arg] = _literal(keyword.value)
        return ParsedCall(name, json.dumps(arguments, ensure_ascii=False, allow_nan=False))
    except (_NotLiteral, ValueError, RecursionError):
        return None


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, (str, bool)):
            return value
        if isinstance(value, (int, float)) and math.isfinite(value):
            return value
        raise _NotLiteral
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        number = node.operand.value if isinstance(node.operand, ast.Constant) else None
        if type(number) not in (int, float):  # (a bool is no number here)
            raise _NotLiteral
        assert isinstance(number, (int, float))
        return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.List):
        return [_literal(element) for element in node.elts]
    if isinstance(node, ast.Dict):
        result: dict[str, Any] = {}
        for key, item in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise _NotLiteral
            result[key.value] = _literal(item)
        return result
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    raise _NotLiteral


# ---- streaming --------------------------------------------------------------------------------------------------
_COMMA, _CLOSE, _BAD = range(3)
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_STRING_RUNS = {quote: re.compile(pattern) for quote, pattern in (
    ("'", r"[^'\\\r\n]*"), ('"', r'[^"\\\r\n]*'), ("'''", r"[^'\\]*"), ('"""', r'[^"\\]*'))}


class ListScan:
    """Python text from a list's ``[`` on, as it grows: its brackets, strings and comments, to find where an item
    of the list ends (a ``,`` in the list itself) and where the list does (its ``]``). Where the text can no longer
    be a list of calls for certain (a bracket that does not match, a line break in a one-line string, an item that
    does not start with a name), it says so; it follows Python's tokenizer exactly for the strings such a list
    holds, so a ``,`` it finds is one of the list's own."""

    def __init__(self, start: int) -> None:
        self._pos = start
        self._closers: list[str] = []
        self._quote = ""
        """The open string's quote ("" outside strings)."""
        self._comment = False
        self._item_due = False
        """Whether the next thing in the list must begin an item (after ``[`` or one of the list's ``,``)."""

    def next_event(self, text: str) -> tuple[int, int] | None:
        """The next (kind, index): the list's ``,`` (_COMMA) or ``]`` (_CLOSE) at index, or _BAD; None when the text
        so far holds no more (or what comes next decides the last characters)."""
        pos, size = self._pos, len(text)
        event: tuple[int, int] | None = None
        while pos < size and event is None:
            char = text[pos]
            if self._comment:
                self._comment = char not in "\r\n"
                pos += 1
            elif self._quote:
                string_pos = self._in_string(text, pos)
                if string_pos is None:
                    break
                if string_pos < 0:
                    event = (_BAD, pos)
                else:
                    pos = string_pos
            elif char == "#":
                self._comment = True
                pos += 1
            elif char in "'\"":
                if pos + 2 >= size:
                    break  # a third quote may make it a triple-quoted string
                if self._item_due:
                    event = (_BAD, pos)
                else:
                    self._quote = char * 3 if text[pos + 1] == char == text[pos + 2] else char
                    pos += len(self._quote)
            else:
                pos, event = self._code(char, pos)
        self._pos = pos
        return event

    def _in_string(self, text: str, pos: int) -> int | None:
        """Where reading goes on in or after the open string; None: wait for more text; -1: a line break in a
        one-line string."""
        quote = self._quote
        pos = _STRING_RUNS[quote].match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches anywhere
        if pos == len(text):
            return pos
        char = text[pos]
        if char == "\\":  # escapes the next character (CR LF as one)
            if pos + 2 >= len(text):
                return None
            return pos + 3 if text.startswith("\r\n", pos + 1) else pos + 2
        if char in "\r\n":
            return -1
        if len(quote) == 1 or text.startswith(quote, pos):
            self._quote = ""
            return pos + len(quote)
        return pos + 1 if pos + 3 <= len(text) else None

    def _code(self, char: str, pos: int) -> tuple[int, tuple[int, int] | None]:
        closers = self._closers
        if char.isspace() or char == "\\":
            return pos + 1, None
        if self._item_due and not (char == "]" and len(closers) == 1):
            if not char.isidentifier():
                return pos, (_BAD, pos)
            self._item_due = False
        if char in _OPENERS:
            closers.append(_OPENERS[char])
            self._item_due = len(closers) == 1
            return pos + 1, None
        if char in ")]}":
            if not closers or closers[-1] != char:
                return pos, (_BAD, pos)
            closers.pop()
            return pos + 1, None if closers else (_CLOSE, pos)
        if char == "," and len(closers) == 1:
            self._item_due = True
            return pos + 1, (_COMMA, pos)
        return pos + 1, None


# what the stream is reading
_LEAD, _LIST, _AFTER, _CONTENT = range(4)


class StreamParser:
    """Reads an output piece by piece; feed() and finish() return what the stream may send."""

    def __init__(self, names: Collection[str], parallel: bool = True) -> None:
        self._names = names
        self._parallel = parallel
        self._text = ""
        self._state = _LEAD
        self._start = 0
        """Where the list starts."""
        self._scan: ListScan | None = None
        self._items_read = 0
        """Items of the list checked as calls."""
        self._items_sent = 0
        """Items whose calls were let go (sent, or with ``parallel`` False dropped after the first)."""
        self._after = 0
        """Where reading goes on after the list's ``]``."""
        self._after_comment = False
        self._resume = 0
        """Where the text after the last call sent starts (what a failure after a sent call sends as content)."""
        self.calls_sent = 0

    def feed(self, text: str) -> StreamDelta:
        """One more piece of the output."""
        if self._state == _CONTENT:
            return StreamDelta(text)
        self._text += text
        if self._state == _LEAD:
            body = self._text.lstrip()
            if not body:
                return StreamDelta()  # whitespace, held
            if not body.startswith("["):
                self._state = _CONTENT
                return StreamDelta(self._text)
            self._state, self._start = _LIST, len(self._text) - len(body)
            self._scan = ListScan(self._start)
        sent = StreamDelta()
        if self._state == _LIST:
            sent = self._read_list()
        if self._state == _AFTER:
            sent = sent.then(self._read_after())
        return sent

    def finish(self) -> StreamDelta:
        """The output has ended: what was held (the whole output parsed decides what is left to send)."""
        state, self._state = self._state, _CONTENT
        if state == _CONTENT:
            return StreamDelta()
        if state == _LEAD:
            return StreamDelta(self._text)
        calls = list_calls(self._text, self._names)
        if calls is None:
            return StreamDelta(self._text[self._resume:] if self.calls_sent else self._text)
        return StreamDelta(calls=self._sendable(calls[self._items_sent:]))

    def _read_list(self) -> StreamDelta:
        """The calls each item end found so far closes; the list's end; or, where it cannot be calls, failure."""
        assert self._scan is not None
        sent = StreamDelta()
        text = self._text
        while (event := self._scan.next_event(text)) is not None:
            kind, index = event
            if kind == _BAD:
                return sent.then(self._fail())
            elements = list_elements(text[self._start:index] + "]" if kind == _COMMA else text[self._start:index + 1])
            if elements is None or (kind == _CLOSE and not elements):
                return sent.then(self._fail())
            calls = [element_call(element, self._names) for element in elements[self._items_read:]]
            if None in calls:
                return sent.then(self._fail())
            self._items_read = len(elements)
            if kind == _CLOSE:  # its calls wait for the end: only whitespace may follow the list
                self._state, self._after = _AFTER, index + 1
                break
            sendable = self._sendable([call for call in calls if call is not None])
            self._items_sent = self._items_read
            if sendable:
                self._resume = index + 1
                sent = sent.then(StreamDelta(calls=sendable))
        return sent

    def _read_after(self) -> StreamDelta:
        """After the list only whitespace and comments may come (a line continuation is left to the whole parse)."""
        for char in self._text[self._after:]:
            if self._after_comment:
                self._after_comment = char not in "\r\n"
            elif char == "#":
                self._after_comment = True
            elif not (char.isspace() or char == "\\"):
                return self._fail()
        self._after = len(self._text)
        return StreamDelta()

    def _sendable(self, calls: list[ParsedCall]) -> tuple[ParsedCall, ...]:
        """Of calls read in order, those to send (after the first, none unless parallel); counts them sent."""
        if not self._parallel:
            calls = calls[:max(0, 1 - self.calls_sent)]
        self.calls_sent += len(calls)
        return tuple(calls)

    def _fail(self) -> StreamDelta:
        """The output is not a list of calls: before any call was sent, all of it is content (the rest of it goes
        out now, and what follows as it comes); after one, the text after the last call sent."""
        self._state = _CONTENT
        return StreamDelta(self._text[self._resume:] if self.calls_sent else self._text)


def stream_parser(names: Collection[str], parallel: bool = True) -> StreamParser:
    """A parser of one output as it is generated (the parser interface of common.py)."""
    return StreamParser(names, parallel)
