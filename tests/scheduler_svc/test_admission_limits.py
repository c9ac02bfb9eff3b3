"""Admission limits of the scheduler: --max-queued-requests refuses a request beyond the queue's limit with a
message saying how many are queued; --max-queue-wait-s names the requests that waited too long to start."""

from __future__ import annotations

import pytest

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.request import Request, StopParams
from scheduler_svc.scheduler import QueueFullError, Scheduler
from stepahead_proto import sampling_pb2


def make_request(request_id: str, arrival_time: float = 0.0) -> Request:
    return Request(request_id=request_id, prompt_token_ids=[1, 2, 3], sampling=sampling_pb2.SamplingParams(),
                   stop_params=StopParams(max_tokens=4), arrival_time=arrival_time)


def make_scheduler(**limits) -> Scheduler:
    config = SchedulingConfig(max_num_seqs=1, max_num_batched_tokens=64, **limits)
    return Scheduler(config, KVBlockManager(64, 16), max_model_len=1024)


def test_a_request_beyond_the_queue_limit_is_refused_with_the_count():
    scheduler = make_scheduler(max_queued_requests=2)
    scheduler.add_request(make_request("a"))
    scheduler.add_request(make_request("b"))
    with pytest.raises(QueueFullError, match=r"2 requests are queued, the limit is 2 \(--max-queued-requests\)"):
        scheduler.add_request(make_request("c"))
    assert "c" not in scheduler.requests and scheduler.num_waiting == 2
    scheduler.schedule()  # "a" starts (max_num_seqs 1): a place in the queue is free again
    scheduler.add_request(make_request("c"))
    assert scheduler.num_waiting == 2


def test_requests_waiting_too_long_are_named_oldest_first_and_started_ones_never():
    scheduler = make_scheduler(max_queue_wait_s=5.0)
    for request_id, arrival in [("old", 0.0), ("older", -1.0), ("new", 4.0)]:
        scheduler.add_request(make_request(request_id, arrival))
    scheduler.schedule()  # "old" starts running: it is no longer waiting to start
    assert scheduler.overdue_waiting(now=5.5) == ["older"]
    assert scheduler.overdue_waiting(now=9.5) == ["older", "new"]
    assert make_scheduler().overdue_waiting(now=1e9) == []  # no limit by default


@pytest.mark.parametrize("field, value", [("max_queued_requests", 0), ("max_queue_wait_s", 0.0),
                                          ("max_queue_wait_s", -1.0)])
def test_limits_are_validated_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SchedulingConfig(**{field: value})
