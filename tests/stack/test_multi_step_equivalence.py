"""Multi-step scheduling through the stack: n decode sub-steps per StepRequest change no output (token ids,
text, finish reasons, logprobs), in sync and run-ahead mode, with and without speculation, with chunked
prefill, preemption, stop strings, stop ids, max_tokens and cancels; tokens still stream one by one."""

from __future__ import annotations

import time

import pytest
from test_async_equivalence import assert_same_outputs, run, workload

from client import Client

pytestmark = pytest.mark.stack

FORCED_EXECUTOR = ["--num-kv-blocks", "8"]
FORCED_SCHEDULER = ["--max-num-batched-tokens", "32"]
SPEC = {
    "none": [],
    "ngram": ["--spec-method", "ngram", "--num-spec-tokens", "3"],
    "draft_model": ["--spec-method", "draft_model", "--num-spec-tokens", "3"],
    "eagle": ["--spec-method", "eagle", "--num-spec-tokens", "3"],
}
# (num_scheduler_steps, max_inflight_steps) compared with the (1, 1) reference: n in {1, 4, 8} x {sync, async}.
RUNS = [(1, 2), (4, 1), (4, 2), (8, 1), (8, 2)]


def multi_step_workload() -> list[dict]:
    requests = workload()
    requests[0]["params"]["ignore_eos"] = False  # EOS may end it too
    return requests


@pytest.mark.parametrize("spec", list(SPEC))
def test_multi_step_outputs_are_identical(spec, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir, launch_stack):
    executor_flags = [*FORCED_EXECUTOR, *SPEC[spec]]
    if spec == "draft_model":
        executor_flags += ["--draft-model", str(tiny_draft_model_dir)]
    if spec == "eagle":
        executor_flags += ["--eagle-drafter", str(tiny_eagle_dir)]
    outputs, stats = {}, {}
    for steps, inflight in [(1, 1), *RUNS]:
        stack = launch_stack.with_scheduler(tiny_model_dir, executor_flags, [
            *FORCED_SCHEDULER, "--num-scheduler-steps", str(steps), "--max-inflight-steps", str(inflight)])
        outputs[steps, inflight] = run(stack.address, multi_step_workload())
        with Client(stack.address) as client:
            info = client.model_info()
        assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0
        assert info.stats.num_preemptions > 0, info.stats
        stats[steps, inflight] = info.stats
    for steps, inflight in RUNS:
        assert_same_outputs(outputs[steps, inflight], outputs[1, 1])
        if steps > 1:  # several sub-step results per StepRequest: fewer StepRequests than results
            assert stats[steps, inflight].step_requests < stats[steps, inflight].steps, stats[steps, inflight]
    assert stats[1, 1].step_requests >= stats[1, 1].steps  # one result per StepRequest (a last may be in flight)
    assert {"stop", "length", "cancelled"} <= {o[-1] for o in outputs[1, 1]}


@pytest.fixture(scope="module")
def slower_model_dir(tmp_path_factory):
    """A deeper tiny Llama: a forward takes milliseconds, so a burst would be told from a stream."""
    from tiny_models import make_tiny_llama
    from tiny_tokenizers import build_byte_level

    directory = tmp_path_factory.mktemp("slower_llama")
    build_byte_level(directory)
    make_tiny_llama(directory, seed=0, vocab_size=400, hidden_size=256, intermediate_size=1024,
                    num_hidden_layers=8)
    return directory


def test_tokens_of_one_multi_step_batch_arrive_one_by_one(slower_model_dir, launch_stack):
    stack = launch_stack(slower_model_dir, [], ["--num-scheduler-steps", "8"])
    # A client starved of CPU by the other test worker reads a queue of messages in one burst, at random; a
    # scheduler that sends a batch of 8 at its end bunches every attempt. So one attempt in three must stream.
    failures = []
    with Client(stack.address) as client:
        for _ in range(3):
            failure = _stream_failure(client)
            if failure is None:
                return
            failures.append(failure)
    pytest.fail(f"tokens arrived bunched in all 3 attempts: {failures}")


def _stream_failure(client: Client) -> str | None:
    """Stream one request of 33 tokens; None when its tokens arrived one by one, else why not."""
    before = client.model_info().stats
    arrivals = []
    for chunk in client.generate_stream(token_ids=[5, 6, 7, 8], max_tokens=33, ignore_eos=True, temperature=0.0):
        arrivals += [time.perf_counter()] * len(chunk.token_ids)
    after = client.model_info().stats
    assert len(arrivals) == 33
    assert after.step_requests - before.step_requests <= 6, after  # the prefill, then batches of 8 sub-steps
    # One message per token, each received at its own time.
    assert len(set(arrivals)) == len(arrivals)
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
    # Tokens leave as their sub-step completes, so most gaps are about one sub-step's compute. Had a batch of 8
    # been sent at its end, only 1 gap in 8 would be; a stall of this shared machine bunches a few (so not the
    # median): at least a quarter of the gaps must be half a sub-step or longer.
    sub_step_s = (after.executor_busy_s - before.executor_busy_s) / (after.steps - before.steps)
    long_gaps = sum(gap > 0.5 * sub_step_s for gap in gaps)
    if long_gaps >= len(gaps) // 4:
        return None
    return f"{long_gaps} of {len(gaps)} gaps over half a sub-step of {sub_step_s * 1e3:.2f} ms"
