"""The step loop: schedule, write StepRequests to the executor, read StepResults, stream outputs.

Up to ``max_inflight_steps`` steps are written before the oldest result is read; results come
back in step order on the same bidirectional stream, which is the cross-process future.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from scheduler_svc.engine_load import EngineLoad
from scheduler_svc.lora_adapters import ServedAdapters
from scheduler_svc.metrics import SchedulerMetrics
from scheduler_svc.output_processor import RequestOutputState
from scheduler_svc.request import Request
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.request_log import RequestLog
from scheduler_svc.request_timing import RequestTiming
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.scheduler_output import SchedulerOutput
from scheduler_svc.spec_stats import SpecStatsTracker
from scheduler_svc.step_codec import to_step_request
from scheduler_svc.step_tracing import EngineTracing
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import executor_pb2, executor_pb2_grpc, generation_pb2

ExecuteCall = grpc.aio.StreamStreamCall[executor_pb2.StepRequest, executor_pb2.StepResult]
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineError:
    """Put on a request's queue when it cannot finish normally (the executor failed)."""

    code: grpc.StatusCode
    message: str


StreamItem = generation_pb2.GenerateResponse | EngineError


class AdmissionClosedError(RuntimeError):
    """A request arrived after the server began shutting down."""


@dataclass(frozen=True)
class MovedRequest:
    """A waiting request with its output state and stream queue, on its way to another executor group."""

    request: Request
    state: RequestOutputState
    queue: asyncio.Queue[StreamItem]


@dataclass(frozen=True)
class InflightStep:
    """A StepRequest written to the executor whose results have not all arrived."""

    output: SchedulerOutput
    sent_at: float
    """When the engine started writing it (wall clock, as the executor stamps its arrival)."""


class Engine:
    """Owns the scheduler and the Execute stream; routes each request's outputs to its queue."""

    def __init__(
        self,
        scheduler: Scheduler,
        tokenizer: Tokenizer,
        executor: executor_pb2_grpc.ExecutorStub,
        max_model_len: int,
        max_inflight_steps: int,
        metrics: SchedulerMetrics | None = None,
        tracing: EngineTracing | None = None,
        recovery_timeout_s: float = 60.0,
        name: str = "",
        adapters: ServedAdapters | None = None,
        request_log: RequestLog | None = None,
    ) -> None:
        """``adapters``: the LoRA adapters requests may name (those loaded while serving are sent again to an
        executor this engine reconnects to); ``request_log``: logs each request as it ends (off by default)."""
        self.name = name
        """The executor group's name in logs and metrics (its address)."""
        self.request_log = request_log or RequestLog()
        self.adapters = adapters
        self.scheduler = scheduler
        self.tracing = tracing or EngineTracing()
        self.metrics = metrics or SchedulerMetrics()
        self.metrics.bind_engine(self)
        self.tokenizer = tokenizer
        self.executor = executor
        self.max_model_len = max_model_len
        self.max_inflight_steps = max_inflight_steps
        self.recovery_timeout_s = recovery_timeout_s
        """After losing the executor, how long a request may wait for it to come back (0: fail at once)."""
        self._states: dict[str, RequestOutputState] = {}
        self._queues: dict[str, asyncio.Queue[StreamItem]] = {}
        self._inflight: deque[InflightStep] = deque()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stats = generation_pb2.EngineStats()
        """Counters the engine accumulates (see ``stats``)."""
        self._last_compute_end: float | None = None
        """When the executor finished the previous step; None after the engine went idle."""
        self._lost_since: float | None = None
        """When the executor was lost, until a step result arrives from its replacement."""
        self._admission_closed: str | None = None
        """Why new requests are refused (the server is shutting down); None while admitting."""
        self._call: ExecuteCall | None = None
        """The Execute stream in use (None between streams)."""
        self._abandon_reason: str | None = None
        """Set when the Execute stream was given up because the executor stopped answering."""
        self._group_steps = self.metrics.group_steps.labels(group=name)
        self.recovering = False
        """True from the executor's loss until it (or its replacement) answers again."""
        self.on_lost: Callable[[Engine], None] | None = None
        """Called once the lost executor's running requests are requeued (executor groups move them on)."""

    # ---- requests ----------------------------------------------------------------------------
    def add_request(
        self, request: Request, queue: asyncio.Queue[StreamItem] | None = None
    ) -> asyncio.Queue[StreamItem]:
        """Queue a validated request; its messages arrive on the returned queue.

        ``queue``: put them there instead of on a new queue (several requests may share one; their
        messages carry their request ids, an EngineError arrives once per request).
        Raises AdmissionClosedError once close_admission() was called.
        """
        if self._admission_closed is not None:
            raise AdmissionClosedError(self._admission_closed)
        self._check_adapter_still_served(request)
        self.scheduler.add_request(request)
        self.tracing.register_request(request.request_id)
        if queue is None:
            queue = asyncio.Queue()
        self._queues[request.request_id] = queue
        self._states[request.request_id] = RequestOutputState(
            request, self.tokenizer, self.max_model_len, RequestTiming(arrival=request.arrival_time),
            self.scheduler.config.stream_interval,
        )
        self._wakeup.set()
        return queue

    def _check_adapter_still_served(self, request: Request) -> None:
        """InvalidRequestError when the request's adapter was unloaded (or unloaded and loaded again) after the
        request was validated: its executor slot or its cached blocks would not be the adapter it was built for."""
        name = request.lora_adapter
        if not name or self.adapters is None:
            return
        if name not in self.adapters or self.adapters.cache_key(name) != request.adapter_cache_key:
            raise InvalidRequestError("model", f"LoRA adapter {name!r} was unloaded while the request was checked")

    def requests_using_adapter(self, name: str) -> int:
        """Unfinished requests that run with LoRA adapter ``name``."""
        return sum(1 for state in self._states.values() if state.request.lora_adapter == name)

    def load(self) -> EngineLoad:
        """KV blocks and requests of this engine, read now."""
        blocks = self.scheduler.block_manager
        return EngineLoad(
            num_kv_blocks=blocks.num_total_blocks,
            num_free_kv_blocks=blocks.num_free_blocks,
            num_running=self.scheduler.num_running,
            num_waiting=self.scheduler.num_waiting,
            num_preemptions=self.scheduler.num_preemptions,
            blocks_wanted=self.scheduler.blocks_wanted(),
            num_prefix_queried_tokens=self.scheduler.num_prefix_queried_tokens,
            num_prefix_hit_tokens=self.scheduler.num_prefix_hit_tokens,
        )

    @property
    def block_size(self) -> int:
        return self.scheduler.block_manager.block_size

    def group_loads(self) -> list[tuple[str, EngineLoad]]:
        """This engine as the one executor group."""
        return [(self.name, self.load())]

    def has_request(self, request_id: str) -> bool:
        return request_id in self._queues

    def detach_waiting(self) -> list[MovedRequest]:
        """Hand over every waiting request (with its stream) to be adopted by another engine."""
        moved = []
        for request in self.scheduler.take_waiting():
            request_id = request.request_id
            moved.append(MovedRequest(request, self._states.pop(request_id), self._queues.pop(request_id)))
        return moved

    def adopt(self, moved: MovedRequest) -> None:
        """Take over a request another engine detached; it is recomputed here from its prompt and outputs."""
        request_id = moved.request.request_id
        self.scheduler.adopt_waiting(moved.request)
        self._states[request_id] = moved.state
        self._queues[request_id] = moved.queue
        self._wakeup.set()

    def close_admission(self, reason: str) -> None:
        """Refuse every new request from now on (graceful shutdown); running and waiting ones go on."""
        self._admission_closed = reason

    @property
    def num_unfinished(self) -> int:
        """Requests whose stream has not ended yet (waiting or running)."""
        return len(self._queues)

    def fail_unfinished(self, code: grpc.StatusCode, message: str) -> None:
        """End every unfinished request with ``code`` and free its blocks (steps in flight are dropped)."""
        self._fail_all(code, message)

    def abort(self, request_id: str) -> bool:
        """Abort a request now: its blocks are freed and its stream ends with finish_reason ABORT."""
        state = self._states.pop(request_id, None)
        queue = self._queues.pop(request_id, None)
        if state is None or queue is None:
            return False
        self.scheduler.finish_request(request_id)
        now = time.monotonic()
        message = state.abort_message(now)
        queue.put_nowait(message)
        self.metrics.observe_finished(state.request, state.timing, generation_pb2.FINISH_REASON_ABORT, now)
        self.request_log.finished(message)
        self._wakeup.set()
        return True

    # ---- loop --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the step loop as a task of the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def abandon_unresponsive_executor(self, reason: str) -> None:
        """The executor did not answer a health check (a stopped or hung process): with steps in flight, give
        up its Execute stream so the requests are recovered as after a crash (recomputed when it is back)."""
        if self._call is None or not self._inflight or self._abandon_reason is not None:
            return
        logger.warning("executor unresponsive with %d steps in flight (%s): giving up its stream",
                       len(self._inflight), reason)
        self._abandon_reason = reason
        self._call.cancel()

    async def _run_forever(self) -> None:
        while True:
            # A new stream may reach a new executor process: KV written before it cannot be read back.
            self.scheduler.reset_prefix_cache()
            await self._restore_adapters()
            call = self._call = self.executor.Execute()
            self._abandon_reason = None
            try:
                await self._run_stream(call)
            except asyncio.CancelledError:
                call.cancel()
                if self._abandon_reason is None or _task_cancelled():
                    raise
                await self._executor_lost(grpc.StatusCode.UNAVAILABLE, f"executor unresponsive: {self._abandon_reason}")
            except Exception as error:  # the executor failed or went away
                code, reason = await _stream_failure(call, error)
                call.cancel()
                await self._executor_lost(code, reason)
            finally:
                self._call = None

    async def _restore_adapters(self) -> None:
        """Send the executor the adapters loaded while serving (a replacement started without them; one that has
        them answers OK). One it cannot load any more ends its requests here, UNAVAILABLE."""
        if self.adapters is None:
            return
        for name, path in self.adapters.loaded_while_serving.items():
            try:
                await self.executor.LoadLoraAdapter(executor_pb2.LoraAdapterRequest(name=name, path=path), timeout=60)
            except grpc.aio.AioRpcError as error:
                if error.code() in (*_EXECUTOR_LOST_CODES, grpc.StatusCode.DEADLINE_EXCEEDED):
                    return  # gone again: opening the stream fails too, and recovery starts over
                self._drop_adapter(name, f"the executor could not load LoRA adapter {name!r} again: {error.details()}")

    def _drop_adapter(self, name: str, reason: str) -> None:
        """Stop serving an adapter this group's executor refuses: its requests end UNAVAILABLE, new ones are refused
        (a step naming it would make the executor refuse the whole stream)."""
        logger.error("%s; the adapter is no longer served", reason)
        if self.adapters is not None and name in self.adapters:
            self.adapters.remove(name)
        for request_id, state in list(self._states.items()):
            if state.request.lora_adapter == name:
                self._fail_request(request_id, grpc.StatusCode.UNAVAILABLE, reason)

    async def _executor_lost(self, code: grpc.StatusCode | None, reason: str) -> None:
        if code in _EXECUTOR_LOST_CODES and self.recovery_timeout_s > 0:
            await self._recover(reason)
        else:  # the executor refused a step, or recovery is off: what ran cannot succeed there
            logger.error("Execute stream failed: %s", reason)
            self._lost_since = None
            self._fail_all(grpc.StatusCode.UNAVAILABLE, f"executor failed: {reason}")
            await asyncio.sleep(0.5)

    async def _recover(self, reason: str) -> None:
        """Keep every request, wait for the executor (or a replacement at its address) to answer, then resume
        the running requests by recomputing them there. A request that waits longer than recovery_timeout_s
        for it ends with UNAVAILABLE."""
        self.metrics.executor_losses.inc()
        if self._lost_since is None:  # a crash loop keeps the first loss: requests do not wait forever
            self._lost_since = time.monotonic()
        lost_at = self._lost_since
        self.tracing.abandon_steps(f"executor lost: {reason}", [step.output.step_id for step in self._inflight])
        self._inflight.clear()
        self._last_compute_end = None
        requeued = self.scheduler.requeue_all_running()
        logger.warning("executor %s lost (%s): %d running requests requeued to be recomputed", self.name, reason,
                       requeued)
        self.recovering = True
        if self.on_lost is not None:
            self.on_lost(self)
        delay = 0.05
        while True:
            self._fail_overdue_for_executor(lost_at, reason)
            try:
                await self.executor.Describe(executor_pb2.DescribeRequest(), timeout=1.0)
                break
            except Exception as error:  # any failure to answer means: not back yet
                logger.debug("executor not back: %s", error)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 1.0)
        self.recovering = False
        self.metrics.executor_recoveries.inc()
        logger.warning("executor back after %.1f s: resuming %d requests", time.monotonic() - lost_at,
                       self.num_unfinished)

    def _fail_overdue_for_executor(self, lost_at: float, reason: str) -> None:
        now = time.monotonic()
        for request_id in list(self._queues):
            waiting_since = max(lost_at, self._states[request_id].request.arrival_time)
            if now - waiting_since >= self.recovery_timeout_s:
                self._fail_request(
                    request_id,
                    grpc.StatusCode.UNAVAILABLE,
                    f"executor unavailable: it failed ({reason}) and was not back within "
                    f"--executor-recovery-timeout-s {self.recovery_timeout_s:g}",
                )
        self.scheduler.discard_finished_ids()

    async def _run_stream(self, call: ExecuteCall) -> None:
        while True:
            await self._fill_pipeline(call)
            if not self._inflight:
                self._last_compute_end = None  # an idle executor with nothing to do is not a bubble
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            result = await call.read()
            read_at = time.time()
            if not isinstance(result, executor_pb2.StepResult):  # grpc.aio.EOF
                raise ConnectionError("the executor closed the Execute stream")
            inflight = self._inflight[0]
            output = inflight.output
            self._process_result(output, result)
            self._account_delivery(result, inflight.sent_at, read_at)
            if result.sub_step + 1 >= output.num_steps:  # a multi-step StepRequest is in flight until its last
                self._inflight.popleft()
                self.scheduler.close_step(output)
                self.tracing.end_step(result)

    async def _fill_pipeline(self, call: ExecuteCall) -> None:
        self._expire_overdue_waiting()
        while len(self._inflight) < self.max_inflight_steps:
            output = self.scheduler.schedule()
            self._stats.scheduler_invocations += 1
            self.metrics.scheduler_invocations.inc()
            if output.is_empty:
                return
            now = time.monotonic()
            for scheduled in output.new_requests:
                self._states[scheduled.request.request_id].timing.mark_scheduled(now)
            if self.scheduler.num_spec_tokens and output.sampling_request_ids:
                self.metrics.spec_k.observe(output.num_spec_tokens)
            step = to_step_request(output, self.max_model_len)
            self.tracing.start_step(output, step)
            sent_at = time.time()
            await call.write(step)
            self._stats.step_requests += 1
            self.metrics.step_requests.inc()
            self._inflight.append(InflightStep(output, sent_at))
            if output.num_scheduled_requests == 0:
                return

    def _process_result(self, output: SchedulerOutput, result: executor_pb2.StepResult) -> None:
        if result.step_id != output.step_id:
            raise RuntimeError(f"step results out of order: expected {output.step_id}, got {result.step_id}")
        self._lost_since = None  # the executor (or its replacement) is computing again
        self._account_executor_time(result)
        now = time.monotonic()
        step_spec = SpecStatsTracker()
        for step_output in result.outputs:
            request = self.scheduler.accept_result(
                output, step_output.request_id, step_output.num_accepted, result.sub_step, step_output.num_draft_slots
            )
            if request is not None and step_output.prompt_logprobs:
                self._states[request.request_id].record_prompt_logprobs(
                    step_output.prompt_logprobs_start, list(step_output.prompt_logprobs))
            if request is None or not step_output.token_ids:
                continue
            num_slots = output.num_draft_tokens.get(request.request_id, 0)
            if result.sub_step:
                num_slots = step_output.num_draft_slots
            request_spec = self._states[request.request_id].spec
            if request.num_output_tokens and self.scheduler.num_spec_tokens and request.spec_enabled:
                request_spec.record_k(num_slots)  # a decode step (the prefill's first token is not one)
            if num_slots:
                for tracker in (request_spec, step_spec):
                    tracker.record(num_slots, step_output.num_drafted, step_output.num_accepted)
                self._observe_drafts(request, step_output, num_slots)
            self._deliver(request.request_id, list(step_output.token_ids), list(step_output.logprobs), now)
        if step_spec.verify_steps:
            self._account_speculation(step_spec)

    def _observe_drafts(self, request: Request, step_output: executor_pb2.RequestStepOutput, num_slots: int) -> None:
        """A verify step's verdict: a predicted output's drafts are counted for its usage and steer how many it
        drafts next (they say nothing of the drafter's acceptance, which steers the step's K)."""
        if request.prediction_token_ids:
            request.observe_prediction(step_output.drafts_from_prediction, step_output.num_drafted,
                                       step_output.num_accepted)
            if step_output.drafts_from_prediction:
                self._states[request.request_id].spec.record_prediction(
                    step_output.num_drafted, step_output.num_accepted)
                return
        self.scheduler.k_policy.observe(num_slots, step_output.num_accepted)

    def _account_speculation(self, step_spec: SpecStatsTracker) -> None:
        """One step's drafts verified and accepted, into the engine counters and the metrics."""
        self._stats.spec_drafted += step_spec.drafted
        self._stats.spec_accepted += step_spec.accepted
        self.metrics.observe_speculation(
            step_spec.drafted, step_spec.accepted, step_spec.accepted_per_position,
            tried_per_position=step_spec.tried_per_position,
        )

    @property
    def stats(self) -> generation_pb2.EngineStats:
        """The engine's counters since start; those the scheduler keeps (preemptions, prefix cache) read now."""
        self._stats.num_preemptions = self.scheduler.num_preemptions
        self._stats.prefix_cache_queried_tokens = self.scheduler.num_prefix_queried_tokens
        self._stats.prefix_cache_hit_tokens = self.scheduler.num_prefix_hit_tokens
        return self._stats

    def _account_delivery(self, result: executor_pb2.StepResult, sent_at: float, read_at: float) -> None:
        """How long the result took to reach the engine (read at ``read_at``) and, once per StepRequest, the step
        to reach the executor (written from ``sent_at``): the two legs of the round trip a step ahead has to hide.
        A time the executor does not report (0) counts nothing."""
        if result.compute_end_s > 0:
            self._stats.result_delivery_s += max(0.0, read_at - result.compute_end_s)
        if result.sub_step == 0 and result.received_s > 0:
            self._stats.step_delivery_s += max(0.0, result.received_s - sent_at)

    def _account_executor_time(self, result: executor_pb2.StepResult) -> None:
        """Busy time of this step, and the executor's idle gap since the previous one (the bubble)."""
        self._stats.steps += 1
        busy_s = result.compute_end_s - result.compute_start_s
        self._stats.executor_busy_s += busy_s
        self._stats.executor_draft_s += result.draft_s
        self._stats.executor_forward_s += result.forward_s
        bubble_s, awaiting_s = None, 0.0
        if self._last_compute_end is not None:
            bubble_s = max(0.0, result.compute_start_s - self._last_compute_end)
            self._stats.executor_bubble_s += bubble_s
            if result.received_s > 0:  # 0: an executor that does not report it
                awaiting_s = min(bubble_s, max(0.0, result.received_s - self._last_compute_end))
                self._stats.executor_bubble_awaiting_step_s += awaiting_s
        self._last_compute_end = result.compute_end_s
        self.metrics.observe_step(busy_s, bubble_s, awaiting_s)
        self._group_steps.inc()

    def _deliver(
        self, request_id: str, token_ids: list[int], logprobs: list[generation_pb2.PositionLogprobs], now: float
    ) -> None:
        state = self._states[request_id]
        message = state.append_tokens(token_ids, logprobs, now)
        if state.finish is not None:
            assert message is not None  # a finishing append always has a message
            state.final_fields(message, now)
            self.metrics.observe_finished(state.request, state.timing, message.finish_reason, now)
            self.request_log.finished(message)
            self.scheduler.finish_request(request_id)
            del self._states[request_id]
            self._queues.pop(request_id).put_nowait(message)
        elif message is not None:
            self._queues[request_id].put_nowait(message)

    def _expire_overdue_waiting(self) -> None:
        """End the requests that waited longer than --max-queue-wait-s without starting."""
        now = time.monotonic()
        limit = self.scheduler.config.max_queue_wait_s
        for request_id in self.scheduler.overdue_waiting(now):
            waited = now - self._states[request_id].request.arrival_time
            self._fail_request(
                request_id,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"server overloaded: the request waited {waited:.1f} s without starting "
                f"(--max-queue-wait-s {limit:g}); retry later",
            )
        self.scheduler.discard_finished_ids()

    def _fail_request(self, request_id: str, code: grpc.StatusCode, message: str) -> None:
        self.scheduler.finish_request(request_id)
        queue = self._queues.pop(request_id)
        unsent = self._states[request_id].take_unsent()
        if unsent is not None:
            queue.put_nowait(unsent)
        queue.put_nowait(EngineError(code, message))
        self.metrics.count_error(code.name)
        self.request_log.failed(request_id, code, message)
        del self._states[request_id]

    def _fail_all(self, code: grpc.StatusCode, message: str) -> None:
        self.tracing.abandon_steps(message, [step.output.step_id for step in self._inflight])
        self._inflight.clear()
        self._last_compute_end = None
        for request_id in list(self._queues):
            self._fail_request(request_id, code, message)
        self.scheduler.discard_finished_ids()


def _task_cancelled() -> bool:
    """Whether the running task itself is being cancelled (not just an RPC it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


_EXECUTOR_LOST_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL, None)
"""Failures that mean the executor went away (None: the stream ended without a status), not that it refused.
INTERNAL: gRPC's core reports a peer killed in the middle of a write as "Internal error from Core"; the executor
never sends INTERNAL itself (it refuses steps with FAILED_PRECONDITION or INVALID_ARGUMENT)."""


async def _stream_failure(call: ExecuteCall, error: Exception) -> tuple[grpc.StatusCode | None, str]:
    """Why the Execute stream broke: the RPC's status code (None when it has none) and one line. A write to a
    failed call only raises "RPC already finished", so the call's own status is asked for."""
    if isinstance(error, grpc.aio.AioRpcError):
        code, details = error.code(), error.details()
    elif call.done() and await call.code() != grpc.StatusCode.OK:
        code, details = await call.code(), await call.details()
    else:  # our own EOF check raises ConnectionError: the executor went away; anything else is a fault here
        return (None if isinstance(error, ConnectionError) else grpc.StatusCode.UNKNOWN), str(error)
    return code, f"the Execute stream ended with {code.name}: {details}"
