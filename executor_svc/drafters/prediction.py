"""Drafts from a request's predicted output (OpenAI's predicted outputs): the text it is expected to repeat.

The output is matched against the prediction, never against the prompt: the longest of its last 1..MAX_N tokens
found in the prediction, preferring the first occurrence that ends at or after where the last match ended (the
output moves forward through the prediction, even where a line repeats), else anywhere (2+ tokens); the tokens
after that occurrence are the drafts. Before any output the drafts are the prediction's first tokens. Where the
output leaves the prediction (an edit), nothing matches and the request drafts as it would without one, until its
newest tokens are found in the prediction again.
"""

from __future__ import annotations

from array import array

MAX_N = 8
"""Longest output suffix looked up: long enough to place a repeated line by what came before it."""

_WORD = array("I").itemsize


class PredictedOutput:
    """One request's prediction, and where in it the output stands."""

    def __init__(self, token_ids: list[int]) -> None:
        if _WORD != 4:
            raise RuntimeError(f"array('I') has {_WORD}-byte items here; the lookup needs 4")
        self.token_ids = token_ids
        self._encoded = array("I", token_ids).tobytes()
        self._matched_end = 0
        """The prediction index right after the last match (where its drafts began)."""

    def propose(self, output_token_ids: list[int], num_tokens: int) -> list[int]:
        """Up to ``num_tokens`` prediction tokens that would follow ``output_token_ids`` (empty: no match)."""
        if num_tokens <= 0 or not self.token_ids:
            return []
        if not output_token_ids:
            self._matched_end = 0
            return self.token_ids[:num_tokens]
        longest = min(MAX_N, len(output_token_ids))
        for from_anywhere, shortest in ((False, 1), (True, 2)):
            for n in range(longest, shortest - 1, -1):
                lowest = 0 if from_anywhere else max(0, self._matched_end - n)
                start = self._find(output_token_ids[-n:], lowest)
                if start is not None and start + n < len(self.token_ids):
                    self._matched_end = start + n
                    return self.token_ids[start + n : start + n + num_tokens]
        return []

    def _find(self, tokens: list[int], lowest: int) -> int | None:
        """Where the first occurrence of ``tokens`` starting at or after index ``lowest`` starts, or None."""
        needle = array("I", tokens).tobytes()
        offset = lowest * _WORD
        while True:
            found = self._encoded.find(needle, offset)
            if found < 0:
                return None
            if found % _WORD == 0:
                return found // _WORD
            offset = found + 1  # straddles two words: look further right
