"""`stepahead bench --api`: the order the APIs run in and the HTTP/gRPC throughput ratio."""

from __future__ import annotations

import pytest

from client.bench.http_compare import api_label, http_ratios
from client.bench.rounds import round_order


def test_order_alternates_round_by_round():
    assert round_order(["grpc", "http"], 0) == ["grpc", "http"]  # the APIs of a round, as bench/cli.py runs them
    assert round_order(["grpc", "http"], 1) == ["http", "grpc"]
    assert round_order(["http", "http"], 0) == ["http"]
    assert api_label("grpc") == "" and api_label("http") == " api=http"


def test_ratio_pairs_runs_of_the_same_round_and_configuration():
    runs = [
        {"label": "c=16 inflight=2", "round": 0, "api": "grpc", "throughput_tok_s": 100.0},
        {"label": "c=16 inflight=2 api=http", "round": 0, "api": "http", "throughput_tok_s": 96.0},
        {"label": "c=16 inflight=2 api=http", "round": 1, "api": "http", "throughput_tok_s": 50.0},
        {"label": "c=16 inflight=2", "round": 1, "api": "grpc", "throughput_tok_s": 50.0},
        {"label": "c=16 inflight=2 api=http", "round": 2, "api": "http", "throughput_tok_s": 99.0},
        {"label": "c=1 inflight=2", "round": 0, "throughput_tok_s": 10.0},
    ]
    assert http_ratios(runs) == {"throughput_http_over_grpc[c=16 inflight=2]": pytest.approx(0.98)}
    for run, busy in zip(runs, (10.0, 9.0, 20.0, 20.0)):
        run.update(output_tokens=1000, executor_busy_s=busy)
    ratios = http_ratios(runs)
    assert ratios["tokens_per_executor_second_http_over_grpc[c=16 inflight=2]"] == pytest.approx((10 / 9 + 1) / 2)
