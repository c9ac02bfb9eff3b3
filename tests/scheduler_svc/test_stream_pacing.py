"""--stream-interval: the first message at once, then messages of at least N tokens, the last with the rest; the
merged messages read exactly as the separate ones (text, ids, logprobs in order; first- and last-message fields
where they belong); nothing held is lost to a finish, an abort or an error."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from test_engine import FakeExecutorStub, make_request
from test_output_processor import feed, make_state
from tiny_tokenizers import build_byte_level

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.engine import Engine, EngineError
from scheduler_svc.output_processor import RequestOutputState
from scheduler_svc.request_timing import RequestTiming
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.stream_pacing import StreamPacer, merge_delta
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import generation_pb2 as pb

STOP = pb.FINISH_REASON_STOP


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def delta(text: str, token_ids: list[int], **fields) -> pb.GenerateResponse:
    logprobs = [pb.PositionLogprobs(sampled=pb.TokenLogprob(token_id=t, logprob=-0.5 * t)) for t in token_ids]
    return pb.GenerateResponse(request_id="r", text=text, token_ids=token_ids, logprobs=logprobs, **fields)


def test_merged_deltas_read_as_the_separate_ones():
    first = delta("Hel", [5], prompt_tokens=7, reasoning_text="Hm")
    merge_delta(first, delta("lo!", [6, 7], finish_reason=STOP, stop_reason="!", usage=pb.Usage(completion_tokens=3),
                             reasoning_text="m.", thought=True))
    assert (first.text, list(first.token_ids), [p.sampled.token_id for p in first.logprobs]) == (
        "Hello!", [5, 6, 7], [5, 6, 7])
    assert (first.reasoning_text, first.thought) == ("Hmm.", True)
    assert (first.prompt_tokens, first.finish_reason, first.stop_reason, first.usage.completion_tokens) == (
        7, STOP, "!", 3)


def test_first_message_at_once_then_at_least_the_interval_then_the_rest():
    pacer = StreamPacer(3)
    sent = [pacer.pace(delta(str(i), [i], prompt_tokens=4 if i == 0 else 0), final=i == 7) for i in range(8)]
    assert [None if m is None else list(m.token_ids) for m in sent] == [
        [0], None, None, [1, 2, 3], None, None, [4, 5, 6], [7]]
    assert pacer.take_held() is None


def test_an_interval_of_one_holds_nothing():
    pacer = StreamPacer()
    assert [list(pacer.pace(delta("x", [i])).token_ids) for i in range(3)] == [[0], [1], [2]]


def test_a_bad_interval_is_refused():
    with pytest.raises(ValueError, match="stream_interval"):
        StreamPacer(0)
    with pytest.raises(ValueError, match="stream_interval"):
        SchedulingConfig(stream_interval=0)


def test_output_state_streams_the_same_text_in_fewer_messages(tokenizer):
    ids = tokenizer.encode("The quick brown fox jumps over the lazy dog")
    texts = {}
    for interval in (1, 4):
        base = make_state(tokenizer, max_tokens=len(ids))
        state = RequestOutputState(base.request, tokenizer, 1000, RequestTiming(arrival=0.0), stream_interval=interval)
        messages = [m for m in (feed(state, [i]) for i in ids) if m is not None]
        assert messages[-1].finish_reason == pb.FINISH_REASON_LENGTH and messages[0].prompt_tokens == 3
        texts[interval] = ("".join(m.text for m in messages), [t for m in messages for t in m.token_ids],
                           len(messages))
    assert texts[4][:2] == texts[1][:2]
    assert texts[4][2] == 1 + -(-(len(ids) - 1) // 4) < texts[1][2]


async def paced_engine(tokenizer, interval: int):
    scheduler = Scheduler(SchedulingConfig(max_inflight_steps=2, stream_interval=interval), KVBlockManager(64, 16),
                          max_model_len=1024)
    engine = Engine(scheduler, tokenizer, FakeExecutorStub(), max_model_len=1024, max_inflight_steps=2)
    engine.start()
    return engine, scheduler


def test_an_abort_sends_what_was_held(tokenizer):
    async def scenario():
        engine, scheduler = await paced_engine(tokenizer, 1000)
        queue = engine.add_request(make_request("a", 500, ignore_eos=True))
        first = await asyncio.wait_for(queue.get(), 10)
        for _ in range(40):  # steps go by; with an interval of 1000 everything after the first token is held
            await asyncio.sleep(0)
        assert queue.empty()
        engine.abort("a")
        last = queue.get_nowait()
        await engine.stop()
        return first, last, scheduler

    first, last, scheduler = asyncio.run(scenario())
    assert len(first.token_ids) == 1 and last.finish_reason == pb.FINISH_REASON_ABORT
    assert len(last.token_ids) > 0 and last.usage.completion_tokens == 1 + len(last.token_ids)
    assert scheduler.block_manager.num_free_blocks == 64


def test_an_error_comes_after_what_was_held(tokenizer):
    async def scenario():
        engine, _ = await paced_engine(tokenizer, 1000)
        queue = engine.add_request(make_request("a", 500, ignore_eos=True))
        await asyncio.wait_for(queue.get(), 10)
        for _ in range(40):
            await asyncio.sleep(0)
        engine.fail_unfinished(grpc.StatusCode.UNAVAILABLE, "executor lost")
        items = [queue.get_nowait() for _ in range(queue.qsize())]
        await engine.stop()
        return items

    held, error = asyncio.run(scenario())
    assert isinstance(held, pb.GenerateResponse) and len(held.token_ids) > 0
    assert isinstance(error, EngineError) and error.code == grpc.StatusCode.UNAVAILABLE
