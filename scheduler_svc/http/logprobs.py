"""Logprobs in OpenAI's two shapes: chat (``logprobs.content``) and legacy completions (parallel lists), and
prompt logprobs in vLLM's.

Every output token gets one entry, so there are as many entries as ``usage.completion_tokens``
(the end-of-sequence token included). A token's text is its own decoding with special tokens kept;
its ``bytes`` are the token's raw bytes (a byte-level token may hold part of a UTF-8 character, which
its text shows as U+FFFD). A logprob of -inf is sent as -9999.0, as JSON has no infinity.

With vLLM's ``return_tokens_as_token_ids`` (``as_ids``), every token string of these logprobs (chat's ``token``,
completions' ``tokens`` and ``top_logprobs`` keys, an echoed prompt's tokens too) is ``"token_id:{id}"``, as vLLM
writes it, so that a client knows each token exactly, even one whose text is not valid UTF-8 on its own. Chat's
``bytes`` stay the token's own bytes (vLLM's for the sampled token; for the alternatives vLLM sends the placeholder's
bytes, which say nothing more), and completions' ``text_offset`` stays the position in the choice's text (vLLM counts
the placeholders' lengths there). Prompt logprobs keep their ``decoded_token`` text: they are keyed by id already,
and vLLM leaves them as they are.

Prompt logprobs (vLLM's ``prompt_logprobs``): one entry per prompt token, the first null (it has no context), then
``{token id (a string): {"logprob", "rank", "decoded_token"}}`` holding the prompt's own token first and then the
top alternatives, most likely first (rank 1). vLLM ranks the prompt's own token among the whole vocabulary; the
server sends no such rank, so here it is its place among the alternatives the server sent when it is one of them,
else one more than their number (a lower bound of its true rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import generation_pb2

NEG_INF_LOGPROB = -9999.0
TOKEN_ID_PREFIX = "token_id:"
"""vLLM's ``return_tokens_as_token_ids`` writes a token as this followed by its id."""


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-to-character table, inverted: the character a byte-level token uses for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars)}


class TokenTexts:
    """Text and bytes of single tokens, cached per id."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._alphabet = _byte_level_alphabet() if tokenizer.byte_level else {}
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def get(self, token_id: int) -> tuple[str, list[int]]:
        """(text, bytes) of ``token_id``."""
        cached = self._cache.get(token_id)
        if cached is None:
            cached = self._cache[token_id] = self._describe(token_id)
        return cached

    def name(self, token_id: int, as_id: bool = False) -> str:
        """How logprobs write ``token_id``: its text, or with ``as_id`` ``"token_id:{id}"``."""
        return f"{TOKEN_ID_PREFIX}{token_id}" if as_id else self.get(token_id)[0]

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of several tokens, special tokens kept unless ``skip_special_tokens`` (an echoed prompt)."""
        return self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def _describe(self, token_id: int) -> tuple[str, list[int]]:
        tokenizer = self._tokenizer
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        raw = tokenizer.inner.id_to_token(token_id) or ""
        if tokenizer.is_byte_fallback(token_id):
            return text, [int(raw[3:5], 16)]
        if self._alphabet and raw and not tokenizer.is_special(token_id) and all(c in self._alphabet for c in raw):
            return text, [self._alphabet[c] for c in raw]
        return text, list(text.encode("utf-8"))


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else NEG_INF_LOGPROB


def chat_logprobs(texts: TokenTexts, positions: Sequence[generation_pb2.PositionLogprobs],
                  as_ids: bool = False) -> list[dict[str, Any]]:
    """``choices[i].logprobs.content`` entries for these positions (``as_ids``: tokens written by id)."""
    entries = []
    for position in positions:
        entry = _chat_entry(texts, position.sampled, as_ids)
        entry["top_logprobs"] = [_chat_entry(texts, alternative, as_ids) for alternative in position.top]
        entries.append(entry)
    return entries


def _chat_entry(texts: TokenTexts, token: generation_pb2.TokenLogprob, as_ids: bool) -> dict[str, Any]:
    return {"token": texts.name(token.token_id, as_ids), "logprob": _finite(token.logprob),
            "bytes": texts.get(token.token_id)[1]}


def completion_logprobs(
    texts: TokenTexts,
    positions: Sequence[generation_pb2.PositionLogprobs],
    text_offset: int,
    max_top: int | None = None,
    as_ids: bool = False,
) -> dict[str, Any]:
    """``choices[i].logprobs`` of a completion: tokens, their logprobs, top alternatives, character offsets.

    ``text_offset`` is where the first of these tokens starts in the choice's text; ``max_top``: at most this many
    alternatives per position (None: all there are); ``as_ids``: tokens written by id (the offsets still count the
    tokens' text).
    """
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for position in positions:
        token_id = position.sampled.token_id
        tokens.append(texts.name(token_id, as_ids))
        token_logprobs.append(_finite(position.sampled.logprob))
        top_logprobs.append({texts.name(alt.token_id, as_ids): _finite(alt.logprob) for alt in position.top[:max_top]})
        offsets.append(text_offset)
        text_offset += len(texts.get(token_id)[0])
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


def echo_logprobs(
    texts: TokenTexts, first_token_id: int, positions: Sequence[generation_pb2.PositionLogprobs], max_top: int,
    as_ids: bool = False,
) -> dict[str, Any]:
    """A completion's ``logprobs`` for its echoed prompt: the first token (null logprob and alternatives: it has no
    context), then prompt tokens 1.. as ``positions`` score them; offsets from 0 (``as_ids``: tokens written by id)."""
    rest = completion_logprobs(texts, positions, len(texts.get(first_token_id)[0]), max_top, as_ids)
    return {"tokens": [texts.name(first_token_id, as_ids), *rest["tokens"]],
            "token_logprobs": [None, *rest["token_logprobs"]],
            "top_logprobs": [None, *rest["top_logprobs"]], "text_offset": [0, *rest["text_offset"]]}


def prompt_logprobs(
    texts: TokenTexts, positions: Sequence[generation_pb2.PositionLogprobs], max_top: int
) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's ``prompt_logprobs``: null for the first prompt token, then one object per scored position (see the
    module's docstring), with at most ``max_top`` alternatives."""
    entries: list[dict[str, dict[str, Any]] | None] = [None]
    for position in positions:
        own = position.sampled
        ids = [alt.token_id for alt in position.top]
        rank = ids.index(own.token_id) + 1 if own.token_id in ids else len(ids) + 1
        entry = {str(own.token_id): _vllm_logprob(texts, own, rank)}
        for index, alt in enumerate(position.top[:max_top]):
            entry.setdefault(str(alt.token_id), _vllm_logprob(texts, alt, index + 1))
        entries.append(entry)
    return entries


def _vllm_logprob(texts: TokenTexts, token: generation_pb2.TokenLogprob, rank: int) -> dict[str, Any]:
    return {"logprob": _finite(token.logprob), "rank": rank, "decoded_token": texts.get(token.token_id)[0]}
