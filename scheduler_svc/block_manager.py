"""Paged KV-cache block bookkeeping for the scheduler (block ids only, never a tensor)."""

from __future__ import annotations

from collections import deque


class NoFreeBlocksError(RuntimeError):
    """Raised when an allocation needs more KV blocks than are free."""


class KVBlockManager:
    """Paged KV block bookkeeping: a free list of block ids with reference counts, per-request block tables.

    A request's block table covers its tokens in order: token ``t`` lives in block
    ``table[t // block_size]``. Blocks are handed out from a FIFO free list (ascending ids at
    first) and return to its tail when their reference count drops to zero. Forked requests share blocks
    (see :meth:`share`), so a block stays in use until every table holding it has been freed.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.num_total_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._ref_counts = [0] * num_blocks
        self._tables: dict[str, list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        """Blocks not referenced by any request."""
        return len(self._free)

    def blocks_needed(self, request_id: str, num_tokens: int) -> int:
        """Extra blocks the request's table needs to cover ``num_tokens`` tokens in total."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        covering = -(-num_tokens // self.block_size)
        return max(0, covering - len(self._tables.get(request_id, ())))

    def can_allocate(self, request_id: str, num_tokens: int) -> bool:
        """Whether :meth:`allocate` for these arguments would succeed; changes nothing."""
        return self.blocks_needed(request_id, num_tokens) <= len(self._free)

    def allocate(self, request_id: str, num_tokens: int) -> list[int]:
        """Grow the request's table to cover ``num_tokens`` tokens; return only the newly added block ids.

        Raises NoFreeBlocksError (and changes nothing) when too few blocks are free.
        """
        needed = self.blocks_needed(request_id, num_tokens)
        if needed > len(self._free):
            raise NoFreeBlocksError(
                f"request {request_id!r} needs {needed} more KV blocks for {num_tokens} tokens, "
                f"only {len(self._free)} free"
            )
        new_blocks = [self._free.popleft() for _ in range(needed)]
        for block_id in new_blocks:
            self._ref_counts[block_id] = 1
        self._tables.setdefault(request_id, []).extend(new_blocks)
        return new_blocks

    def block_ids(self, request_id: str) -> list[int]:
        """A copy of the request's block table (empty if it holds none)."""
        return list(self._tables.get(request_id, ()))

    def free(self, request_id: str) -> None:
        """Drop the request's references to its blocks; freeing an unknown or freed request does nothing."""
        for block_id in self._tables.pop(request_id, ()):
            self._ref_counts[block_id] -= 1
            if self._ref_counts[block_id] == 0:
                self._free.append(block_id)

    def share(self, src_request_id: str, dst_request_id: str) -> None:
        """Fork: give ``dst`` the same blocks as ``src`` (each referenced once more).

        Any table ``dst`` held before is freed first. Blocks written after the fork must be
        allocated separately by the caller (no copy-on-write here).
        """
        if src_request_id == dst_request_id:
            return
        self.free(dst_request_id)
        table = self.block_ids(src_request_id)
        for block_id in table:
            self._ref_counts[block_id] += 1
        self._tables[dst_request_id] = table

    def ref_count(self, block_id: int) -> int:
        """How many block tables hold ``block_id`` (0 when it is free)."""
        return self._ref_counts[block_id]
