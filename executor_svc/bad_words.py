"""Bad words (vLLM's ``bad_words``) applied to logits on device.

A request's bad words arrive tokenized (by the scheduler) as token sequences. The last token of a sequence is
forbidden at a position whose output so far ends with the sequence's other tokens; a one-token sequence is forbidden
everywhere. Which tokens that forbids depends on the request's outputs (and, on a verify step, on the drafts before
each row). A step running ahead of the host does not know the newest output token there: the bans that hinge on it
are conditional, applied on the device where that token (the LastTokenBuffer's) equals the one the word needs, so
such a step need not wait (deferrable_with: only the newest token may be unknown to a word longer than two tokens).
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
class ConditionalBans:
    """(row, token) pairs forbidden only where the row's newest output token, unknown to the host, is ``needed``."""

    rows: Tensor  # [C] long
    tokens: Tensor  # [C] long
    needed: Tensor  # [C] long
    newest: Tensor  # [C] long: each pair's row's newest output token, on the device


@dataclass
class BannedTokens:
    """The (row, token) pairs a batch forbids, on device, and those it forbids depending on a newest token."""

    rows: Tensor  # [M] long
    tokens: Tensor  # [M] long
    conditional: ConditionalBans | None = None


def banned_tokens(sequences: Sequence[Sequence[int]], output_token_ids: Sequence[int]) -> list[int]:
    """The tokens forbidden after ``output_token_ids``, sorted, without repeats."""
    return sorted({sequence[-1] for sequence in sequences if _ends_with(output_token_ids, sequence[:-1])})


def _ends_with(tokens: Sequence[int], suffix: Sequence[int]) -> bool:
    start = len(tokens) - len(suffix)
    return start >= 0 and all(tokens[start + i] == token for i, token in enumerate(suffix))


def conditional_bans(sequences: Sequence[Sequence[int]], known_outputs: Sequence[int],
                     num_unread: int) -> tuple[list[int], list[tuple[int, int]]]:
    """The tokens forbidden after ``known_outputs`` followed by ``num_unread`` tokens the host does not know yet (only
    the newest may matter: see deferrable_with): those forbidden whatever they are, and (needed newest token, token)
    pairs forbidden only if the newest is the needed one."""
    if not num_unread:
        return banned_tokens(sequences, known_outputs), []
    certain, conditional = set(), set()
    for sequence in sequences:
        if len(sequence) == 1:
            certain.add(sequence[0])
        elif _ends_with(known_outputs, sequence[:-2]):
            conditional.add((sequence[-2], sequence[-1]))
    return sorted(certain), sorted(conditional)


def deferrable_with(sequences: Sequence[Sequence[int]], num_unread: int) -> bool:
    """Whether a step can sample under these bad words while ``num_unread`` output tokens are not on the host: the
    device holds only the newest, so a word longer than two tokens needs every other one known."""
    return num_unread <= 1 or all(len(sequence) <= 2 for sequence in sequences)


def build_banned_tokens(params: Sequence[BadWordsParams], output_token_ids: Sequence[Sequence[int]],
                        device: torch.device | str, num_unread: Sequence[int] | None = None,
                        newest: Tensor | None = None) -> BannedTokens | None:
    """The pairs a batch forbids, or None when no row forbids a token now. ``num_unread``: per row, output tokens
    not in ``output_token_ids`` yet (the host's copy); ``newest``: per row, the newest output token on the device
    (needed when some row with bad words has unread tokens)."""
    if not any(p.bad_words for p in params):
        return None
    pairs, conditional = [], []
    for row, (p, outputs) in enumerate(zip(params, output_token_ids)):
        if not p.bad_words:
            continue
        certain, pending = conditional_bans(p.bad_words, outputs, num_unread[row] if num_unread else 0)
        pairs += [(row, token) for token in certain]
        conditional += [(row, token, needed) for needed, token in pending]
    if not pairs and not conditional:
        return None
    index = host_list_to_device([list(column) for column in zip(*pairs)] if pairs else [[], []], device)
    return BannedTokens(rows=index[0], tokens=index[1], conditional=_conditional(conditional, newest, device))


def _conditional(triples: list[tuple[int, int, int]], newest: Tensor | None,
                 device: torch.device | str) -> ConditionalBans | None:
    if not triples:
        return None
    if newest is None:
        raise ValueError("bad words of rows with unread tokens need the rows' newest tokens on the device")
    index = host_list_to_device([list(column) for column in zip(*triples)], device)
    return ConditionalBans(rows=index[0], tokens=index[1], needed=index[2], newest=newest.index_select(0, index[0]))


def apply_banned_tokens(logits: Tensor, banned: BannedTokens) -> Tensor:
    """Logits [N, V] with every banned pair at -inf, conditional ones where their newest token is the needed one (a
    new tensor; the input is left untouched; no host sync)."""
    result = logits.clone()
    result[banned.rows, banned.tokens] = float("-inf")
    conditional = banned.conditional
    if conditional is not None:
        # Accumulated, so a pair listed under several needed tokens is banned if any of them holds.
        hit = conditional.newest == conditional.needed
        penalty = torch.zeros_like(result)
        penalty.index_put_((conditional.rows, conditional.tokens),
                           torch.where(hit, float("-inf"), 0.0).to(result.dtype), accumulate=True)
        result = result + penalty
    return result


def bad_word_sequences(sequences: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """A request's bad words as RowSamplingParams keeps them (tuples, hashable), repeats and empty ones dropped."""
    return tuple(dict.fromkeys(tuple(int(t) for t in s) for s in sequences if len(s)))
