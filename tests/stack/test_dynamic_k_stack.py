"""Dynamic K through the stack: greedy output equals no speculation, sync and async (and multi-step with
n-gram), with n-gram and draft-model drafts, while the K chosen changes between steps.

The step profile is measured by `stepahead profile` (the CLI), then its table is replaced (key kept, so the
scheduler takes it from its cache) by one whose optimum depends on the batch size only: K = 3 at one
decoding request, 1 at two, 0 from four on. Requests of different lengths make the batch shrink, so K moves.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from cpu_share import executor_threads
from test_speculative_decoding import make_prompts

from client import Client
from scheduler_svc.spec_profile import ProfileKey

pytestmark = pytest.mark.stack

SWITCHING_TABLE = {"batch_sizes": [1, 2, 4, 64],
                   "step_ms": [[10, 10, 10, 10], [10, 10, 1000, 1000], [10, 1000, 2000, 3000],
                               [10, 1000, 2000, 3000]],
                   "acceptance_prior": [0.5, 0.5, 0.5]}


def lengths(count: int) -> list[int]:
    """Output lengths: 5 apart, except 20 between the last three requests, so the phases with exactly two and
    exactly one request decoding outlast a multi-step batch (K is fixed per batch) plus any arrival stagger."""
    short = [6 + 5 * i for i in range(count - 2)]
    return short + [short[-1] + 20, short[-1] + 40]


def run_all(address: str, prompts: list[list[int]]) -> list[tuple]:
    """(token_ids, steps_per_k) per prompt, all sent at once (each client connected first, then released
    together, so the batch holds them all before the shortest ends); greedy; lengths differ."""
    clients = [Client(address) for _ in prompts]
    for client in clients:
        client.model_info()  # the connection is made here, not in the timed start
    start = threading.Barrier(len(prompts))

    def one(item):
        client, prompt, max_tokens = item
        start.wait()
        result = client.generate(token_ids=prompt, max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        return result.token_ids, result.spec.steps_per_k if result.spec else ()

    try:
        with ThreadPoolExecutor(len(prompts)) as pool:
            return list(pool.map(one, zip(clients, prompts, lengths(len(prompts)))))
    finally:
        for client in clients:
            client.close()


def k_histogram(stack) -> dict[str, float]:
    """The scheduler's histogram of the K chosen per step: {le: cumulative count}, and its count and sum."""
    address = stack.scheduler.find(r"scheduler metrics on (\S+)")
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    name = "stepahead_scheduler_spec_num_draft_tokens"
    values = {}
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket"):
            values[line.split('le="')[1].split('"')[0]] = float(line.split()[-1])
        elif line.startswith((f"{name}_count", f"{name}_sum")):
            values[line.split()[0].rsplit("_", 1)[1]] = float(line.split()[-1])
    return values


def write_switching_profile(model_dir, spec_flags: list[str], cache_dir) -> None:
    """Profile with the CLI (exactly as the stack's executor will run), then swap in SWITCHING_TABLE."""
    measured = cache_dir / "measured.json"
    subprocess.run([sys.executable, "-m", "client.cli", "profile", "--model", str(model_dir),
                    "--num-threads", executor_threads(),
                    *spec_flags, "--out", str(measured)], check=True, capture_output=True, timeout=300)
    document = json.loads(measured.read_text())
    assert document["key"]["batch_sizes"] == [1, 2, 4, 8, 16, 32, 64]
    assert len(document["profile"]["acceptance_prior"]) == 3
    key = ProfileKey(**{**document["key"], "batch_sizes": tuple(document["key"]["batch_sizes"])})
    (cache_dir / key.file_name()).write_text(json.dumps({**document, "profile": SWITCHING_TABLE}))


@pytest.mark.parametrize("drafter", ["ngram", "draft_model", "eagle"])
def test_greedy_output_with_dynamic_k_equals_no_speculation(
    drafter, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir, launch_stack, tmp_path
):
    prompts = make_prompts(6)
    reference_stack = launch_stack.with_scheduler(tiny_model_dir)
    reference = [tokens for tokens, _ in run_all(reference_stack.address, prompts)]
    spec = ["--spec-method", drafter, "--num-spec-tokens", "3"]
    if drafter == "draft_model":
        spec += ["--draft-model", str(tiny_draft_model_dir)]
    if drafter == "eagle":
        spec += ["--eagle-drafter", str(tiny_eagle_dir)]
    write_switching_profile(tiny_model_dir, spec, tmp_path)
    # (inflight, multi-step depth); n-gram lookup drafts any K from the context alone (no drafter state that K
    # could desynchronise), so it runs only the multi-step mode (CI time).
    modes = [(2, 4)] if drafter == "ngram" else [(1, 1), (2, 1)]
    for inflight, num_steps in modes:
        stack = launch_stack.with_scheduler(tiny_model_dir, spec, [
            "--max-inflight-steps", str(inflight), "--num-spec-tokens", "dynamic", "--spec-profile-dir", str(tmp_path),
            "--metrics-port", "0", "--num-scheduler-steps", str(num_steps)])
        results = run_all(stack.address, prompts)
        assert [tokens for tokens, _ in results] == reference, f"inflight {inflight}, steps {num_steps}"
        ks_used = {k for _, steps_per_k in results for k, count in enumerate(steps_per_k) if count}
        assert {0, 3} <= ks_used, f"K should follow the batch size: {[s for _, s in results]}"
        assert "step profile from" in stack.scheduler.log()  # the cached (switching) profile, not a new one
        histogram = k_histogram(stack)  # steps with K = 0 and steps with K = 3 (and 1) were chosen
        assert 0 < histogram["0.0"] < histogram["2.0"] < histogram["3.0"] == histogram["count"]
        with Client(stack.address) as client:
            info = client.model_info()
        assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0
