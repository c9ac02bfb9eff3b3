"""An in-process engine over a fake executor, and the HTTP app over it, for the HTTP front's unit tests.

The fake executor samples token ``(10 + seed + outputs) % 300`` (seed 0 when unset), or EOS once a
request has ``eos_after`` outputs; with logprobs asked it returns the sampled token's logprob and
descending alternatives. ``fail`` makes every Execute stream fail (an unreachable executor);
``step_delay_s`` slows every step (so a client can disconnect mid-stream).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field

import grpc

from scheduler_svc.api_keys import ApiKeyChecker
from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.engine import Engine
from scheduler_svc.http.app import create_app
from scheduler_svc.http.context import ServingContext
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits
from stepahead_proto import executor_pb2, generation_pb2, sampling_pb2

EOS = 2
MODEL = "tiny"
MAX_MODEL_LEN = 256
NUM_BLOCKS = 64


class _Call:
    def __init__(self, stub: FakeExecutor) -> None:
        self.stub = stub
        self.pending: deque[executor_pb2.StepRequest] = deque()
        self.arrived = asyncio.Event()

    async def write(self, step: executor_pb2.StepRequest) -> None:
        if self.stub.fail:
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       details="connection refused")
        self.pending.append(step)
        self.arrived.set()

    async def read(self) -> executor_pb2.StepResult:
        await asyncio.sleep(self.stub.step_delay_s)
        while not self.pending:
            self.arrived.clear()
            await self.arrived.wait()
        return self.stub.run(self.pending.popleft())

    def cancel(self) -> None:
        pass

    def done(self) -> bool:
        return False


@dataclass
class FakeExecutor:
    """Stands in for the executor's stub: Execute() returns a fake bidirectional call."""

    eos_after: int | None = None
    fail: bool = False
    step_delay_s: float = 0.0
    state: dict[str, list[int]] = field(default_factory=dict)
    """request id -> [known tokens, computed tokens, outputs, seed, logprobs asked (-1: none)]."""
    seeds: dict[str, int | None] = field(default_factory=dict)
    formats: dict[str, sampling_pb2.StructuredOutput] = field(default_factory=dict)
    """request id -> the structured output format it arrived with (empty: free text)."""

    def Execute(self) -> _Call:
        return _Call(self)

    def run(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        for request_id in step.finished_request_ids:
            self.state.pop(request_id, None)
        result = executor_pb2.StepResult(step_id=step.step_id)
        scheduled = []
        for new in step.new_requests:
            sampling = new.sampling
            self.seeds[new.request_id] = sampling.seed if sampling.HasField("seed") else None
            self.formats[new.request_id] = sampling.structured_output
            logprobs = sampling.logprobs if sampling.HasField("logprobs") else -1
            known = len(new.prompt_token_ids) + len(new.output_token_ids)
            self.state[new.request_id] = [known, new.num_computed_tokens, len(new.output_token_ids),
                                          sampling.seed if sampling.HasField("seed") else 0, logprobs]
            scheduled.append((new.request_id, new.num_scheduled_tokens))
        scheduled += [(cached.request_id, cached.num_scheduled_tokens) for cached in step.cached_requests]
        for request_id, num in scheduled:
            entry = self.state[request_id]
            entry[1] += num
            output = result.outputs.add(request_id=request_id)
            if entry[1] == entry[0]:
                outputs, seed, logprobs = entry[2], entry[3], entry[4]
                token = EOS if self.eos_after is not None and outputs >= self.eos_after else (10 + seed + outputs) % 300
                output.token_ids.append(token)
                if logprobs >= 0:
                    position = output.logprobs.add(sampled=generation_pb2.TokenLogprob(token_id=token, logprob=-0.5))
                    for rank in range(logprobs):
                        position.top.add(token_id=(token + rank) % 300, logprob=-0.5 - rank)
                entry[0] += 1
                entry[2] += 1
        return result


class EngineHarness:
    """An Engine on the running loop over a FakeExecutor, and the HTTP app serving it."""

    def __init__(self, tokenizer: Tokenizer, executor: FakeExecutor | None = None, api_keys: tuple[str, ...] = (),
                 metrics_on: bool = False, ready: bool = True, max_body_bytes: int = 4 * 2**20) -> None:
        self.executor = executor or FakeExecutor()
        self.scheduler = Scheduler(SchedulingConfig(max_num_batched_tokens=256, max_num_seqs=16),
                                   KVBlockManager(NUM_BLOCKS, 16), max_model_len=MAX_MODEL_LEN)
        # No waiting for a lost executor to come back: a failing fake executor answers 503 at once.
        self.engine = Engine(self.scheduler, tokenizer, self.executor, MAX_MODEL_LEN, max_inflight_steps=2,
                             recovery_timeout_s=0.0)
        self.limits = ModelLimits(MODEL, MAX_MODEL_LEN, tokenizer.vocab_size, frozenset({EOS}), 16)
        self.ready = ready
        self.context = ServingContext(
            self.engine, tokenizer, self.limits, ApiKeyChecker(api_keys), is_ready=lambda: self.ready,
            metrics_registry=self.engine.metrics.registry if metrics_on else None, max_body_bytes=max_body_bytes,
        )
        self.app = create_app(self.context)

    async def __aenter__(self) -> EngineHarness:
        self.engine.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self.engine.stop()

    async def wait_until_idle(self, timeout_s: float = 5.0) -> None:
        """Every request is gone and every KV block is free again."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        blocks = self.scheduler.block_manager
        while self.scheduler.has_unfinished_requests or blocks.num_free_blocks != blocks.num_total_blocks:
            assert asyncio.get_running_loop().time() < deadline, "requests or KV blocks were not released"
            await asyncio.sleep(0.01)
