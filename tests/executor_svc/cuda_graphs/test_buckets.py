"""Batch-size buckets, captured shapes, and the shape a batch replays in."""

from __future__ import annotations

import pytest

from executor_svc.cuda_graphs.buckets import GraphShape, batch_size_buckets, choose_shape, graph_shapes


@pytest.mark.parametrize(
    "max_num_seqs, expected",
    [
        (1, [1]),
        (3, [1, 2, 3]),
        (8, [1, 2, 4, 8]),
        (20, [1, 2, 4, 8, 16, 20]),
        (64, [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]),
    ],
)
def test_buckets_double_to_eight_then_step_by_eight_up_to_the_cap(max_num_seqs, expected):
    assert batch_size_buckets(max_num_seqs) == expected


def test_bad_limits_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match="max_num_seqs"):
        batch_size_buckets(0)
    with pytest.raises(ValueError, match="max_query_len"):
        graph_shapes(4, 0)


def test_every_query_length_of_every_bucket_is_captured_largest_first():
    shapes = graph_shapes(4, 3)
    assert set(shapes) == {GraphShape(b, q) for b in (1, 2, 4) for q in (1, 2, 3)}
    sizes = [s.num_tokens for s in shapes]
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize(
    "query_lens, expected",
    [
        ([1], GraphShape(1, 1)),
        ([1, 1, 1], GraphShape(4, 1)),
        ([1, 4, 2], GraphShape(4, 4)),  # mixed verify lengths pad to the longest
        ([4] * 5, GraphShape(8, 4)),
        ([1] * 9, None),  # more sequences than the largest bucket
        ([5], None),  # a query longer than any captured one (a prefill chunk)
        ([], None),
    ],
)
def test_a_batch_replays_in_the_smallest_shape_holding_it(query_lens, expected):
    assert choose_shape(graph_shapes(8, 4), query_lens) == expected
