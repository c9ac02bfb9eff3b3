"""`stepahead bench` end to end on a tiny checkpoint: every run gets its own bare forward on its contexts."""

from __future__ import annotations

import argparse
import json
import re
from types import SimpleNamespace

import pytest

from client.bench.cli import _run_hf_peers
from client.cli import main

pytestmark = pytest.mark.stack


def test_bench_reports_sync_and_async_against_bare_forwards(tiny_model_dir, tmp_path, capsys):
    main(["bench", "--model", str(tiny_model_dir), "--no-hf", "--concurrency", "1", "3", "--num-prompts", "3",
          "--max-tokens", "6", "--max-inflight-steps", "1", "2", "--num-threads", "1", "--weight-floor",
          "--reuse-executor", "--out", str(tmp_path)])
    report = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    assert [run["label"] for run in report["runs"]] == [
        "c=1 inflight=1", "c=3 inflight=1", "c=1 inflight=2", "c=3 inflight=2"]
    floor = report["weight_floor"]
    assert floor["floor_ms"] > 0 and floor["bandwidth_gb_s"] > 0
    assert report["ratios"]["itl_p50_over_weight_floor_batch3[c=3 inflight=2]"] > 0
    for run in report["runs"]:
        assert len(run["decode_contexts"]) == run["concurrency"]
        assert run["bare_forward"]["context_lens"] == run["decode_contexts"]
        assert run["bare_forward"]["batch_size"] == run["concurrency"]
        assert 0 < run["executor_forward_ms_mean"] <= run["executor_step_ms_mean"]
        ratio = report["ratios"][f"itl_p50_over_bare_forward_batch{run['concurrency']}[{run['label']}]"]
        assert ratio == pytest.approx(run["itl_ms_p50"] / run["bare_forward"]["median_ms"])
    assert [bare["batch_size"] for bare in report["bare_forward"]] == [1, 3]
    assert "throughput_over_sync[c=3 inflight=2]" in report["ratios"]
    assert next(tmp_path.glob("bench-*.png")).stat().st_size > 0
    printed = capsys.readouterr().out
    assert "bare forward + LM head right after the run" in printed and "weight-read floor:" in printed
    assert not list(tmp_path.glob("*.partial.json"))  # a complete run leaves only its report


def test_reuse_executor_starts_one_executor_and_times_one_bare_forward_per_concurrency(tiny_model_dir, tmp_path,
                                                                                      monkeypatch):
    from client.bench import baselines
    from client.stack import LocalStack

    starts, bare_calls = [], []
    start, bare = LocalStack.start, baselines.measure_bare_decode_forward_in_subprocess
    monkeypatch.setattr(LocalStack, "start", lambda self, *a, **k: starts.append(1) or start(self, *a, **k))
    monkeypatch.setattr(baselines, "measure_bare_decode_forward_in_subprocess",
                        lambda *a, **k: bare_calls.append(1) or bare(*a, **k))
    main(["bench", "--model", str(tiny_model_dir), "--no-hf", "--concurrency", "1", "2", "--num-prompts", "2",
          "--max-tokens", "4", "--max-inflight-steps", "1", "2", "--stream-interval", "1", "2", "--num-threads", "1",
          "--reuse-executor", "--out", str(tmp_path)])
    report = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    assert [run["label"] for run in report["runs"]] == [
        f"c={c} inflight={i}{s}" for i in (1, 2) for s in ("", " interval=2") for c in (1, 2)]
    assert (len(starts), len(bare_calls)) == (1, 2)  # one executor; one bare forward per concurrency
    for run in report["runs"]:
        assert run["bare_forward"]["batch_size"] == run["concurrency"] and run["output_tokens"] > 0


def test_a_run_cut_short_in_the_baselines_leaves_its_load_runs(tiny_model_dir, tmp_path, monkeypatch):
    def cut_short(*args, **kwargs):
        raise RuntimeError("cut short, as by a time limit")

    load_run = {"label": "c=1 inflight=1", "concurrency": 1}
    monkeypatch.setattr("client.bench.cli.load_runs", lambda *args: ([load_run], None))
    monkeypatch.setattr("client.bench.baselines.hf_generate_throughput", cut_short)
    with pytest.raises(RuntimeError, match="cut short"):
        main(["bench", "--model", str(tiny_model_dir), "--concurrency", "1", "--out", str(tmp_path)])
    (partial,) = tmp_path.glob("bench-*.partial.json")
    report = json.loads(partial.read_text())
    assert report["runs"] == [load_run] and report["hf"] == []
    assert report["partial"] == "after the load runs of round 0"


def test_bench_compares_the_http_front_with_grpc_in_one_run(tiny_model_dir, tmp_path):
    """... over two rounds, the second running the configurations in reverse, ratios paired within each round."""
    main(["bench", "--model", str(tiny_model_dir), "--no-hf", "--concurrency", "2", "--num-prompts", "3",
          "--max-tokens", "6", "--max-inflight-steps", "2", "--num-threads", "1", "--api", "grpc", "http",
          "--rounds", "2", "--out", str(tmp_path)])
    report = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    assert [(run["label"], run["round"]) for run in report["runs"]] == [
        ("c=2 inflight=2", 0), ("c=2 inflight=2 api=http", 0), ("c=2 inflight=2 api=http", 1), ("c=2 inflight=2", 1)]
    grpc_run, http_run = report["runs"][:2]
    assert http_run["api"] == "http" and http_run["output_tokens"] == grpc_run["output_tokens"] > 0
    assert http_run["num_requests"] == 3 and http_run["steps"] > 0
    ratio = report["ratios"]["throughput_http_over_grpc[c=2 inflight=2]"]
    assert 0 < ratio < 10
    assert not any("api=http" in name for name in report["ratios"] if not name.startswith("throughput_http"))


def test_hf_peers_picks_the_baselines(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """--hf-peers compiled skips HF eager generate (the compiled peer runs on CUDA only, so on the CPU neither)."""
    def not_asked_for(*args, **kwargs):
        raise AssertionError("HF eager generate ran without being asked for")

    monkeypatch.setattr("client.bench.baselines.hf_generate_throughput", not_asked_for)
    main(["bench", "--model", str(tiny_model_dir), "--hf-peers", "compiled", "--concurrency", "1", "--num-prompts",
          "2", "--max-tokens", "4", "--max-inflight-steps", "2", "--num-threads", "1", "--out", str(tmp_path)])
    report = json.loads(next(tmp_path.glob("bench-*.json")).read_text())
    assert report["hf"] == [] and "hf_compiled" not in report and len(report["runs"]) == 1
    done = r"done: c=1 inflight=2: [\d.]+ tok/s, bubble [\d.]+% \([\d.]+% awaiting the step\) \[\d\d:\d\d:\d\d\]"
    assert re.search(done, capsys.readouterr().out)


def test_the_compiled_peer_runs_first_and_a_cut_in_the_eager_peers_keeps_it(monkeypatch):
    """A device call's time limit can fall inside HF eager generate (minutes at batch 64): the compiled peer, the one
    the GPU targets compare with, has run by then and is in the saved partial report."""
    calls, saved = [], []

    def compiled(*args, **kwargs):
        calls.append("compiled")
        return {"throughput_tok_s": 200.0}

    def eager(model_dir, prompts, concurrency, *args):
        calls.append(f"eager {concurrency}")
        if concurrency == 16:
            raise RuntimeError("cut short, as by a time limit")
        return {"throughput_tok_s": 30.0, "concurrency": concurrency}

    monkeypatch.setattr("client.bench.baselines.hf_compiled_generate_throughput", compiled)
    monkeypatch.setattr("client.bench.baselines.hf_generate_throughput", eager)
    args = argparse.Namespace(no_hf=False, hf_peers=["eager", "compiled"], concurrency=[1, 16], num_prompts=None,
                              prompts_per_client=1, max_tokens=8, num_threads=1, ignore_eos=True,
                              forward_setup=SimpleNamespace(is_cuda=True))
    report: dict = {"hf": []}
    with pytest.raises(RuntimeError, match="cut short"):
        _run_hf_peers(report, args, "model", ["a prompt"] * 20, 0,
                      lambda stage: saved.append((stage, json.loads(json.dumps(report)))))
    assert calls == ["compiled", "eager 1", "eager 16"]
    stage, last = saved[-1]
    assert stage == "after HF batch 1 of round 0"
    assert last["hf_compiled"] == [{"throughput_tok_s": 200.0, "round": 0}] and len(last["hf"]) == 1
