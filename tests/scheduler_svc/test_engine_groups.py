"""EngineGroups without a model: placement by free KV capacity, lost groups skipped and their requests
moved, ids unique across groups, aborts routed, counters summed; and two groups run against in-process
fake executors give the outputs of one."""

from __future__ import annotations

import asyncio

import pytest
from test_engine import EOS, FakeExecutorStub, make_request
from tiny_tokenizers import build_byte_level

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.engine import Engine
from scheduler_svc.engine_groups import EngineGroups
from scheduler_svc.metrics import SchedulerMetrics
from scheduler_svc.scheduler import DuplicateRequestError, Scheduler
from scheduler_svc.server import STEP_ID_GROUP_SHIFT
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import generation_pb2


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def make_groups(tokenizer, num_blocks: list[int], stubs=None) -> EngineGroups:
    metrics = SchedulerMetrics()
    engines = []
    for index, blocks in enumerate(num_blocks):
        scheduler = Scheduler(SchedulingConfig(max_num_batched_tokens=64), KVBlockManager(blocks, 16),
                              max_model_len=1024, first_step_id=index << STEP_ID_GROUP_SHIFT)
        stub = stubs[index] if stubs else FakeExecutorStub()
        engines.append(Engine(scheduler, tokenizer, stub, 1024, 2, metrics, name=f"group-{index}"))
    return EngineGroups(engines, metrics)


def placed_on(groups: EngineGroups) -> dict[str, list[str]]:
    return {engine.name: [r.request_id for r in engine.scheduler.waiting] for engine in groups.engines}


def test_new_requests_alternate_between_equal_groups(tokenizer):
    groups = make_groups(tokenizer, [8, 8])
    for index in range(4):
        groups.add_request(make_request(f"r{index}", 4))
    assert placed_on(groups) == {"group-0": ["r0", "r2"], "group-1": ["r1", "r3"]}


def test_the_group_with_the_larger_free_share_gets_the_request(tokenizer):
    groups = make_groups(tokenizer, [4, 16])
    for index in range(5):
        groups.add_request(make_request(f"r{index}", 4))
    # r0 ties at 100% free (then the fewest unfinished, then the first): group-0, now 3/4 free after its queue;
    # group-1 stays the larger free share for r1..r4 (15/16, 14/16, 13/16, 12/16 > 3/4)
    waiting = placed_on(groups)
    assert waiting["group-0"] == ["r0"] and waiting["group-1"] == ["r1", "r2", "r3", "r4"]
    assert groups.load().num_waiting == 5 and groups.load().num_kv_blocks == 20


def test_a_recovering_group_gets_no_new_request_unless_every_group_is(tokenizer):
    groups = make_groups(tokenizer, [8, 8])
    groups.engines[0].recovering = True
    groups.add_request(make_request("a", 4))
    groups.add_request(make_request("b", 4))
    assert placed_on(groups) == {"group-0": [], "group-1": ["a", "b"]}
    groups.engines[1].recovering = True
    groups.add_request(make_request("c", 4))
    assert placed_on(groups)["group-0"] == ["c"]


def test_request_ids_are_unique_across_groups_and_aborts_find_their_group(tokenizer):
    groups = make_groups(tokenizer, [8, 8])
    groups.add_request(make_request("a", 4))
    queue = groups.add_request(make_request("b", 4))
    with pytest.raises(DuplicateRequestError, match="request_id"):
        groups.add_request(make_request("a", 4))
    assert groups.abort("b") and not groups.abort("b") and not groups.abort("nope")
    assert queue.get_nowait().finish_reason == generation_pb2.FINISH_REASON_ABORT
    assert groups.num_unfinished == 1


def test_a_lost_group_hands_its_requests_to_a_group_that_answers(tokenizer):
    groups = make_groups(tokenizer, [8, 8, 8])
    queues = {name: groups.add_request(make_request(name, 4)) for name in ("a", "b", "c", "d")}
    lost = groups.engines[0]
    assert [r.request_id for r in lost.scheduler.waiting] == ["a", "d"]
    groups.engines[2].recovering = True  # a second lost group takes nothing
    lost.recovering = True
    lost.on_lost(lost)
    assert placed_on(groups) == {"group-0": [], "group-1": ["b", "a", "d"], "group-2": ["c"]}
    assert not lost.has_request("a") and groups.engines[1].has_request("a")
    assert groups.metrics.registry.get_sample_value("stepahead_scheduler_requests_moved_total") == 2
    assert groups.abort("a") and queues["a"].get_nowait().finish_reason == generation_pb2.FINISH_REASON_ABORT


def test_with_no_group_answering_the_requests_stay(tokenizer):
    groups = make_groups(tokenizer, [8, 8])
    groups.add_request(make_request("a", 4))
    for engine in groups.engines:
        engine.recovering = True
    groups.engines[0].on_lost(groups.engines[0])
    assert placed_on(groups)["group-0"] == ["a"]


def test_two_groups_run_their_requests_to_the_end_with_disjoint_step_ids(tokenizer):
    stubs = [FakeExecutorStub(eos_after=6), FakeExecutorStub(eos_after=6)]
    groups = make_groups(tokenizer, [16, 16], stubs)

    async def main() -> list[list[int]]:
        groups.start()
        queues = [groups.add_request(make_request(f"r{i}", 20)) for i in range(6)]
        outputs = []
        for queue in queues:
            tokens: list[int] = []
            while True:
                message = await asyncio.wait_for(queue.get(), 10)
                tokens += message.token_ids
                if message.finish_reason:
                    break
            outputs.append(tokens)
        await groups.stop()
        return outputs

    outputs = asyncio.run(main())
    assert outputs == [[10, 11, 12, 13, 14, 15, EOS]] * 6
    step_ids = [{step for kind, step in stub.log if kind == "write"} for stub in stubs]
    assert all(step_ids) and max(step_ids[0]) < min(step_ids[1]) == 1 << STEP_ID_GROUP_SHIFT
    assert groups.stats.steps == sum(engine.stats.steps for engine in groups.engines) > 0
    assert groups.load().num_free_kv_blocks == 32 and groups.num_unfinished == 0


def make_caching_groups(tokenizer, num_blocks: list[int]) -> EngineGroups:
    metrics = SchedulerMetrics()
    engines = []
    for index, blocks in enumerate(num_blocks):
        config = SchedulingConfig(max_num_batched_tokens=256, enable_prefix_caching=True)
        scheduler = Scheduler(config, KVBlockManager(blocks, 16, enable_prefix_caching=True), max_model_len=1024,
                              first_step_id=index << STEP_ID_GROUP_SHIFT)
        engines.append(Engine(scheduler, tokenizer, FakeExecutorStub(), 1024, 2, metrics, name=f"group-{index}"))
    return EngineGroups(engines, metrics)


def with_prompt(request_id: str, tokens: list[int]):
    request = make_request(request_id, len(tokens))
    request.prompt_token_ids = list(tokens)
    return request


def test_with_prefix_caching_a_request_goes_to_the_group_holding_its_prefix(tokenizer):
    groups = make_caching_groups(tokenizer, [64, 64])
    shared = list(range(100, 148))  # three blocks
    groups.add_request(with_prompt("first", shared + [1, 2]))
    groups.engines[0].scheduler.schedule()  # its step is planned: its blocks are cached on group-0
    for index in range(3):
        groups.add_request(with_prompt(f"same-{index}", shared + [3 + index]))
        groups.add_request(make_request(f"other-{index}", 4))
    waiting = placed_on(groups)
    # The same prefix follows its blocks while group-0 stays within a quarter of group-1's free share; the others
    # go by load.
    assert waiting["group-0"] == ["same-0", "same-1", "same-2"]
    assert waiting["group-1"] == ["other-0", "other-1", "other-2"]


def test_with_prefix_caching_load_wins_over_a_cached_prefix_on_a_busy_group(tokenizer):
    groups = make_caching_groups(tokenizer, [16, 16])
    shared = list(range(100, 148))
    groups.add_request(with_prompt("first", shared + [1, 2]))
    groups.engines[0].scheduler.schedule()
    groups.engines[0].add_request(make_request("busy", 16 * 5))  # group-0: 4 + 5 of 16 blocks spoken for
    groups.add_request(with_prompt("same", shared + [3]))
    assert placed_on(groups)["group-1"] == ["same"]
