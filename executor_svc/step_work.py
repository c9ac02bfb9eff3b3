"""The pieces of one step as the model runner works on it: each request's share, the flattened batch,
and a launched step whose sampled tokens may still be on their way to the host."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from executor_svc.host_batch import HostBatch
from executor_svc.host_transfer import HostCopy
from executor_svc.prompt_logprobs import PromptRows, ScoredPrompt
from executor_svc.request_state import ExecutorRequestState
from executor_svc.sampler import DeviceLogprobs, DeviceSamplerOutput, RowLogprobs, SamplerOutput
from stepahead_proto import executor_pb2


@dataclass
class ScheduledWork:
    """One request's part of a step."""

    state: ExecutorRequestState
    num_tokens: int
    """New tokens to compute (1 for a decode step), not counting drafts."""
    num_drafts: int
    """Draft slots to verify (the request's held drafts, padded with PAD_DRAFT)."""
    num_spec: int
    """Drafts to propose after sampling."""


@dataclass
class SamplingGroup:
    """The consecutive logits rows of one request that samples this step (1 + its draft slots)."""

    work: ScheduledWork
    drafts: list[int]
    from_prediction: bool = False
    """The drafts came from the request's predicted output."""


@dataclass
class FlatBatch:
    """One step's flattened forward (host lists) and which of its rows are sampled."""

    host: HostBatch
    sample_rows: list[int]
    """Flat rows whose logits are sampled: each sampling group's last real token and its draft slots."""
    groups: list[SamplingGroup]
    prompt_rows: list[PromptRows] = field(default_factory=list)
    """Rows scoring prompt tokens (requests that asked for prompt logprobs)."""


@dataclass
class Emitted:
    """What one request produced in a step."""

    token_ids: list[int]
    logprobs: list[RowLogprobs | None]
    num_drafted: int
    num_accepted: int
    num_draft_slots: int = 0
    """Draft slots verified, padding included."""
    from_prediction: bool = False
    """The drafts verified came from the request's predicted output."""


class PendingSamples:
    """A step's sampled tokens (and logprobs) being copied to the host."""

    def __init__(self, sampled: DeviceSamplerOutput) -> None:
        self._logprobs_request = sampled.logprobs.request if sampled.logprobs is not None else None
        tensors = [sampled.token_ids]
        if sampled.logprobs is not None:
            tensors += [sampled.logprobs.sampled, sampled.logprobs.top_ids, sampled.logprobs.top_values]
        self._copy = HostCopy(tensors)

    def wait(self) -> None:
        """Blocks this thread until the copies are done."""
        self._copy.wait()

    def to_host(self) -> SamplerOutput:
        host = self._copy.wait()
        logprobs = None
        if self._logprobs_request is not None:
            logprobs = DeviceLogprobs(self._logprobs_request, *host[1:])
        return DeviceSamplerOutput(host[0], logprobs).to_host()


@dataclass
class LaunchedStep:
    """A step whose forward and sampling are queued on the device.

    Until it is settled, its sampled tokens exist only on the device (and in each request's slot of
    the LastTokenBuffer); settling copies them into the requests' host state, in step order.
    """

    step: executor_pb2.StepRequest
    work: list[ScheduledWork]
    groups: list[SamplingGroup]
    result: executor_pb2.StepResult
    """Step id and phase times so far; outputs are added when the step completes."""
    pending: PendingSamples | None = None
    """None when nothing was sampled or once settled."""
    emitted: dict[str, Emitted] = field(default_factory=dict)
    prompt_logprobs: dict[str, ScoredPrompt] = field(default_factory=dict)
    """Per request: the prompt tokens its chunk scored (prompt logprobs)."""
    settled: bool = False
    computed_at: float | None = None
    """When the device was seen to have finished the step (time.time())."""

    def wait_until_computed(self) -> None:
        """Blocks this thread (not the device) until the sampled tokens are on the host."""
        if self.pending is not None:
            self.pending.wait()
        if self.computed_at is None:
            self.computed_at = time.time()
