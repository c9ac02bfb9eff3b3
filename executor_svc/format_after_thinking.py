"""A structured output format that waits for a reasoning model's thinking to end (NewRequestData's
``format_after_thinking``): the output thinks freely, and the format constrains the answer after it, as the scheduler's
reasoning parser splits them (vLLM applies a format after the reasoning the same way).

The phases follow the output's tokens: *deciding* (only with opener tokens: the first token may open thinking or
start the answer), *thinking* (every token allowed, until the end tokens), *header* (only with a header end token:
gpt-oss's final channel's header, until ``<|message|>``), *answering* (the format's matcher, fed from the next
token). Masks and draft shaping walk drafts through the same phases without keeping them, so a verify step whose
drafts cross the end of the thinking masks each row as the output would be masked one token at a time.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from executor_svc.grammar import RequestGrammar
from executor_svc.token_mask import token_bits


class _Phase(Enum):
    DECIDING = "deciding"
    THINKING = "thinking"
    HEADER = "header"
    ANSWERING = "answering"


class FormatAfterThinking:
    """One request's format, applied after its thinking: the RequestGrammar interface, with ``inner`` the format's
    matcher at its start (the other arguments as executor.proto's FormatAfterThinking)."""

    def __init__(self, inner: RequestGrammar, vocab_size: int, end_token_ids: list[int],
                 opener_token_ids: list[int], header_end_token_id: int | None = None) -> None:
        if not end_token_ids:
            raise ValueError("end_token_ids: at least one token ends the thinking")
        self._inner = inner
        self._end = list(end_token_ids)
        self._openers = frozenset(opener_token_ids)
        self._opener_bits = token_bits(self._openers, vocab_size) if self._openers else None
        self._header_end = header_end_token_id
        self._phase = _Phase.DECIDING if self._openers else _Phase.THINKING
        self._recent: list[int] = []
        """The thinking's last tokens (at most as many as end_token_ids): where the end tokens may have begun."""

    @property
    def thinking(self) -> bool:
        """Whether the format does not apply yet (the output has not ended its thinking, or not decided to skip it)."""
        return self._phase is not _Phase.ANSWERING

    def consume(self, token_ids: list[int]) -> None:
        """Advance past output tokens (the format's matcher sees the answer's alone)."""
        self._phase, self._recent, start = self._advance(self._phase, self._recent, list(token_ids))
        if self._phase is _Phase.ANSWERING and start < len(token_ids):
            self._inner.consume(list(token_ids[start:]))

    def masks(self, drafts: list[int]) -> np.ndarray:
        """As RequestGrammar.masks: rows while thinking allow everything, a deciding row allows the openers and what
        the format allows first."""
        if self._phase is _Phase.ANSWERING:
            return self._inner.masks(drafts)
        rows = np.full((len(drafts) + 1, self._inner.words), -1, dtype=np.int32)
        start = self._answer_start(drafts)
        if start is not None:
            rows[start:] = self._inner.masks(drafts[start:])
        if self._phase is _Phase.DECIDING:
            if start != 0:  # the first draft opened thinking (or there is none): the first row is the deciding one
                rows[0] = self._inner.masks([])[0]
            rows[0] |= self._opener_bits
        return rows

    def constrain_drafts(self, proposed: list[int], limit: int) -> list[int]:
        """As RequestGrammar.constrain_drafts, for the drafts of the answer; the thinking's drafts are the
        drafter's own."""
        start = self._answer_start(proposed[:limit])
        if start is None:
            return proposed[:limit]
        return proposed[:start] + self._inner.constrain_drafts(proposed[start:], limit - start)

    @property
    def error(self) -> str | None:
        """The format's matcher's error, if it met one."""
        return self._inner.error

    def _answer_start(self, tokens: list[int]) -> int | None:
        """The index in ``tokens`` (output tokens after the consumed ones) where the answer starts; None: not in
        them. A padded slot (< 0) ends the walk: the rows after it are never reached."""
        real = tokens[: next((i for i, token in enumerate(tokens) if token < 0), len(tokens))]
        phase, _, start = self._advance(self._phase, self._recent, real)
        return start if phase is _Phase.ANSWERING else None

    def _advance(self, phase: _Phase, recent: list[int], tokens: list[int]) -> tuple[_Phase, list[int], int]:
        """Walk ``tokens`` from ``phase`` (``recent``: the thinking's last tokens) until the answer starts: the phase
        and recent tokens then, and the index in ``tokens`` where the answer starts (len(tokens) if it does not)."""
        for index, token in enumerate(tokens):
            if phase is _Phase.ANSWERING:
                return phase, [], index
            if phase is _Phase.DECIDING:
                if token not in self._openers:
                    return _Phase.ANSWERING, [], index  # the answer starts with this token
                phase = _Phase.THINKING
            elif phase is _Phase.THINKING:
                recent = [*recent, token][-len(self._end):]
                if recent == self._end:
                    phase, recent = (_Phase.ANSWERING if self._header_end is None else _Phase.HEADER), []
            elif token == self._header_end:
                phase = _Phase.ANSWERING
        return phase, recent, len(tokens)


OutputFormat = RequestGrammar | FormatAfterThinking
"""What keeps a request's output in its format: from the first token, or after the thinking."""
