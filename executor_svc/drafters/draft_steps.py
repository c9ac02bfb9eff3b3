"""The autoregressive loop shared by drafters that draft one token per forward (draft model, EAGLE-style head).

Each request wants its own number of drafts; after the first draft, every further step runs only the requests
that want more. The per-request state (drafts first, then whatever else the drafter carries, e.g. predicted
features) stays on the device, and all the drafts reach the host in one copy at the end.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from executor_svc.drafters.base import DraftRequest
from executor_svc.host_transfer import host_list_to_device
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel

DraftState = tuple[torch.Tensor, ...]
"""Per wanted request, on the device: the latest drafts [n] first, then the drafter's own tensors [n, ...]."""


def draft_autoregressively(
    batch: list[DraftRequest],
    wanted: list[DraftRequest],
    first: DraftState,
    step: Callable[[list[DraftRequest], DraftState, int], DraftState],
    device: torch.device,
    tp: TensorParallel = SINGLE,
) -> list[list[int]]:
    """Drafts for every request of ``batch`` ([] for those not in ``wanted``). ``first``: the state after each
    wanted request's first draft; ``step(requests, state, s)``: the state after draft s + 1 of ``requests``.
    ``tp``: a drafter replicated over tensor-parallel ranks takes rank 0's drafts, so every rank verifies the
    same tokens even where the ranks' features differ in the last bit."""
    steps, drafting, state = [first[0]], [list(range(len(wanted)))], first
    for s in range(1, max(request.num_tokens for request in wanted)):
        active = drafting[-1]
        still = [i for i in active if wanted[i].num_tokens > s]
        if len(still) < len(active):
            keep = host_list_to_device([active.index(i) for i in still], device)
            state = tuple(tensor.index_select(0, keep) for tensor in state)
        drafting.append(still)
        state = step([wanted[i] for i in still], state, s)
        steps.append(state[0])
    drafts = iter(tp.broadcast_from_first(torch.cat(steps)).tolist())  # the one host read of the proposal
    proposals: dict[str, list[int]] = {request.state.request_id: [] for request in batch}
    for active in drafting:
        for i in active:
            proposals[wanted[i].state.request_id].append(next(drafts))
    return [proposals[request.state.request_id] for request in batch]
