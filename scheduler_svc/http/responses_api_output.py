"""Responses API objects from the chat endpoint's output: the whole response from a chat completion body, and the
stream's events from its chunks.

A response's ``output`` items, in the order they are generated: a ``reasoning`` item (the thinking the server's
--reasoning-parser split off, as one ``reasoning_text`` content part), a ``message`` item (the answer, one
``output_text`` part, with ``include: ["message.output_text.logprobs"]`` or ``top_logprobs`` its tokens' logprobs in
chat's entries: ``token``, ``logprob``, ``bytes``, ``top_logprobs``), and a ``function_call`` item per tool call
(``call_id`` the call's id). ``status`` is "completed", "incomplete" (``incomplete_details.reason`` "max_output_tokens":
the output reached its limit) or "cancelled" (aborted on the server). ``usage.output_tokens_details.reasoning_tokens``
is the thinking's text tokenized again (its markers not counted), 0 without thinking.

Streamed, the events are OpenAI's: ``response.created`` and ``response.in_progress``; per item
``response.output_item.added``, its deltas (``response.reasoning_text.delta``, ``response.content_part.added`` then
``response.output_text.delta``, ``response.function_call_arguments.delta``), their ``.done`` events and
``response.output_item.done``; then ``response.completed`` (or ``response.incomplete``) with the whole response.
Every event carries ``sequence_number``; an error after the stream began is an ``error`` event, then the stream
ends. The finished response (whole, or the stream's last) is handed to ``on_done`` (the store keeps it). A background
request answers with its ``queued`` response at once (``detach``) and hands on its outcome the same way: the whole
response, ``cancelled`` when stopped, or ``failed`` with its ``error``.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from scheduler_svc.http.chat_stream_reader import ChatStreamReader
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.responses import ResponseBuilder
from scheduler_svc.http.responses_api_protocol import ResponsesRequest

CountTokens = Callable[[str], int]
OnDone = Callable[[dict[str, Any]], None]
StartBackground = Callable[[Coroutine[Any, Any, None]], None]
"""Runs a background response's generation (the store's ``start``)."""


def _item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


@dataclass(frozen=True)
class ResponseHead:
    """What every response object of one request repeats: its id, time, model and the request's settings."""

    response_id: str
    created_at: int
    model: str
    request: ResponsesRequest
    stored: bool = False
    """Whether the response is stored (for previous_response_id and retrieval)."""

    def response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None,
                 incomplete_reason: str | None = None, error: ApiError | None = None) -> dict[str, Any]:
        """The response object (``error``: what made it fail)."""
        body = self.request
        text_format = body.text.format.model_dump(by_alias=True, exclude_none=True) if body.text and body.text.format \
            else {"type": "text"}
        return {
            "id": self.response_id, "object": "response", "created_at": self.created_at, "status": status,
            "error": {"code": _error_code(error), "message": error.message} if error else None,
            "background": bool(body.background),
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens, "model": self.model,
            "output": output, "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
            "store": self.stored, "temperature": body.temperature, "top_p": body.top_p, "text": {"format": text_format},
            "tool_choice": body.tool_choice if body.tool_choice is not None else ("auto" if body.tools else "none"),
            "tools": [tool.model_dump(exclude_none=True) for tool in body.tools or []], "truncation": "disabled",
            "usage": usage, "user": body.user, "metadata": body.metadata or {},
        }


def _error_code(error: ApiError) -> str:
    """The response's ``error.code``: OpenAI's for the server's failures, else the error's own."""
    return "server_error" if error.status >= 500 else (error.error_code or "invalid_prompt")


def usage_of(chat_usage: dict[str, Any] | None, reasoning: str, count_tokens: CountTokens) -> dict[str, Any] | None:
    """The Responses usage of a chat usage object."""
    if chat_usage is None:
        return None
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    # cache_write_tokens: OpenAI's explicit prompt cache writes; the prefix cache here is implicit, so none.
    return {"input_tokens": chat_usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": chat_usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": count_tokens(reasoning) if reasoning else 0},
            "total_tokens": chat_usage["total_tokens"]}


def status_of(finish_reason: str | None) -> tuple[str, str | None]:
    """The response's status and incomplete reason for the chat finish reason."""
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "abort":
        return "cancelled", None
    return "completed", None


def reasoning_item(text: str, item_id: str = "", status: str = "completed") -> dict[str, Any]:
    return {"id": item_id or _item_id("rs"), "type": "reasoning", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}], "encrypted_content": None, "status": status}


def message_item(text: str, item_id: str = "", status: str = "completed",
                 logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": item_id or _item_id("msg"), "type": "message", "role": "assistant", "status": status,
            "content": [output_text(text, logprobs)] if status == "completed" else []}


def output_text(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def call_item(call_id: str, name: str, arguments: str, item_id: str = "", status: str = "completed") -> dict[str, Any]:
    return {"id": item_id or _item_id("fc"), "type": "function_call", "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def response_of_chat(head: ResponseHead, chat_body: dict[str, Any], count_tokens: CountTokens) -> dict[str, Any]:
    """The whole response of a chat completion body (one choice)."""
    choice = chat_body["choices"][0]
    message = choice["message"]
    reasoning = message.get("reasoning") or ""
    output = [reasoning_item(reasoning)] if message.get("reasoning") is not None else []
    if message.get("content"):
        logprobs = (choice.get("logprobs") or {}).get("content")
        output.append(message_item(message["content"], logprobs=logprobs))
    for call in message.get("tool_calls") or []:
        output.append(call_item(call["id"], call["function"]["name"], call["function"]["arguments"]))
    status, reason = status_of(choice["finish_reason"])
    return head.response(status, output, usage_of(chat_body.get("usage"), reasoning, count_tokens), reason)


@dataclass
class _OpenItem:
    index: int
    item: dict[str, Any]
    kind: str
    text: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class ResponseEvents:
    """Turns the chat stream's chunks (one choice) into the Responses API's events."""

    def __init__(self, head: ResponseHead, count_tokens: CountTokens, on_done: OnDone | None = None,
                 start_background: StartBackground | None = None) -> None:
        self.head = head
        self._count_tokens = count_tokens
        self._on_done = on_done
        self._start_background = start_background
        self._sequence = 0
        self._output: list[dict[str, Any]] = []
        self._open: _OpenItem | None = None
        self._reasoning: list[str] = []
        self._reader = ChatStreamReader()

    def whole(self, chat_body: dict[str, Any]) -> dict[str, Any]:
        """The whole response of a chat completion body (not streamed)."""
        return self._done(response_of_chat(self.head, chat_body, self._count_tokens))

    def start(self, builder: ResponseBuilder) -> list[dict[str, Any]]:
        """The stream's first events (and those of the chat stream's role chunk)."""
        response = self.head.response("in_progress", [], None)
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response), *self.feed(builder.role_chunk())]

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events of one chat chunk."""
        events: list[dict[str, Any]] = []
        for piece in self._reader.pieces(chunk):
            if piece.kind == "reasoning":
                events += self._text("reasoning", piece.text)
            elif piece.kind == "content":
                events += self._text("message", piece.text, list(piece.logprobs))
            elif piece.kind == "call":
                events += self._close()
                item = call_item(piece.call_id, piece.name, "", _item_id("fc"), "in_progress")
                events += self._add(_OpenItem(len(self._output), item, "function_call"))
            elif self._open is not None:  # more arguments of the open call
                self._open.text.append(piece.text)
                events.append(self._event("response.function_call_arguments.delta", item_id=self._open.item["id"],
                                          output_index=self._open.index, delta=piece.text))
        return events

    def finish(self, builder: ResponseBuilder) -> list[dict[str, Any]]:
        """The last events: the open item's end and the whole response (its usage from the builder's)."""
        events = self.feed(builder.usage_chunk()) + self._close()
        status, reason = status_of(self._reader.finish_reason)
        usage = usage_of(self._reader.usage, "".join(self._reasoning), self._count_tokens)
        response = self._done(self.head.response(status, self._output, usage, reason))
        kind = "response.completed" if status == "completed" else f"response.{status}"
        return events + [self._event(kind, response=response)]

    def detach(self, collect: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
        """For a background request: the queued response, now, with ``collect`` (the whole chat body) awaited in the
        background and its outcome handed on; None for any other request."""
        if not self.head.request.background or self._start_background is None:
            return None
        queued = self._done(self.head.response("queued", [], None))
        self._start_background(self._in_background(collect))
        return queued

    async def _in_background(self, collect: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        try:
            self.whole(await collect())
        except asyncio.CancelledError:
            self._done(self.head.response("cancelled", [], None))
        except ApiError as error:
            self._done(self.head.response("failed", [], None, error=error))

    def _done(self, response: dict[str, Any]) -> dict[str, Any]:
        if self._on_done is not None:
            self._on_done(response)
        return response

    def error_events(self, error: ApiError) -> list[dict[str, Any]]:
        """An error after the stream began."""
        return [self._event("error", code=error.error_code or error.code.name.lower(), message=error.message,
                            param=error.param)]

    def _text(self, kind: str, text: str, logprobs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        events = [] if self._open is not None and self._open.kind == kind else self._open_item(kind)
        assert self._open is not None
        self._open.text.append(text)
        if kind == "reasoning":
            self._reasoning.append(text)
            return events + [self._event("response.reasoning_text.delta", **self._where(), delta=text)]
        self._open.logprobs += logprobs or []
        return events + [self._event("response.output_text.delta", **self._where(), delta=text,
                                     logprobs=logprobs or [])]

    def _open_item(self, kind: str) -> list[dict[str, Any]]:
        events = self._close()
        if kind == "reasoning":
            item = reasoning_item("", _item_id("rs"), "in_progress")
            item["content"] = []
            return events + self._add(_OpenItem(len(self._output), item, kind))
        events += self._add(_OpenItem(len(self._output), message_item("", _item_id("msg"), "in_progress"), kind))
        return events + [self._event("response.content_part.added", **self._where(), part=output_text(""))]

    def _add(self, opened: _OpenItem) -> list[dict[str, Any]]:
        self._open = opened
        return [self._event("response.output_item.added", output_index=opened.index, item=dict(opened.item))]

    def _close(self) -> list[dict[str, Any]]:
        """The open item's done events (none when no item is open)."""
        opened, self._open = self._open, None
        if opened is None:
            return []
        text = "".join(opened.text)
        where = {"item_id": opened.item["id"], "output_index": opened.index}
        if opened.kind == "reasoning":
            item = reasoning_item(text, opened.item["id"])
            events = [self._event("response.reasoning_text.done", **where, content_index=0, text=text)]
        elif opened.kind == "message":
            logprobs = opened.logprobs + self._reader.pending_logprobs  # (tokens after the last text: EOS's)
            self._reader.pending_logprobs = []
            item = message_item(text, opened.item["id"], logprobs=logprobs)
            events = [self._event("response.output_text.done", **where, content_index=0, text=text,
                                  logprobs=logprobs),
                      self._event("response.content_part.done", **where, content_index=0,
                                  part=output_text(text, logprobs))]
        else:
            item = {**opened.item, "arguments": text, "status": "completed"}
            events = [self._event("response.function_call_arguments.done", **where, name=item["name"],
                                  arguments=text)]
        self._output.append(item)
        return events + [self._event("response.output_item.done", output_index=opened.index, item=item)]

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open.item["id"], "output_index": self._open.index, "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event
