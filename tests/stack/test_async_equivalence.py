"""Synchronous (1 step in flight) and run-ahead (2, 3) scheduling give token-identical outputs."""

from __future__ import annotations

import random

import pytest
from simultaneous import run_simultaneously
from test_metrics_and_health import metrics_address, scrape

from client import Client

pytestmark = pytest.mark.stack

GRID = {
    "plain": ([], []),
    "chunked_prefill": ([], ["--max-num-batched-tokens", "32"]),
    "preemption": (["--num-kv-blocks", "8"], []),
    # n-gram drafts depend on the tokens alone, so speculation adds no float noise of its own here.
    "ngram_preemption_chunked": (["--spec-method", "ngram", "--num-spec-tokens", "3", "--num-kv-blocks", "8"],
                                 ["--max-num-batched-tokens", "32"]),
    # The executor launches step N+1 before step N's tokens are read back (the CUDA default).
    "deferred_readback_preemption_chunked": (["--defer-token-readback", "on", "--num-kv-blocks", "8",
                                              "--metrics-port", "0"], ["--max-num-batched-tokens", "32"]),
}


STRUCTURED_SCHEMA = {"type": "object", "properties": {"k": {"enum": ["a", "bb"]}, "n": {"type": "integer"}},
                     "required": ["k", "n"]}


def workload() -> list[dict]:
    """Greedy and seeded-sampling requests with penalties and logprobs, stop strings, stop tokens
    (standing in for EOS), max_tokens, structured output, and some requests cancelled mid-stream.

    Two long greedy requests grow to all eight KV blocks of the preemption config each, so whichever
    order the requests arrive in, preemption is all but certain: a long request that shares the
    batch with any other must evict it. The short requests alone may all fit, depending on arrival
    order, which once left a CI run without a single preemption."""
    rng = random.Random(3)
    requests = []
    for index in range(10):
        prompt = [rng.randrange(3, 400) for _ in range(rng.choice([4, 20, 45, 70]))]
        params = dict(max_tokens=rng.choice([8, 25, 40]), ignore_eos=True)
        if index % 2:
            params.update(temperature=0.8, top_p=0.9, top_k=40, seed=100 + index, repetition_penalty=1.2,
                          presence_penalty=0.3, frequency_penalty=0.2, logprobs=2)
        else:
            params.update(temperature=0.0, logprobs=1)
        if index % 5 == 1:
            params["stop_token_ids"] = [rng.randrange(3, 400) for _ in range(40)]
        if index % 5 == 2:
            params["stop"] = ["e", "a "]
        requests.append({"prompt": prompt, "params": params, "cancel_after": 6 if index % 4 == 3 else None})
    for _ in range(2):
        prompt = [rng.randrange(3, 400) for _ in range(60)]
        params = dict(max_tokens=60, ignore_eos=True, temperature=0.0)
        requests.append({"prompt": prompt, "params": params, "cancel_after": None})
    # Structured output: each step masks by the tokens before it, so these settle the executor's run-ahead.
    for params in (dict(max_tokens=30, temperature=0.0, regex=r"[0-9]{2,5}-[a-z]{3,9}!", logprobs=1),
                   dict(max_tokens=40, temperature=0.9, seed=11, json_schema=STRUCTURED_SCHEMA, ignore_eos=True)):
        prompt = [rng.randrange(3, 400) for _ in range(30)]
        requests.append({"prompt": prompt, "params": params, "cancel_after": None})
    return requests


def stream_request(client: Client, spec: dict) -> tuple:
    """One workload request, streamed: (tokens, logprobs, text, finish reason), or the first
    ``cancel_after`` tokens and "cancelled" when it is cancelled mid-stream."""
    stream = client.generate_stream(token_ids=spec["prompt"], **spec["params"])
    tokens, logprobs, text, finish = [], [], "", None
    for chunk in stream:
        tokens += chunk.token_ids
        logprobs += [p.sampled.logprob for p in chunk.logprobs]
        text += chunk.text
        finish = chunk.finish_reason or finish
        if spec["cancel_after"] is not None and len(tokens) >= spec["cancel_after"]:
            stream.cancel()
            return tuple(tokens[: spec["cancel_after"]]), "cancelled"
    return tuple(tokens), tuple(logprobs), text, finish


def run(address: str, requests: list[dict]) -> list[tuple]:
    """All requests start together."""
    return run_simultaneously(address, stream_request, requests)


def assert_same_outputs(actual: list[tuple], expected: list[tuple]) -> None:
    """Token ids, text and finish reasons identical; logprobs equal up to float noise.

    The two modes may batch the same requests differently (arrival timing; the run-ahead step that
    still carries a request whose stop is not seen yet), and another batch shape can change a
    matmul's last bits."""
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        if want[-1] == "cancelled" or got[-1] == "cancelled":
            assert got == want
            continue
        (tokens, logprobs, text, finish), (want_tokens, want_logprobs, want_text, want_finish) = got, want
        assert (tokens, text, finish) == (want_tokens, want_text, want_finish)
        assert logprobs == pytest.approx(want_logprobs, abs=1e-4)  # measured: at most 1.5e-6 apart


def device_input_ids(stack) -> float:
    """How many input ids the executor read on the device (its metric counts over every scheduler it served)."""
    return scrape(metrics_address(stack.executor.log(), "executor"))["stepahead_executor_device_input_ids_total"]


@pytest.mark.parametrize("config", list(GRID))
def test_sync_and_async_outputs_are_identical(config, tiny_model_dir, launch_stack):
    executor_flags, scheduler_flags = GRID[config]
    outputs = {}
    for inflight in (1, 2, 3):
        stack = launch_stack.with_scheduler(tiny_model_dir, executor_flags,
                                            [*scheduler_flags, "--max-inflight-steps", str(inflight)])
        counted_before = device_input_ids(stack) if "deferred" in config else 0
        outputs[inflight] = run(stack.address, workload())
        with Client(stack.address) as client:
            info = client.model_info()
        assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0
        if "preemption" in config:
            assert info.stats.num_preemptions > 0, info.stats
        if "ngram" in config:
            assert info.stats.spec_accepted > 0, info.stats
        if "deferred" in config:
            # Only a step sent before the previous result was read can launch on unread tokens.
            assert (device_input_ids(stack) > counted_before) == (inflight > 1)
    assert_same_outputs(outputs[2], outputs[1])
    assert_same_outputs(outputs[3], outputs[1])
    finishes = {o[-1] for o in outputs[1]}
    assert {"stop", "length", "cancelled"} <= finishes
