"""Splitting a padded attention batch into groups of similar length.

The batched path pads every sequence's keys to the longest one in its group, so one long sequence
among short ones multiplies the keys gathered and attended. Splitting costs a fixed overhead per
group (one more gather, attention call and scatter in every layer); `length_groups` picks the split
that minimises padded keys plus that overhead.
"""

from __future__ import annotations

from collections import Counter
from itertools import accumulate


def length_groups(widths: list[int], overhead: int) -> list[list[int]]:
    """Groups of indices into ``widths`` (each group's padded cost is its size times its widest member)
    minimising the total padded width plus ``overhead`` per group.

    Groups hold consecutive widths in ascending order; within a group, indices keep their input order.
    Exact dynamic programming over the distinct widths (O(distinct^2)).
    """
    if overhead < 0:
        raise ValueError(f"overhead: must be >= 0, got {overhead}")
    if not widths:
        return []
    counts = Counter(widths)
    distinct = sorted(counts)
    before = [0, *accumulate(counts[w] for w in distinct)]
    # best[b]: cheapest cost of the widths distinct[0:b]; cut[b]: where its last group starts.
    best = [0] * (len(distinct) + 1)
    cut = [0] * (len(distinct) + 1)
    for end in range(1, len(distinct) + 1):
        width = distinct[end - 1]
        best[end], cut[end] = min(
            (best[start] + (before[end] - before[start]) * width + overhead, start) for start in range(end)
        )
    group_of: dict[int, int] = {}
    end, num_groups = len(distinct), 0
    while end > 0:
        group_of.update((w, num_groups) for w in distinct[cut[end] : end])
        end, num_groups = cut[end], num_groups + 1
    # Groups were numbered from the widest down.
    groups: list[list[int]] = [[] for _ in range(num_groups)]
    for i, w in enumerate(widths):
        groups[num_groups - 1 - group_of[w]].append(i)
    return groups
