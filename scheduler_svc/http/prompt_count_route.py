"""Token counting of the translated APIs' prompts: ``POST /v1/messages/count_tokens`` (Anthropic's,
``{"input_tokens": N}``) and ``POST /v1/responses/input_tokens`` (OpenAI's, ``{"object": "response.input_tokens",
"input_tokens": N}``).

The prompt is rendered as the API's generation endpoint would render it (its messages, the tools given to the chat
template unless tool_choice is "none", the template's controls) and tokenized as ``/tokenize`` does: a prompt longer
than the context is counted, not refused. Errors come in the API's own shape, naming its parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scheduler_svc.http.answered_route import answered
from scheduler_svc.http.completions import parse_body, read_body
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.conversion import chat_prompt, check_model, give_reasoning_effort, renamed_error
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.messages_api_input import RENAMES as MESSAGES_RENAMES
from scheduler_svc.http.messages_api_input import prompt_fields as messages_prompt_fields
from scheduler_svc.http.messages_api_output import error_body as anthropic_error_body
from scheduler_svc.http.messages_api_protocol import MessagesPrompt
from scheduler_svc.http.param_names import ParamNames, validated_chat
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.http.responses_api_input import prompt_fields as responses_prompt_fields
from scheduler_svc.http.responses_api_protocol import ResponsesPrompt
from scheduler_svc.http.tools import template_tools
from scheduler_svc.http.unrecognized import refuse_unrecognized
from scheduler_svc.prompt_work import prompt_chars, run_prompt_work
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenization import tokenize
from stepahead_proto import generation_pb2

MESSAGES_COUNT_ROUTE = "/v1/messages/count_tokens"
RESPONSES_COUNT_ROUTE = "/v1/responses/input_tokens"
PromptFields = tuple[dict[str, Any], ParamNames]


@dataclass(frozen=True)
class CountedApi:
    """What one API's counting endpoint reads and answers."""

    route: str
    body: type[BaseModel]
    prompt_fields: Callable[[Any, ServingContext], PromptFields]
    """The body's chat fields of its prompt, and its parameters' names."""
    answer: Callable[[int], dict[str, Any]]
    error_payload: Callable[[ApiError], dict[str, Any]]


def _messages_fields(body: MessagesPrompt, context: ServingContext) -> PromptFields:
    fields, params = messages_prompt_fields(body)
    return fields, ParamNames(tuple(params), MESSAGES_RENAMES)


MESSAGES_COUNT = CountedApi(MESSAGES_COUNT_ROUTE, MessagesPrompt, _messages_fields,
                            lambda count: {"input_tokens": count}, anthropic_error_body)
RESPONSES_COUNT = CountedApi(RESPONSES_COUNT_ROUTE, ResponsesPrompt,
                             lambda body, context: responses_prompt_fields(body, context.response_store),
                             lambda count: {"object": "response.input_tokens", "input_tokens": count},
                             ApiError.body)


class PromptCountRoute:
    """One API's token counting endpoint."""

    def __init__(self, context: ServingContext, api: CountedApi) -> None:
        self.context = context
        self.api = api

    async def count(self, request: Request) -> Response:
        """``POST`` of the API's counting route."""
        context, api = self.context, self.api

        async def respond() -> Response:
            names = ParamNames()
            try:
                body = parse_body(api.body, await read_body(request, context.max_body_bytes))
                refuse_unrecognized(body)
                fields, names = api.prompt_fields(body, context)
                return JSONResponse(api.answer(await self._count(validated_chat(fields, names))))
            except ApiError as error:
                raise names.renamed(error) from None

        return await answered(context, request, "POST", api.route, respond,
                              lambda error: JSONResponse(api.error_payload(error), status_code=error.status))

    async def _count(self, chat: ChatCompletionRequest) -> int:
        limits = self.context.limits
        request = generation_pb2.TokenizeRequest(model=check_model(chat.model, limits.model_name, limits.lora_adapters))
        tools = "" if chat.tool_choice == "none" else template_tools(chat.tools)
        request.chat.CopyFrom(chat_prompt(chat.messages, tools, chat))
        give_reasoning_effort(request.chat, chat)
        try:
            response = await run_prompt_work(prompt_chars(request), tokenize, request, self.context.tokenizer, limits)
        except InvalidRequestError as error:
            raise renamed_error(error, "chat") from None
        return len(response.token_ids)
