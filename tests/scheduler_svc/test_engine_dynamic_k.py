"""The engine feeds every verify's outcome to the K policy and records the K of each decode step per
request, against a fake executor that accepts every draft it is asked to verify."""

from __future__ import annotations

import asyncio

import pytest
from test_engine import EOS, FakeExecutorCall, make_request
from tiny_tokenizers import build_byte_level

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.engine import Engine
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import executor_pb2


class AcceptingCall(FakeExecutorCall):
    """Verifies drafts by accepting all of them: 1 + num_draft_tokens tokens per decode step."""

    def _run(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        drafts = {c.request_id: c.num_draft_tokens for c in step.cached_requests}
        result = super()._run(step)
        for output in result.outputs:
            count = drafts.get(output.request_id, 0)
            if count and output.token_ids:
                entry = self.state[output.request_id]
                output.token_ids.extend(10 + (entry[2] + i) % 300 for i in range(count))
                entry[0] += count
                entry[1] += count
                entry[2] += count
                output.num_drafted = output.num_accepted = output.num_draft_slots = count
        return result


class Stub:
    def Execute(self):
        return AcceptingCall([], None)


class Alternating:
    """K = 2, 0, 2, 0, ... per step; records the verifies it is told about."""

    def __init__(self) -> None:
        self.calls = 0
        self.observed: list[tuple[int, int]] = []

    def choose(self, batch_size: int) -> int:
        self.calls += 1
        return 2 if self.calls % 2 else 0

    def observe(self, num_drafted: int, num_accepted: int) -> None:
        self.observed.append((num_drafted, num_accepted))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


@pytest.mark.parametrize("inflight", [1, 2])
def test_verifies_reach_the_policy_and_k_per_step_reaches_the_request(tokenizer, inflight):
    policy = Alternating()

    async def run():
        scheduler = Scheduler(SchedulingConfig(max_num_batched_tokens=64, max_inflight_steps=inflight),
                              KVBlockManager(64, 16), max_model_len=1024, num_spec_tokens=2, k_policy=policy)
        engine = Engine(scheduler, tokenizer, Stub(), max_model_len=1024, max_inflight_steps=inflight)
        engine.start()
        queue = engine.add_request(make_request("a", max_tokens=12, ignore_eos=True))
        tokens, final = [], None
        while final is None:
            message = await asyncio.wait_for(queue.get(), 10)
            tokens.extend(message.token_ids)
            final = message if message.finish_reason else None
        await engine.stop()
        return tokens, final, scheduler

    tokens, final, scheduler = asyncio.run(run())
    assert len(tokens) == 12 and EOS not in tokens
    assert policy.observed and all(drafted == accepted == 2 for drafted, accepted in policy.observed)
    steps_per_k = list(final.spec.steps_per_k)
    assert steps_per_k[2] == len(policy.observed) and sum(steps_per_k) > steps_per_k[2]  # K = 0 steps too
    assert final.spec.accepted == 2 * len(policy.observed)
    assert scheduler.block_manager.num_free_blocks == 64
