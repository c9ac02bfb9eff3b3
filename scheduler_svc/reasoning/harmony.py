"""gpt-oss's thinking and answer (--reasoning-parser openai_gptoss): its output is OpenAI's harmony format.

The chat template ends the prompt with ``<|start|>assistant``, and the model writes messages, each a header naming
its channel and a body: ``<|channel|>analysis<|message|>...<|end|>`` (the thinking), then
``<|start|>assistant<|channel|>final<|message|>...`` (the answer, ended by the ``<|return|>`` stop token, which is
not in the text). The ``analysis`` channel's bodies are the thinking; every other channel's (``final``, and
``commentary``: preambles) are the content. Headers and markers are dropped, but for a tool call: a message addressed
to a function (``to=functions.NAME`` in its header, written as ``... to=functions.get_weather <|constrain|>json``)
goes to the content as ``<|channel|>commentary to=functions.NAME<|message|>ARGUMENTS<|call|>`` (CALL_OPENER; the
closing ``<|call|>`` only when another marker ends it: the model's own is a stop token), which the ``openai`` tool
call parser reads (scheduler_svc/tool_calls/harmony.py). An output that does not start with a channel header
is all content; a header left unfinished when the output ends is given as content rather than dropped. The markers
are special tokens, so they are kept in the text while a parser reads it (unless the request sets
skip_special_tokens).
"""

from __future__ import annotations

from enum import Enum

from scheduler_svc.reasoning.delta import PieceReader, ReasoningDelta, partial_marker_length

CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
START = "<|start|>"
BODY_ENDS = ("<|end|>", "<|return|>", "<|call|>")
MARKERS = (CHANNEL, MESSAGE, START, "<|constrain|>", *BODY_ENDS)
THINKING_CHANNEL = "analysis"
FUNCTIONS = "functions."
"""A tool call's recipient prefix: ``to=functions.NAME``."""
CALL_OPENER = f"{CHANNEL}commentary to={FUNCTIONS}"
"""How a tool call message starts in the content: the function's name and ``<|message|>`` follow."""
CALL_END = "<|call|>"


class _Part(Enum):
    LEADING = "leading"
    """Nothing read yet but, perhaps, the beginning of ``<|channel|>``."""
    HEADER = "header"
    BODY = "body"
    BETWEEN = "between"
    """After a body's end marker, before the next ``<|start|>``."""
    PLAIN = "plain"
    """The output is not in harmony format: all content."""


class HarmonySplitter(PieceReader):
    """Splits one choice's harmony output, fed in order, into thinking and answer (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._part = _Part.LEADING
        self._header = ""
        self._thinking = False
        self._calling = False
        """Whether the body being read is a tool call's arguments (its message names a function)."""
        self.thought = False
        """Whether any of the output was on the analysis channel."""

    def finish(self) -> ReasoningDelta:
        """What was held back, once the output has ended (an unfinished header as content)."""
        held = self._header + self._held
        self._header = self._held = ""
        if self._part is _Part.BODY and self._thinking:
            return ReasoningDelta(reasoning=held)
        return ReasoningDelta(content=held)

    def _advance(self, text: str) -> tuple[ReasoningDelta, str]:
        """One move through ``text``: what it lets go, and what is left to read."""
        if self._part is _Part.PLAIN:
            return ReasoningDelta(content=text), ""
        if self._part is _Part.LEADING:
            return ReasoningDelta(), self._lead(text)
        if self._part is _Part.HEADER:
            return self._read_header(text)
        if self._part is _Part.BETWEEN:
            return self._between(text)
        return self._read_body(text)

    def _lead(self, text: str) -> str:
        if text.startswith(CHANNEL):
            self._part = _Part.HEADER
            return text
        if CHANNEL.startswith(text):
            self._held = text
            return ""
        self._part = _Part.PLAIN
        return text

    def _read_header(self, text: str) -> tuple[ReasoningDelta, str]:
        """A message's header, once its ``<|message|>`` has come: a tool call's opener as content, else nothing."""
        header = self._header + text
        end = header.find(MESSAGE)
        if end < 0:
            self._header = header
            return ReasoningDelta(), ""
        self._header = ""
        function = _function_of(header[:end])
        self._calling = function is not None
        self._thinking = not self._calling and _channel_of(header[:end]) == THINKING_CHANNEL
        self.thought = self.thought or self._thinking
        self._part = _Part.BODY
        opener = ReasoningDelta(content=f"{CALL_OPENER}{function}{MESSAGE}") if self._calling else ReasoningDelta()
        return opener, header[end + len(MESSAGE):]

    def _read_body(self, text: str) -> tuple[ReasoningDelta, str]:
        found = [(index, marker) for marker in (*BODY_ENDS, START) if (index := text.find(marker)) >= 0]
        if found:
            index, marker = min(found)
            body, rest = text[:index], text[index + len(marker):]
            self._part = _Part.HEADER if marker == START else _Part.BETWEEN
            if self._calling:
                body, self._calling = body + CALL_END, False
        else:
            kept = len(text) - partial_marker_length(text, MARKERS)
            body, rest, self._held = text[:kept], "", text[kept:]
        return (ReasoningDelta(reasoning=body) if self._thinking else ReasoningDelta(content=body)), rest

    def _between(self, text: str) -> tuple[ReasoningDelta, str]:
        """Text between a body's end and the next ``<|start|>`` (normally none) is content."""
        index = text.find(START)
        if index < 0:
            kept = len(text) - partial_marker_length(text, MARKERS)
            self._held = text[kept:]
            return ReasoningDelta(content=text[:kept]), ""
        self._part = _Part.HEADER
        return ReasoningDelta(content=text[:index]), text[index + len(START):]


def _function_of(header: str) -> str | None:
    """The function a message header addresses (``to=functions.NAME``, in its role or channel part); None when it
    addresses none."""
    for word in header.replace("<|", " <|").split():
        if word.startswith(f"to={FUNCTIONS}") and len(word) > len(f"to={FUNCTIONS}"):
            return word[len(f"to={FUNCTIONS}"):]
    return None


def _channel_of(header: str) -> str:
    """The channel a message header names (``<|channel|>analysis``, perhaps followed by `` to=functions.f`` and
    ``<|constrain|>json``); "" when it names none."""
    if CHANNEL not in header:
        return ""
    words = header.split(CHANNEL, 1)[1].split("<|", 1)[0].split()
    return words[0] if words else ""
