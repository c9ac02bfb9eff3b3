"""Scheduler: chunked prefill, decode, preemption by recompute, run-ahead placeholders, stale results."""

from __future__ import annotations

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.request import Request, RequestStatus, StopParams
from scheduler_svc.scheduler import Scheduler
from stepahead_proto import sampling_pb2


def make_request(request_id: str, prompt_len: int, max_tokens: int = 16) -> Request:
    return Request(
        request_id=request_id,
        prompt_token_ids=list(range(1, prompt_len + 1)),
        sampling=sampling_pb2.SamplingParams(),
        stop_params=StopParams(max_tokens=max_tokens),
    )


def make_scheduler(num_blocks: int = 64, budget: int = 512, max_num_seqs: int = 64) -> Scheduler:
    config = SchedulingConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget)
    return Scheduler(config, KVBlockManager(num_blocks, 16), max_model_len=4096)


def complete_step(scheduler: Scheduler, output, token: int = 7) -> None:
    """Feed back one sampled token for every request the step samples."""
    for request_id in output.sampling_request_ids:
        request = scheduler.accept_result(output, request_id)
        if request is not None:
            request.output_token_ids.append(token)


def test_prefill_then_decode_sends_request_once_then_deltas():
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", prompt_len=20))
    first = scheduler.schedule()
    assert [r.request.request_id for r in first.new_requests] == ["a"]
    assert first.new_requests[0].num_scheduled_tokens == 20
    assert first.new_requests[0].block_ids == [0, 1]
    assert first.sampling_request_ids == {"a"}
    complete_step(scheduler, first)
    second = scheduler.schedule()
    assert not second.new_requests
    cached = [(c.request_id, c.num_computed_tokens, c.num_scheduled_tokens) for c in second.cached_requests]
    assert cached == [("a", 20, 1)]


def test_chunked_prefill_respects_budget_and_samples_only_at_the_end():
    scheduler = make_scheduler(budget=32)
    scheduler.add_request(make_request("a", prompt_len=100))
    chunks, samples = [], []
    for _ in range(4):
        output = scheduler.schedule()
        scheduled = output.new_requests + output.cached_requests
        chunks.append(scheduled[0].num_scheduled_tokens)
        samples.append(bool(output.sampling_request_ids))
        complete_step(scheduler, output)
    assert chunks == [32, 32, 32, 4]
    assert samples == [False, False, False, True]


def test_budget_shared_between_decode_and_new_prefill():
    scheduler = make_scheduler(budget=10)
    scheduler.add_request(make_request("a", prompt_len=5))
    complete_step(scheduler, scheduler.schedule())
    scheduler.add_request(make_request("b", prompt_len=30))
    output = scheduler.schedule()
    assert [c.num_scheduled_tokens for c in output.cached_requests] == [1]
    assert [n.num_scheduled_tokens for n in output.new_requests] == [9]


def test_preemption_recomputes_with_outputs_and_frees_blocks():
    scheduler = make_scheduler(num_blocks=3)
    scheduler.add_request(make_request("a", prompt_len=16, max_tokens=40))
    scheduler.add_request(make_request("b", prompt_len=16, max_tokens=40))
    complete_step(scheduler, scheduler.schedule())  # a: 1 block, b: 1 block
    # Decoding token 17 needs a second block each: only one is free, so b (last) is preempted.
    output = scheduler.schedule()
    assert [c.request_id for c in output.cached_requests] == ["a"]
    b = scheduler.requests["b"]
    assert b.status is RequestStatus.WAITING and b.num_preemptions == 1 and b.num_computed_tokens == 0
    assert output.finished_request_ids == ["b"]  # the executor drops b's state in this very step
    complete_step(scheduler, output)
    following = scheduler.schedule()
    scheduler.finish_request("a")
    complete_step(scheduler, following)
    resumed = scheduler.schedule()
    new = [n for n in resumed.new_requests if n.request.request_id == "b"]
    assert new and new[0].num_scheduled_tokens == 17  # prompt + the one output token, recomputed
    for request_id in list(scheduler.requests):
        scheduler.finish_request(request_id)
    assert scheduler.block_manager.num_free_blocks == 3


def test_stale_result_after_preemption_is_dropped():
    scheduler = make_scheduler(num_blocks=2)
    scheduler.add_request(make_request("a", prompt_len=16))
    scheduler.add_request(make_request("b", prompt_len=16))
    first = scheduler.schedule()
    complete_step(scheduler, first)
    second = scheduler.schedule()  # a grows, b is preempted
    assert scheduler.accept_result(second, "b") is None
    assert scheduler.accept_result(first, "b") is None  # epoch moved on


def test_run_ahead_counts_placeholders_and_never_passes_max_tokens():
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", prompt_len=4, max_tokens=3))
    steps = [scheduler.schedule() for _ in range(5)]  # no results read: run ahead as far as allowed
    scheduled = [len(s.new_requests) + len(s.cached_requests) for s in steps]
    assert scheduled == [1, 1, 1, 0, 0]
    assert scheduler.requests["a"].num_output_placeholders == 3
    for step in steps[:3]:
        complete_step(scheduler, step)
    assert scheduler.requests["a"].num_output_placeholders == 0
    assert len(scheduler.requests["a"].output_token_ids) == 3


def test_max_num_seqs_limits_admission():
    scheduler = make_scheduler(max_num_seqs=2)
    for name in "abc":
        scheduler.add_request(make_request(name, prompt_len=4))
    output = scheduler.schedule()
    assert [n.request.request_id for n in output.new_requests] == ["a", "b"]
    assert scheduler.num_waiting == 1


def test_finish_request_frees_blocks_and_is_reported_once():
    scheduler = make_scheduler(num_blocks=8)
    scheduler.add_request(make_request("a", prompt_len=40))
    scheduler.schedule()
    assert scheduler.block_manager.num_free_blocks == 5
    assert scheduler.finish_request("a")
    assert not scheduler.finish_request("a")
    assert scheduler.block_manager.num_free_blocks == 8
    assert scheduler.schedule().finished_request_ids == ["a"]
    assert scheduler.schedule().finished_request_ids == []


def test_waiting_request_finished_before_scheduling_is_not_reported():
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", prompt_len=4))
    scheduler.finish_request("a")
    assert scheduler.schedule().is_empty
