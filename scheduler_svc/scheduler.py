"""Continuous batching with chunked prefill and preemption by recompute.

The scheduler decides, step by step, which requests compute how many tokens, under a token
budget and the KV blocks available. It plans from ``computed + placeholders`` so it can run ahead
of the executor: a token scheduled for sampling counts as a placeholder until its result returns.
"""

from __future__ import annotations

from collections import deque

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.request import Request, RequestStatus
from scheduler_svc.scheduler_output import (
    ScheduledCachedRequest,
    ScheduledNewRequest,
    SchedulerOutput,
)


class Scheduler:
    """Owns the waiting queue, the running batch and the KV block tables."""

    def __init__(self, config: SchedulingConfig, block_manager: KVBlockManager, max_model_len: int) -> None:
        self.config = config
        self.block_manager = block_manager
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self._finished_since_last_step: list[str] = []
        self._next_step_id = 0
        self.num_preemptions = 0

    # ---- queue -----------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Queue a validated request."""
        if request.request_id in self.requests:
            raise ValueError(f"request_id: {request.request_id!r} is already running")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def finish_request(self, request_id: str) -> bool:
        """End a request (stopped, aborted or failed): frees its blocks now. False if unknown."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return False
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        elif request.status is RequestStatus.WAITING:
            self.waiting.remove(request)
        request.status = RequestStatus.FINISHED
        self.block_manager.free(request_id)
        if request.sent_to_executor:
            self._finished_since_last_step.append(request_id)
        return True

    def discard_finished_ids(self) -> None:
        """Forget ids queued for the executor to drop (its state is gone, e.g. a new Execute stream)."""
        self._finished_since_last_step = []

    @property
    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    # ---- scheduling ------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Plan one step. Mutates request progress optimistically (as if the step succeeds)."""
        output = SchedulerOutput(step_id=self._next_step_id)
        budget = self.config.max_num_batched_tokens
        budget = self._schedule_running(output, budget)
        self._schedule_waiting(output, budget)
        output.finished_request_ids = self._finished_since_last_step
        self._finished_since_last_step = []
        if not output.is_empty:
            self._next_step_id += 1
        return output

    def _num_tokens_to_schedule(self, request: Request, budget: int) -> int:
        planned = request.num_tokens_with_placeholders
        if request.num_computed_tokens >= planned:
            return 0
        if request.num_output_tokens + request.num_output_placeholders >= request.stop_params.max_tokens:
            return 0  # the token that would be sampled is past max_tokens: never schedule it
        limit = self.max_model_len - request.num_computed_tokens
        return max(0, min(planned - request.num_computed_tokens, budget, limit))

    def _schedule_running(self, output: SchedulerOutput, budget: int) -> int:
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = self._num_tokens_to_schedule(request, budget)
            if num_new == 0:
                index += 1
                continue
            if not self._make_room(request, num_new):
                break  # the request preempted itself: everything after it is gone too
            new_block_ids = self.block_manager.allocate(request.request_id, request.num_computed_tokens + num_new)
            self._record(output, request, num_new, new_block_ids)
            budget -= num_new
            index += 1
        return budget

    def _make_room(self, request: Request, num_new: int) -> bool:
        """Preempt from the back of the running batch until the request's blocks fit."""
        total = request.num_computed_tokens + num_new
        while not self.block_manager.can_allocate(request.request_id, total):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is request:
                return False
        return True

    def _schedule_waiting(self, output: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting[0]
            num_new = self._num_tokens_to_schedule(request, budget)
            if num_new == 0:
                break
            total = request.num_computed_tokens + num_new
            if not self.block_manager.can_allocate(request.request_id, total):
                break
            self.waiting.popleft()
            self.block_manager.allocate(request.request_id, total)
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            self._record(output, request, num_new, new_block_ids=[])
            budget -= num_new

    def _record(self, output: SchedulerOutput, request: Request, num_new: int, new_block_ids: list[int]) -> None:
        computed_before = request.num_computed_tokens
        if request.sent_to_executor:
            output.cached_requests.append(
                ScheduledCachedRequest(request.request_id, new_block_ids, computed_before, num_new)
            )
        else:
            output.new_requests.append(
                ScheduledNewRequest(
                    request=request,
                    block_ids=self.block_manager.block_ids(request.request_id),
                    num_computed_tokens=computed_before,
                    num_scheduled_tokens=num_new,
                )
            )
            request.sent_to_executor = True
        request.num_computed_tokens += num_new
        output.request_epochs[request.request_id] = request.epoch
        if request.num_computed_tokens >= request.num_tokens_with_placeholders:
            request.num_output_placeholders += 1
            output.sampling_request_ids.add(request.request_id)

    def _preempt(self, request: Request) -> None:
        """Free a running request's blocks; it will be recomputed from its prompt and outputs."""
        self.running.remove(request)
        self.block_manager.free(request.request_id)
        if request.sent_to_executor:
            self._finished_since_last_step.append(request.request_id)
        request.status = RequestStatus.WAITING
        request.sent_to_executor = False
        request.num_computed_tokens = 0
        request.num_output_placeholders = 0
        request.epoch += 1
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    # ---- results ---------------------------------------------------------------------------
    def accept_result(self, output: SchedulerOutput, request_id: str) -> Request | None:
        """Match a step's result to its request and settle its placeholder.

        Returns None when the result is stale: the request finished, was aborted or was preempted
        after the step was scheduled. The caller appends the tokens (it knows the stop rules).
        """
        request = self.requests.get(request_id)
        if request is None or output.request_epochs.get(request_id) != request.epoch:
            return None
        if request_id in output.sampling_request_ids:
            request.num_output_placeholders -= 1
        return request
