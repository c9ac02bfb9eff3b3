"""Drafting with a smaller causal LM that shares the target's vocabulary.

The draft model keeps its own paged KV tensors, addressed by the target's block ids (the scheduler
reserves the lookahead slots). Each step it first catches up on the tokens it has not seen (the
prompt, then the tokens accepted since its last proposal), then decodes K tokens greedily.
Draft KV written for rejected drafts is simply overwritten by the next catch-up.

Each draft decode step takes its input ids from the previous step's argmax on the device, and
replays a captured graph when the drafter has them: the K drafts reach the host in one copy at the end.
"""

from __future__ import annotations

import torch

from executor_svc.cuda_graphs.step_graphs import GraphableModel, StepGraphs
from executor_svc.drafters.base import Drafter, DraftRequest
from executor_svc.drafters.draft_steps import draft_autoregressively
from executor_svc.host_batch import HostBatch
from executor_svc.host_transfer import host_list_to_device
from executor_svc.kv_cache import PagedKVCache
from executor_svc.row_argmax import row_argmax


class DraftModelDrafter:
    """Greedy drafts from a separate model (q is one-hot at each draft)."""

    name = "draft_model"
    reads_target_hidden = False
    source_dir: str | None = None  # its model directory is the config's draft_model_dir

    def __init__(
        self,
        model: GraphableModel,
        kv_cache: PagedKVCache,
        block_size: int,
        device: torch.device,
        graphs: StepGraphs | None = None,
    ) -> None:
        """``graphs``: captured one-token decode forwards of ``model`` over ``kv_cache`` (None: eager)."""
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device
        self.graphs = graphs
        self.num_replays = 0
        """Draft decode steps replayed from a captured graph so far."""
        self._computed: dict[str, int] = {}
        """Tokens of each request whose draft KV is valid."""

    def timed_as(self) -> Drafter:
        """Itself: its cost per draft does not depend on the text."""
        return self

    @torch.inference_mode()
    def propose(self, batch: list[DraftRequest]) -> list[list[int]]:
        wanted = [request for request in batch if request.num_tokens > 0]
        if not wanted:
            return [[] for _ in batch]
        return draft_autoregressively(
            batch, wanted, (self._catch_up(wanted),),
            lambda requests, state, step: (self._decode_one(requests, state[0], step),), self.device)

    def _catch_up(self, batch: list[DraftRequest]) -> torch.Tensor:
        """Feed every token the draft model has not seen; return the first draft of each request."""
        host = HostBatch(self.block_size)
        for request in batch:
            tokens = request.state.token_ids
            start = min(self._computed.get(request.state.request_id, 0), len(tokens) - 1)
            host.add_sequence(tokens[start:], start, request.state.block_ids)
            self._computed[request.state.request_id] = len(tokens)
        input_ids, positions, meta = host.to_device(self.device)
        hidden = self.model(input_ids, positions, meta, self.kv_cache)
        last_rows = host_list_to_device(host.query_lens, self.device).cumsum(0) - 1
        return row_argmax(self.model.compute_logits(hidden.index_select(0, last_rows)))

    def _decode_one(self, batch: list[DraftRequest], previous: torch.Tensor, step: int) -> torch.Tensor:
        """Feed each request's previous draft (at position len(tokens) + step - 1) and take the next."""
        host = HostBatch(self.block_size)
        for request in batch:
            host.add_sequence([0], len(request.state.token_ids) + step - 1, request.state.block_ids)
        host.unread_rows = list(range(len(batch)))  # every input id is a draft still on the device

        def put_previous(input_ids: torch.Tensor) -> None:
            input_ids[: len(batch)].copy_(previous)

        shape = self.graphs.shape_for(host) if self.graphs is not None else None
        if self.graphs is not None and shape is not None:
            self.num_replays += 1
            return row_argmax(self.graphs.run(host, shape, put_previous))
        input_ids, positions, meta = host.to_device(self.device)
        put_previous(input_ids)
        return row_argmax(self.model.compute_logits(self.model(input_ids, positions, meta, self.kv_cache)))

    def observe(self, host, request_ids, hidden, slots) -> None:
        pass  # reads no target features

    def adopt_cached_prefix(self, request_id: str, num_cached_tokens: int) -> None:
        pass  # it catches up from position 0: its KV of the prefix is written again, with the same values

    def drop(self, request_id: str) -> None:
        self._computed.pop(request_id, None)

    def reset(self) -> None:
        self._computed.clear()
