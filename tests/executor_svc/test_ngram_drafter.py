"""Prompt-lookup drafting."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor_svc.drafters.base import DraftRequest
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


def scanned(tokens: list[int], num_tokens: int, min_n: int, max_n: int) -> list[int]:
    """The lookup's definition, as a plain scan: the longest suffix first, its latest earlier occurrence."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == tokens[len(tokens) - n :]:
                return tokens[start + n : start + n + num_tokens]
    return []


# Ids whose 4-byte words share bytes in shifted positions, so a byte-level match can straddle two words.
TOKENS = st.sampled_from([0, 1, 2, 256, 257, 65536, 65792, 16777216, 16843009, 49151])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(TOKENS, min_size=1, max_size=12), min_size=1, max_size=6),
       st.integers(1, 3), st.integers(0, 2), st.integers(1, 5))
def test_proposals_equal_the_scan_as_tokens_are_appended(chunks, min_n, extra_n, num_tokens):
    """Each proposal (the request's encoding extended by the chunk appended since the last one) equals the scan."""
    drafter = NgramDrafter(min_n, min_n + extra_n)
    tokens: list[int] = []
    for chunk in chunks:
        tokens = tokens + chunk
        state = SimpleNamespace(request_id="r", token_ids=tokens)
        assert drafter.propose([DraftRequest(state, num_tokens)]) == [
            scanned(tokens, num_tokens, min_n, min_n + extra_n)]
        assert drafter.lookup(tokens, num_tokens) == scanned(tokens, num_tokens, min_n, min_n + extra_n)


def test_a_request_whose_tokens_changed_is_encoded_again_and_drop_forgets_it():
    drafter = NgramDrafter(1, 3)
    first = SimpleNamespace(request_id="r", token_ids=[1, 2, 3, 1])
    assert drafter.propose([DraftRequest(first, 2)]) == [[2, 3]]
    changed = SimpleNamespace(request_id="r", token_ids=[7, 8, 9, 7, 8])  # a recomputed request, same id
    assert drafter.propose([DraftRequest(changed, 2)]) == [[9, 7]]
    assert drafter.propose([DraftRequest(changed, 0)]) == [[]]
    drafter.drop("r")
    assert drafter._encoded == {}
