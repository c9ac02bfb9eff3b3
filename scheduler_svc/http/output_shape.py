"""What a generation endpoint answers with (OutputShape): the chat and completion endpoints' own OpenAI bodies and
``data:`` chunks (OpenAIChunks), or another API's objects and events made from them (the Responses and Messages
APIs: translated_route.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.responses import ResponseBuilder
from scheduler_svc.http.streaming import DONE, sse_event


class OutputShape(Protocol):
    """What a generation endpoint answers with, made from the chat or completion builder's output."""

    def response_id(self, base: str) -> str:
        """The response's ``id`` for the request id's base (request_ids.py)."""
        ...

    def body(self, built: dict[str, Any]) -> dict[str, Any]:
        """The whole response from the builder's body."""
        ...

    def start_events(self, builder: ResponseBuilder) -> list[bytes]:
        """A stream's first events."""
        ...

    def chunk_events(self, chunk: dict[str, Any]) -> list[bytes]:
        """The events of one of the builder's chunks."""
        ...

    def error_events(self, error: ApiError) -> list[bytes]:
        """The events of an error after the stream began (the stream ends after them)."""
        ...

    def end_events(self, builder: ResponseBuilder) -> list[bytes]:
        """A stream's last events."""
        ...

    def detach(self, collect: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
        """For a request answered at once and generated in the background (the Responses API's ``background``):
        the immediate answer, ``collect`` (the builder's whole body) then awaited in the background; None: the
        request waits for its answer."""
        ...

    def renamed(self, error: ApiError) -> ApiError:
        """``error`` naming the endpoint's own parameter."""
        ...

    def error_payload(self, error: ApiError) -> dict[str, Any]:
        """The body of an error response."""
        ...


class OpenAIChunks:
    """The chat and completion endpoints' own shape: the builder's body, and its chunks as ``data:`` events ended
    by ``[DONE]``; ``id_prefix``: the response id's (``chatcmpl``, ``cmpl``)."""

    def __init__(self, id_prefix: str) -> None:
        self.id_prefix = id_prefix

    def response_id(self, base: str) -> str:
        return f"{self.id_prefix}-{base}"

    def body(self, built: dict[str, Any]) -> dict[str, Any]:
        return built

    def start_events(self, builder: ResponseBuilder) -> list[bytes]:
        if not builder.chat:
            return []
        return [sse_event(builder.role_chunk()), *(sse_event(chunk) for chunk in builder.echo_chunks())]

    def chunk_events(self, chunk: dict[str, Any]) -> list[bytes]:
        return [sse_event(chunk)]

    def error_events(self, error: ApiError) -> list[bytes]:
        return [sse_event(error.body()), DONE]

    def end_events(self, builder: ResponseBuilder) -> list[bytes]:
        return [sse_event(builder.usage_chunk()), DONE] if builder.plan.include_usage else [DONE]

    def detach(self, collect: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
        return None

    def renamed(self, error: ApiError) -> ApiError:
        return error

    def error_payload(self, error: ApiError) -> dict[str, Any]:
        return error.body()
