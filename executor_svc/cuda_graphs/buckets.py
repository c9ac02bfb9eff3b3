"""Which padded shapes get a captured graph, and which one a step runs in."""

from __future__ import annotations

from dataclasses import dataclass

_POWERS_OF_TWO_UP_TO = 8
_STEP_ABOVE = 8


@dataclass(frozen=True, order=True)
class GraphShape:
    """A captured step's padded shape: up to ``num_seqs`` sequences of up to ``query_len`` tokens each."""

    num_seqs: int
    query_len: int

    @property
    def num_tokens(self) -> int:
        """Flat token rows the captured forward computes (real tokens first, padding after)."""
        return self.num_seqs * self.query_len


def batch_size_buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 8, the last one capped at ``max_num_seqs``."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs: must be >= 1, got {max_num_seqs}")
    buckets = [1]
    while buckets[-1] < max_num_seqs:
        last = buckets[-1]
        buckets.append(min(max_num_seqs, last * 2 if last < _POWERS_OF_TWO_UP_TO else last + _STEP_ABOVE))
    return buckets


def graph_shapes(max_num_seqs: int, max_query_len: int) -> list[GraphShape]:
    """Every (batch bucket, query length 1..max_query_len) pair, largest first (captured in that order so
    smaller graphs reuse the memory pool of larger ones)."""
    if max_query_len < 1:
        raise ValueError(f"max_query_len: must be >= 1, got {max_query_len}")
    shapes = [GraphShape(b, q) for b in batch_size_buckets(max_num_seqs) for q in range(1, max_query_len + 1)]
    return sorted(shapes, key=lambda s: (s.num_tokens, s.num_seqs), reverse=True)


def choose_shape(shapes: list[GraphShape], query_lens: list[int]) -> GraphShape | None:
    """The smallest captured shape holding these sequences (fewest padded rows), or None when none does."""
    if not query_lens:
        return None
    num_seqs, longest = len(query_lens), max(query_lens)
    fitting = [s for s in shapes if s.num_seqs >= num_seqs and s.query_len >= longest]
    return min(fitting, key=lambda s: (s.num_tokens, s.num_seqs), default=None)
