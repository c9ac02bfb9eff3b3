"""The order of a benchmark round's configurations."""

from __future__ import annotations

from client.bench.rounds import round_order


def test_round_order_reverses_every_other_round_without_repeats():
    configurations = [(1, 1), (2, 1), (1, 1)]
    assert round_order(configurations, 0) == [(1, 1), (2, 1)]
    assert round_order(configurations, 1) == [(2, 1), (1, 1)]
    assert round_order(configurations, 2) == [(1, 1), (2, 1)]
