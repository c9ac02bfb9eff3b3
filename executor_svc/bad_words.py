"""Bad words (vLLM's ``bad_words``) applied to logits on device.

A request's bad words arrive tokenized (by the scheduler) as token sequences. The last token of a sequence is
forbidden at a position whose output so far ends with the sequence's other tokens; a one-token sequence is forbidden
everywhere. Which tokens that forbids depends on the request's outputs (and, on a verify step, on the drafts before
each row), so a step that carries bad words waits for its outputs on the host, as penalties do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from executor_svc.host_transfer import host_list_to_device


class BadWordsParams(Protocol):
    """The bad words of one row (satisfied by RowSamplingParams)."""

    @property
    def bad_words(self) -> tuple[tuple[int, ...], ...]: ...


@dataclass
class BannedTokens:
    """The (row, token) pairs a batch forbids, on device."""

    rows: Tensor  # [M] long
    tokens: Tensor  # [M] long


def banned_tokens(sequences: Sequence[Sequence[int]], output_token_ids: Sequence[int]) -> list[int]:
    """The tokens forbidden after ``output_token_ids``, sorted, without repeats."""
    banned = set()
    for sequence in sequences:
        context = len(sequence) - 1
        if context <= len(output_token_ids) and _ends_with(output_token_ids, sequence[:context]):
            banned.add(sequence[-1])
    return sorted(banned)


def _ends_with(tokens: Sequence[int], suffix: Sequence[int]) -> bool:
    start = len(tokens) - len(suffix)
    return all(tokens[start + i] == token for i, token in enumerate(suffix))


def build_banned_tokens(params: Sequence[BadWordsParams], output_token_ids: Sequence[Sequence[int]],
                        device: torch.device | str) -> BannedTokens | None:
    """The pairs a batch forbids, or None when no row forbids a token now."""
    if not any(p.bad_words for p in params):
        return None
    pairs = [(row, token) for row, (p, outputs) in enumerate(zip(params, output_token_ids))
             if p.bad_words for token in banned_tokens(p.bad_words, outputs)]
    if not pairs:
        return None
    index = host_list_to_device([list(column) for column in zip(*pairs)], device)
    return BannedTokens(rows=index[0], tokens=index[1])


def apply_banned_tokens(logits: Tensor, banned: BannedTokens) -> Tensor:
    """Logits [N, V] with every banned pair at -inf (a new tensor; the input is left untouched)."""
    result = logits.clone()
    result[banned.rows, banned.tokens] = float("-inf")
    return result


def bad_word_sequences(sequences: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """A request's bad words as RowSamplingParams keeps them (tuples, hashable), repeats and empty ones dropped."""
    return tuple(dict.fromkeys(tuple(int(t) for t in s) for s in sequences if len(s)))
