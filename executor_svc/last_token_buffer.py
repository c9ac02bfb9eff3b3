"""Each live request's last sampled token, kept on the device so the next step can read it there."""

from __future__ import annotations

import torch
from torch import Tensor

INITIAL_SLOTS = 64


class LastTokenBuffer:
    """A device tensor with one slot per live request, holding the last token it sampled.

    A step that runs before the previous step's tokens reached the host takes those requests' input
    ids from here (a gather on the device), so preparing it never waits for the device. Slots follow
    request ids, not batch rows, so a reordered batch or requests joining and leaving change nothing.
    All reads and writes are queued on the device in step order.
    """

    def __init__(self, device: torch.device, initial_slots: int = INITIAL_SLOTS) -> None:
        if initial_slots < 1:
            raise ValueError(f"initial_slots must be >= 1, got {initial_slots}")
        self.tokens = torch.zeros(initial_slots, dtype=torch.long, device=device)
        self._slots: dict[str, int] = {}
        self._free: list[int] = list(range(initial_slots - 1, -1, -1))

    def assign(self, request_id: str) -> int:
        """Gives a request a slot (growing the buffer when every slot is taken)."""
        if request_id in self._slots:
            raise ValueError(f"request_id {request_id!r} already has a slot")
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slots[request_id] = slot
        return slot

    def release(self, request_id: str) -> None:
        """Frees a request's slot (a no-op for an id without one)."""
        slot = self._slots.pop(request_id, None)
        if slot is not None:
            self._free.append(slot)

    def slot(self, request_id: str) -> int:
        return self._slots[request_id]

    def write(self, slots: Tensor, token_ids: Tensor) -> None:
        """tokens[slots[i]] = token_ids[i], on the device."""
        self.tokens.index_copy_(0, slots, token_ids)

    def read(self, slots: Tensor) -> Tensor:
        """The last tokens of ``slots``, on the device."""
        return self.tokens.index_select(0, slots)

    def clear(self) -> None:
        """Frees every slot."""
        self._slots.clear()
        self._free = list(range(self.tokens.shape[0] - 1, -1, -1))

    def _grow(self) -> None:
        old = self.tokens.shape[0]
        self.tokens = torch.cat([self.tokens, torch.zeros_like(self.tokens)])
        self._free.extend(range(2 * old - 1, old - 1, -1))
