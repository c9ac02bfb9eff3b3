"""The target's forward over one step's flattened batch: replayed from a captured graph when one fits,
eager otherwise (prefill chunks longer than a captured query length, batches larger than the largest captured
bucket, or no graphs at all). Graphs of a model serving LoRA adapters apply them (the adapter slots are one of
their static inputs), so steps with adapter rows replay like any other."""

from __future__ import annotations

import functools
from typing import cast

import torch

from executor_svc.cuda_graphs.step_graphs import GraphableModel, StepGraphs
from executor_svc.host_batch import HostBatch
from executor_svc.host_transfer import host_list_to_device
from executor_svc.kv_cache import PagedKVCache
from executor_svc.last_token_buffer import LastTokenBuffer
from executor_svc.lora.projection import AdaptedModel


class StepForward:
    """Runs the target on a HostBatch and returns the logits of the rows the step samples."""

    def __init__(
        self,
        model: GraphableModel,
        kv_cache: PagedKVCache,
        last_tokens: LastTokenBuffer,
        device: torch.device,
        graphs: StepGraphs | None = None,
    ) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.last_tokens = last_tokens
        self.device = device
        self.graphs = graphs
        self.num_replays = 0
        """Steps replayed from a captured graph so far (the others ran eagerly)."""
        self.last_hidden: torch.Tensor | None = None
        """The final-normed hidden states [T, hidden] of the last step's rows (what an EAGLE-style drafter reads;
        a view of a graph's output when replayed, valid until the next step)."""
        self.last_slots: torch.Tensor | None = None
        """The KV slot of each of those rows, on the device (the attention metadata's; valid as long)."""

    def sampled_logits(self, batch: HostBatch, sample_rows: list[int]) -> torch.Tensor:
        """Logits [len(sample_rows), vocab] of the flat rows ``sample_rows``; writes the batch's K/V."""
        rows = host_list_to_device(sample_rows, self.device)
        shape = self.graphs.shape_for(batch) if self.graphs is not None else None
        if self.graphs is not None and shape is not None:
            self.num_replays += 1
            logits = self.graphs.run(batch, shape, functools.partial(self._resolve_unread, batch))
            self.last_hidden = self.graphs.last_hidden
            self.last_slots = self.graphs.inputs.view("slot_mapping", batch.num_tokens)
            return logits.index_select(0, rows)
        input_ids, positions, meta = batch.to_device(self.device)
        self._resolve_unread(batch, input_ids)
        if batch.uses_adapters:
            token_slots = host_list_to_device(batch.token_adapter_slots(), self.device)
            model = cast(AdaptedModel, self.model)  # only a model serving adapters is given such rows
            hidden = model(input_ids, positions, meta, self.kv_cache, model.adapter_rows(token_slots))
        else:
            hidden = self.model(input_ids, positions, meta, self.kv_cache)
        self.last_hidden = hidden
        self.last_slots = meta.slot_mapping
        return self.model.compute_logits(hidden.index_select(0, rows))

    def _resolve_unread(self, batch: HostBatch, input_ids: torch.Tensor) -> None:
        """Put each unread input id (a token sampled by a step not read back yet) in place, on the device."""
        if not batch.unread_rows:
            return
        rows_and_slots = host_list_to_device([batch.unread_rows, batch.unread_slots], self.device)
        input_ids.index_copy_(0, rows_and_slots[0], self.last_tokens.read(rows_and_slots[1]))
