"""The order of a benchmark round's configurations."""

from __future__ import annotations

from client.bench.rounds import round_order


def test_round_order_reverses_every_other_round_without_repeats():
    configurations = [(1, 1), (2, 1), (1, 1)]
    assert round_order(configurations, 0) == [(1, 1), (2, 1)]
    assert round_order(configurations, 1) == [(2, 1), (1, 1)]
    assert round_order(configurations, 2) == [(1, 1), (2, 1)]


def test_executor_group_counts_alternate_round_by_round():
    assert round_order([1, 2], 0) == [1, 2] and round_order([1, 2], 1) == [2, 1]
    assert round_order([1], 3) == [1]
