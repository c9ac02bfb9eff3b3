"""Decode and verify forwards captured once per padded shape and replayed with new inputs.

A captured forward computes the target's logits for every flat row of its shape (real rows first, then
padding) from the static input buffers. Replaying it costs one launch instead of the ~20 kernel launches
per layer an eager forward pays, which is what bounds a small model's step on a fast GPU. Steps whose
shape no graph holds (prefill chunks, batches larger than the largest bucket) run eagerly.

The graph itself is behind ``GraphCapture`` so the bookkeeping can be tested on the CPU with a stand-in
that re-runs the captured function at every replay: a function that read anything but the static
buffers would then give different tokens than eager, as a real graph would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.cuda_graphs.buckets import GraphShape, choose_shape, graph_shapes
from executor_svc.cuda_graphs.static_inputs import StaticStepInputs
from executor_svc.host_batch import HostBatch
from executor_svc.kv_cache import PagedKVCache
from executor_svc.lora.projection import AdaptedModel

WARMUP_RUNS = 2
"""Eager runs before capture: compile Triton and torch.compile kernels, size cuBLAS workspaces."""


class GraphableModel(Protocol):
    """A causal LM whose forward reads only its arguments (so a graph of it replays on new inputs)."""

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata, kv_cache: PagedKVCache
    ) -> torch.Tensor:
        """Hidden states [T, hidden] of the flat tokens."""
        ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [T, vocab] of hidden states."""
        ...


class GraphCapture(Protocol):
    """Records a function's device work once and replays it."""

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Run and record fn; its output tensor is rewritten in place by every replay."""
        ...

    def replay(self) -> None:
        """Run the recorded work again, reading the inputs' current contents."""
        ...


class CudaGraphCapture:
    """A torch.cuda.CUDAGraph sharing one memory pool with the other captured shapes."""

    def __init__(self, pool: Any) -> None:
        """``pool``: a handle from torch.cuda.graph_pool_handle(), shared by every shape's graph."""
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(self.graph, pool=self.pool):
            out = fn()
        return out

    def replay(self) -> None:
        self.graph.replay()


def cuda_graph_factory() -> Callable[[], GraphCapture]:
    """Makes CUDA graphs that all share one memory pool (captured largest first, smaller ones reuse it)."""
    pool = torch.cuda.graph_pool_handle()
    return functools.partial(CudaGraphCapture, pool)


class EagerStandIn:
    """A graph stand-in for CPU tests: replay re-runs the function and writes into the captured output."""

    def __init__(self) -> None:
        self.fn: Callable[[], torch.Tensor] | None = None
        self.out: torch.Tensor | None = None
        self.replays = 0

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        self.fn, self.out = fn, fn()
        return self.out

    def replay(self) -> None:
        assert self.fn is not None and self.out is not None, "replay before capture"
        self.out.copy_(self.fn())
        self.replays += 1


@dataclass
class _Captured:
    graph: GraphCapture
    logits: torch.Tensor
    """[shape.num_tokens, vocab] float32, rewritten by every replay."""


class StepGraphs:
    """The captured forwards of one model over its KV cache, one per shape, and their static inputs.

    ``model(input_ids, positions, meta, kv_cache)`` must only use graph-safe attention (the metadata it
    gets is static: padded, host lists empty); ``make_capture`` builds one graph per shape.
    """

    def __init__(
        self,
        model: GraphableModel,
        kv_cache: PagedKVCache,
        max_num_seqs: int,
        max_query_len: int,
        max_blocks_per_seq: int,
        make_capture: Callable[[], GraphCapture],
        keep_hidden: bool = False,
        adapters: bool = False,
    ) -> None:
        """``keep_hidden``: also leave each replay's hidden states in a static buffer (``last_hidden``), for a
        drafter that reads the target's features; off, the captured step does not copy them. ``adapters``: the
        model serves LoRA adapters (an AdaptedModel): every captured step applies them to the rows the static
        adapter slots name, so steps with adapter rows replay too (and base-only ones run the adapters' masked
        matmuls, whose update is zero)."""
        self.model = model
        self.adapters = adapters
        self.kv_cache = kv_cache
        device = kv_cache.layers[0].device
        self.shapes = graph_shapes(max_num_seqs, max_query_len)
        self.inputs = StaticStepInputs(max_num_seqs, max_query_len, max_blocks_per_seq, kv_cache.block_size, device)
        self._make_capture = make_capture
        self._captured: dict[GraphShape, _Captured] = {}
        self.keep_hidden = keep_hidden
        self._hidden: torch.Tensor | None = None
        """With keep_hidden, every replay copies its hidden states here (allocated by the first, eager, warm-up run)."""
        self.last_hidden: torch.Tensor | None = None
        """Hidden states of the last replay's real rows (a view of the buffer above)."""

    @torch.inference_mode()
    def capture_all(self) -> None:
        """Capture every shape, largest first (smaller graphs then fit in the pool the larger ones left).

        The captured forwards write K/V only to padded slots (-1, skipped): capturing changes no cache."""
        for shape in self.shapes:
            self._write_idle_inputs(shape)
            graph = self._make_capture()
            logits = graph.capture(functools.partial(self._forward, shape))
            self._captured[shape] = _Captured(graph, logits)

    def shape_for(self, batch: HostBatch) -> GraphShape | None:
        """The captured shape this batch replays in, or None (run it eagerly)."""
        shape = choose_shape(list(self._captured), batch.query_lens)
        if shape is None:
            return None
        widest = max(-(-s // self.inputs.block_size) for s in batch.seq_lens)
        return shape if widest <= self.inputs.max_blocks_per_seq else None

    def run(self, batch: HostBatch, shape: GraphShape, resolve_unread: Callable[[torch.Tensor], None]) -> torch.Tensor:
        """Replay ``shape`` on this batch; returns the logits of its real rows [batch.num_tokens, vocab]
        (a view of the graph's output, valid until the next replay of that shape).

        ``resolve_unread(input_ids)`` fills in, on the device, the input ids not read back yet."""
        self.inputs.write(batch, shape)
        if batch.unread_rows:
            resolve_unread(self.inputs.input_ids(shape))
        captured = self._captured[shape]
        captured.graph.replay()
        self.last_hidden = None if self._hidden is None else self._hidden[: batch.num_tokens]
        return captured.logits[: batch.num_tokens]

    def _forward(self, shape: GraphShape) -> torch.Tensor:
        inputs = self.inputs
        if self.adapters:
            model = cast(AdaptedModel, self.model)
            hidden = model(inputs.input_ids(shape), inputs.positions(shape), inputs.metadata(shape), self.kv_cache,
                           model.adapter_rows(inputs.adapter_slots(shape)))
        else:
            hidden = self.model(inputs.input_ids(shape), inputs.positions(shape), inputs.metadata(shape),
                                self.kv_cache)
        if self.keep_hidden:
            if self._hidden is None:  # the largest shape's first warm-up run: outside any capture
                self._hidden = torch.empty((max(s.num_tokens for s in self.shapes), hidden.shape[1]),
                                           dtype=hidden.dtype, device=hidden.device)
            self._hidden[: hidden.shape[0]].copy_(hidden)
        return self.model.compute_logits(hidden)

    def _write_idle_inputs(self, shape: GraphShape) -> None:
        """Inputs of a capture: every sequence empty, every token padding (nothing read or written)."""
        self.inputs.write(HostBatch(self.inputs.block_size), shape)
