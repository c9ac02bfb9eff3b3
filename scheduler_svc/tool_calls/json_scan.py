"""Where a JSON value ends in text that is still being generated, for the streaming tool call parsers.

JsonScan follows one value (an object or an array) through a growing text, each character read once: it tells
when the value is complete (and where it ends), when the text can no longer be the start of one (so a stream may
let it go as content at once), and, for an array, where each of its items ends. It reads the grammar of Python's
``json`` module (NaN, Infinity and -Infinity included, control characters in strings refused), so a value it
finds complete decodes with ``json.JSONDecoder.raw_decode`` to the same end, and text it refuses does not decode
(but for nesting too deep for the decoder, which it does not bound).
"""

from __future__ import annotations

import re
import string

_SPACE = " \t\n\r"
_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')
"""A run of string characters with nothing to check."""
_TOKEN = re.compile(r"[A-Za-z0-9+\-.]*")
"""A run of the characters a number or a literal name is made of."""
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORDS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_TOKEN_STARTS = frozenset("-0123456789tfnNI")
_HEX = frozenset(string.hexdigits)
_ESCAPED = frozenset('"\\/bfnrt')

# what the scanner expects next
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _NEXT = range(6)
_STRING, _ESCAPE, _UNICODE, _TOKEN_RUN = range(6, 10)
_DONE, _BAD = 10, 11


def _viable(token: str) -> bool:
    """Whether more characters may still make ``token`` a number or a literal name."""
    return (any(word.startswith(token) for word in _WORDS) or _NUMBER.fullmatch(token) is not None
            or _NUMBER.fullmatch(token + "0") is not None)


def _complete(token: str) -> bool:
    return token in _WORDS or _NUMBER.fullmatch(token) is not None


class JsonScan:
    """One JSON value starting at ``start`` of a text that grows; call advance() with the whole text so far."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.end = -1
        """Where the value ends (exclusive), once done."""
        self.items: list[tuple[int, int]] = []
        """Where each item of the outermost array (or value of the outermost object) starts and ends, as they
        complete."""
        self._pos = start
        self._state = _VALUE
        self._closers: list[str] = []
        self._in_key = False
        self._hex_left = 0
        self._token_start = 0
        self._item_start = -1

    @property
    def done(self) -> bool:
        """The value is complete (it ends at ``end``)."""
        return self._state == _DONE

    @property
    def bad(self) -> bool:
        """The text is not the start of a JSON value."""
        return self._state == _BAD

    def advance(self, text: str) -> None:
        """Read ``text`` (the whole text so far, the earlier text unchanged) on from where the last call stopped."""
        pos, size = self._pos, len(text)
        while pos < size and self._state < _DONE:
            state = self._state
            if state == _STRING:
                pos = self._string(text, pos)
                continue
            if state == _ESCAPE:
                char = text[pos]
                self._state = _UNICODE if char == "u" else _STRING if char in _ESCAPED else _BAD
                self._hex_left = 4
                pos += 1
                continue
            if state == _UNICODE:
                if text[pos] not in _HEX:
                    self._state = _BAD
                    continue
                self._hex_left -= 1
                self._state = _UNICODE if self._hex_left else _STRING
                pos += 1
                continue
            if state == _TOKEN_RUN:
                pos = _TOKEN.match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches anywhere
                token = text[self._token_start:pos]
                if pos == size:
                    if not _viable(token):
                        self._state = _BAD
                    break
                if not _complete(token):
                    self._state = _BAD
                    continue
                self._value_end(pos)
                continue
            char = text[pos]
            if char in _SPACE:
                pos += 1
                continue
            pos = self._structure(state, char, pos)
        self._pos = pos

    def _string(self, text: str, pos: int) -> int:
        pos = _PLAIN.match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches anywhere
        if pos == len(text):
            return pos
        char = text[pos]
        if char == "\\":
            self._state = _ESCAPE
        elif char == '"':
            if self._in_key:
                self._state = _COLON
            else:
                self._value_end(pos + 1)
        else:  # a control character
            self._state = _BAD
            return pos
        return pos + 1

    def _structure(self, state: int, char: str, pos: int) -> int:
        """A character outside strings and tokens; returns where reading goes on."""
        closers = self._closers
        if state in (_VALUE, _VALUE_OR_CLOSE):
            if char == "]" and state == _VALUE_OR_CLOSE:
                closers.pop()
                self._value_end(pos + 1)
                return pos + 1
            if len(closers) == 1:
                self._item_start = pos
            if char == "{":
                closers.append("}")
                self._state = _KEY_OR_CLOSE
            elif char == "[":
                closers.append("]")
                self._state = _VALUE_OR_CLOSE
            elif char == '"':
                self._in_key = False
                self._state = _STRING
            elif char in _TOKEN_STARTS:
                self._token_start = pos
                self._state = _TOKEN_RUN
                return pos
            else:
                self._state = _BAD
                return pos
            return pos + 1
        if state in (_KEY, _KEY_OR_CLOSE):
            if char == '"':
                self._in_key = True
                self._state = _STRING
            elif char == "}" and state == _KEY_OR_CLOSE:
                closers.pop()
                self._value_end(pos + 1)
            else:
                self._state = _BAD
                return pos
            return pos + 1
        if state == _COLON:
            if char != ":":
                self._state = _BAD
                return pos
            self._state = _VALUE
            return pos + 1
        # _NEXT: after an item of a container
        if char == ",":
            self._state = _KEY if closers[-1] == "}" else _VALUE
        elif char == closers[-1]:
            closers.pop()
            self._value_end(pos + 1)
        else:
            self._state = _BAD
            return pos
        return pos + 1

    def _value_end(self, end: int) -> None:
        """A value ended at ``end`` (exclusive): the scanned value is done, or its container reads on."""
        if not self._closers:
            self._state = _DONE
            self.end = end
            return
        self._state = _NEXT
        if len(self._closers) == 1 and self._item_start >= 0:
            self.items.append((self._item_start, end))
            self._item_start = -1
