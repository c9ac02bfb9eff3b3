"""Content hashes of full KV blocks for prefix caching: block i's hash covers every token of blocks 0..i.

A chained SHA-256 (the previous block's digest, then this block's token ids as 4-byte little-endian words), so
two requests share a cached block only when every token before and in it is the same; a crafted prompt cannot
collide with another user's prefix as it could with Python's ``hash``. A request running with a LoRA adapter starts
the chain from the adapter's name: the KV of its blocks depends on the adapter, so only requests with the same one
share them.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence


def num_cacheable_blocks(num_tokens: int, block_size: int) -> int:
    """Full blocks a request with ``num_tokens`` known tokens may take from the cache when it starts: all but its
    last token's (that token is always computed: its logits give the next one)."""
    return max(0, num_tokens - 1) // block_size


def extend_block_hashes(hashes: list[bytes], token_ids: Sequence[int], block_size: int,
                        lora_adapter: str = "") -> list[bytes]:
    """Append to ``hashes`` (the digests of the first len(hashes) blocks of ``token_ids``) those of every further
    full block of ``token_ids``; returns ``hashes``. ``lora_adapter``: the cache key of the adapter the tokens run
    with (ServedAdapters.cache_key; empty: none)."""
    root = hashlib.sha256(b"lora adapter\0" + lora_adapter.encode()).digest() if lora_adapter else b""
    for start in range(len(hashes) * block_size, len(token_ids) - block_size + 1, block_size):
        digest = hashlib.sha256(hashes[-1] if hashes else root)
        digest.update(array("i", token_ids[start : start + block_size]).tobytes())
        hashes.append(digest.digest())
    return hashes
