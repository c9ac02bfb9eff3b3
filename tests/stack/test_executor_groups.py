"""Two executor groups behind one scheduler (`stepahead scheduler --executor A --executor B`): 32 concurrent
requests spread over both and give the outputs of one group, running ahead, with n-gram speculation, with
chunked prefill and preemption forced; readiness and metrics per group; when one group's executor is lost,
its requests move to the other group and complete token for token."""

from __future__ import annotations

import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_async_equivalence import assert_same_outputs, run
from test_metrics_and_health import NOT_SERVING, SERVING, health_status, metrics_address, scrape

from client import Client
from scheduler_svc.readiness import GENERATION_SERVICE

pytestmark = pytest.mark.stack

FORCED_EXECUTOR = ["--num-kv-blocks", "12", "--num-threads", "1"]
FORCED_SCHEDULER = ["--max-num-batched-tokens", "32", "--max-inflight-steps", "2", "--metrics-port", "0"]
VARIANTS = {"async": [], "ngram": ["--spec-method", "ngram", "--num-spec-tokens", "3"]}


def workload(num_requests: int = 32) -> list[dict]:
    """Greedy and seeded-sampling requests with penalties and logprobs, stop strings and stop tokens, of
    mixed lengths; one in eight cancelled mid-stream."""
    rng = random.Random(11)
    requests = []
    for index in range(num_requests):
        prompt = [rng.randrange(3, 400) for _ in range(rng.choice([5, 18, 40, 66]))]
        params = dict(max_tokens=rng.choice([10, 24, 40]), ignore_eos=True)
        if index % 2:
            params.update(temperature=0.9, top_p=0.95, top_k=50, seed=500 + index, repetition_penalty=1.1,
                          presence_penalty=0.2, logprobs=1)
        else:
            params.update(temperature=0.0, logprobs=1)
        if index % 6 == 1:
            params["stop"] = ["e", "o "]
        if index % 6 == 3:
            params["stop_token_ids"] = [rng.randrange(3, 400) for _ in range(30)]
        requests.append({"prompt": prompt, "params": params, "cancel_after": 5 if index % 8 == 7 else None})
    return requests


def group_samples(stack, name: str) -> dict[str, float]:
    """The scheduler's per-group series ``name``, keyed by executor address."""
    samples = scrape(metrics_address(stack.scheduler.log(), "scheduler"))
    prefix = f'stepahead_scheduler_{name}{{group="'
    return {key[len(prefix):-2]: value for key, value in samples.items() if key.startswith(prefix)}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_two_groups_give_the_outputs_of_one(variant, tiny_model_dir, launch_stack):
    executor_flags = [*FORCED_EXECUTOR, *VARIANTS[variant]]
    outputs = {}
    for groups in (1, 2):
        stack = (launch_stack.with_scheduler(tiny_model_dir, executor_flags, FORCED_SCHEDULER) if groups == 1
                 else launch_stack(tiny_model_dir, executor_flags, FORCED_SCHEDULER, executor_groups=groups))
        outputs[groups] = run(stack.address, workload())
        with Client(stack.address) as client:
            info = client.model_info()
        assert info.num_free_kv_blocks == info.num_kv_blocks == 12 * groups and info.num_running == 0
        assert info.stats.num_preemptions > 0, info.stats
        steps = group_samples(stack, "group_steps_total")
        assert sorted(steps) == sorted(stack.executor_addresses) and all(steps.values()), steps
        for address in stack.executor_addresses:
            assert health_status(stack.address, f"{GENERATION_SERVICE}/{address}") == SERVING
    assert_same_outputs(outputs[2], outputs[1])


def test_a_lost_group_s_requests_move_to_the_other_group(tiny_model_dir, launch_stack):
    # Long enough that the metrics poll below sees the first group running before the workload ends, also on a
    # loaded machine (at 60 tokens a CI run once finished it between two polls).
    requests = [{"prompt": spec["prompt"], "params": {**spec["params"], "max_tokens": 200}, "cancel_after": None}
                for spec in workload(12)]
    expected = run(launch_stack.with_scheduler(tiny_model_dir, ["--num-threads", "1"]).address, requests)
    stack = launch_stack(tiny_model_dir, ["--num-threads", "1"], ["--metrics-port", "0"], executor_groups=2)
    lost = stack.executor_addresses[0]
    with ThreadPoolExecutor(1) as pool:
        outputs = pool.submit(run, stack.address, requests)
        deadline = time.monotonic() + 60
        while not group_samples(stack, "group_requests_running").get(lost):
            assert time.monotonic() < deadline and not outputs.done(), "no request ever ran on the first group"
            time.sleep(0.02)
        os.killpg(stack.executors[0].process.pid, signal.SIGKILL)
        assert_same_outputs(outputs.result(timeout=120), expected)
    samples = scrape(metrics_address(stack.scheduler.log(), "scheduler"))
    assert samples["stepahead_scheduler_requests_moved_total"] > 0
    deadline = time.monotonic() + 10  # the group's monitor polls every 0.5 s; the requests may end sooner
    while health_status(stack.address, f"{GENERATION_SERVICE}/{lost}") != NOT_SERVING:
        assert time.monotonic() < deadline, "the lost group still reports SERVING"
        time.sleep(0.1)
    assert health_status(stack.address, GENERATION_SERVICE) == SERVING  # the other group serves
    with Client(stack.address) as client:
        info = client.model_info()
    assert info.num_running == info.num_waiting == 0 and info.num_free_kv_blocks == info.num_kv_blocks
