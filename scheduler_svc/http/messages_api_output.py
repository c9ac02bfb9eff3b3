"""Messages API objects from the chat endpoint's output: the whole message from a chat completion body, and the
stream's events from its chunks, and errors in Anthropic's shape.

A message's ``content`` blocks, in the order they are generated: a ``thinking`` block (the thinking the server's
--reasoning-parser split off; ``signature`` empty, as nothing is signed here), a ``text`` block (the answer), and a
``tool_use`` block per tool call (``input`` its arguments as an object). ``stop_reason`` is "tool_use" with calls,
"max_tokens" at the limit, "stop_sequence" (``stop_sequence`` the one met) or "end_turn"; usage counts input, output
and cached input tokens (``cache_read_input_tokens``; nothing is written to a cache on request:
``cache_creation_input_tokens`` 0).

Streamed, the events are Anthropic's: ``message_start``; per block ``content_block_start``, its
``content_block_delta`` events (``text_delta``, ``thinking_delta``, ``input_json_delta``) and ``content_block_stop``;
then ``message_delta`` (stop reason, output tokens) and ``message_stop``. An error after the stream began is an
``error`` event, then the stream ends.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler_svc.http.chat_stream_reader import ChatStreamReader
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.responses import ResponseBuilder

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def error_body(error: ApiError) -> dict[str, Any]:
    """An error in Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": _ERROR_TYPES.get(error.status, "api_error"), "message": error.message}}


def stop_of(finish_reason: str | None, stop_reason: str | None, calls: bool) -> tuple[str, str | None]:
    """Anthropic's stop reason and stop sequence."""
    if calls:
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if stop_reason:  # a Messages request stops on strings only (stop_sequences)
        return "stop_sequence", stop_reason
    return "end_turn", None


def usage_of(chat_usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = chat_usage or {"prompt_tokens": 0, "completion_tokens": 0}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def call_block(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A tool call as a ``tool_use`` block; arguments that are no JSON object (a named call cut short by
    ``max_tokens``) as a ``text`` block instead, as the chat endpoint gives such output as content."""
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return {"type": "text", "text": arguments}
    return {"type": "tool_use", "id": call_id, "name": name, "input": value}


@dataclass(frozen=True)
class MessageHead:
    """What every message object of one request repeats: its id and model."""

    message_id: str
    model: str

    def message(self, content: list[dict[str, Any]], stop: tuple[str | None, str | None],
                usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.message_id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": stop[0], "stop_sequence": stop[1], "usage": usage}


def message_of_chat(head: MessageHead, chat_body: dict[str, Any]) -> dict[str, Any]:
    """The whole message of a chat completion body (one choice)."""
    choice = chat_body["choices"][0]
    message = choice["message"]
    content: list[dict[str, Any]] = []
    if message.get("reasoning") is not None:
        content.append({"type": "thinking", "thinking": message["reasoning"], "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        content.append(call_block(call["id"], call["function"]["name"], call["function"]["arguments"]))
    calls = any(block["type"] == "tool_use" for block in content)
    stop = stop_of(choice["finish_reason"], choice.get("stop_reason"), calls)
    return head.message(content, stop, usage_of(chat_body.get("usage")))


@dataclass
class _OpenBlock:
    index: int
    kind: str


@dataclass
class MessageEvents:
    """Turns the chat stream's chunks (one choice) into the Messages API's events."""

    head: MessageHead
    _blocks: int = 0
    _open: _OpenBlock | None = None
    _calls: int = 0
    _reader: ChatStreamReader = field(default_factory=ChatStreamReader)

    def detach(self, collect: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
        """Messages are never generated in the background."""
        return None

    def whole(self, chat_body: dict[str, Any]) -> dict[str, Any]:
        """The whole message of a chat completion body (not streamed)."""
        return message_of_chat(self.head, chat_body)

    def start(self, builder: ResponseBuilder) -> list[dict[str, Any]]:
        """The stream's first event (and those of the chat stream's role chunk)."""
        usage = {"input_tokens": builder.prompt_tokens(0), "output_tokens": 0, "cache_read_input_tokens": 0,
                 "cache_creation_input_tokens": 0}
        start = {"type": "message_start", "message": self.head.message([], (None, None), usage)}
        return [start, *self.feed(builder.role_chunk())]

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events of one chat chunk."""
        events: list[dict[str, Any]] = []
        for piece in self._reader.pieces(chunk):
            if piece.kind == "reasoning":
                events += self._delta("thinking", {"type": "thinking_delta", "thinking": piece.text})
            elif piece.kind == "content":
                events += self._delta("text", {"type": "text_delta", "text": piece.text})
            elif piece.kind == "call":
                self._calls += 1
                events += self._start("tool_use", {"type": "tool_use", "id": piece.call_id, "name": piece.name,
                                                   "input": {}})
            elif self._open is not None:  # more arguments of the open call
                events.append({"type": "content_block_delta", "index": self._open.index,
                               "delta": {"type": "input_json_delta", "partial_json": piece.text}})
        return events

    def finish(self, builder: ResponseBuilder) -> list[dict[str, Any]]:
        """The last events: the open block's end, the stop reason and usage (the builder's), the end of the
        message."""
        events = self.feed(builder.usage_chunk())
        stop = stop_of(self._reader.finish_reason, builder.stop_reason(0), self._calls > 0)
        usage = usage_of(self._reader.usage)
        return events + self._close() + [
            {"type": "message_delta", "delta": {"stop_reason": stop[0], "stop_sequence": stop[1]},
             "usage": {"output_tokens": usage["output_tokens"]}},
            {"type": "message_stop"}]

    def error_events(self, error: ApiError) -> list[dict[str, Any]]:
        """An error after the stream began."""
        return [error_body(error)]

    def _delta(self, kind: str, delta: dict[str, Any]) -> list[dict[str, Any]]:
        events = []
        if self._open is None or self._open.kind != kind:
            block = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else \
                {"type": "text", "text": ""}
            events = self._start(kind, block)
        assert self._open is not None
        return events + [{"type": "content_block_delta", "index": self._open.index, "delta": delta}]

    def _start(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        self._open = _OpenBlock(self._blocks, kind)
        self._blocks += 1
        return events + [{"type": "content_block_start", "index": self._open.index, "content_block": block}]

    def _close(self) -> list[dict[str, Any]]:
        opened, self._open = self._open, None
        return [] if opened is None else [{"type": "content_block_stop", "index": opened.index}]
