"""Per-forward attention metadata: where each new token's K/V goes and which cache blocks each sequence reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from executor_svc.host_transfer import host_list_to_device


@dataclass
class AttentionMetadata:
    """Describes one flattened forward over several sequences reading a paged KV cache.

    Sequence i owns the flat tokens query_start_loc[i] .. query_start_loc[i+1]-1; they sit at
    positions seq_lens[i]-query_lens[i] .. seq_lens[i]-1 of that sequence.
    """

    slot_mapping: torch.Tensor
    """int64 [T]: cache slot (block_id * block_size + offset) each new token's K/V goes to."""
    query_start_loc: torch.Tensor
    """int64 [B+1]: token offsets of each sequence's queries in the flat batch."""
    seq_lens: torch.Tensor
    """int64 [B]: tokens in context after this step (computed before + new)."""
    block_tables: torch.Tensor
    """int64 [B, max_blocks]: the blocks each sequence needs for seq_lens tokens, padded with 0."""
    block_size: int
    query_lens_list: list[int]
    seq_lens_list: list[int]
    block_tables_list: list[list[int]]
    """Each sequence's blocks on the host, trimmed to the ones its seq_len uses."""
    is_pure_decode: bool
    """Every sequence has exactly one query token."""
    max_query_len: int
    """The longest query; for a captured graph, its shape's query length (a bound, fixed per shape)."""
    is_static: bool = False
    """Views of a captured graph's static buffers: padded, and the host lists are empty (see ``static``)."""
    backend_cache: dict[str, Any] = field(default_factory=dict)
    """Per-forward derived tensors a backend builds on its first layer and reuses on the others."""

    @property
    def num_tokens(self) -> int:
        """Tokens in the flat batch (T; padding included for static metadata)."""
        if self.is_static:
            return self.slot_mapping.shape[0]
        return int(sum(self.query_lens_list))

    @property
    def num_seqs(self) -> int:
        """Sequences in the batch (B; padding included for static metadata)."""
        return self.seq_lens.shape[0]

    @property
    def device(self) -> torch.device:
        """Device the tensors live on."""
        return self.slot_mapping.device

    def cached(self, key: str, build: Callable[[], Any]) -> Any:
        """Return backend_cache[key], building it with `build()` on first use."""
        if key not in self.backend_cache:
            self.backend_cache[key] = build()
        return self.backend_cache[key]

    @classmethod
    def build(
        cls,
        query_lens: list[int],
        seq_lens: list[int],
        block_tables: list[list[int]],
        block_size: int,
        device: torch.device | str,
    ) -> AttentionMetadata:
        """Build the metadata of one forward from host-side lists (no device synchronisation)."""
        _validate(query_lens, seq_lens, block_tables, block_size)
        tables = [list(table[: -(-seq_len // block_size)]) for table, seq_len in zip(block_tables, seq_lens)]
        slots = _slot_mapping(query_lens, seq_lens, tables, block_size)
        starts = [0]
        for query_len in query_lens:
            starts.append(starts[-1] + query_len)
        width = max((len(t) for t in tables), default=0)
        padded = [t + [0] * (width - len(t)) for t in tables]
        return cls(
            slot_mapping=host_list_to_device(slots, device),
            query_start_loc=host_list_to_device(starts, device),
            seq_lens=host_list_to_device(seq_lens, device),
            block_tables=host_list_to_device(padded, device).view(len(tables), width),
            block_size=block_size,
            query_lens_list=list(query_lens),
            seq_lens_list=list(seq_lens),
            block_tables_list=tables,
            is_pure_decode=all(q == 1 for q in query_lens),
            max_query_len=max(query_lens, default=0),
        )

    @classmethod
    def static(
        cls,
        slot_mapping: torch.Tensor,
        query_start_loc: torch.Tensor,
        seq_lens: torch.Tensor,
        block_tables: torch.Tensor,
        block_size: int,
        max_query_len: int,
    ) -> AttentionMetadata:
        """Metadata over a captured graph's static buffers, whose contents change at every replay.

        Padded sequences have seq_len 0 and an empty query; padded tokens have slot -1 (never written).
        Only graph-safe backends read it: the host lists are empty.
        """
        return cls(
            slot_mapping=slot_mapping,
            query_start_loc=query_start_loc,
            seq_lens=seq_lens,
            block_tables=block_tables,
            block_size=block_size,
            query_lens_list=[],
            seq_lens_list=[],
            block_tables_list=[],
            is_pure_decode=max_query_len == 1,
            max_query_len=max_query_len,
            is_static=True,
        )


def _slot_mapping(query_lens: list[int], seq_lens: list[int], tables: list[list[int]], block_size: int) -> list[int]:
    slots: list[int] = []
    for query_len, seq_len, table in zip(query_lens, seq_lens, tables):
        for position in range(seq_len - query_len, seq_len):
            slots.append(table[position // block_size] * block_size + position % block_size)
    return slots


def _validate(query_lens: list[int], seq_lens: list[int], block_tables: list[list[int]], block_size: int) -> None:
    if block_size < 1:
        raise ValueError(f"block_size: must be >= 1, got {block_size}")
    if not len(query_lens) == len(seq_lens) == len(block_tables):
        raise ValueError(
            "query_lens, seq_lens, block_tables: lengths differ "
            f"({len(query_lens)}, {len(seq_lens)}, {len(block_tables)})"
        )
    for i, (query_len, seq_len, table) in enumerate(zip(query_lens, seq_lens, block_tables)):
        if query_len < 1 or seq_len < query_len:
            raise ValueError(f"query_lens/seq_lens: sequence {i} has query_len {query_len} and seq_len {seq_len}")
        if len(table) * block_size < seq_len:
            raise ValueError(f"block_tables: sequence {i} has {len(table)} blocks, too few for {seq_len} tokens")
