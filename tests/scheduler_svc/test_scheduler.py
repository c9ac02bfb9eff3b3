"""Scheduler: chunked prefill, decode, preemption by recompute, run-ahead placeholders, stale results."""

from __future__ import annotations

from scheduler_steps import complete_step

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


# ---- prefix caching --------------------------------------------------------------------------
def caching_scheduler(num_blocks: int = 64, budget: int = 512) -> Scheduler:
    config = SchedulingConfig(max_num_batched_tokens=budget, enable_prefix_caching=True)
    return Scheduler(config, KVBlockManager(num_blocks, 16, enable_prefix_caching=True), max_model_len=4096)


def test_a_later_request_with_the_same_prefix_starts_after_its_cached_blocks():
    scheduler = caching_scheduler()
    scheduler.add_request(make_request("a", prompt_len=40))
    complete_step(scheduler, scheduler.schedule())
    b = make_request("b", prompt_len=40)
    b.prompt_token_ids[35] = 999  # differs in block 2 only
    scheduler.add_request(b)
    (new,) = scheduler.schedule().new_requests
    a_blocks = scheduler.block_manager.block_ids("a")
    assert new.num_computed_tokens == 32 and new.num_scheduled_tokens == 8
    assert new.block_ids[:2] == a_blocks[:2] and new.block_ids[2] not in a_blocks
    assert (scheduler.num_prefix_queried_tokens, scheduler.num_prefix_hit_tokens) == (80, 32)
    assert (b.num_cached_prompt_tokens, scheduler.requests["a"].num_cached_prompt_tokens) == (32, 0)


def test_the_last_prompt_token_is_always_computed():
    scheduler = caching_scheduler()
    scheduler.add_request(make_request("a", prompt_len=32))
    complete_step(scheduler, scheduler.schedule())
    scheduler.add_request(make_request("b", prompt_len=32))
    (new,) = scheduler.schedule().new_requests
    assert (new.num_computed_tokens, new.num_scheduled_tokens) == (16, 16)


def test_blocks_are_cached_only_for_steps_planned_after_the_one_that_writes_them():
    scheduler = caching_scheduler()
    scheduler.add_request(make_request("a", prompt_len=40))
    scheduler.add_request(make_request("b", prompt_len=40))
    output = scheduler.schedule()  # both new in one step: b cannot read what a writes in it
    assert [n.num_computed_tokens for n in output.new_requests] == [0, 0]
    scheduler.add_request(make_request("c", prompt_len=40))
    (new,) = scheduler.schedule().new_requests  # a's step is planned and sent: c may read it
    assert new.num_computed_tokens == 32


def test_output_blocks_are_cached_once_their_tokens_are_known():
    scheduler = caching_scheduler()
    scheduler.add_request(make_request("a", prompt_len=14, max_tokens=8))
    for token in range(5):
        complete_step(scheduler, scheduler.schedule(), token=100 + token)
    a = scheduler.requests["a"]
    follow_up = make_request("b", prompt_len=30)
    follow_up.prompt_token_ids = a.all_token_ids[:16] + list(range(50, 64))
    scheduler.add_request(follow_up)
    (new,) = scheduler.schedule().new_requests
    assert new.num_computed_tokens == 16  # the block of 14 prompt + 2 output tokens


def test_a_preempted_request_resumes_from_its_cached_blocks():
    scheduler = caching_scheduler(num_blocks=4)
    scheduler.add_request(make_request("a", prompt_len=32, max_tokens=40))
    b = make_request("b", prompt_len=32, max_tokens=40)
    b.prompt_token_ids = list(range(101, 133))
    scheduler.add_request(b)
    complete_step(scheduler, scheduler.schedule())  # 2 blocks each, all 4 used
    output = scheduler.schedule()  # a needs a third block: b is preempted, and its last block goes to a
    assert b.num_preemptions == 1
    complete_step(scheduler, output)
    scheduler.finish_request("a")
    resumed = [n for n in scheduler.schedule().new_requests if n.request.request_id == "b"]
    assert resumed and resumed[0].num_computed_tokens == 16 and resumed[0].num_scheduled_tokens == 17
    assert b.num_cached_prompt_tokens == 0  # what the prompt found when the request first started


def test_a_lost_executor_forgets_every_cached_block():
    scheduler = caching_scheduler()
    scheduler.add_request(make_request("a", prompt_len=40))
    complete_step(scheduler, scheduler.schedule())
    scheduler.requeue_all_running()
    assert scheduler.block_manager.num_cached_blocks == 0
    (new,) = scheduler.schedule().new_requests
    assert new.num_computed_tokens == 0 and new.num_scheduled_tokens == 41  # the prompt and its output token


def test_without_prefix_caching_nothing_is_looked_up():
    scheduler = make_scheduler()
    for request_id in ("a", "b"):
        scheduler.add_request(make_request(request_id, prompt_len=40))
        (new,) = scheduler.schedule().new_requests
        assert new.num_computed_tokens == 0
    assert (scheduler.num_prefix_queried_tokens, scheduler.num_prefix_hit_tokens) == (0, 0)
