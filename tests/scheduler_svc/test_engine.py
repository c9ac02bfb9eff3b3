"""The engine loop against an in-process fake executor: run-ahead ordering, stops found late, aborts."""

from __future__ import annotations

import asyncio
from collections import deque

import grpc
import pytest
from tiny_tokenizers import build_byte_level

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.engine import Engine, EngineError
from scheduler_svc.request import Request, StopParams
from scheduler_svc.request_log import RequestLog
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import executor_pb2, generation_pb2, sampling_pb2

EOS = 2


class FakeExecutorCall:
    """A bidirectional Execute stream whose executor samples token (10 + number of outputs) % 300,
    or EOS once a request has `eos_after` outputs. Records the order of writes and reads."""

    def __init__(self, log: list[tuple[str, int]], eos_after: int | None) -> None:
        self.log = log
        self.eos_after = eos_after
        self.pending: deque[executor_pb2.StepRequest] = deque()
        self.state: dict[str, list[int]] = {}  # request id -> [known tokens, computed, outputs]
        self.arrived = asyncio.Event()

    async def write(self, step: executor_pb2.StepRequest) -> None:
        self.log.append(("write", step.step_id))
        if step.new_requests or step.cached_requests:
            self.log.append(("compute", step.step_id))
        self.pending.append(step)
        self.arrived.set()

    async def read(self) -> executor_pb2.StepResult:
        await asyncio.sleep(0)  # a real stream read always suspends
        while not self.pending:
            self.arrived.clear()
            await self.arrived.wait()
        step = self.pending.popleft()
        self.log.append(("read", step.step_id))
        return self._run(step)

    def _run(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        for request_id in step.finished_request_ids:
            self.state.pop(request_id, None)
        result = executor_pb2.StepResult(step_id=step.step_id)
        scheduled = [(n.request_id, n.num_scheduled_tokens) for n in step.new_requests]
        for new in step.new_requests:
            self.state[new.request_id] = [
                len(new.prompt_token_ids) + len(new.output_token_ids),
                new.num_computed_tokens,
                len(new.output_token_ids),
            ]
        scheduled += [(c.request_id, c.num_scheduled_tokens) for c in step.cached_requests]
        for request_id, num in scheduled:
            entry = self.state[request_id]
            entry[1] += num
            output = result.outputs.add(request_id=request_id)
            if entry[1] == entry[0]:
                outputs = entry[2]
                token = EOS if self.eos_after is not None and outputs >= self.eos_after else 10 + outputs % 300
                output.token_ids.append(token)
                entry[0] += 1
                entry[2] += 1
        return result

    def cancel(self) -> None:
        pass


class FakeExecutorStub:
    def __init__(self, eos_after: int | None = None) -> None:
        self.log: list[tuple[str, int]] = []
        self.eos_after = eos_after

    def Execute(self):
        return FakeExecutorCall(self.log, self.eos_after)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def make_request(request_id: str, max_tokens: int, ignore_eos: bool = False) -> Request:
    stop = StopParams(max_tokens=max_tokens, eos_token_ids=frozenset({EOS}), ignore_eos=ignore_eos)
    return Request(request_id, [5, 6, 7, 8], sampling_pb2.SamplingParams(), stop)


async def run_requests(tokenizer, inflight: int, requests: list[Request], eos_after=None, num_blocks=64,
                       request_log: RequestLog | None = None):
    stub = FakeExecutorStub(eos_after)
    scheduler = Scheduler(SchedulingConfig(max_num_batched_tokens=64, max_inflight_steps=inflight),
                          KVBlockManager(num_blocks, 16), max_model_len=1024)
    engine = Engine(scheduler, tokenizer, stub, max_model_len=1024, max_inflight_steps=inflight,
                    request_log=request_log)
    engine.start()
    queues = [engine.add_request(r) for r in requests]
    finals = []
    for queue in queues:
        tokens = []
        while True:
            message = await asyncio.wait_for(queue.get(), 10)
            tokens.extend(message.token_ids)
            if message.finish_reason:
                finals.append((tokens, message))
                break
    await engine.stop()
    return finals, stub.log, scheduler


def test_run_ahead_writes_next_step_before_reading_result(tokenizer):
    finals, log, _ = asyncio.run(run_requests(tokenizer, 2, [make_request("a", 6)]))
    assert log.index(("write", 1)) < log.index(("read", 0))
    assert finals[0][0] == [10, 11, 12, 13, 14, 15]


def test_synchronous_mode_never_runs_ahead(tokenizer):
    finals, log, _ = asyncio.run(run_requests(tokenizer, 1, [make_request("a", 6)]))
    for step_id in range(1, 6):
        assert log.index(("read", step_id - 1)) < log.index(("write", step_id))
    assert finals[0][0] == [10, 11, 12, 13, 14, 15]


@pytest.mark.parametrize("inflight", [1, 2, 3])
def test_stop_found_late_discards_inflight_token_and_frees_blocks(tokenizer, inflight):
    requests = [make_request("a", 50), make_request("b", 50, ignore_eos=True)]
    finals, _, scheduler = asyncio.run(run_requests(tokenizer, inflight, requests, eos_after=3))
    tokens_a, last_a = finals[0]
    assert tokens_a == [10, 11, 12, EOS] and last_a.finish_reason == generation_pb2.FINISH_REASON_STOP
    assert last_a.usage.completion_tokens == 4
    tokens_b, last_b = finals[1]
    assert len(tokens_b) == 50 and last_b.finish_reason == generation_pb2.FINISH_REASON_LENGTH
    assert scheduler.block_manager.num_free_blocks == 64


@pytest.mark.parametrize("inflight", [1, 2])
def test_max_tokens_is_never_over_scheduled(tokenizer, inflight):
    finals, log, _ = asyncio.run(run_requests(tokenizer, inflight, [make_request("a", 3, ignore_eos=True)]))
    assert finals[0][0] == [10, 11, 12]
    assert max(step for kind, step in log if kind == "compute") == 2  # steps 0, 1, 2 and no more


def test_abort_while_step_in_flight_drops_its_result(tokenizer):
    async def scenario():
        stub = FakeExecutorStub()
        scheduler = Scheduler(SchedulingConfig(max_inflight_steps=2), KVBlockManager(64, 16), max_model_len=1024)
        engine = Engine(scheduler, tokenizer, stub, max_model_len=1024, max_inflight_steps=2)
        engine.start()
        queue = engine.add_request(make_request("a", 500, ignore_eos=True))
        await asyncio.wait_for(queue.get(), 10)
        assert engine.abort("a")
        messages = []
        while not queue.empty():
            messages.append(queue.get_nowait())
        for _ in range(5):  # let in-flight results arrive; none may reach the aborted stream
            await asyncio.sleep(0)
        assert queue.empty()
        await engine.stop()
        return messages, scheduler

    messages, scheduler = asyncio.run(scenario())
    assert messages[-1].finish_reason == generation_pb2.FINISH_REASON_ABORT
    assert scheduler.block_manager.num_free_blocks == 64


class FailingOnceStub(FakeExecutorStub):
    """The first Execute stream fails on its third read with ``code``; later streams run normally and Describe
    always answers (the executor came back, or never left)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__()
        self.code, self.details = code, details
        self.streams = 0

    def Execute(self):
        self.streams += 1
        call = FakeExecutorCall(self.log, self.eos_after)
        if self.streams == 1:
            read, reads = call.read, [0]

            async def failing_read():
                reads[0] += 1
                if reads[0] == 3:
                    raise grpc.aio.AioRpcError(self.code, grpc.aio.Metadata(), grpc.aio.Metadata(), self.details)
                return await read()

            call.read = failing_read
        return call

    async def Describe(self, request, timeout=None):
        return executor_pb2.ExecutorDescription()


async def run_with_failing_stream(tokenizer, stub) -> generation_pb2.GenerateResponse | EngineError:
    """One 8-token request through an engine on ``stub``; its last stream item."""
    scheduler = Scheduler(SchedulingConfig(max_num_batched_tokens=64), KVBlockManager(64, 16), max_model_len=1024)
    engine = Engine(scheduler, tokenizer, stub, max_model_len=1024, max_inflight_steps=2, recovery_timeout_s=30)
    engine.start()
    queue = engine.add_request(make_request("a", 8, ignore_eos=True))
    tokens = []
    while True:
        item = await asyncio.wait_for(queue.get(), 10)
        if isinstance(item, EngineError):
            break
        tokens.extend(item.token_ids)
        if item.finish_reason:
            break
    await engine.stop()
    return item, tokens


def test_a_stream_torn_down_as_internal_is_an_executor_loss_and_the_request_recovers(tokenizer):
    """gRPC's core reports an executor killed mid-write as INTERNAL ("Internal error from Core"), which the executor
    itself never sends: the request is recomputed on the new stream and completes with the same tokens."""
    stub = FailingOnceStub(grpc.StatusCode.INTERNAL, "Internal error from Core")
    last, tokens = asyncio.run(run_with_failing_stream(tokenizer, stub))
    assert last.finish_reason == generation_pb2.FINISH_REASON_LENGTH and stub.streams == 2
    assert tokens == [10 + i for i in range(8)]


def test_a_refused_step_fails_the_request_instead_of_recovering(tokenizer):
    stub = FailingOnceStub(grpc.StatusCode.FAILED_PRECONDITION, "block_ids: too few")
    last, _ = asyncio.run(run_with_failing_stream(tokenizer, stub))
    assert isinstance(last, EngineError) and last.code == grpc.StatusCode.UNAVAILABLE
    assert "FAILED_PRECONDITION" in last.message and "block_ids: too few" in last.message


def test_the_bubble_is_split_at_the_next_steps_arrival(tokenizer):
    scheduler = Scheduler(SchedulingConfig(), KVBlockManager(64, 16), max_model_len=1024)
    engine = Engine(scheduler, tokenizer, FakeExecutorStub(), max_model_len=1024, max_inflight_steps=2,
                    recovery_timeout_s=30)

    def account(received: float, start: float, end: float) -> tuple[float, float]:
        engine._account_executor_time(executor_pb2.StepResult(received_s=received, compute_start_s=start,
                                                               compute_end_s=end))
        return engine.stats.executor_bubble_s, engine.stats.executor_bubble_awaiting_step_s

    assert account(9.0, 10.0, 10.1) == (0.0, 0.0)  # the first step: no gap before it
    bubble, awaiting = account(10.13, 10.15, 10.2)  # arrived 30 ms after the previous step ended, started 20 ms later
    assert bubble == pytest.approx(0.05) and awaiting == pytest.approx(0.03)
    bubble, awaiting = account(10.15, 10.21, 10.3)  # already there when the previous step ended: the executor's own gap
    assert bubble == pytest.approx(0.06) and awaiting == pytest.approx(0.03)
    bubble, awaiting = account(0.0, 10.4, 10.5)  # an executor that does not report arrivals: none counted as awaiting
    assert bubble == pytest.approx(0.16) and awaiting == pytest.approx(0.03)


def test_both_legs_of_the_round_trip_are_summed(tokenizer):
    """result in: a step's end on the executor to the engine reading its result, every result; step out: the engine
    writing a StepRequest to the executor reading it, once per StepRequest (sub-step 0 of a multi-step one)."""
    scheduler = Scheduler(SchedulingConfig(), KVBlockManager(64, 16), max_model_len=1024)
    engine = Engine(scheduler, tokenizer, FakeExecutorStub(), max_model_len=1024, max_inflight_steps=2,
                    recovery_timeout_s=30)
    step = executor_pb2.StepResult
    results = [(step(step_id=1, received_s=100.002, compute_end_s=100.2), 100.0, 100.203),
               (step(step_id=2, received_s=100.504, compute_end_s=100.7), 100.5, 100.701),
               (step(step_id=2, sub_step=1, received_s=100.504, compute_end_s=100.9), 100.5, 100.902),
               (step(step_id=3, compute_end_s=101.2), 101.0, 101.2)]  # arrival not reported
    for result, sent_at, read_at in results:
        engine._account_delivery(result, sent_at, read_at)
    assert engine.stats.result_delivery_s == pytest.approx(0.003 + 0.001 + 0.002 + 0.0)
    assert engine.stats.step_delivery_s == pytest.approx(0.002 + 0.004)
    engine._account_delivery(executor_pb2.StepResult(step_id=4), 101.5, 101.6)  # an executor that reports no times
    assert engine.stats.result_delivery_s == pytest.approx(0.006)


def test_the_request_log_has_a_line_per_ended_request_when_enabled(tokenizer, caplog):
    requests = [make_request("a", 50), make_request("b", 5, ignore_eos=True)]
    with caplog.at_level("INFO", logger="stepahead.requests"):
        asyncio.run(run_requests(tokenizer, 2, requests, eos_after=3, request_log=RequestLog(True)))
        lines = sorted(record.getMessage() for record in caplog.records if record.name == "stepahead.requests")
    assert len(lines) == 2
    assert lines[0].startswith("request a finished (stop): prompt 4 tokens (0 cached), output 4 tokens, queue ")
    assert lines[1].startswith("request b finished (length): prompt 4 tokens (0 cached), output 5 tokens, queue ")
    assert all(" ttft " in line and " e2e " in line for line in lines)
    caplog.clear()
    with caplog.at_level("INFO", logger="stepahead.requests"):
        asyncio.run(run_requests(tokenizer, 2, [make_request("c", 5)]))  # off by default
    assert not [record for record in caplog.records if record.name == "stepahead.requests"]


def test_the_request_log_has_aborted_and_failed_requests(tokenizer, caplog):
    async def main():
        scheduler = Scheduler(SchedulingConfig(max_num_batched_tokens=64), KVBlockManager(64, 16), max_model_len=1024)
        engine = Engine(scheduler, tokenizer, FakeExecutorStub(), max_model_len=1024, max_inflight_steps=2,
                        request_log=RequestLog(True, group="127.0.0.1:1"))
        engine.add_request(make_request("gone", 50, ignore_eos=True))
        engine.add_request(make_request("cut", 50, ignore_eos=True))
        assert engine.abort("gone")
        engine.fail_unfinished(grpc.StatusCode.UNAVAILABLE, "executor lost")

    with caplog.at_level("INFO", logger="stepahead.requests"):
        asyncio.run(main())
    lines = [record.getMessage() for record in caplog.records if record.name == "stepahead.requests"]
    assert lines[0].startswith("request gone on 127.0.0.1:1 finished (abort): prompt ")
    assert lines[1] == "request cut on 127.0.0.1:1 failed: UNAVAILABLE executor lost"
