"""Drafting with a smaller causal LM that shares the target's vocabulary.

The draft model keeps its own paged KV tensors, addressed by the target's block ids (the scheduler
reserves the lookahead slots). Each step it first catches up on the tokens it has not seen (the
prompt, then the tokens accepted since its last proposal), then decodes K tokens greedily.
Draft KV written for rejected drafts is simply overwritten by the next catch-up.
"""

from __future__ import annotations

import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.drafters.base import DraftRequest
from executor_svc.host_transfer import host_list_to_device
from executor_svc.kv_cache import PagedKVCache
from executor_svc.row_argmax import row_argmax


class DraftModelDrafter:
    """Greedy drafts from a separate model (q is one-hot at each draft)."""

    name = "draft_model"

    def __init__(self, model, kv_cache: PagedKVCache, block_size: int, device: torch.device) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device
        self._computed: dict[str, int] = {}
        """Tokens of each request whose draft KV is valid."""

    @torch.inference_mode()
    def propose(self, batch: list[DraftRequest]) -> list[list[int]]:
        wanted = [request for request in batch if request.num_tokens > 0]
        proposals: dict[str, list[int]] = {request.state.request_id: [] for request in batch}
        if not wanted:
            return [[] for _ in batch]
        first = self._catch_up(wanted)
        for request, token in zip(wanted, first):
            proposals[request.state.request_id].append(token)
        for step in range(1, max(request.num_tokens for request in wanted)):
            active = [request for request in wanted if request.num_tokens > step]
            tokens = self._decode_one(active, [proposals[r.state.request_id][-1] for r in active], step)
            for request, token in zip(active, tokens):
                proposals[request.state.request_id].append(token)
        return [proposals[request.state.request_id] for request in batch]

    def _catch_up(self, batch: list[DraftRequest]) -> list[int]:
        """Feed every token the draft model has not seen; return the first draft of each request."""
        ids: list[int] = []
        positions: list[int] = []
        query_lens: list[int] = []
        seq_lens: list[int] = []
        for request in batch:
            tokens = request.state.token_ids
            start = min(self._computed.get(request.state.request_id, 0), len(tokens) - 1)
            ids.extend(tokens[start:])
            positions.extend(range(start, len(tokens)))
            query_lens.append(len(tokens) - start)
            seq_lens.append(len(tokens))
            self._computed[request.state.request_id] = len(tokens)
        last_rows = host_list_to_device(query_lens, self.device).cumsum(0) - 1
        return self._forward_argmax(batch, ids, positions, query_lens, seq_lens, last_rows)

    def _decode_one(self, batch: list[DraftRequest], previous: list[int], step: int) -> list[int]:
        """Feed each request's previous draft (at position len(tokens) + step - 1) and take the next."""
        seq_lens = [len(request.state.token_ids) + step for request in batch]
        positions = [length - 1 for length in seq_lens]
        return self._forward_argmax(batch, previous, positions, [1] * len(batch), seq_lens, None)

    def _forward_argmax(self, batch, ids, positions, query_lens, seq_lens, rows) -> list[int]:
        tables = [request.state.block_ids for request in batch]
        meta = AttentionMetadata.build(query_lens, seq_lens, tables, self.block_size, self.device)
        hidden = self.model(
            host_list_to_device(ids, self.device),
            host_list_to_device(positions, self.device),
            meta,
            self.kv_cache,
        )
        if rows is not None:
            hidden = hidden.index_select(0, rows)
        return row_argmax(self.model.compute_logits(hidden)).tolist()

    def drop(self, request_id: str) -> None:
        self._computed.pop(request_id, None)

    def reset(self) -> None:
        self._computed.clear()
