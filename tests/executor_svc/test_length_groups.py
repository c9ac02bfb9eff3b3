"""length_groups: the cheapest split of a padded batch into groups of similar length."""

from __future__ import annotations

import itertools

import pytest

from executor_svc.attention.length_groups import length_groups


def cost(widths: list[int], groups: list[list[int]], overhead: int) -> int:
    return sum(len(g) * max(widths[i] for i in g) + overhead for g in groups)


def all_contiguous_splits(widths: list[int]):
    """Every split of the sorted distinct widths into consecutive runs, as index groups."""
    distinct = sorted(set(widths))
    for cuts in itertools.product([False, True], repeat=len(distinct) - 1):
        groups, current = [], [distinct[0]]
        for width, cut in zip(distinct[1:], cuts):
            if cut:
                groups.append(current)
                current = []
            current.append(width)
        groups.append(current)
        yield [[i for i, w in enumerate(widths) if w in run] for run in groups]


@pytest.mark.parametrize("overhead", [0, 3, 10, 40, 1000])
@pytest.mark.parametrize(
    "widths", [[5, 30, 5, 6, 29, 12], [1, 2, 3, 4, 5, 6, 7, 8], [9, 9, 9], [4, 31, 17, 2, 30, 8, 8]]
)
def test_groups_cover_every_index_once_at_minimal_cost(widths, overhead):
    groups = length_groups(widths, overhead)
    assert sorted(i for g in groups for i in g) == list(range(len(widths)))
    assert all(g == sorted(g) for g in groups)
    best = min(cost(widths, split, overhead) for split in all_contiguous_splits(widths))
    assert cost(widths, groups, overhead) == best


def test_no_overhead_separates_every_length_and_a_huge_one_keeps_one_group():
    widths = [3, 8, 3, 20]
    assert length_groups(widths, 0) == [[0, 2], [1], [3]]
    assert length_groups(widths, 10**9) == [[0, 1, 2, 3]]


def test_empty_and_invalid():
    assert length_groups([], 5) == []
    with pytest.raises(ValueError, match="overhead"):
        length_groups([1], -1)
