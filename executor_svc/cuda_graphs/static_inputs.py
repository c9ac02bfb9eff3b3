"""The device buffers a captured step reads, written in place before every replay.

A captured graph replays the exact kernels it recorded, reading the exact addresses it recorded: its
inputs must live in buffers that never move. They are sized for the largest captured shape; a step of
shape (B, Q) uses each buffer's first rows. All of them are views of one int64 device tensor, filled by
two host-to-device copies per step from a pinned staging tensor that is allocated anew each step (the
caching host allocator hands a pinned block out again only after the copy that read it has run, so a
step prepared while the previous one is still queued never overwrites its inputs).
"""

from __future__ import annotations

import numpy as np
import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.cuda_graphs.buckets import GraphShape
from executor_svc.host_batch import HostBatch

PAD_SLOT = -1
"""Slot of a padded token: attention backends skip it when writing K/V."""


class StaticStepInputs:
    """Input ids, positions, attention metadata and LoRA adapter slots of captured steps, at fixed device
    addresses."""

    def __init__(
        self, max_num_seqs: int, max_query_len: int, max_blocks_per_seq: int, block_size: int, device: torch.device
    ) -> None:
        for name, value in (
            ("max_num_seqs", max_num_seqs),
            ("max_query_len", max_query_len),
            ("max_blocks_per_seq", max_blocks_per_seq),
            ("block_size", block_size),
        ):
            if value < 1:
                raise ValueError(f"{name}: must be >= 1, got {value}")
        self.max_num_seqs = max_num_seqs
        self.max_num_tokens = max_num_seqs * max_query_len
        self.max_blocks_per_seq = max_blocks_per_seq
        self.block_size = block_size
        self.device = device
        tokens, seqs = self.max_num_tokens, max_num_seqs
        # Layout of the flat buffer: the per-token and per-sequence rows, then the block tables.
        self._offsets = {
            "input_ids": (0, tokens),
            "positions": (tokens, 2 * tokens),
            "slot_mapping": (2 * tokens, 3 * tokens),
            "adapter_slots": (3 * tokens, 4 * tokens),
            "query_start_loc": (4 * tokens, 4 * tokens + seqs + 1),
            "seq_lens": (4 * tokens + seqs + 1, 4 * tokens + 2 * seqs + 1),
        }
        self._rows_end = 4 * tokens + 2 * seqs + 1
        self.flat = torch.zeros(self._rows_end + seqs * max_blocks_per_seq, dtype=torch.long, device=device)
        self.block_tables = self.flat[self._rows_end :].view(seqs, max_blocks_per_seq)
        self._metadata: dict[GraphShape, AttentionMetadata] = {}

    def view(self, name: str, length: int | None = None) -> torch.Tensor:
        """A fixed view of one field's buffer (its first ``length`` rows)."""
        start, end = self._offsets[name]
        return self.flat[start : end if length is None else start + length]

    def fits(self, shape: GraphShape) -> bool:
        """Whether the buffers are large enough for this shape."""
        return shape.num_seqs <= self.max_num_seqs and shape.num_tokens <= self.max_num_tokens

    def input_ids(self, shape: GraphShape) -> torch.Tensor:
        return self.view("input_ids", shape.num_tokens)

    def positions(self, shape: GraphShape) -> torch.Tensor:
        return self.view("positions", shape.num_tokens)

    def adapter_slots(self, shape: GraphShape) -> torch.Tensor:
        """The LoRA adapter slot of each token (-1: none, padding included)."""
        return self.view("adapter_slots", shape.num_tokens)

    def metadata(self, shape: GraphShape) -> AttentionMetadata:
        """The attention metadata of this shape: the same object (and tensors) at every replay."""
        if shape not in self._metadata:
            self._metadata[shape] = AttentionMetadata.static(
                slot_mapping=self.view("slot_mapping", shape.num_tokens),
                query_start_loc=self.view("query_start_loc", shape.num_seqs + 1),
                seq_lens=self.view("seq_lens", shape.num_seqs),
                block_tables=self.block_tables[: shape.num_seqs],
                block_size=self.block_size,
                max_query_len=shape.query_len,
            )
        return self._metadata[shape]

    def write(self, batch: HostBatch, shape: GraphShape) -> None:
        """Copy the batch into the buffers, padded to ``shape``: padded tokens have id 0, position 0, slot -1
        and no adapter; padded sequences have seq_len 0 and an empty query at the end of the real tokens."""
        self._check_fits(batch, shape)
        staging = torch.empty(self.flat.shape[0], dtype=torch.long, pin_memory=self.device.type == "cuda")
        host = staging.numpy()
        rows_end = self._rows_end
        host[:rows_end] = 0
        tokens = batch.num_tokens
        self._put(host, "input_ids", batch.input_ids)
        self._put(host, "positions", batch.positions)
        start, end = self._offsets["slot_mapping"]
        host[start:end] = PAD_SLOT
        host[start : start + tokens] = batch.slot_mapping()
        start, end = self._offsets["adapter_slots"]
        host[start:end] = -1
        if batch.uses_adapters:
            host[start : start + tokens] = batch.token_adapter_slots()
        starts = np.zeros(shape.num_seqs + 1, dtype=np.int64)
        np.cumsum(batch.query_lens, out=starts[1 : batch.num_seqs + 1])
        starts[batch.num_seqs + 1 :] = tokens
        self._put(host, "query_start_loc", starts)
        self._put(host, "seq_lens", batch.seq_lens)
        tables = host[rows_end : rows_end + shape.num_seqs * self.max_blocks_per_seq].reshape(shape.num_seqs, -1)
        tables[:] = 0
        for row, (table, seq_len) in enumerate(zip(batch.block_tables, batch.seq_lens)):
            used = -(-seq_len // self.block_size)
            tables[row, :used] = table[:used]
        cuda = self.device.type == "cuda"
        self.flat[:rows_end].copy_(staging[:rows_end], non_blocking=cuda)
        table_end = rows_end + shape.num_seqs * self.max_blocks_per_seq
        self.flat[rows_end:table_end].copy_(staging[rows_end:table_end], non_blocking=cuda)

    def _put(self, host: np.ndarray, name: str, values: list[int] | np.ndarray) -> None:
        start, _ = self._offsets[name]
        host[start : start + len(values)] = values

    def _check_fits(self, batch: HostBatch, shape: GraphShape) -> None:
        if batch.num_seqs > shape.num_seqs or max(batch.query_lens, default=0) > shape.query_len:
            raise ValueError(
                f"batch: {batch.num_seqs} sequences with queries up to {max(batch.query_lens, default=0)} "
                f"do not fit shape {shape}"
            )
        if not self.fits(shape):
            raise ValueError(f"shape: {shape} is larger than the buffers ({self.max_num_seqs} sequences)")
        widest = max((-(-s // self.block_size) for s in batch.seq_lens), default=0)
        if widest > self.max_blocks_per_seq:
            raise ValueError(f"block_tables: a sequence needs {widest} blocks, buffers hold {self.max_blocks_per_seq}")
