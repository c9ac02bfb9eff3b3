"""The Responses API's stored responses (``store``, ``previous_response_id``, ``GET`` and ``DELETE
/v1/responses/{id}``): the last ``--responses-store-size`` responses, in this process's memory.

A background response (``background: true``) is stored as soon as it is queued and replaced once its generation, a
task of the store's that ``cancel`` may stop, has ended.

A stored response keeps the object it answered with and its conversation as Responses input items: the earlier turns
it continued (``previous_response_id``), its own input (a string input as one user message) and its output items
(reasoning, message, function calls), which a later request's ``previous_response_id`` puts before its own input.
Instructions are not carried over, as in OpenAI's API. The least recently used response is evicted first; nothing
survives a restart of the scheduler.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoredResponse:
    """One stored response: its object and its conversation up to and including its output."""

    response: dict[str, Any]
    items: tuple[dict[str, Any], ...]
    """The conversation as Responses input items."""
    input_items: tuple[dict[str, Any], ...] = ()
    """The response's own input as listed by ``GET /v1/responses/{id}/input_items`` (each with an id)."""


class ResponseStore:
    """The last ``capacity`` stored responses by id, least recently used evicted first (0: nothing is stored)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity: must be >= 0, got {capacity}")
        self.capacity = capacity
        self._responses: OrderedDict[str, StoredResponse] = OrderedDict()
        self._running: dict[str, asyncio.Task[None]] = {}

    @property
    def enabled(self) -> bool:
        """Whether responses are stored at all."""
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._responses)

    def put(self, stored: StoredResponse) -> None:
        """Keep ``stored`` under its response's id (evicting the least recently used beyond the capacity)."""
        if not self.enabled:
            return
        response_id = stored.response["id"]
        self._responses[response_id] = stored
        self._responses.move_to_end(response_id)
        while len(self._responses) > self.capacity:
            self._responses.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        """The stored response (now the most recently used), or None: never stored, deleted or evicted."""
        stored = self._responses.get(response_id)
        if stored is not None:
            self._responses.move_to_end(response_id)
        return stored

    def delete(self, response_id: str) -> bool:
        """Forget the response; whether it was stored."""
        return self._responses.pop(response_id, None) is not None

    def start(self, response_id: str, work: Coroutine[Any, Any, None]) -> None:
        """Run a background response's generation (``work``, which stores its outcome) as a task ``cancel`` stops."""
        task = asyncio.get_running_loop().create_task(work)
        self._running[response_id] = task
        task.add_done_callback(lambda _: self._running.pop(response_id, None))

    async def cancel(self, response_id: str) -> bool:
        """Stop the response's background generation and wait until its outcome is stored; False when none runs."""
        task = self._running.get(response_id)
        if task is None:
            return False
        task.cancel()
        await asyncio.wait([task])
        return True

    def cancel_all(self) -> None:
        """Stop every background generation (the server is stopping)."""
        for task in list(self._running.values()):
            task.cancel()
