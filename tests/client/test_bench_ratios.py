"""The bench's acceptance ratios: medians over rounds, each run paired with sync and HF of its own round."""

from __future__ import annotations

import argparse

import pytest

from client.bench.cli import _ratios, run_bench


def run(label: str, round_index: int, throughput: float, itl_ms: float, bare_ms: float) -> dict:
    concurrency = int(label.split()[0][2:])
    return {"label": label, "round": round_index, "concurrency": concurrency, "throughput_tok_s": throughput,
            "itl_ms_p50": itl_ms, "bare_forward": {"median_ms": bare_ms}}


def test_ratios_are_medians_over_rounds_with_sync_from_the_same_round():
    hf = [{"batch_size": 1, "throughput_tok_s": t, "round": r} for r, t in enumerate((10.0, 5.0, 10.0))]
    report = {"hf": hf, "runs": [
        run("c=1 inflight=1", 0, 40.0, 25.0, 20.0), run("c=1 inflight=2", 0, 44.0, 21.0, 20.0),
        run("c=1 inflight=1", 1, 20.0, 50.0, 40.0), run("c=1 inflight=2", 1, 21.0, 42.0, 40.0),
        run("c=1 inflight=1", 2, 30.0, 33.0, 30.0), run("c=1 inflight=2", 2, 36.0, 31.5, 30.0),
    ]}
    ratios = _ratios(report)
    assert ratios["itl_p50_over_bare_forward_batch1[c=1 inflight=2]"] == pytest.approx(1.05)
    assert ratios["itl_p50_over_bare_forward_batch1[c=1 inflight=1]"] == pytest.approx(1.25)
    # per round: 1.1, 1.05, 1.2 -> median 1.1 (pairing across rounds would give other values)
    assert ratios["throughput_over_sync[c=1 inflight=2]"] == pytest.approx(1.1)
    # against HF of the same round: 4.4, 4.2, 3.6
    assert ratios["throughput_over_hf_batch1[c=1 inflight=2]"] == pytest.approx(4.2)


def test_sync_runs_report_the_bare_forward_over_their_idle_gap_per_step():
    sync = {**run("c=16 inflight=1", 0, 100.0, 6.0, 3.0), "max_inflight_steps": 1, "steps": 500,
            "executor_bubble_s": 0.75}
    async_ = {**run("c=16 inflight=2", 0, 130.0, 4.5, 3.0), "max_inflight_steps": 2, "steps": 500,
              "executor_bubble_s": 0.1}
    ratios = _ratios({"hf": [], "runs": [sync, async_]})
    assert ratios["bare_forward_over_sync_gap[c=16 inflight=1]"] == pytest.approx(2.0)  # 3.0 ms / 1.5 ms
    assert not any(name.startswith("bare_forward_over_sync_gap[c=16 inflight=2") for name in ratios)


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="--rounds"):
        run_bench(argparse.Namespace(rounds=0))


def test_stream_intervals_are_compared_with_one_message_per_token_of_the_same_round():
    runs = []
    for r, (plain, paced) in enumerate([(100.0, 150.0), (80.0, 100.0), (90.0, 171.0)]):
        runs += [{**run("c=64 inflight=2", r, plain, 5.0, 2.0), "stream_interval": 1},
                 {**run("c=64 inflight=2 interval=4", r, paced, 4.0, 2.0), "stream_interval": 4}]
    ratios = _ratios({"hf": [], "runs": runs})
    assert ratios["throughput_over_interval1[c=64 inflight=2 interval=4]"] == pytest.approx(1.5)  # 1.5, 1.25, 1.9
    assert not any("over_interval1[c=64 inflight=2]" in name for name in ratios)


def test_the_bench_takes_several_stream_intervals_and_passes_each_to_its_scheduler():
    from client import cli
    from scheduler_svc.cli_args import scheduler_flags

    args = cli._build_parser().parse_args(["bench", "--stream-interval", "1", "4"])
    assert args.stream_interval == [1, 4]
    flags = scheduler_flags(argparse.Namespace(**{**vars(args), "max_inflight_steps": 2, "num_scheduler_steps": 1,
                                                  "stream_interval": 4}))
    assert flags[flags.index("--stream-interval") + 1] == "4"


def test_runs_with_several_tokens_per_message_compare_their_tpot_not_their_itl():
    chunked = {**run("c=16 inflight=2 interval=4", 0, 130.0, 0.0, 3.0), "stream_interval": 4, "tpot_ms_mean": 3.6,
               "bare_forward_graph": {"median_ms": 2.0}}
    ratios = _ratios({"hf": [], "runs": [chunked]})
    assert ratios["tpot_over_bare_forward_batch16[c=16 inflight=2 interval=4]"] == pytest.approx(1.2)
    assert ratios["tpot_over_graph_forward_batch16[c=16 inflight=2 interval=4]"] == pytest.approx(1.8)
    assert not any(name.startswith("itl_p50") for name in ratios)
