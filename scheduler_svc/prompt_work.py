"""Long prompts are tokenized in a worker thread, so the engine loop keeps stepping and streaming meanwhile.

Tokenizing is the one piece of a request's admission whose cost grows with the prompt: 0.3 s for the longest text
the default model's limits let through (validation.MAX_PROMPT_CHARS_PER_TOKEN), all of it on the event loop that
sends every step and every stream message. The tokenizer releases the GIL while it encodes (Tokenizer.encode), so
in a thread it costs the loop nothing; short prompts stay on the loop, where a thread hand-off would cost more than
their tokenization.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from scheduler_svc.validation import PromptRequest, chat_prompt_chars
from stepahead_proto import generation_pb2

INLINE_PROMPT_CHARS = 8192
"""Prompts of at most this many characters (about 2 ms of tokenization) are tokenized on the event loop."""
STRUCTURED_OUTPUT_CHARS = INLINE_PROMPT_CHARS + 1
"""What a structured output format counts as: compiling it (and, the first time, building llguidance's view of the
tokenizer: 0.25 s for the default model) is work for a worker thread, whatever the prompt's length."""

Result = TypeVar("Result")


def prompt_chars(pb: PromptRequest) -> int:
    """Characters of text the request's prompt and prediction need tokenized (a token-id prompt needs none), plus
    STRUCTURED_OUTPUT_CHARS for a structured output format to compile."""
    format_chars = 0
    if isinstance(pb, generation_pb2.GenerateRequest):
        format_chars = len(pb.prediction)
        if pb.sampling.HasField("structured_output"):
            format_chars += STRUCTURED_OUTPUT_CHARS
    kind = pb.WhichOneof("prompt")
    if kind == "text":
        return len(pb.text) + format_chars
    if kind == "chat":  # the template renders every message, empty or not
        return chat_prompt_chars(pb.chat) + format_chars
    return format_chars


async def run_prompt_work(chars: int, work: Callable[..., Result], *args: object) -> Result:
    """``work(*args)``: on the event loop for a prompt of at most INLINE_PROMPT_CHARS characters, else in a
    worker thread (exceptions propagate either way)."""
    if chars <= INLINE_PROMPT_CHARS:
        return work(*args)
    return await asyncio.to_thread(work, *args)
