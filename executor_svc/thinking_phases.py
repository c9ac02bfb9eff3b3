"""A reasoning model's output in phases (NewRequestData's ``format_after_thinking`` bounds): a structured output
format that waits for the thinking to end, and a thinking budget (``sampling.thinking_token_budget``) that ends it.

The output thinks freely and the format constrains the answer after it, as the scheduler's reasoning parser splits
them (vLLM applies a format after the reasoning the same way). With a budget, once the thinking has written that many
tokens, the next rows allow only the tokens that end it, in order: the model is made to stop thinking and answer
(vLLM's ``thinking_token_budget``, SGLang's strict thinking).

The phases follow the output's tokens: *deciding* (only with opener tokens: the first token may open thinking or
start the answer), *thinking* (every token allowed, until the end tokens or the budget), *closing* (the budget is
spent: the end tokens are forced one by one), *header* (only with a header end token: gpt-oss's final channel's
header, until ``<|message|>``), *answering* (the format's matcher, fed from the next token; no format: every token).
Masks and draft shaping walk drafts through the same phases without keeping them, so a verify step whose drafts
cross the end of the thinking masks each row as the output would be masked one token at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from executor_svc.grammar import RequestGrammar
from executor_svc.token_mask import mask_words, token_bits


class _Phase(Enum):
    DECIDING = "deciding"
    THINKING = "thinking"
    CLOSING = "closing"
    HEADER = "header"
    ANSWERING = "answering"


@dataclass(frozen=True)
class _Walk:
    """Where an output stands: its phase, the thinking's last tokens (at most as many as the end tokens: where they
    may have begun), the thinking tokens written so far, and the end tokens a closing has forced so far."""

    phase: _Phase
    recent: tuple[int, ...] = ()
    thought: int = 0
    closed: int = 0


class ThinkingPhases:
    """One request's output phases: the RequestGrammar interface, with ``inner`` the format's matcher at its start
    (None: no format, the answer is free), ``budget`` the thinking tokens allowed before the end tokens are forced
    (None: no limit); the other arguments as executor.proto's FormatAfterThinking."""

    def __init__(self, inner: RequestGrammar | None, vocab_size: int, end_token_ids: list[int],
                 opener_token_ids: list[int], header_end_token_id: int | None = None,
                 budget: int | None = None) -> None:
        if not end_token_ids:
            raise ValueError("end_token_ids: at least one token ends the thinking")
        if budget is not None and budget < 0:
            raise ValueError(f"budget: {budget} thinking tokens; at least 0")
        self._inner = inner
        self._words = inner.words if inner is not None else mask_words(vocab_size)
        self._end = tuple(end_token_ids)
        self._end_bits = [token_bits([token], vocab_size) for token in self._end]
        self._openers = frozenset(opener_token_ids)
        self._opener_bits = token_bits(self._openers, vocab_size) if self._openers else None
        self._header_end = header_end_token_id
        self._budget = budget
        self._walk = _Walk(_Phase.DECIDING) if self._openers else self._thinking()

    @property
    def words(self) -> int:
        """32-bit words of one row's mask."""
        return self._words

    @property
    def thinking(self) -> bool:
        """Whether the answer has not started yet (the output has not ended its thinking, or not decided to skip
        it)."""
        return self._walk.phase is not _Phase.ANSWERING

    @property
    def settled(self) -> bool:
        """Whether nothing is left to restrict: the answer started and there is no format."""
        return self._inner is None and self._walk.phase is _Phase.ANSWERING

    @property
    def error(self) -> str | None:
        """The format's matcher's error, if it met one."""
        return self._inner.error if self._inner is not None else None

    def consume(self, token_ids: list[int]) -> None:
        """Advance past output tokens (the format's matcher sees the answer's alone)."""
        walk = self._walk
        for index, token in enumerate(token_ids):
            if self._answers(walk, token):
                walk = _Walk(_Phase.ANSWERING)
                if self._inner is not None:
                    self._inner.consume(list(token_ids[index:]))
                break
            walk = self._step(walk, token)
        self._walk = walk

    def masks(self, drafts: list[int]) -> np.ndarray:
        """As RequestGrammar.masks: rows while thinking allow everything, a deciding row allows the openers and what
        the answer may start with, a closing row its next end token alone. A padded slot (< 0) ends the walk: the
        rows after it are never reached."""
        real = drafts[: next((i for i, token in enumerate(drafts) if token < 0), len(drafts))]
        rows = np.full((len(drafts) + 1, self._words), -1, dtype=np.int32)
        walk = self._walk
        for j in range(len(real) + 1):
            if walk.phase is _Phase.ANSWERING:
                if self._inner is not None:
                    rows[j : len(real) + 1] = self._inner.masks(real[j:])
                break
            rows[j] = self._row(walk)
            if j < len(real):
                if walk.phase is _Phase.DECIDING and real[j] not in self._openers:
                    if self._inner is not None:  # real[j] is the answer's first token
                        rows[j + 1 : len(real) + 1] = self._inner.masks(real[j:])[1:]
                    break
                walk = self._step(walk, real[j])
        return rows

    def constrain_drafts(self, proposed: list[int], limit: int) -> list[int]:
        """As RequestGrammar.constrain_drafts: the thinking's drafts are the drafter's own, a closing's are the end
        tokens it forces (the drafter's later tokens are kept only while it proposed those), and the answer's are
        shaped by the format."""
        drafts: list[int] = []
        walk = self._walk
        own = True
        while len(drafts) < limit:
            proposal = proposed[len(drafts)] if own and len(drafts) < len(proposed) else None
            if walk.phase is _Phase.ANSWERING or (
                    walk.phase is _Phase.DECIDING and proposal is not None and proposal not in self._openers):
                rest = proposed[len(drafts):] if own else []
                room = limit - len(drafts)
                return drafts + (self._inner.constrain_drafts(rest, room) if self._inner is not None else rest[:room])
            forced = self._end[walk.closed] if walk.phase is _Phase.CLOSING else None
            token = forced if forced is not None else proposal
            if token is None:
                break
            own = own and proposal == token
            drafts.append(token)
            walk = self._step(walk, token)
        return drafts

    def _thinking(self) -> _Walk:
        """The walk as the thinking starts (at once closing under a budget of 0)."""
        return _Walk(_Phase.CLOSING) if self._budget == 0 else _Walk(_Phase.THINKING)

    def _answers(self, walk: _Walk, token: int) -> bool:
        """Whether ``token`` is part of the answer."""
        return walk.phase is _Phase.ANSWERING or (walk.phase is _Phase.DECIDING and token not in self._openers)

    def _row(self, walk: _Walk) -> np.ndarray:
        """The mask of the next token while the answer has not started."""
        if walk.phase is _Phase.CLOSING:
            return self._end_bits[walk.closed]
        if walk.phase is _Phase.DECIDING and self._inner is not None:
            return self._inner.masks([])[0] | self._opener_bits
        return np.full(self._words, -1, dtype=np.int32)

    def _step(self, walk: _Walk, token: int) -> _Walk:
        """The walk after ``token`` (not a token of the answer)."""
        if walk.phase is _Phase.DECIDING:
            return self._thinking()  # the token opened thinking
        if walk.phase is _Phase.HEADER:
            return _Walk(_Phase.ANSWERING) if token == self._header_end else walk
        if walk.phase is _Phase.CLOSING:
            closed = walk.closed + 1  # the mask allowed only the end token it forced
            return self._ended() if closed == len(self._end) else replace(walk, closed=closed)
        recent = (*walk.recent, token)[-len(self._end):]
        if recent == self._end:
            return self._ended()
        thought = walk.thought + 1
        if self._budget is not None and thought >= self._budget:
            return _Walk(_Phase.CLOSING)
        return _Walk(_Phase.THINKING, recent, thought)

    def _ended(self) -> _Walk:
        return _Walk(_Phase.ANSWERING if self._header_end is None else _Phase.HEADER)


OutputFormat = RequestGrammar | ThinkingPhases
"""What keeps a request's output in its format and budget: from the first token, or in phases of its thinking."""
