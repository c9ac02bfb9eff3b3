"""Drafts from a request's predicted output (OpenAI's predicted outputs): the text it is expected to repeat.

The prediction is expected from the first output token on. While the output follows it token for token, the drafts are
the prediction's next tokens. Once the output leaves it (an edit), the request drafts as it would without a prediction
(its drafter's drafts, or none) until its last 2..MAX_N tokens are found in the prediction again: the longest such
suffix, the first occurrence that ends at or after where the output last stood in the prediction (so a repeated line
is continued where the output is, not where it was), else anywhere; from there it follows the prediction again. The
output is matched against the prediction only, never the prompt, and one token is never enough to rejoin (a lone
newline or bracket occurs everywhere in code; drafts from it would pre-empt better ones).
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
        self._cursor: int | None = 0
        """The prediction index the next output token is expected to equal (None: the output left the prediction)."""
        self._last_cursor = 0
        """Where the cursor last stood while the output followed the prediction."""
        self._seen = 0
        """Output tokens already compared with the prediction."""

    def propose(self, output_token_ids: list[int], num_tokens: int) -> list[int]:
        """Up to ``num_tokens`` prediction tokens that would follow ``output_token_ids`` (empty: off the prediction)."""
        self._advance(output_token_ids)
        if self._cursor is None or num_tokens <= 0:
            return []
        return self.token_ids[self._cursor : self._cursor + num_tokens]

    def _advance(self, output: list[int]) -> None:
        """Compare the output tokens appended since the last call with the prediction; rejoin it when off it."""
        new = output[self._seen :] if len(output) >= self._seen else output
        self._seen = len(output)
        if self._cursor is not None:
            expected = self.token_ids[self._cursor : self._cursor + len(new)]
            followed = next((i for i, (a, b) in enumerate(zip(new, expected)) if a != b), min(len(new), len(expected)))
            self._last_cursor = self._cursor + followed
            if followed == len(new):
                self._cursor = self._last_cursor
                return
            self._cursor = None
        self._cursor = self._rejoin(output)
        if self._cursor is not None:
            self._last_cursor = self._cursor

    def _rejoin(self, output: list[int]) -> int | None:
        """The prediction index after the longest of the output's last 2..MAX_N tokens found in it (forward of where
        the output last stood first, then anywhere); None when none occurs with a token after it."""
        longest = min(MAX_N, len(output))
        for from_anywhere in (False, True):
            for n in range(longest, 1, -1):
                lowest = 0 if from_anywhere else max(0, self._last_cursor - n)
                start = self._find(output[-n:], lowest)
                if start is not None and start + n < len(self.token_ids):
                    return start + n
        return None

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
