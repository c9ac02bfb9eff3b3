"""Prompt-lookup drafting: continue the latest earlier occurrence of the sequence's last n tokens."""

from __future__ import annotations

from executor_svc.drafters.base import DraftRequest


class NgramDrafter:
    """For n from max_n down to min_n, find the most recent earlier match of the last n tokens in the
    prompt + output and propose the tokens that followed it. Stateless; costs no forward pass."""

    name = "ngram"
    reads_target_hidden = False

    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"ngram_min_n: must be in [1, ngram_max_n={max_n}], got {min_n}")
        self.min_n = min_n
        self.max_n = max_n

    def propose(self, batch: list[DraftRequest]) -> list[list[int]]:
        return [self.lookup(request.state.token_ids, request.num_tokens) for request in batch]

    def lookup(self, tokens: list[int], num_tokens: int) -> list[int]:
        """The up-to-num_tokens tokens that followed the latest earlier match of the longest suffix."""
        length = len(tokens)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            suffix = tokens[length - n :]
            first = suffix[0]
            # Scan backwards from the last possible start so the most recent match wins.
            for start in range(length - n - 1, -1, -1):
                if tokens[start] == first and tokens[start : start + n] == suffix:
                    return tokens[start + n : start + n + num_tokens]
        return []

    def observe(self, request_id: str, first_position: int, hidden_rows) -> None:
        pass

    def drop(self, request_id: str) -> None:
        pass

    def reset(self) -> None:
        pass
