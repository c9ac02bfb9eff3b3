"""Tests for scheduler_svc.prefix_hashes: chained hashes of full blocks."""

from hypothesis import given
from hypothesis import strategies as st

from scheduler_svc.prefix_hashes import extend_block_hashes, num_cacheable_blocks


def test_only_full_blocks_are_hashed_and_equal_prefixes_hash_equal():
    a = extend_block_hashes([], list(range(10)), 4)
    b = extend_block_hashes([], list(range(8)) + [99, 98, 97], 4)
    assert len(a) == len(b) == 2 and a == b
    assert extend_block_hashes([], [1, 2, 3], 4) == []


def test_a_changed_token_changes_its_block_and_every_later_one():
    base = extend_block_hashes([], list(range(12)), 4)
    changed = extend_block_hashes([], [0, 1, 2, 3, 4, 5, 6, 70, 8, 9, 10, 11], 4)
    assert changed[0] == base[0] and changed[1] != base[1] and changed[2] != base[2]


def test_the_same_block_after_another_prefix_hashes_differently():
    assert extend_block_hashes([], [1, 2, 5, 6], 2)[1] != extend_block_hashes([], [3, 4, 5, 6], 2)[1]


@given(st.lists(st.integers(0, 2**31 - 1), max_size=60), st.integers(1, 8), st.lists(st.integers(0, 60), max_size=4))
def test_extending_piece_by_piece_equals_hashing_at_once(tokens, block_size, cuts):
    hashes: list[bytes] = []
    for cut in sorted(cuts):
        extend_block_hashes(hashes, tokens[:cut], block_size)
    assert extend_block_hashes(hashes, tokens, block_size) == extend_block_hashes([], tokens, block_size)


def test_every_full_block_but_the_last_tokens_may_come_from_the_cache():
    assert [num_cacheable_blocks(n, 16) for n in (0, 1, 16, 17, 32, 33)] == [0, 0, 0, 1, 1, 2]
