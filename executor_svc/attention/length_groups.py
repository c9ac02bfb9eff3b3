"""Splitting a padded attention batch into groups of similar length.

The batched path pads every sequence's keys to the longest one in its group, so one long sequence
among short ones multiplies the keys gathered and attended. Splitting costs a fixed overhead per
group (one more gather, attention call and scatter in every layer); `length_groups` picks the split
that minimises padded keys plus that overhead.
"""

from __future__ import annotations

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
    distinct = sorted(set(widths))
    counts = [0] * len(distinct)
    rank = {w: r for r, w in enumerate(distinct)}
    for w in widths:
        counts[rank[w]] += 1
    before = [0, *accumulate(counts)]
    # best[b]: cheapest cost of the widths distinct[0:b]; cut[b]: where its last group starts.
    best = [0] + [0] * len(distinct)
    cut = [0] * (len(distinct) + 1)
    for end in range(1, len(distinct) + 1):
        width = distinct[end - 1]
        best[end], cut[end] = min(
            (best[start] + (before[end] - before[start]) * width + overhead, start) for start in range(end)
        )
    bounds = []
    end = len(distinct)
    while end > 0:
        bounds.append((cut[end], end))
        end = cut[end]
    groups = []
    for start, end in reversed(bounds):
        members = set(distinct[start:end])
        groups.append([i for i, w in enumerate(widths) if w in members])
    return groups
