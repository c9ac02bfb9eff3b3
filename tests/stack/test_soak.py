"""`stepahead soak` on a tiny model with a small KV pool (preemption pressure), cancels, deadlines, structured output
and prompt scoring, requests naming a LoRA adapter while a second one is loaded and unloaded every few seconds, and
the executor killed every 10 s for a minute: nothing leaks, no stream hangs, constrained outputs hold their format,
the report counts what happened."""

from __future__ import annotations

import json
import subprocess

import pytest
from serve_process import environment_without_flag_variables

from client.launcher import ServiceProcess

pytestmark = pytest.mark.stack

SOAK_MINUTES = 1.0  # the issue asks for 1 minute in CI; `stepahead soak --minutes 20` is the long run


def test_a_short_soak_with_executor_kills_leaks_nothing(tiny_model_dir, tmp_path):
    out = tmp_path / "soak.json"
    env = environment_without_flag_variables()
    argv = ServiceProcess.cli_argv(
        "soak", "--minutes", str(SOAK_MINUTES), "--model", str(tiny_model_dir), "--concurrency", "6",
        "--max-prompt-tokens", "40", "--max-output-tokens", "24", "--num-kv-blocks", "16", "--num-threads", "1",
        "--kill-executor-every-s", "10", "--hang-s", "20", "--out", str(out))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["leaked_kv_blocks"] == report["hung_streams"] == report["requests_left"] == 0
    assert report["max_silence_s"] < 20, report  # a restarted executor is back in a few seconds
    assert report["executor_kills"] >= 3
    outcomes = report["outcomes"]
    assert outcomes["completed"] > 30 and outcomes.get("cancelled", 0) > 0, outcomes
    assert set(outcomes) <= {"completed", "cancelled", "DEADLINE_EXCEEDED", "CANCELLED", "ADAPTER_UNLOADED"}, outcomes
    assert report["lora"]["requests"] > 10 and report["lora"].get("loads", 0) >= 2, report["lora"]
    assert "scheduler" in report["rss_growth_after_warmup"]
    assert report["format_mismatches"] == [] and sum(report["constrained_checked"].values()) > 0, report
    counters = report["server_counters"]  # the small pool preempts; the cache is on by default
    assert counters["preemptions"] > 0 and 0 <= counters["prefix_cache_hit_tokens"] <= counters[
        "prefix_cache_queried_tokens"], counters
