"""What one scheduling decision produces: the work of one step, before it becomes a StepRequest."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_svc.request import Request


@dataclass(frozen=True)
class ScheduledNewRequest:
    """A request sent to the executor in full (first time, or again after a preemption)."""

    request: Request
    block_ids: list[int]
    num_computed_tokens: int
    num_scheduled_tokens: int
    num_spec_tokens: int = 0


@dataclass(frozen=True)
class ScheduledCachedRequest:
    """A request the executor already holds: only what changed."""

    request_id: str
    new_block_ids: list[int]
    num_computed_tokens: int
    num_scheduled_tokens: int
    num_draft_tokens: int = 0
    num_spec_tokens: int = 0


@dataclass
class Unsettled:
    """What a request's results from one step have still to settle: placeholders and draft slots."""

    placeholders: int = 0
    drafts: int = 0


@dataclass
class SchedulerOutput:
    """The work of one step and the bookkeeping needed to match its result."""

    step_id: int
    new_requests: list[ScheduledNewRequest] = field(default_factory=list)
    cached_requests: list[ScheduledCachedRequest] = field(default_factory=list)
    finished_request_ids: list[str] = field(default_factory=list)
    request_epochs: dict[str, int] = field(default_factory=dict)
    """Epoch of each scheduled request when scheduled; a result from an older epoch is stale."""
    sampling_request_ids: set[str] = field(default_factory=set)
    """Requests whose scheduled tokens reach their end, so the step samples a token for them."""
    num_draft_tokens: dict[str, int] = field(default_factory=dict)
    """Drafts each request verifies in this step (absent: 0)."""
    num_spec_tokens: int = 0
    """K chosen for this step: drafts each speculating request that samples proposes for the next step."""
    num_steps: int = 1
    """Decode sub-steps the executor runs for this step (multi-step when above 1)."""
    unsettled: dict[str, Unsettled] = field(default_factory=dict)
    """Per request, the placeholders and draft slots its results have not settled yet."""

    @property
    def num_scheduled_requests(self) -> int:
        return len(self.new_requests) + len(self.cached_requests)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return (
            sum(r.num_scheduled_tokens for r in self.new_requests)
            + sum(r.num_scheduled_tokens for r in self.cached_requests)
            + sum(self.num_draft_tokens.values())
        )

    @property
    def is_empty(self) -> bool:
        return self.num_scheduled_requests == 0 and not self.finished_request_ids
