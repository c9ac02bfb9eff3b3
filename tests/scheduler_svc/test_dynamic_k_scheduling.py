"""The scheduler with a K policy: it asks once per step with B = the decoding requests, every request of
the step proposes that K, KV lookahead and unresolved drafts follow it, multi-step keeps one K per batch."""

from __future__ import annotations

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.request import Request, StopParams
from scheduler_svc.scheduler import Scheduler
from stepahead_proto import sampling_pb2


class ByBatchSize:
    """K = 3 for one decoding request, 1 for two, 0 above; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.observed: list[tuple[int, int]] = []

    def choose(self, batch_size: int) -> int:
        self.asked.append(batch_size)
        return {1: 3, 2: 1}.get(batch_size, 0)

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        self.observed.append((num_drafted, num_accepted))


def make_request(request_id: str, prompt_len: int = 20, max_tokens: int = 64) -> Request:
    return Request(request_id=request_id, prompt_token_ids=list(range(1, prompt_len + 1)),
                   sampling=sampling_pb2.SamplingParams(), stop_params=StopParams(max_tokens=max_tokens))


def make_scheduler(policy, num_scheduler_steps: int = 1, k_max: int = 3) -> Scheduler:
    config = SchedulingConfig(max_num_seqs=8, max_num_batched_tokens=512, num_scheduler_steps=num_scheduler_steps)
    return Scheduler(config, KVBlockManager(200, 16), max_model_len=4096, num_spec_tokens=k_max, k_policy=policy)


def settle(scheduler: Scheduler, output, accepted: int = 0) -> None:
    """Every sampling request gets its token(s); drafts verified are all settled."""
    for request_id in output.sampling_request_ids:
        request = scheduler.accept_result(output, request_id, num_accepted=accepted)
        if request is not None:
            request.output_token_ids.extend([7] * (1 + accepted))
    scheduler.close_step(output)


def specs(output) -> list[int]:
    return [r.num_spec_tokens for r in output.new_requests] + [r.num_spec_tokens for r in output.cached_requests]


def test_k_follows_the_number_of_decoding_requests():
    policy = ByBatchSize()
    scheduler = make_scheduler(policy)
    scheduler.add_request(make_request("a"))
    prefill = scheduler.schedule()
    assert policy.asked == [1] and specs(prefill) == [3] and prefill.num_spec_tokens == 3
    settle(scheduler, prefill)
    decode = scheduler.schedule()  # one decoding request: K = 3, verifying the 3 drafts of the prefill
    assert specs(decode) == [3] and decode.num_draft_tokens == {"a": 3}
    settle(scheduler, decode)
    scheduler.add_request(make_request("b"))
    mixed = scheduler.schedule()  # b is still a prompt: B counts a alone
    assert policy.asked[-1] == 1 and specs(mixed) == [3, 3]
    settle(scheduler, mixed)
    two = scheduler.schedule()
    assert policy.asked[-1] == 2 and specs(two) == [1, 1]
    settle(scheduler, two)
    for name in "cd":
        scheduler.add_request(make_request(name))
    settle(scheduler, scheduler.schedule())
    four = scheduler.schedule()
    assert policy.asked[-1] == 4 and specs(four) == [0, 0, 0, 0]
    # a and b verify the one draft proposed when K was 1; c and d verify what their prefill proposed (K = 1).
    assert four.num_draft_tokens == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_kv_lookahead_is_sized_to_the_chosen_k():
    policy = ByBatchSize()
    scheduler = make_scheduler(policy)
    scheduler.add_request(make_request("a", prompt_len=16))
    prefill = scheduler.schedule()
    # 16 prompt tokens and 3 lookahead slots for the drafts proposed: two blocks.
    assert len(scheduler.block_manager.block_ids("a")) == 2
    settle(scheduler, prefill)
    fixed = make_scheduler(ByBatchSize(), k_max=0)  # no drafter: no lookahead
    fixed.add_request(make_request("a", prompt_len=16))
    fixed.schedule()
    assert len(fixed.block_manager.block_ids("a")) == 1


def test_a_multi_step_batch_keeps_one_k():
    policy = ByBatchSize()
    scheduler = make_scheduler(policy, num_scheduler_steps=4)
    for name in "ab":
        scheduler.add_request(make_request(name))
    settle(scheduler, scheduler.schedule())
    calls = len(policy.asked)
    multi = scheduler.schedule()
    assert multi.num_steps == 4 and len(policy.asked) == calls + 1  # asked once for the whole batch
    assert specs(multi) == [1, 1]
    # 3 extra sub-steps of 1 + K slots each on top of the first step's drafts: unresolved drafts follow K.
    assert all(scheduler.requests[name].num_unresolved_drafts == 3 + 3 * 1 for name in "ab")


def test_policy_k_is_capped_by_the_executors_k_max():
    scheduler = make_scheduler(ByBatchSize(), k_max=2)
    scheduler.add_request(make_request("a"))
    assert specs(scheduler.schedule()) == [2]
