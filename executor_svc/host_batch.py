"""One step's flattened batch as host lists, before it becomes device tensors (fresh, or a graph's buffers)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.host_transfer import host_list_to_device


@dataclass
class HostBatch:
    """Sequence i owns the flat tokens after those of sequences 0..i-1; its query_lens[i] tokens sit at
    positions seq_lens[i] - query_lens[i] .. seq_lens[i] - 1."""

    block_size: int
    input_ids: list[int] = field(default_factory=list)
    """0 where the token is still on the device (see unread_rows)."""
    positions: list[int] = field(default_factory=list)
    query_lens: list[int] = field(default_factory=list)
    seq_lens: list[int] = field(default_factory=list)
    block_tables: list[list[int]] = field(default_factory=list)
    unread_rows: list[int] = field(default_factory=list)
    """Flat rows whose input id is a sampled token not read back yet..."""
    unread_slots: list[int] = field(default_factory=list)
    """...and each one's LastTokenBuffer slot."""
    adapter_slots: list[int] = field(default_factory=list)
    """Per sequence, the LoRA adapter slot its rows run with (-1: the base model)."""

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def uses_adapters(self) -> bool:
        """Whether some sequence runs with a LoRA adapter."""
        return any(slot >= 0 for slot in self.adapter_slots)

    def add_sequence(self, tokens: list[int], start: int, block_table: list[int], adapter_slot: int = -1) -> int:
        """Append one sequence's tokens (at positions start, start+1, ...) run with LoRA adapter slot
        ``adapter_slot`` (-1: none); returns its first flat row."""
        first = len(self.input_ids)
        self.adapter_slots.append(adapter_slot)
        self.input_ids.extend(tokens)
        self.positions.extend(range(start, start + len(tokens)))
        self.query_lens.append(len(tokens))
        self.seq_lens.append(start + len(tokens))
        self.block_tables.append(block_table)
        return first

    def token_adapter_slots(self) -> list[int]:
        """The LoRA adapter slot of every flat token (-1: none)."""
        return [slot for slot, query_len in zip(self.adapter_slots, self.query_lens) for _ in range(query_len)]

    def slot_mapping(self) -> list[int]:
        """The cache slot of every flat token."""
        slots: list[int] = []
        size = self.block_size
        for query_len, seq_len, table in zip(self.query_lens, self.seq_lens, self.block_tables):
            for position in range(seq_len - query_len, seq_len):
                slots.append(table[position // size] * size + position % size)
        return slots

    def to_device(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        """Fresh device tensors (input ids, positions) and attention metadata for an eager forward."""
        meta = AttentionMetadata.build(self.query_lens, self.seq_lens, self.block_tables, self.block_size, device)
        return (
            host_list_to_device(self.input_ids, device),
            host_list_to_device(self.positions, device),
            meta,
        )
