"""An in-process engine over a fake executor, and the HTTP app over it, for the HTTP front's unit tests.

The fake executor samples token ``(10 + seed + outputs) % 300`` (seed 0 when unset), or EOS once a
request has ``eos_after`` outputs (with a ``script``, every request's outputs are the script's ids, then EOS);
with logprobs asked it returns the sampled token's logprob and descending alternatives. With prompt logprobs
asked, each step's output scores the prompt positions its chunk predicts (as the real executor does; the engine
sends positions 1..n-1 of an n-token prompt with the first message): see ``fake_prompt_position``. ``fail`` makes
every Execute stream fail (an unreachable executor); ``step_delay_s`` slows every step (so a client can disconnect
mid-stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx

from scheduler_svc.api_keys import ApiKeyChecker
from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.engine import Engine
from scheduler_svc.http.app import create_app
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.response_store import ResponseStore
from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits
from stepahead_proto import executor_pb2, generation_pb2, sampling_pb2

EOS = 2
MODEL = "tiny"
MAX_MODEL_LEN = 256
NUM_BLOCKS = 64


PROMPT_TOP_LOGPROB = -0.25
"""The fake's logprob of the most likely token at a prompt position (the next ones: 1 less each)."""
UNLIKELY_PROMPT_LOGPROB = -30.0
"""The fake's logprob of a prompt token at an odd position: below every alternative it sends."""


def fake_prompt_position(prompt: list[int], position: int, top: int) -> generation_pb2.PositionLogprobs:
    """The fake's logprobs of prompt token ``position`` (>= 1) with ``top`` alternatives: at an even position the
    prompt's own token is the most likely (its logprob PROMPT_TOP_LOGPROB, then ids +1, +2, ... mod 300); at an odd
    one the alternatives are ids +1, +2, ... mod 300, and the prompt's token is not among them
    (UNLIKELY_PROMPT_LOGPROB)."""
    token = prompt[position]
    even = position % 2 == 0
    own = PROMPT_TOP_LOGPROB if even else UNLIKELY_PROMPT_LOGPROB
    alternatives = ([token] if even else []) + [(token + offset) % 300 for offset in range(1, top + 1)]
    entry = generation_pb2.PositionLogprobs(sampled=generation_pb2.TokenLogprob(token_id=token, logprob=own))
    for rank, token_id in enumerate(alternatives[:top]):
        entry.top.add(token_id=token_id, logprob=PROMPT_TOP_LOGPROB - rank)
    return entry


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
    script: list[int] | None = None
    """Token ids every request outputs in order, then EOS (it ignores structured output: the script follows the
    format or not)."""
    fail: bool = False
    step_delay_s: float = 0.0
    state: dict[str, list[int]] = field(default_factory=dict)
    """request id -> [known tokens, computed tokens, outputs, seed, logprobs asked (-1: none)]."""
    seeds: dict[str, int | None] = field(default_factory=dict)
    formats: dict[str, sampling_pb2.StructuredOutput] = field(default_factory=dict)
    """request id -> the structured output format it arrived with (empty: free text)."""
    prompts: dict[str, list[int]] = field(default_factory=dict)
    """request id -> its prompt token ids."""
    samplings: dict[str, sampling_pb2.SamplingParams] = field(default_factory=dict)
    """request id -> the sampling parameters it arrived with."""
    prompt_logprobs_asked: dict[str, int | None] = field(default_factory=dict)
    """request id -> the sampling.prompt_logprobs it arrived with (None: unset)."""
    formats_after_thinking: dict[str, executor_pb2.FormatAfterThinking] = field(default_factory=dict)
    """request id -> where its format starts (unset: from the first token)."""

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
            self.formats_after_thinking[new.request_id] = new.format_after_thinking
            self.samplings[new.request_id] = sampling
            asked = sampling.prompt_logprobs if sampling.HasField("prompt_logprobs") else None
            self.prompt_logprobs_asked[new.request_id] = asked
            self.prompts[new.request_id] = list(new.prompt_token_ids)
            logprobs = sampling.logprobs if sampling.HasField("logprobs") else -1
            known = len(new.prompt_token_ids) + len(new.output_token_ids)
            self.state[new.request_id] = [known, new.num_computed_tokens, len(new.output_token_ids),
                                          sampling.seed if sampling.HasField("seed") else 0, logprobs]
            scheduled.append((new.request_id, new.num_scheduled_tokens))
        scheduled += [(cached.request_id, cached.num_scheduled_tokens) for cached in step.cached_requests]
        for request_id, num in scheduled:
            entry = self.state[request_id]
            output = result.outputs.add(request_id=request_id)
            prompt, top = self.prompts[request_id], self.prompt_logprobs_asked[request_id]
            scored = range(max(1, entry[1] + 1), min(len(prompt) - 1, entry[1] + num) + 1)  # what this chunk predicts
            if top is not None and scored:
                output.prompt_logprobs_start = scored.start
                output.prompt_logprobs.extend(fake_prompt_position(prompt, position, top) for position in scored)
            entry[1] += num
            if entry[1] == entry[0]:
                outputs, seed, logprobs = entry[2], entry[3], entry[4]
                token = self._token(outputs, seed)
                output.token_ids.append(token)
                if logprobs >= 0:
                    position = output.logprobs.add(sampled=generation_pb2.TokenLogprob(token_id=token, logprob=-0.5))
                    for rank in range(logprobs):
                        position.top.add(token_id=(token + rank) % 300, logprob=-0.5 - rank)
                entry[0] += 1
                entry[2] += 1
        return result

    def _token(self, outputs: int, seed: int) -> int:
        if self.script is not None:
            return self.script[outputs] if outputs < len(self.script) else EOS
        return EOS if self.eos_after is not None and outputs >= self.eos_after else (10 + seed + outputs) % 300


class EngineHarness:
    """An Engine on the running loop over a FakeExecutor, and the HTTP app serving it."""

    def __init__(self, tokenizer: Tokenizer, executor: FakeExecutor | None = None, api_keys: tuple[str, ...] = (),
                 metrics_on: bool = False, ready: bool = True, max_body_bytes: int = 4 * 2**20,
                 tool_call_parser: str | None = None, request_chat_templates: bool = False,
                 reasoning_parser: str | None = None, allowed_origins: tuple[str, ...] = (),
                 thinking_bounds: ThinkingBounds | None = None, response_store: ResponseStore | None = None,
                 force_include_usage: bool = False) -> None:
        self.executor = executor or FakeExecutor()
        self.scheduler = Scheduler(SchedulingConfig(max_num_batched_tokens=256, max_num_seqs=16),
                                   KVBlockManager(NUM_BLOCKS, 16), max_model_len=MAX_MODEL_LEN)
        # No waiting for a lost executor to come back: a failing fake executor answers 503 at once.
        self.engine = Engine(self.scheduler, tokenizer, self.executor, MAX_MODEL_LEN, max_inflight_steps=2,
                             recovery_timeout_s=0.0)
        self.limits = ModelLimits(MODEL, MAX_MODEL_LEN, tokenizer.vocab_size, frozenset({EOS}), 16,
                                  request_chat_templates=request_chat_templates, reasoning_parser=reasoning_parser,
                                  thinking_bounds=thinking_bounds)
        self.ready = ready
        self.context = ServingContext(
            self.engine, tokenizer, self.limits, ApiKeyChecker(api_keys), is_ready=lambda: self.ready,
            metrics_registry=self.engine.metrics.registry if metrics_on else None, max_body_bytes=max_body_bytes,
            tool_call_parser=tool_call_parser, allowed_origins=allowed_origins, force_include_usage=force_include_usage,
            **({"response_store": response_store} if response_store is not None else {}),
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


def serve(tokenizer: Tokenizer, test: Callable[[httpx.AsyncClient, EngineHarness], Awaitable[None]], **harness: Any):
    """Run ``test`` against the app over an EngineHarness, then check every request and KV block was released."""
    async def main() -> None:
        async with EngineHarness(tokenizer, **harness) as served:
            transport = httpx.ASGITransport(app=served.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                await test(client, served)
                await served.wait_until_idle()

    asyncio.run(main())


def scripted(tokenizer: Tokenizer, text: str) -> FakeExecutor:
    """A fake executor whose every request outputs ``text``, then EOS."""
    return FakeExecutor(script=tokenizer.encode(text, add_special_tokens=False))


def typed_events(text: str) -> list[dict[str, Any]]:
    """The events of a Responses or Messages stream: each block ``event: TYPE`` then ``data: {...}`` of that type."""
    found = []
    for block in filter(None, text.split("\n\n")):
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        found.append(event)
    return found


def events(response: httpx.Response) -> list[Any]:
    """The SSE payloads, [DONE] as the string "[DONE]"."""
    assert response.headers["content-type"].startswith("text/event-stream")
    found = []
    for block in response.text.split("\n\n"):
        if block:
            assert block.startswith("data: "), block
            payload = block[len("data: "):]
            found.append(payload if payload == "[DONE]" else json.loads(payload))
    return found
