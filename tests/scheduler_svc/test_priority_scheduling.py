"""The priority scheduling policy: the queue by (priority, arrival), the worst running request preempted first, a
waiting request preempting running ones of strictly lower priority; fcfs unchanged; the request field checked."""

from __future__ import annotations

import dataclasses

import pytest
from scheduler_steps import complete_step
from tiny_tokenizers import build_byte_level

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.request import Request, RequestStatus, StopParams
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2, sampling_pb2


def make_request(request_id: str, priority: int, prompt_len: int = 16, max_tokens: int = 40,
                 arrival: float = 0.0) -> Request:
    return Request(request_id=request_id, prompt_token_ids=list(range(1, prompt_len + 1)),
                   sampling=sampling_pb2.SamplingParams(), stop_params=StopParams(max_tokens=max_tokens),
                   arrival_time=arrival, priority=priority)


def make_scheduler(policy: str, num_blocks: int = 64, max_num_seqs: int = 64) -> Scheduler:
    config = SchedulingConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=512, scheduling_policy=policy)
    return Scheduler(config, KVBlockManager(num_blocks, 16), max_model_len=4096)



def started(output) -> list[str]:
    return [new.request.request_id for new in output.new_requests]


def test_the_queue_is_ordered_by_priority_then_arrival_and_fcfs_keeps_arrival_order():
    arrivals = [("a", 2), ("b", 0), ("c", 1), ("d", 0)]
    by_priority, fcfs = make_scheduler("priority", max_num_seqs=1), make_scheduler("fcfs", max_num_seqs=1)
    for index, (request_id, priority) in enumerate(arrivals):
        by_priority.add_request(make_request(request_id, priority, arrival=index))
        fcfs.add_request(make_request(request_id, 0, arrival=index))
    assert [r.request_id for r in by_priority.waiting] == ["b", "d", "c", "a"]
    assert [r.request_id for r in fcfs.waiting] == ["a", "b", "c", "d"]
    assert started(by_priority.schedule()) == ["b"]


def test_a_waiting_request_of_higher_priority_takes_the_seat_of_the_worst_running_one():
    scheduler = make_scheduler("priority", max_num_seqs=2)
    scheduler.add_request(make_request("low-early", 5, arrival=0))
    scheduler.add_request(make_request("low-late", 5, arrival=1))
    complete_step(scheduler, scheduler.schedule())
    scheduler.add_request(make_request("urgent", 0, arrival=2))
    output = scheduler.schedule()
    assert started(output) == ["urgent"]
    assert [c.request_id for c in output.cached_requests] == ["low-early"]
    assert output.finished_request_ids == ["low-late"]  # the executor drops its state
    preempted = scheduler.requests["low-late"]
    assert preempted.status is RequestStatus.WAITING and preempted.num_preemptions == 1
    assert [r.request_id for r in scheduler.running] == ["urgent", "low-early"]


def test_equal_or_lower_priority_never_preempts_and_waits_its_turn():
    scheduler = make_scheduler("priority", max_num_seqs=1)
    scheduler.add_request(make_request("running", 1, arrival=0))
    complete_step(scheduler, scheduler.schedule())
    scheduler.add_request(make_request("same", 1, arrival=1))
    scheduler.add_request(make_request("lower", 3, arrival=2))
    output = scheduler.schedule()
    assert not started(output) and scheduler.num_preemptions == 0
    assert [r.request_id for r in scheduler.waiting] == ["same", "lower"]


def test_a_waiting_request_short_of_blocks_preempts_lower_priority_requests_until_it_fits():
    scheduler = make_scheduler("priority", num_blocks=4)
    for index in range(4):
        scheduler.add_request(make_request(f"low{index}", 3, prompt_len=8, arrival=index))  # one block each
    complete_step(scheduler, scheduler.schedule())
    scheduler.add_request(make_request("urgent", 0, prompt_len=32, arrival=9))  # needs two blocks
    output = scheduler.schedule()
    assert started(output) == ["urgent"]
    assert sorted(output.finished_request_ids) == ["low2", "low3"]  # the latest ones, no more than needed
    assert [r.request_id for r in scheduler.waiting] == ["low2", "low3"]
    assert [c.request_id for c in output.cached_requests] == ["low0", "low1"]  # still within their blocks


def test_when_running_requests_need_blocks_the_worst_priority_is_preempted_not_the_latest_started():
    scheduler = make_scheduler("priority", num_blocks=3)
    scheduler.add_request(make_request("low", 5, arrival=0))
    complete_step(scheduler, scheduler.schedule())
    scheduler.add_request(make_request("high", 1, arrival=1))
    complete_step(scheduler, scheduler.schedule())  # high starts beside low: one block each, one left
    assert [r.request_id for r in scheduler.running] == ["high", "low"]
    output = scheduler.schedule()  # both need a second block for token 17: only one is free
    assert [c.request_id for c in output.cached_requests] == ["high"]
    assert scheduler.requests["low"].status is RequestStatus.WAITING


def test_fcfs_preempts_the_latest_started_whatever_the_priority_field():
    scheduler = make_scheduler("fcfs", num_blocks=3)
    scheduler.add_request(make_request("first", 0, arrival=0))
    scheduler.add_request(make_request("second", 0, arrival=1))
    complete_step(scheduler, scheduler.schedule())
    output = scheduler.schedule()
    assert [c.request_id for c in output.cached_requests] == ["first"]
    assert scheduler.waiting[0].request_id == "second"


def test_an_unknown_policy_is_refused_by_name():
    with pytest.raises(ValueError, match="scheduling_policy"):
        SchedulingConfig(scheduling_policy="lifo")


def test_a_request_started_first_keeps_its_blocks_while_the_running_ones_grow_in_the_same_step():
    scheduler = make_scheduler("priority", num_blocks=4)
    for index in range(3):
        scheduler.add_request(make_request(f"low{index}", 3, arrival=index))  # 16 tokens: one full block each
    complete_step(scheduler, scheduler.schedule())
    scheduler.add_request(make_request("urgent", 0, prompt_len=8, arrival=9))
    output = scheduler.schedule()  # urgent takes the free block; low0 and low1 each need one for token 17
    assert started(output) == ["urgent"] and scheduler.requests["urgent"].status is RequestStatus.RUNNING
    assert [c.request_id for c in output.cached_requests] == ["low0"]
    assert sorted(output.finished_request_ids) == ["low1", "low2"]  # low2 made room for low0; low1 for none
    blocks = [block for new in output.new_requests for block in new.block_ids]
    blocks += [block for cached in output.cached_requests for block in cached.new_block_ids]
    assert len(blocks) == len(set(blocks))  # no block handed to two requests


def test_making_room_skips_protected_requests_even_at_the_back():
    """A request planned earlier in the step (started first) sits at the back once the ones after it are gone: the
    request asking for room preempts itself rather than take it back."""
    scheduler = make_scheduler("priority", num_blocks=3)
    scheduler.add_request(make_request("a", 0, arrival=0))
    scheduler.add_request(make_request("b", 1, arrival=1))
    scheduler.add_request(make_request("c", 2, arrival=2))
    scheduler.schedule()
    assert [r.request_id for r in scheduler.running] == ["a", "b", "c"] and scheduler.block_manager.num_free_blocks == 0
    assert not scheduler._make_room(scheduler.requests["a"], 40, protected={"b"})
    assert [r.request_id for r in scheduler.running] == ["b"]  # c, then a itself; b kept


def test_a_priority_needs_the_priority_policy_and_reaches_the_request(tmp_path):
    tokenizer = Tokenizer.from_dir(build_byte_level(tmp_path))
    fcfs = ModelLimits("tiny", 256, tokenizer.vocab_size, frozenset({2}), 16)
    urgent = generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIdsPrompt(ids=[5, 6]), priority=-2)
    with pytest.raises(InvalidRequestError) as refused:
        build_request(urgent, tokenizer, fcfs)
    assert refused.value.field == "priority" and "--scheduling-policy priority" in str(refused.value)
    assert build_request(urgent, tokenizer, dataclasses.replace(fcfs, priority_scheduling=True)).priority == -2
    default = generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIdsPrompt(ids=[5, 6]))
    assert build_request(default, tokenizer, fcfs).priority == 0
