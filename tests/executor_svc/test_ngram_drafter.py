"""Prompt-lookup drafting."""

from __future__ import annotations

import pytest

from executor_svc.drafters.ngram import NgramDrafter


def test_continues_latest_match_of_longest_suffix():
    drafter = NgramDrafter(min_n=1, max_n=3)
    tokens = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert drafter.lookup(tokens, 3) == [7, 8, 5]  # the later "1 2 3" wins


def test_falls_back_to_shorter_ngrams_and_truncates():
    drafter = NgramDrafter(min_n=1, max_n=3)
    assert drafter.lookup([4, 5, 6, 4], 2) == [5, 6]
    assert drafter.lookup([4, 5, 4], 5) == [5, 4]


def test_no_match_and_min_n():
    assert NgramDrafter(min_n=2, max_n=3).lookup([1, 2, 3, 1], 3) == []
    assert NgramDrafter(min_n=1, max_n=1).lookup([7], 3) == []
    with pytest.raises(ValueError, match="ngram_min_n"):
        NgramDrafter(min_n=3, max_n=2)
