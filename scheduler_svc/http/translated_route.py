"""The APIs served by translating onto the chat endpoint's flow (completions.CompletionRoutes.serve): OpenAI's
Responses API (``POST /v1/responses``) and Anthropic's Messages API (``POST /v1/messages``).

Each request's body becomes the chat request it asks for (responses_api_input.py, messages_api_input.py), which runs
the chat endpoint's checks, plan and engine requests; its translator (responses_api_output.py, messages_api_output.py)
shapes the answer as that API's object or event stream, errors in its own shape naming its own parameters. API keys
come as ``Authorization: Bearer`` or ``x-api-key`` (Anthropic's clients).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from scheduler_svc.http.completions import CompletionRoutes, parse_body
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.conversion import GenerationPlan, chat_plan
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.messages_api_input import chat_of_messages
from scheduler_svc.http.messages_api_output import MessageEvents, MessageHead, error_body
from scheduler_svc.http.messages_api_protocol import MessagesRequest
from scheduler_svc.http.param_names import ParamNames
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.http.response_store import StoredResponse
from scheduler_svc.http.responses import ResponseBuilder
from scheduler_svc.http.responses_api_input import (
    chat_of_response,
    check_logprobs_servable,
    earlier_items,
)
from scheduler_svc.http.responses_api_items import listed_input_items
from scheduler_svc.http.responses_api_output import ResponseEvents, ResponseHead
from scheduler_svc.http.responses_api_protocol import ResponsesRequest
from scheduler_svc.http.streaming import sse_typed_event
from scheduler_svc.http.unrecognized import refuse_unrecognized


class Translator(Protocol):
    """One request's answer in its API's shape, made from the chat endpoint's output."""

    def whole(self, chat_body: dict[str, Any]) -> dict[str, Any]:
        """The whole answer (not streamed)."""
        ...

    def start(self, builder: ResponseBuilder) -> list[dict[str, Any]]:
        """A stream's first events."""
        ...

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events of one chat chunk."""
        ...

    def finish(self, builder: ResponseBuilder) -> list[dict[str, Any]]:
        """A stream's last events."""
        ...

    def error_events(self, error: ApiError) -> list[dict[str, Any]]:
        """The events of an error after the stream began."""
        ...

    def detach(self, collect: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
        """The immediate answer of a request generated in the background (OutputShape.detach); None: answer in the
        request."""
        ...


@dataclass(frozen=True)
class TranslatedApi:
    """What one translated API reads and answers."""

    route: str
    request: type[BaseModel]
    to_chat: Callable[[Any, ServingContext], tuple[ChatCompletionRequest, ParamNames]]
    """The chat request of a body, and the API's names of its parameters."""
    id_prefix: str
    translator: Callable[[str, str, Any, ServingContext], Translator]
    """The translator of a request: (response id, model, body, context)."""
    error_payload: Callable[[ApiError], dict[str, Any]]


def _responses_translator(response_id: str, model: str, body: Any, context: ServingContext) -> Translator:
    store = context.response_store
    stored = body.store is not False and store.enabled
    head = ResponseHead(response_id, int(time.time()), model, body, stored)
    listed = listed_input_items(body)
    conversation = (*earlier_items(body, store), *listed)

    def keep(response: dict[str, Any]) -> None:
        output = response["output"]
        if output and output[-1]["type"] == "reasoning":  # thought without an answer: nothing for it to precede
            output = output[:-1]
        store.put(StoredResponse(response, (*conversation, *output), listed))

    return ResponseEvents(head, lambda text: len(context.tokenizer.encode(text)), keep if stored else None,
                          lambda work: store.start(response_id, work))


def _messages_translator(message_id: str, model: str, body: Any, context: ServingContext) -> Translator:
    return MessageEvents(MessageHead(message_id, model))


def _responses_chat(body: Any, context: ServingContext) -> tuple[ChatCompletionRequest, ParamNames]:
    chat, names = chat_of_response(body, context.response_store)
    check_logprobs_servable(body, chat, context.limits.reasoning_parser)
    return chat, names


RESPONSES_API = TranslatedApi("/v1/responses", ResponsesRequest, _responses_chat, "resp_", _responses_translator,
                              ApiError.body)
MESSAGES_API = TranslatedApi("/v1/messages", MessagesRequest, lambda body, context: chat_of_messages(body), "msg_",
                             _messages_translator, error_body)


class TranslatedRoute:
    """One translated API's endpoint."""

    def __init__(self, context: ServingContext, completions: CompletionRoutes, api: TranslatedApi) -> None:
        self.context = context
        self.completions = completions
        self.api = api

    async def create(self, request: Request) -> Response:
        """``POST`` of the API's route."""
        output = TranslatedOutput(self.context, self.api)
        return await self.completions.serve(request, self.api.route, output.plan, output)


class TranslatedOutput:
    """One request: its plan (the chat request it asks for) and its answer's shape (completions.OutputShape)."""

    def __init__(self, context: ServingContext, api: TranslatedApi) -> None:
        self.context = context
        self.api = api
        self._names = ParamNames()
        self._response_id = ""
        self._translator: Translator | None = None

    def response_id(self, base: str) -> str:
        self._response_id = f"{self.api.id_prefix}{base}"
        return self._response_id

    def plan(self, raw: bytes) -> GenerationPlan:
        """The chat plan of the body; ApiError naming the API's parameter otherwise."""
        body = parse_body(self.api.request, raw)
        refuse_unrecognized(body)
        chat, self._names = self.api.to_chat(body, self.context)
        limits = self.context.limits
        plan = chat_plan(chat, limits.model_name, self.context.tool_call_parser, limits.lora_adapters,
                         limits.reasoning_parser, limits.thinking_bounds)
        model = chat.model or limits.model_name
        self._translator = self.api.translator(self._response_id, model, body, self.context)
        return plan

    def body(self, built: dict[str, Any]) -> dict[str, Any]:
        return self._translated.whole(built)

    def start_events(self, builder: ResponseBuilder) -> list[bytes]:
        return [sse_typed_event(event) for event in self._translated.start(builder)]

    def chunk_events(self, chunk: dict[str, Any]) -> list[bytes]:
        return [sse_typed_event(event) for event in self._translated.feed(chunk)]

    def error_events(self, error: ApiError) -> list[bytes]:
        return [sse_typed_event(event) for event in self._translated.error_events(self.renamed(error))]

    def end_events(self, builder: ResponseBuilder) -> list[bytes]:
        return [sse_typed_event(event) for event in self._translated.finish(builder)]

    def detach(self, collect: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
        return self._translated.detach(collect)

    def renamed(self, error: ApiError) -> ApiError:
        return self._names.renamed(error)

    def error_payload(self, error: ApiError) -> dict[str, Any]:
        return self.api.error_payload(error)

    @property
    def _translated(self) -> Translator:
        assert self._translator is not None  # planned before any output
        return self._translator
