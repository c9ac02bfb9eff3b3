"""The interface every drafter implements (n-gram lookup, draft model, EAGLE-style head)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from executor_svc.host_batch import HostBatch
from executor_svc.request_state import ExecutorRequestState


@dataclass(frozen=True)
class DraftRequest:
    """One request that wants drafts after this step's tokens were accepted."""

    state: ExecutorRequestState
    num_tokens: int
    """How many drafts to propose (the drafter may return fewer)."""
    target_hidden: torch.Tensor | None = None
    """The target's last hidden state for the request's newest token (what an EAGLE-style head reads)."""


class Drafter(Protocol):
    """Proposes draft tokens for a batch of requests; argmax drafts (q is one-hot at each draft)."""

    name: str
    reads_target_hidden: bool
    """Whether the drafter wants the target's hidden states of every step (``observe``)."""

    @property
    def source_dir(self) -> str | None:
        """The directory of weights the drafter loaded beyond what the executor's config names (an EAGLE-style
        head's), else None: part of the model fingerprint that keys cached step profiles."""
        ...

    def observe(self, host: HostBatch, request_ids: Sequence[str], hidden: torch.Tensor, slots: torch.Tensor) -> None:
        """The target fed ``host``'s sequences (one per request id, in order); ``hidden`` row i is the target's
        hidden state of flat row i, ``slots`` row i's KV slot (on the device, as the step's attention wrote it)."""
        ...

    def propose(self, batch: list[DraftRequest]) -> list[list[int]]:
        """Drafts following each request's current tokens, at most num_tokens each."""
        ...

    def timed_as(self) -> Drafter:
        """The drafter a step profile times in this one's place (executor_svc/step_profile.py): itself, unless
        its cost per draft depends on the text in a way the profile's short generations would misrepresent."""
        ...

    def adopt_cached_prefix(self, request_id: str, num_cached_tokens: int) -> None:
        """A new request starts past a cached prefix (prefix caching): the KV of its first ``num_cached_tokens``
        tokens, the drafter's own included, sits in shared blocks written for an earlier request."""
        ...

    def drop(self, request_id: str) -> None:
        """Forget a finished or preempted request."""
        ...

    def reset(self) -> None:
        """Forget every request."""
        ...
