"""Paged KV-cache block bookkeeping for the scheduler (block ids only, never a tensor)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class NoFreeBlocksError(RuntimeError):
    """Raised when an allocation needs more KV blocks than are free."""


class KVBlockManager:
    """Paged KV block bookkeeping: a free list of block ids with reference counts, per-request block tables.

    A request's block table covers its tokens in order: token ``t`` lives in block
    ``table[t // block_size]``. Blocks are handed out from a FIFO free list (ascending ids at
    first) and return to its tail when their reference count drops to zero. Forked requests share blocks
    (see :meth:`share`), so a block stays in use until every table holding it has been freed.

    With prefix caching, a full block whose KV the executor holds can be registered under the hash of its
    content and of the tokens before it (:meth:`register`); a free registered block keeps its content and hash
    until the free list hands it out again (least recently freed first), so a later request with the same prefix
    takes it back instead of recomputing it (:meth:`cached_prefix`, :meth:`take_cached`).
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.num_total_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._ref_counts = [0] * num_blocks
        self._tables: dict[str, list[int]] = {}
        self._hash_of_block: dict[int, bytes] = {}
        self._block_of_hash: dict[bytes, int] = {}
        self.num_evicted_blocks = 0
        """Registered blocks handed out again for other content (their cached prefix lost)."""

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
        new_blocks = [self._free.popitem(last=False)[0] for _ in range(needed)]
        for block_id in new_blocks:
            self._ref_counts[block_id] = 1
            self._forget(block_id)
        self._tables.setdefault(request_id, []).extend(new_blocks)
        return new_blocks

    def block_ids(self, request_id: str) -> list[int]:
        """A copy of the request's block table (empty if it holds none)."""
        return list(self._tables.get(request_id, ()))

    def free(self, request_id: str) -> None:
        """Drop the request's references to its blocks; freeing an unknown or freed request does nothing. With
        prefix caching the table's last blocks join the free list first: they are handed out (and their cached
        content lost) before the blocks of the prefix they extend."""
        table = self._tables.pop(request_id, [])
        for block_id in reversed(table) if self.enable_prefix_caching else table:
            self._ref_counts[block_id] -= 1
            if self._ref_counts[block_id] == 0:
                self._free[block_id] = None

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

    # ---- prefix caching --------------------------------------------------------------------
    @property
    def num_cached_blocks(self) -> int:
        """Registered blocks (in use or free), whose content a request with the same prefix can take back."""
        return len(self._hash_of_block)

    def cached_prefix(self, block_hashes: Sequence[bytes]) -> list[int]:
        """The registered blocks holding the first blocks of ``block_hashes``, up to the first one not cached
        (empty when prefix caching is off)."""
        if not self.enable_prefix_caching:
            return []
        blocks = []
        for block_hash in block_hashes:
            block_id = self._block_of_hash.get(block_hash)
            if block_id is None:
                break
            blocks.append(block_id)
        return blocks

    def take_cached(self, request_id: str, block_ids: Sequence[int]) -> None:
        """Start the request's (empty) table with these registered blocks, each referenced once more."""
        if not block_ids:
            return
        if self._tables.get(request_id):
            raise ValueError(f"request {request_id!r} already holds blocks; cached blocks only start a table")
        for block_id in block_ids:
            if self._ref_counts[block_id] == 0:
                del self._free[block_id]
            self._ref_counts[block_id] += 1
        self._tables[request_id] = list(block_ids)

    def can_allocate_after_cached(self, cached: Sequence[int], num_tokens: int) -> bool:
        """Whether a request without blocks fits ``num_tokens`` tokens once it takes these cached blocks (those
        that are free leave the free list)."""
        covering = -(-num_tokens // self.block_size)
        taken_from_free = sum(1 for block_id in cached if self._ref_counts[block_id] == 0)
        return max(0, covering - len(cached)) <= len(self._free) - taken_from_free

    def register(self, request_id: str, block_hashes: Sequence[bytes], start: int = 0) -> None:
        """Register the request's blocks start..len(block_hashes)-1 under these hashes (the hashes of its first
        blocks): their KV is (or is being) written by steps already sent. A block already registered, or a hash
        another block holds, is skipped."""
        if not self.enable_prefix_caching:
            return
        table = self._tables.get(request_id, [])
        for block_id, block_hash in zip(table[start:], block_hashes[start:]):
            if block_id in self._hash_of_block or block_hash in self._block_of_hash:
                continue
            self._hash_of_block[block_id] = block_hash
            self._block_of_hash[block_hash] = block_id

    def reset_prefix_cache(self) -> None:
        """Forget every registered block (the executor's KV is gone or unknown, e.g. after it was lost)."""
        self._hash_of_block.clear()
        self._block_of_hash.clear()

    def _forget(self, block_id: int) -> None:
        block_hash = self._hash_of_block.pop(block_id, None)
        if block_hash is not None:
            del self._block_of_hash[block_hash]
            self.num_evicted_blocks += 1
