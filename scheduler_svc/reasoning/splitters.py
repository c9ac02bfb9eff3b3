"""Reasoning models' thinking, split from their answer (the server's --reasoning-parser, chat completions only).

Models that think before answering write ``<think> ... </think>`` and then the answer. With a parser the HTTP front
returns the thinking as the message's ``reasoning`` (vLLM's current name) and ``reasoning_content`` (DeepSeek's API,
SGLang and older vLLM), and the answer alone as ``content``, in whole responses and, as it is generated, in stream
deltas. The tags themselves are dropped; the text between and after them is kept as the model wrote it.

The two <think> parsers differ in who opens the thinking:

- ``deepseek_r1``: the chat template (DeepSeek-R1, QwQ, Qwen3 thinking releases end the prompt with ``<think>``).
  The output is thinking up to ``</think>``, the answer after it; without ``</think>`` (cut by max_tokens, say) all
  of it is thinking. A ``<think>`` the model writes first anyway is dropped.
- ``qwen3``: the model itself (Qwen3, SmolLM3: ``enable_thinking`` or ``/think``). Only an output that starts with
  ``<think>`` (after whitespace) thinks, up to ``</think>`` or its end; any other output is all answer (thinking
  turned off, or a template that already closed the block in the prompt).

``openai_gptoss``: gpt-oss's harmony channels instead (harmony.py).

Every split is decided on text as it streams: a delta that may end inside a tag or marker holds those characters
back until the next delta (or the end) tells, so the streamed pieces join to exactly what the whole response gives.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from scheduler_svc.config import REASONING_PARSERS
from scheduler_svc.reasoning.delta import PieceReader, ReasoningDelta, partial_marker_length
from scheduler_svc.reasoning.harmony import HarmonySplitter

THINK_START = "<think>"
THINK_END = "</think>"


class _Part(Enum):
    LEADING = "leading"
    """Nothing but whitespace or the start of ``<think>`` so far: whether the output thinks is not known yet."""
    REASONING = "reasoning"
    CONTENT = "content"


class ReasoningSplitter(Protocol):
    """Splits one choice's output, fed in order, into thinking and answer."""

    thought: bool
    """Whether the output (so far) thinks."""

    def feed(self, text: str) -> ReasoningDelta:
        """The thinking and answer ``text`` lets go (characters that may begin a marker are held back)."""

    def finish(self) -> ReasoningDelta:
        """What was held back, once the output has ended."""


def reasoning_splitter(parser: str) -> ReasoningSplitter:
    """A new splitter of the server's --reasoning-parser ``parser``."""
    if parser not in REASONING_PARSERS:
        raise ValueError(f"reasoning_parser: must be one of {', '.join(REASONING_PARSERS)}, got {parser!r}")
    return HarmonySplitter() if parser == "openai_gptoss" else ThinkTagSplitter(parser == "deepseek_r1")


class ThinkTagSplitter(PieceReader):
    """Splits a ``<think>`` block from the answer (deepseek_r1 and qwen3; see the module's docstring)."""

    def __init__(self, opened_by_template: bool) -> None:
        super().__init__()
        self._thinks_unopened = opened_by_template
        self._part = _Part.LEADING
        self.thought = self._thinks_unopened
        """Whether the output thinks: deepseek_r1's always does (the template opened the block), qwen3's once it
        opens one (an empty ``<think></think>`` counts)."""

    def finish(self) -> ReasoningDelta:
        """What was held back, once the output has ended."""
        held, self._held = self._held, ""
        if not held:
            return ReasoningDelta()
        if self._part is _Part.LEADING:
            self._part = _Part.REASONING if self._thinks_unopened else _Part.CONTENT
        return ReasoningDelta(reasoning=held) if self._part is _Part.REASONING else ReasoningDelta(content=held)

    def _advance(self, text: str) -> tuple[ReasoningDelta, str]:
        """One move through ``text``: what it lets go, and what is left to read."""
        if self._part is _Part.CONTENT:
            return ReasoningDelta(content=text), ""
        if self._part is _Part.LEADING:
            return ReasoningDelta(), self._lead(text)
        end = text.find(THINK_END)
        if end >= 0:
            self._part = _Part.CONTENT
            return ReasoningDelta(reasoning=text[:end]), text[end + len(THINK_END):]
        kept = len(text) - partial_marker_length(text, (THINK_END,))
        self._held = text[kept:]
        return ReasoningDelta(reasoning=text[:kept]), ""

    def _lead(self, text: str) -> str:
        """Decide from the output's first characters whether it thinks; the text left to read."""
        stripped = text.lstrip()
        if stripped.startswith(THINK_START):
            self._part, self.thought = _Part.REASONING, True
            return stripped[len(THINK_START):]
        if THINK_START.startswith(stripped):  # only whitespace, or the tag's beginning: wait for more
            self._held = text
            return ""
        self._part = _Part.REASONING if self._thinks_unopened else _Part.CONTENT
        return text


def split_reasoning(parser: str, text: str) -> tuple[str | None, str]:
    """A whole output's thinking (None when it did not think) and answer."""
    splitter = reasoning_splitter(parser)
    delta = splitter.feed(text).then(splitter.finish())
    return (delta.reasoning if splitter.thought else None), delta.content
