"""Server-sent events, and noticing a client that went away.

A streaming response watches the connection while it sends: when the client disconnects, sending
stops and ``on_close`` runs at once (the route aborts the engine requests there, freeing their KV
blocks), not at the next token. A non-streaming request races its work against the same watch.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"
T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before the response was ready."""


def sse_event(payload: dict[str, Any]) -> bytes:
    """One ``data: {...}`` event."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


def sse_typed_event(payload: dict[str, Any]) -> bytes:
    """One ``event: TYPE`` / ``data: {...}`` event, its name the payload's ``type`` (the Responses and Messages APIs'
    streams)."""
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {payload['type']}\ndata: {data}\n\n".encode()


async def until_disconnected(receive: Receive) -> None:
    """Return when the client disconnects (the request body must have been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(work: Awaitable[T], receive: Receive) -> T:
    """``await work``, unless the client disconnects first: then cancel it and raise ClientDisconnected."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnected(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    if task.cancelled() or not task.done():
        raise ClientDisconnected()
    return task.result()


class EventStream(StreamingResponse):
    """A ``text/event-stream`` response whose ``on_close`` runs when it ends, however it ends."""

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], None],
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", **(headers or {})})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sender = asyncio.ensure_future(self.stream_response(send))
        watcher = asyncio.ensure_future(until_disconnected(receive))
        try:
            await asyncio.wait((sender, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, watcher):
                task.cancel()
            self._on_close()
        if sender.done() and not sender.cancelled() and sender.exception() is not None:
            error = sender.exception()
            if not isinstance(error, OSError):  # OSError: the client went away while we were sending
                logger.error("event stream failed", exc_info=error)
