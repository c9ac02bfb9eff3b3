"""``POST /v1/messages``: Anthropic's Messages API over the chat endpoint's flow (completions.CompletionRoutes.serve).

The body becomes the chat request it asks for (messages_api_input.py), which runs the chat endpoint's checks, plan
and engine requests; the answer is shaped as a Messages object or event stream, errors as Anthropic's
(messages_api_output.py), naming the Messages API's parameters. API keys come as ``x-api-key`` (Anthropic's
clients) or ``Authorization: Bearer``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from scheduler_svc.http.completions import CompletionRoutes, parse_body
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.conversion import GenerationPlan, chat_plan
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.messages_api_input import chat_of_messages
from scheduler_svc.http.messages_api_output import (
    MessageEvents,
    MessageHead,
    error_body,
    message_of_chat,
)
from scheduler_svc.http.messages_api_protocol import MessagesRequest
from scheduler_svc.http.param_names import ParamNames
from scheduler_svc.http.responses import ResponseBuilder
from scheduler_svc.http.streaming import sse_typed_event
from scheduler_svc.http.unrecognized import refuse_unrecognized

MESSAGES_ROUTE = "/v1/messages"


class MessagesRoute:
    """The Messages API endpoint."""

    def __init__(self, context: ServingContext, completions: CompletionRoutes) -> None:
        self.context = context
        self.completions = completions

    async def create(self, request: Request) -> Response:
        """``POST /v1/messages``."""
        output = MessagesOutput(self.context)
        return await self.completions.serve(request, MESSAGES_ROUTE, output.plan, output)


class MessagesOutput:
    """One Messages request: its plan (the chat request it asks for) and the shape of its answer."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context
        self._names = ParamNames()
        self._message_id = ""
        self._head: MessageHead | None = None
        self._events: MessageEvents | None = None

    def response_id(self, base: str) -> str:
        self._message_id = f"msg_{base}"
        return self._message_id

    def plan(self, raw: bytes) -> GenerationPlan:
        """The chat plan of the body; ApiError naming the Messages parameter otherwise."""
        body = parse_body(MessagesRequest, raw)
        refuse_unrecognized(body)
        chat, self._names = chat_of_messages(body)
        limits = self.context.limits
        plan = chat_plan(chat, limits.model_name, self.context.tool_call_parser, limits.lora_adapters,
                         limits.reasoning_parser, limits.thinking_bounds)
        self._head = MessageHead(self._message_id, body.model or limits.model_name)
        self._events = MessageEvents(self._head)
        return plan

    def body(self, built: dict[str, Any]) -> dict[str, Any]:
        assert self._head is not None  # planned before any output
        return message_of_chat(self._head, built)

    def start_events(self, builder: ResponseBuilder) -> list[bytes]:
        events = self._stream.start(builder.prompt_tokens(0)) + self._stream.feed(builder.role_chunk())
        return [sse_typed_event(event) for event in events]

    def chunk_events(self, chunk: dict[str, Any]) -> list[bytes]:
        return [sse_typed_event(event) for event in self._stream.feed(chunk)]

    def error_events(self, error: ApiError) -> list[bytes]:
        return [sse_typed_event(error_body(self.renamed(error)))]

    def end_events(self, builder: ResponseBuilder) -> list[bytes]:
        events = self._stream.feed(builder.usage_chunk()) + self._stream.finish(builder.stop_reason(0))
        return [sse_typed_event(event) for event in events]

    def renamed(self, error: ApiError) -> ApiError:
        return self._names.renamed(error)

    def error_payload(self, error: ApiError) -> dict[str, Any]:
        return error_body(error)

    @property
    def _stream(self) -> MessageEvents:
        assert self._events is not None  # planned before any output
        return self._events
