"""Prompt-lookup drafting: continue the latest earlier occurrence of the sequence's last n tokens.

The search runs in C: each request's tokens are kept as 4-byte words in a bytearray, extended by the tokens
appended since its last proposal, and `bytearray.rfind` finds the latest earlier occurrence of the suffix's
bytes (an occurrence that does not start on a word boundary is skipped). Per request and step with nothing
matching: 0.006 ms at 1,000 tokens of context and 0.023 ms at 8,000, where a Python scan took 0.07 and 0.57 ms
(bench/experiments/ngram_lookup_speed.py): it counts on a GPU, whose whole decode step takes about 2 ms.
"""

from __future__ import annotations

from array import array

from executor_svc.drafters.base import Drafter, DraftRequest

_WORD = array("I").itemsize


class NgramDrafter:
    """For n from max_n down to min_n, find the most recent earlier match of the last n tokens in the
    prompt + output and propose the tokens that followed it. Costs no forward pass."""

    name = "ngram"
    reads_target_hidden = False
    source_dir: str | None = None

    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"ngram_min_n: must be in [1, ngram_max_n={max_n}], got {min_n}")
        if _WORD != 4:
            raise RuntimeError(f"array('I') has {_WORD}-byte items here; the lookup needs 4")
        self.min_n = min_n
        self.max_n = max_n
        self._encoded: dict[str, bytearray] = {}
        """Per request, its tokens so far as 4-byte words (extended at each proposal)."""

    def timed_as(self) -> Drafter:
        """Itself: its cost per draft does not depend on the text."""
        return self

    def propose(self, batch: list[DraftRequest]) -> list[list[int]]:
        proposals: list[list[int]] = []
        for request in batch:
            if request.num_tokens <= 0:
                proposals.append([])
                continue
            tokens = request.state.token_ids
            proposals.append(self.lookup(tokens, request.num_tokens, self._encoding(request.state.request_id, tokens)))
        return proposals

    def lookup(self, tokens: list[int], num_tokens: int, encoded: bytes | bytearray | None = None) -> list[int]:
        """The up-to-num_tokens tokens that followed the latest earlier match of the longest suffix.
        ``encoded``: ``tokens`` as 4-byte words, when the caller keeps them (else they are encoded now)."""
        if encoded is None:
            encoded = array("I", tokens).tobytes()
        length = len(tokens)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            start = _latest_earlier_start(encoded, length, n)
            if start is not None:
                return tokens[start + n : start + n + num_tokens]
        return []

    def _encoding(self, request_id: str, tokens: list[int]) -> bytearray:
        """The request's tokens as words, extended by those appended since its last proposal (started over if
        they are not an extension: fewer tokens, or a different last known token)."""
        encoded = self._encoded.get(request_id)
        known = 0 if encoded is None else len(encoded) // _WORD
        if encoded is None or known > len(tokens) or (
                known and encoded[-_WORD:] != array("I", tokens[known - 1 : known]).tobytes()):
            encoded, known = bytearray(), 0
            self._encoded[request_id] = encoded
        encoded += array("I", tokens[known:]).tobytes()
        return encoded

    def observe(self, host, request_ids, hidden, slots) -> None:
        pass  # reads no target features

    def adopt_cached_prefix(self, request_id: str, num_cached_tokens: int) -> None:
        pass  # the lookup reads tokens only

    def drop(self, request_id: str) -> None:
        self._encoded.pop(request_id, None)

    def reset(self) -> None:
        self._encoded.clear()


def _latest_earlier_start(encoded: bytes | bytearray, length: int, n: int) -> int | None:
    """Where the latest occurrence of the last n of ``length`` tokens starts, among those that end before the
    last token; None if there is none."""
    suffix = encoded[(length - n) * _WORD : length * _WORD]
    end = (length - 1) * _WORD
    while True:
        found = encoded.rfind(suffix, 0, end)
        if found < 0:
            return None
        if found % _WORD == 0:
            return found // _WORD
        end = found + len(suffix) - 1  # straddles two words: look further left, overlaps included
