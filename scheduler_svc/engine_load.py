"""How loaded one engine (one executor group) is: what ModelInfo, metrics and request placement read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class EngineLoad:
    """KV blocks and requests of one executor group (or of several, summed)."""

    num_kv_blocks: int
    num_free_kv_blocks: int
    num_running: int
    num_waiting: int
    num_preemptions: int
    blocks_wanted: int
    """Blocks the waiting requests need for their known tokens (queued load free blocks do not show yet)."""
    num_prefix_queried_tokens: int = 0
    """Tokens of started requests that looked for a cached prefix (prefix caching on)."""
    num_prefix_hit_tokens: int = 0
    """Of those, tokens whose KV was found cached."""

    @property
    def free_share(self) -> float:
        """Free blocks left once the waiting requests start, as a share of all blocks (may go below 0)."""
        if self.num_kv_blocks == 0:
            return 0.0
        return (self.num_free_kv_blocks - self.blocks_wanted) / self.num_kv_blocks

    @property
    def num_unfinished(self) -> int:
        return self.num_running + self.num_waiting

    @staticmethod
    def total(loads: Iterable[EngineLoad]) -> EngineLoad:
        """Every field summed."""
        loads = list(loads)
        return EngineLoad(**{f.name: sum(getattr(load, f.name) for load in loads) for f in fields(EngineLoad)})
