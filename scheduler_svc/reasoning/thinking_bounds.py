"""The tokens where a reasoning parser's thinking ends, in the served model's tokenizer: what lets a structured output
format wait for the thinking (the executor's NewRequestData.format_after_thinking) and constrain the answer alone.

The executor follows the output's token ids, so the markers must be tokens the model writes whole: ``<think>`` and
``</think>`` one token each (Qwen3, DeepSeek-R1, SmolLM3 and QwQ add them to their vocabularies), gpt-oss's
``<|channel|>`` and ``<|message|>`` too (the channel's name between them is its tokens). A tokenizer that spells a
marker out of several pieces has no bounds: formats then constrain the whole output (request_split.splitting_parser).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_svc.reasoning.splitters import THINK_END, THINK_START
from scheduler_svc.tokenizer import Tokenizer

HARMONY_FINAL = ("<|channel|>", "final", "<|message|>")
"""The header that opens gpt-oss's answer (its ``final`` channel's message; a ``<|constrain|>`` type may come before
``<|message|>``)."""


@dataclass(frozen=True)
class ThinkingBounds:
    """A parser's thinking markers as token ids (see executor.proto's FormatAfterThinking)."""

    end_token_ids: tuple[int, ...]
    """The tokens after which the answer starts."""
    opener_token_ids: tuple[int, ...] = ()
    """Tokens that, as the first output token, open thinking (qwen3: the model decides); empty: the output opens
    thinking by itself (the chat template opened it, or gpt-oss's channels)."""
    header_end_token_id: int | None = None
    """gpt-oss: ``<|message|>``, which ends the final channel's header (it may name a ``<|constrain|>`` type) after
    end_token_ids; the answer starts after it."""


def thinking_bounds(parser: str, tokenizer: Tokenizer) -> ThinkingBounds | None:
    """``parser``'s bounds in ``tokenizer``; None when a marker is not one token there."""
    if parser == "openai_gptoss":
        channel, final, message = HARMONY_FINAL
        opened, closed = _single_token(tokenizer, channel), _single_token(tokenizer, message)
        if opened is None or closed is None:
            return None
        return ThinkingBounds((opened, *tokenizer.encode(final, add_special_tokens=False)), header_end_token_id=closed)
    end = _single_token(tokenizer, THINK_END)
    if end is None:
        return None
    if parser == "deepseek_r1":
        return ThinkingBounds((end,))
    opener = _single_token(tokenizer, THINK_START)
    return None if opener is None else ThinkingBounds((end,), (opener,))


def _single_token(tokenizer: Tokenizer, marker: str) -> int | None:
    ids = tokenizer.encode(marker, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None
