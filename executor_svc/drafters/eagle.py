"""Drafting with an EAGLE-style head over the target's own features (see eagle_head.py for the head).

Every target step hands the drafter the hidden states of the rows it fed (``observe``): f_p for each fed
position p, written to a paged feature store at p's KV slot (the target's block ids), so a later feed of a
position (rows of rejected drafts fed again) overwrites it. When asked for drafts, the head first catches up
on the entries it has not seen, entry j = (f_j, x_{j+1}) for j up to the request's newest accepted pair; the
last one gives the first draft. Each further draft feeds the head its own predicted feature and the previous
draft.

Entry j's K/V sits at position j of a one-layer paged cache addressed by the target's block ids; draft
entries (positions past the accepted ones) are overwritten by the next catch-up, as for the draft model.
A request that starts past a cached prefix (prefix caching) finds the prefix's features in the shared
blocks, written when the target computed them, and catches up from position 0: its head entries do not
depend on whether, or how far, the request that computed the prefix had drafted.
Drafts are argmax over the draft vocabulary, mapped back to target ids on the device: the K drafts reach
the host in one copy at the end. With step graphs (CUDA), every draft step after the first replays a
captured one-token step (eagle_step_model.py); catch-ups, of any length, run eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from executor_svc.cuda_graphs.step_graphs import GraphCapture, StepGraphs
from executor_svc.drafters.base import Drafter, DraftRequest
from executor_svc.drafters.draft_steps import DraftState, draft_autoregressively
from executor_svc.drafters.eagle_head import EagleHead
from executor_svc.drafters.eagle_step_model import EagleStepModel
from executor_svc.host_batch import HostBatch
from executor_svc.host_transfer import host_list_to_device
from executor_svc.kv_cache import PagedKVCache
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel


class EagleDrafter:
    """Greedy drafts from an EAGLE-style head (q is one-hot at each draft)."""

    name = "eagle"
    reads_target_hidden = True

    def __init__(self, head: EagleHead, target, kv_cache: PagedKVCache, block_size: int,
                 device: torch.device, source_dir: str | None = None, tp: TensorParallel = SINGLE) -> None:
        """``target``: the target's shared tensors (drafters/shared_target.py) or the unsharded model itself
        (its embedding, LM head rows and RoPE tables are shared); ``source_dir``: where the head was loaded
        from; ``tp``: the target's tensor-parallel group (the head is replicated; rank 0's drafts count)."""
        self.head = head
        self.tp = tp
        self.source_dir = source_dir
        self.step_model = EagleStepModel(head, target)
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device
        num_slots = (kv_cache.num_blocks + kv_cache.scratch_blocks) * block_size
        self.feature_store = torch.zeros(num_slots, head.norm_weight.shape[0], dtype=kv_cache.dtype, device=device)
        """The target's hidden state of every fed position, at that position's KV slot."""
        self._fed: dict[str, int] = {}
        """Per request, the positions 0..n-1 whose features are in the store (fed, or in a cached prefix)."""
        self._computed: dict[str, int] = {}
        """Per request, the entries 0..n-1 whose head K/V is valid."""
        self.step_graphs: StepGraphs | None = None
        """The captured draft steps of ``step_model`` (``capture_step_graphs``); None: every step eager."""
        self.num_replays = 0
        """Draft steps replayed from a captured graph so far."""

    def observe(self, host: HostBatch, request_ids: Sequence[str], hidden: torch.Tensor, slots: torch.Tensor) -> None:
        """The target fed ``host``'s sequences, one per request id; ``hidden`` row i is flat row i's hidden state
        and ``slots`` row i's KV slot. A feed supersedes whatever an earlier step fed at the same positions
        (rejected drafts' rows)."""
        rows = host.num_tokens
        self.feature_store.index_copy_(0, slots[:rows], hidden[:rows].to(self.feature_store.dtype))
        for request_id, query_len, seq_len in zip(request_ids, host.query_lens, host.seq_lens):
            first = seq_len - query_len
            if first <= self._fed.get(request_id, 0):  # else a gap: the request never drafts (never wrongly)
                self._fed[request_id] = seq_len
            self._computed[request_id] = min(self._computed.get(request_id, 0), first)

    def adopt_cached_prefix(self, request_id: str, num_cached_tokens: int) -> None:
        """The prefix's features sit in the shared blocks (stored when the target computed them for another
        request); the head catches up over them, so its entries there are its own."""
        self._fed[request_id] = num_cached_tokens
        self._computed[request_id] = 0

    def timed_as(self) -> Drafter:
        """Itself: its cost per draft does not depend on the text."""
        return self

    @torch.inference_mode()
    def propose(self, batch: list[DraftRequest]) -> list[list[int]]:
        catching_up = [(request, slots) for request in batch if request.num_tokens > 0
                       for slots in [self._pending_slots(request)] if slots is not None]
        if not catching_up:
            return [[] for _ in batch]
        wanted = [request for request, _ in catching_up]
        return draft_autoregressively(batch, wanted, self._catch_up(catching_up), self._draft_step, self.device,
                                      self.tp)

    def _pending_slots(self, request: DraftRequest) -> list[int] | None:
        """The store's slots of features f_c .. f_{L-2}, those of the entries the head has not seen (L: the
        request's tokens), or None when some were never fed (the request then gets no drafts this step)."""
        state = request.state
        first, last = self._computed.get(state.request_id, 0), len(state.token_ids) - 2
        if last < first or self._fed.get(state.request_id, 0) <= last:
            return None
        size = self.block_size
        return [state.block_ids[p // size] * size + p % size for p in range(first, last + 1)]

    def _catch_up(self, batch: list[tuple[DraftRequest, list[int]]]) -> DraftState:
        """Feed every entry the head has not seen; the first draft and predicted feature of each request."""
        host = HostBatch(self.block_size)
        all_slots: list[int] = []
        for request, slots in batch:
            state = request.state
            first = len(state.token_ids) - 1 - len(slots)
            host.add_sequence(state.token_ids[first + 1 :], first, state.block_ids)
            self._computed[state.request_id] = len(state.token_ids) - 1
            all_slots += slots
        features = self.feature_store.index_select(0, host_list_to_device(all_slots, self.device))
        predicted = self._forward(host, features)
        last_rows = host_list_to_device(host.query_lens, self.device).cumsum(0) - 1
        predicted = predicted.index_select(0, last_rows)
        return self._draft_ids(predicted), predicted

    def _draft_step(self, batch: list[DraftRequest], state: DraftState, step: int) -> DraftState:
        """Feed each request's previous draft and predicted feature (entry L - 2 + step, at that position)."""
        previous, features = state
        host = HostBatch(self.block_size)
        for request in batch:
            host.add_sequence([0], len(request.state.token_ids) - 2 + step, request.state.block_ids)
        shape = self.step_graphs.shape_for(host) if self.step_graphs is not None else None
        if self.step_graphs is None or shape is None:
            predicted = self._forward(host, features, previous)
            return self._draft_ids(predicted), predicted
        host.unread_rows = list(range(len(batch)))  # every input id is a draft still on the device

        def put_inputs(input_ids: torch.Tensor) -> None:
            input_ids[: len(batch)].copy_(previous)
            self.step_model.features[: len(batch)].copy_(features)

        self.num_replays += 1
        logits = self.step_graphs.run(host, shape, put_inputs)
        assert self.step_graphs.last_hidden is not None  # captured with keep_hidden
        # The predicted features are a view of the graphs' buffer: the next step copies them in before replaying.
        return self.step_model.draft_ids(logits), self.step_graphs.last_hidden

    def _forward(self, host: HostBatch, features: torch.Tensor, token_ids: torch.Tensor | None = None) -> torch.Tensor:
        input_ids, positions, meta = host.to_device(self.device)
        if token_ids is not None:  # drafts still on the device
            input_ids = token_ids
        return self.step_model.predict(features, input_ids, positions, meta, self.kv_cache)

    def capture_step_graphs(self, max_num_seqs: int, max_blocks_per_seq: int,
                            make_capture: Callable[[], GraphCapture]) -> None:
        """Capture the one-token draft step for every batch bucket up to ``max_num_seqs`` (the head's attention
        backend must be graph-safe and its KV cache have a scratch block for padded writes)."""
        self.step_model.reserve_features(max_num_seqs)
        graphs = StepGraphs(self.step_model, self.kv_cache, max_num_seqs, 1, max_blocks_per_seq, make_capture,
                            keep_hidden=True)
        graphs.capture_all()
        self.step_graphs = graphs

    def _draft_ids(self, predicted: torch.Tensor) -> torch.Tensor:
        """Argmax over the draft vocabulary of predicted features, as target ids (on the device)."""
        return self.step_model.draft_ids(self.step_model.compute_logits(predicted))

    def drop(self, request_id: str) -> None:
        self._fed.pop(request_id, None)
        self._computed.pop(request_id, None)

    def reset(self) -> None:
        self._fed.clear()
        self._computed.clear()
