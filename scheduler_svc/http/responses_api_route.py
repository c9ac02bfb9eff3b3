"""``POST /v1/responses``: OpenAI's Responses API over the chat endpoint's flow (completions.CompletionRoutes.serve).

The body becomes the chat request it asks for (responses_api_input.py), which runs the chat endpoint's checks, plan
and engine requests; the answer is shaped as a Responses object or event stream (responses_api_output.py), and
errors name the Responses API's parameters.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from scheduler_svc.http.completions import CompletionRoutes, parse_body
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.conversion import GenerationPlan, chat_plan
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.param_names import ParamNames
from scheduler_svc.http.responses import ResponseBuilder
from scheduler_svc.http.responses_api_input import chat_of_response
from scheduler_svc.http.responses_api_output import (
    ResponseEvents,
    ResponseHead,
    response_of_chat,
)
from scheduler_svc.http.responses_api_protocol import ResponsesRequest
from scheduler_svc.http.streaming import sse_typed_event
from scheduler_svc.http.unrecognized import refuse_unrecognized

RESPONSES_ROUTE = "/v1/responses"


class ResponsesRoute:
    """The Responses API endpoint."""

    def __init__(self, context: ServingContext, completions: CompletionRoutes) -> None:
        self.context = context
        self.completions = completions

    async def create(self, request: Request) -> Response:
        """``POST /v1/responses``."""
        output = ResponsesOutput(self.context)
        return await self.completions.serve(request, RESPONSES_ROUTE, output.plan, output)


class ResponsesOutput:
    """One Responses request: its plan (the chat request it asks for) and the shape of its answer."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context
        self._names = ParamNames()
        self._response_id = ""
        self._head: ResponseHead | None = None
        self._events: ResponseEvents | None = None

    def plan(self, raw: bytes) -> GenerationPlan:
        """The chat plan of the body; ApiError naming the Responses parameter otherwise."""
        body = parse_body(ResponsesRequest, raw)
        refuse_unrecognized(body)
        chat, self._names = chat_of_response(body)
        limits = self.context.limits
        plan = chat_plan(chat, limits.model_name, self.context.tool_call_parser, limits.lora_adapters,
                         limits.reasoning_parser, limits.thinking_bounds)
        model = body.model or limits.model_name
        self._head = ResponseHead(self._response_id, int(time.time()), model, body)
        self._events = ResponseEvents(self._head, self._count_tokens)
        return plan

    def response_id(self, base: str) -> str:
        self._response_id = f"resp_{base}"
        return self._response_id

    def _count_tokens(self, text: str) -> int:
        return len(self.context.tokenizer.encode(text))

    def body(self, built: dict[str, Any]) -> dict[str, Any]:
        assert self._head is not None  # planned before any output
        return response_of_chat(self._head, built, self._count_tokens)

    def start_events(self, builder: ResponseBuilder) -> list[bytes]:
        events = self._stream.start() + self._stream.feed(builder.role_chunk())
        return [sse_typed_event(event) for event in events]

    def chunk_events(self, chunk: dict[str, Any]) -> list[bytes]:
        return [sse_typed_event(event) for event in self._stream.feed(chunk)]

    def error_events(self, error: ApiError) -> list[bytes]:
        return [sse_typed_event(event) for event in self._stream.error(self.renamed(error))]

    def end_events(self, builder: ResponseBuilder) -> list[bytes]:
        events = self._stream.feed(builder.usage_chunk()) + self._stream.finish()
        return [sse_typed_event(event) for event in events]

    def renamed(self, error: ApiError) -> ApiError:
        return self._names.renamed(error)

    def error_payload(self, error: ApiError) -> dict[str, Any]:
        return error.body()

    @property
    def _stream(self) -> ResponseEvents:
        assert self._events is not None  # planned before any output
        return self._events
