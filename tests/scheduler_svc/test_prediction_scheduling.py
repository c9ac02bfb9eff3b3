"""How many draft slots the scheduler plans for a request with a predicted output, and when."""

from __future__ import annotations

from test_scheduler import make_request

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.dynamic_k import FixedK
from scheduler_svc.scheduler import Scheduler

MAX_PREDICTION = 5


def make_scheduler(num_spec_tokens: int = 0, step_k: int = 0, max_prediction: int = MAX_PREDICTION) -> Scheduler:
    return Scheduler(SchedulingConfig(), KVBlockManager(64, 16), max_model_len=4096, num_spec_tokens=num_spec_tokens,
                     k_policy=FixedK(step_k), max_prediction_tokens=max_prediction)


def predicted(request_id: str):
    request = make_request(request_id, prompt_len=8, max_tokens=32)
    request.prediction_token_ids = [3, 4, 5, 6]
    return request


def spec_of(output, request_id: str) -> int:
    for new in output.new_requests:
        if new.request.request_id == request_id:
            return new.num_spec_tokens
    return next(c.num_spec_tokens for c in output.cached_requests if c.request_id == request_id)


def settle(scheduler: Scheduler, output) -> None:
    """Every request of the step sampled one token and had none of its drafts accepted."""
    for request_id in output.sampling_request_ids:
        request = scheduler.accept_result(output, request_id)
        if request is not None:
            request.output_token_ids.append(9)
    scheduler.close_step(output)


def test_without_a_drafter_only_a_prediction_gets_draft_slots():
    scheduler = make_scheduler()
    scheduler.add_request(predicted("p"))
    scheduler.add_request(make_request("plain", prompt_len=8))
    first = scheduler.schedule()
    assert spec_of(first, "p") == MAX_PREDICTION and spec_of(first, "plain") == 0


def test_off_its_prediction_a_request_probes_with_one_slot_until_drafts_are_accepted_again():
    scheduler = make_scheduler()
    request = predicted("p")
    scheduler.add_request(request)
    settle(scheduler, scheduler.schedule())
    request.observe_prediction(from_prediction=True, num_drafted=5, num_accepted=2)
    assert not request.prediction_on_track
    assert spec_of(scheduler.schedule(), "p") == 1
    request.observe_prediction(from_prediction=False, num_drafted=0, num_accepted=0)
    assert not request.prediction_on_track
    request.observe_prediction(from_prediction=True, num_drafted=1, num_accepted=1)
    assert request.prediction_on_track


def test_with_a_drafter_the_larger_of_the_step_k_and_the_prediction_slots():
    scheduler = make_scheduler(num_spec_tokens=3, step_k=2)
    request = predicted("p")
    scheduler.add_request(request)
    scheduler.add_request(make_request("plain", prompt_len=8))
    first = scheduler.schedule()
    assert spec_of(first, "p") == MAX_PREDICTION and spec_of(first, "plain") == 2
    request.prediction_on_track = False
    settle(scheduler, first)
    assert spec_of(scheduler.schedule(), "p") == 2


def test_an_executor_that_offers_no_prediction_drafts_gets_no_slots_for_them():
    scheduler = make_scheduler(max_prediction=0)
    scheduler.add_request(predicted("p"))
    assert spec_of(scheduler.schedule(), "p") == 0
