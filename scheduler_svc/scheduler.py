"""Continuous batching with chunked prefill and preemption by recompute.

The scheduler decides, step by step, which requests compute how many tokens, under a token
budget and the KV blocks available. It plans from ``computed + placeholders`` so it can run ahead
of the executor: a token scheduled for sampling counts as a placeholder until its result returns.

Policies: "fcfs" keeps the waiting queue and the running batch in arrival order (a preempted request goes back
to the queue's head) and preempts the latest-started request first. "priority" keeps both ordered by
(priority, arrival): the best waiting request starts first, the worst running one is preempted first, and a
waiting request that cannot start for want of a seat or of KV blocks preempts running requests of strictly lower
priority (before the step is planned, so no request of the step being built is taken back).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import deque
from operator import attrgetter

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulingConfig
from scheduler_svc.dynamic_k import FixedK, KPolicy
from scheduler_svc.prefix_hashes import extend_block_hashes, num_cacheable_blocks
from scheduler_svc.request import Request, RequestStatus
from scheduler_svc.scheduler_output import (
    ScheduledCachedRequest,
    ScheduledNewRequest,
    SchedulerOutput,
    Unsettled,
)


class DuplicateRequestError(ValueError):
    """A request was added under the id of one that is still running or waiting."""


class QueueFullError(RuntimeError):
    """A new request arrived while max_queued_requests were already waiting to start."""


class Scheduler:
    """Owns the waiting queue, the running batch and the KV block tables."""

    def __init__(
        self,
        config: SchedulingConfig,
        block_manager: KVBlockManager,
        max_model_len: int,
        num_spec_tokens: int = 0,
        k_policy: KPolicy | None = None,
        first_step_id: int = 0,
        max_prediction_tokens: int = 0,
    ) -> None:
        """``first_step_id``: where this scheduler's step ids start (executor groups use disjoint ranges, so a
        step id names one step of one group in traces and logs). ``max_prediction_tokens``: the most drafts the
        executor proposes per step from a request's predicted output (ExecutorDescription.max_num_prediction_tokens;
        0: predictions draft nothing)."""
        self.config = config
        self.block_manager = block_manager
        self.max_model_len = max_model_len
        self.num_spec_tokens = num_spec_tokens
        """K_max: the most drafts proposed after a sampling step of a request that speculates (0: none)."""
        self.k_policy: KPolicy = k_policy if k_policy is not None else FixedK(num_spec_tokens)
        """Chooses each step's K (one for every request in the step, all sub-steps of a multi-step batch)."""
        self.max_prediction_tokens = max_prediction_tokens
        self._step_k = 0
        self._by_priority = config.scheduling_policy == "priority"
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self._finished_since_last_step: list[str] = []
        self._next_step_id = first_step_id
        self.num_preemptions = 0
        self.num_schedule_calls = 0
        """Scheduler invocations so far (empty ones included)."""
        self._block_hashes: dict[str, list[bytes]] = {}
        """Per request (prefix caching), the hashes of its full blocks of known tokens computed so far."""
        self._num_registered: dict[str, int] = {}
        """Per request, how many of its first blocks were registered with the block manager."""
        self.num_prefix_queried_tokens = 0
        """Tokens of the requests that looked for a cached prefix when they started (prefix caching)."""
        self.num_prefix_hit_tokens = 0
        """Of those, tokens found cached: their KV was not computed again."""

    # ---- queue -----------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Queue a validated request."""
        if request.request_id in self.requests:
            raise DuplicateRequestError(f"request_id: {request.request_id!r} is already running")
        if len(self.waiting) >= self.config.max_queued_requests:
            raise QueueFullError(
                f"server overloaded: {len(self.waiting)} requests are queued, the limit is "
                f"{self.config.max_queued_requests} (--max-queued-requests); retry later"
            )
        self.requests[request.request_id] = request
        self._join(self.waiting, request)

    def _join(self, queue: deque[Request] | list[Request], request: Request, at_head: bool = False) -> None:
        """Into the waiting queue or the running batch: at its place by (priority, arrival) under the priority
        policy, else at the back (``at_head``: the front, where a preempted request goes back)."""
        if self._by_priority:
            queue.insert(bisect.bisect_right(queue, request.priority_key, key=attrgetter("priority_key")), request)
        elif at_head:
            queue.insert(0, request)
        else:
            queue.append(request)

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
        self._block_hashes.pop(request_id, None)
        self._num_registered.pop(request_id, None)
        if request.sent_to_executor:
            self._finished_since_last_step.append(request_id)
        return True

    def take_waiting(self) -> list[Request]:
        """Remove every waiting request (none holds blocks) and return them in queue order: they move to
        another executor group."""
        moved = list(self.waiting)
        self.waiting.clear()
        for request in moved:
            del self.requests[request.request_id]
            self._block_hashes.pop(request.request_id, None)
            self._num_registered.pop(request.request_id, None)
        return moved

    def adopt_waiting(self, request: Request) -> None:
        """Queue a request that waited in another group (past the queue limit: it was admitted already)."""
        if request.request_id in self.requests:
            raise DuplicateRequestError(f"request_id: {request.request_id!r} is already running")
        self.requests[request.request_id] = request
        self._join(self.waiting, request)

    def blocks_wanted(self) -> int:
        """KV blocks the waiting requests need to hold their known tokens (prompts, and outputs to
        recompute): a measure of the load queued here that free blocks do not show yet."""
        size = self.block_manager.block_size
        return sum(-(-request.num_tokens // size) for request in self.waiting)

    def overdue_waiting(self, now: float) -> list[str]:
        """Ids of requests that never started and have waited longer than max_queue_wait_s (oldest first)."""
        limit = self.config.max_queue_wait_s
        if limit is None:
            return []
        return [r.request_id for r in self.waiting if not r.num_preemptions and now - r.arrival_time > limit]

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
        self.num_schedule_calls += 1
        output = SchedulerOutput(step_id=self._next_step_id)
        self._step_k = output.num_spec_tokens = self._choose_k()
        budget = self.config.max_num_batched_tokens
        started_first, budget = self._start_before_lower_priority(output, budget)
        budget = self._schedule_running(output, budget, started_first)
        self._schedule_waiting(output, budget)
        if self.config.num_scheduler_steps > 1 and _is_pure_decode(output):
            self._extend_to_multi_step(output)
        if self.block_manager.enable_prefix_caching:
            self._register_computed_blocks(output)
        output.finished_request_ids = self._finished_since_last_step
        self._finished_since_last_step = []
        if not output.is_empty:
            self._next_step_id += 1
        return output

    def _choose_k(self) -> int:
        """This step's K from the policy, B being the running requests past their prompt (decoding)."""
        if not self.num_spec_tokens:
            return 0
        batch = sum(1 for r in self.running if r.num_computed_tokens >= len(r.prompt_token_ids))
        return max(0, min(self.k_policy.choose(max(1, batch)), self.num_spec_tokens))

    def _num_tokens_to_schedule(self, request: Request, budget: int) -> int:
        planned = request.num_tokens_with_placeholders
        if request.num_computed_tokens >= planned:
            return 0
        if request.num_output_tokens + request.num_output_placeholders >= request.stop_params.max_tokens:
            return 0  # the token that would be sampled is past max_tokens: never schedule it
        limit = self.max_model_len - request.num_computed_tokens
        return max(0, min(planned - request.num_computed_tokens, budget, limit))

    def _schedule_running(self, output: SchedulerOutput, budget: int, started_first: set[str]) -> int:
        """Every running request's next tokens, in order, preempting from the back for blocks; requests that
        started first in this step (``started_first``) are planned already and never preempted."""
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = 0 if request.request_id in started_first else self._num_tokens_to_schedule(request, budget)
            if num_new == 0:
                index += 1
                continue
            num_drafts, num_spec = self._spec_plan(request, num_new, budget)
            total = self._tokens_to_cover(request, num_new, num_drafts, num_spec)
            if not self._make_room(request, total, started_first):
                break  # the request preempted itself: everything after it is gone too
            new_block_ids = self.block_manager.allocate(request.request_id, total)
            self._record(output, request, num_new, new_block_ids, num_drafts, num_spec)
            budget -= num_new + num_drafts
            index += 1
        return budget

    def _spec_plan(self, request: Request, num_new: int, budget: int) -> tuple[int, int]:
        """Drafts to verify now and drafts to propose for the next step, within budget and context."""
        samples = request.num_computed_tokens + num_new >= request.num_tokens_with_placeholders
        room = self.max_model_len - (request.num_computed_tokens + num_new + request.num_unresolved_drafts)
        num_drafts = max(0, min(request.num_pending_drafts, budget - num_new, room))
        wanted = self._step_k if samples and request.spec_enabled else 0
        if samples and request.prediction_token_ids and self.max_prediction_tokens:
            wanted = max(wanted, self.max_prediction_tokens if request.prediction_on_track else 1)
        return num_drafts, max(0, min(wanted, room - num_drafts))

    @staticmethod
    def _tokens_to_cover(request: Request, num_new: int, num_drafts: int, num_spec: int) -> int:
        """KV slots the executor may write this step: the tokens, the drafts it verifies, the drafts it
        proposes next, and the drafts of steps in flight it may already have accepted."""
        return request.num_computed_tokens + num_new + request.num_unresolved_drafts + num_drafts + num_spec

    def _make_room(self, request: Request, total: int, protected: set[str]) -> bool:
        """Preempt from the back of the running batch (skipping ``protected`` requests, planned in this step
        already) until the request's blocks cover ``total`` tokens; False when it preempted the request itself."""
        while not self.block_manager.can_allocate(request.request_id, total):
            victim = next(r for r in reversed(self.running) if r.request_id not in protected)
            self._preempt(victim)
            if victim is request:
                return False
        return True

    def _start_before_lower_priority(self, output: SchedulerOutput, budget: int) -> tuple[set[str], int]:
        """Priority policy: while the best waiting request has a strictly higher priority than the worst running
        one, start it first in the step, preempting running requests of lower priority (worst first) until it has
        a seat and its KV blocks. Runs before any running request is planned, so none planned is taken back.
        Returns the ids started and the budget left."""
        started: set[str] = set()
        while self._by_priority and self.waiting and self.running and budget > 0 and (
                self.waiting[0].priority < self.running[-1].priority):
            head = self.waiting[0]
            seated = len(self.running) < self.config.max_num_seqs
            admission = self._admission(head, budget) if seated else None
            if admission is None:
                self._preempt(self.running[-1])
                continue
            budget -= self._start(output, head, admission)
            started.add(head.request_id)
        return started, budget

    def _admission(self, request: Request, budget: int) -> tuple[list[int], int, int, int] | None:
        """What starting ``request`` now takes: (its cached prefix's blocks, tokens to compute, drafts to propose,
        KV slots to cover); None when it cannot start (no budget or too few free blocks). Leaves
        ``request.num_computed_tokens`` at the cached prefix's length (0 with None)."""
        cached = self._cached_prefix(request)
        request.num_computed_tokens = len(cached) * self.block_manager.block_size
        num_new = self._num_tokens_to_schedule(request, budget)
        _, num_spec = self._spec_plan(request, num_new, budget)
        total = self._tokens_to_cover(request, num_new, 0, num_spec)
        if num_new == 0 or not self.block_manager.can_allocate_after_cached(cached, total):
            request.num_computed_tokens = 0
            return None
        return cached, num_new, num_spec, total

    def _schedule_waiting(self, output: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting[0]
            admission = self._admission(request, budget)
            if admission is None:
                break
            budget -= self._start(output, request, admission)

    def _start(self, output: SchedulerOutput, request: Request, admission: tuple[list[int], int, int, int]) -> int:
        """Move the first waiting request to the running batch and plan its first chunk; returns its tokens."""
        cached, num_new, num_spec, total = admission
        self.waiting.popleft()
        if self.block_manager.enable_prefix_caching:
            self.num_prefix_queried_tokens += request.num_tokens
            self.num_prefix_hit_tokens += request.num_computed_tokens
            if not request.num_preemptions:
                request.num_cached_prompt_tokens = request.num_computed_tokens
        self.block_manager.take_cached(request.request_id, cached)
        self.block_manager.allocate(request.request_id, total)
        request.status = RequestStatus.RUNNING
        self._join(self.running, request)
        self._record(output, request, num_new, [], 0, num_spec)
        return num_new

    # ---- prefix caching --------------------------------------------------------------------
    @staticmethod
    def _scores_prompt(request: Request) -> bool:
        return request.sampling.HasField("prompt_logprobs")

    def _cached_prefix(self, request: Request) -> list[int]:
        """Registered blocks holding the request's first full blocks of known tokens (prefix caching), leaving at
        least its last token to compute (its logits give the next one). None for a request asking for prompt
        logprobs: they come from the logits of every prompt position, and a cached block kept only its KV."""
        if not self.block_manager.enable_prefix_caching or self._scores_prompt(request):
            return []
        usable = num_cacheable_blocks(request.num_tokens, self.block_manager.block_size)
        return self.block_manager.cached_prefix(self._hashes(request)[:usable])

    def _hashes(self, request: Request) -> list[bytes]:
        hashes = self._block_hashes.setdefault(request.request_id, [])
        if (len(hashes) + 1) * self.block_manager.block_size <= request.num_tokens:
            extend_block_hashes(hashes, request.all_token_ids, self.block_manager.block_size,
                                request.adapter_cache_key)
        return hashes

    def _register_computed_blocks(self, output: SchedulerOutput) -> None:
        """Register the full blocks of known tokens whose KV this or an earlier step writes. Done once the step is
        planned, so only later steps read them: the executor runs steps in order."""
        scheduled = [new.request for new in output.new_requests] + [
            self.requests[cached.request_id] for cached in output.cached_requests]
        for request in scheduled:
            written = min(request.num_computed_tokens, request.num_tokens) // self.block_manager.block_size
            done = self._num_registered.get(request.request_id, 0)
            if written > done:
                hashes = self._hashes(request)[:written]
                self.block_manager.register(request.request_id, hashes, start=done)
                self._num_registered[request.request_id] = written

    def reset_prefix_cache(self) -> None:
        """The executor's KV cache is gone or unknown (it was lost, or a new Execute stream starts): nothing
        registered can be taken back."""
        self.block_manager.reset_prefix_cache()
        self._num_registered.clear()

    def _record(
        self,
        output: SchedulerOutput,
        request: Request,
        num_new: int,
        new_block_ids: list[int],
        num_drafts: int,
        num_spec: int,
    ) -> None:
        computed_before = request.num_computed_tokens
        if request.sent_to_executor:
            output.cached_requests.append(
                ScheduledCachedRequest(
                    request.request_id, new_block_ids, computed_before, num_new, num_drafts, num_spec
                )
            )
        else:
            output.new_requests.append(
                ScheduledNewRequest(
                    request=request,
                    block_ids=self.block_manager.block_ids(request.request_id),
                    num_computed_tokens=computed_before,
                    num_scheduled_tokens=num_new,
                    num_spec_tokens=num_spec,
                )
            )
            request.sent_to_executor = True
        request.num_computed_tokens += num_new
        output.request_epochs[request.request_id] = request.epoch
        unsettled = output.unsettled[request.request_id] = Unsettled(drafts=num_drafts)
        if num_drafts:
            output.num_draft_tokens[request.request_id] = num_drafts
            request.num_unresolved_drafts += num_drafts
        if request.num_computed_tokens >= request.num_tokens_with_placeholders:
            request.num_output_placeholders += 1
            unsettled.placeholders = 1
            request.num_pending_drafts = num_spec
            output.sampling_request_ids.add(request.request_id)

    # ---- multi-step ------------------------------------------------------------------------
    def _extend_to_multi_step(self, output: SchedulerOutput) -> None:
        """Make a pure decode step run n sub-steps: the most up to num_scheduler_steps whose KV slots
        fit in the free blocks (n * (1 + K) per request); 1 when not even two fit."""
        requests = [self.requests[cached.request_id] for cached in output.cached_requests]
        specs = [cached.num_spec_tokens for cached in output.cached_requests]
        for num_steps in range(self.config.num_scheduler_steps, 1, -1):
            totals = [self._multi_step_cover(r, k, num_steps) for r, k in zip(requests, specs)]
            needed = sum(self.block_manager.blocks_needed(r.request_id, t) for r, t in zip(requests, totals))
            if needed <= self.block_manager.num_free_blocks:
                self._apply_multi_step(output, requests, totals, num_steps)
                return

    def _extra_sub_steps(self, request: Request, num_steps: int) -> int:
        """Sub-steps after the first that may sample for the request: never past max_tokens or the
        length limit (the executor stops it there)."""
        left = request.stop_params.max_tokens - request.num_output_tokens - request.num_output_placeholders
        room = self.max_model_len - request.num_computed_tokens
        return max(0, min(num_steps - 1, left, room))

    def _multi_step_cover(self, request: Request, num_spec: int, num_steps: int) -> int:
        """KV slots the request needs for ``num_steps`` sub-steps (its first one is already covered)."""
        extra = self._extra_sub_steps(request, num_steps)
        return request.num_computed_tokens + request.num_unresolved_drafts + num_spec + extra * (1 + num_spec)

    def _apply_multi_step(
        self, output: SchedulerOutput, requests: list[Request], totals: list[int], num_steps: int
    ) -> None:
        output.num_steps = num_steps
        for index, (request, total) in enumerate(zip(requests, totals)):
            cached = output.cached_requests[index]
            new_block_ids = self.block_manager.allocate(request.request_id, total)
            output.cached_requests[index] = dataclasses.replace(
                cached, new_block_ids=cached.new_block_ids + new_block_ids
            )
            extra = self._extra_sub_steps(request, num_steps)
            request.num_computed_tokens += extra
            request.num_output_placeholders += extra
            request.num_unresolved_drafts += extra * cached.num_spec_tokens
            unsettled = output.unsettled[request.request_id]
            unsettled.placeholders += extra
            unsettled.drafts += extra * cached.num_spec_tokens

    def requeue_all_running(self) -> int:
        """The executor was lost: every running request goes back to the head of the queue in its order, to be
        recomputed from its prompt and outputs on the executor that replaces it. Returns how many."""
        running = list(self.running)
        for request in reversed(running):
            self._preempt(request, counted=False)
        self._finished_since_last_step.clear()  # a new executor holds none of them
        self.reset_prefix_cache()
        return len(running)

    def _preempt(self, request: Request, counted: bool = True) -> None:
        """Free a running request's blocks; it will be recomputed from its prompt and outputs."""
        self.running.remove(request)
        self.block_manager.free(request.request_id)
        self._num_registered.pop(request.request_id, None)
        if request.sent_to_executor:
            self._finished_since_last_step.append(request.request_id)
        request.status = RequestStatus.WAITING
        request.sent_to_executor = False
        request.num_computed_tokens = 0
        request.num_output_placeholders = 0
        request.num_pending_drafts = 0
        request.num_unresolved_drafts = 0
        request.epoch += 1
        request.num_preemptions += 1
        self.num_preemptions += counted
        self._join(self.waiting, request, at_head=True)

    # ---- results ---------------------------------------------------------------------------
    def accept_result(
        self, output: SchedulerOutput, request_id: str, num_accepted: int = 0, sub_step: int = 0,
        num_draft_slots: int = 0,
    ) -> Request | None:
        """Match a step's (or sub-step's) result to its request, settle its placeholder and its verified
        drafts (the step's planned drafts in sub-step 0, the executor's reported slots after it).

        Returns None when the result is stale: the request finished, was aborted or was preempted
        after the step was scheduled. The caller appends the tokens (it knows the stop rules).
        Accepted drafts become computed tokens; rejected ones simply never were.
        """
        request = self._live(output, request_id)
        if request is None:
            return None
        unsettled = output.unsettled.setdefault(request_id, Unsettled())
        if request_id in output.sampling_request_ids and unsettled.placeholders > 0:
            request.num_output_placeholders -= 1
            unsettled.placeholders -= 1
        drafts = output.num_draft_tokens.get(request_id, 0) if sub_step == 0 else num_draft_slots
        drafts = min(drafts, unsettled.drafts)
        request.num_unresolved_drafts -= drafts
        unsettled.drafts -= drafts
        request.num_computed_tokens += num_accepted
        return request

    def close_step(self, output: SchedulerOutput) -> None:
        """The step's last result was processed: settle what its results did not (sub-steps the
        executor skipped for a request it stopped), so no placeholder or draft slot is left behind."""
        for request_id, unsettled in output.unsettled.items():
            request = self._live(output, request_id)
            if request is None:
                continue
            request.num_output_placeholders -= unsettled.placeholders
            request.num_unresolved_drafts -= unsettled.drafts
            if unsettled.placeholders:  # planned sub-steps that never ran never computed their token
                request.num_computed_tokens -= unsettled.placeholders
        output.unsettled.clear()

    def _live(self, output: SchedulerOutput, request_id: str) -> Request | None:
        """The request the step was scheduled for, or None when it ended or was preempted since."""
        request = self.requests.get(request_id)
        if request is None or output.request_epochs.get(request_id) != request.epoch:
            return None
        return request


def _is_pure_decode(output: SchedulerOutput) -> bool:
    """Whether every scheduled request is cached and decodes one token (no prefill, no new request)."""
    return not output.new_requests and bool(output.cached_requests) and all(
        cached.num_scheduled_tokens == 1 and cached.request_id in output.sampling_request_ids
        for cached in output.cached_requests
    )

