"""``POST /v1/messages/count_tokens``: Anthropic's token counting, ``{"input_tokens": N}`` for a Messages prompt.

The prompt is rendered as ``/v1/messages`` would render it (system, messages, tools given to the chat template unless
tool_choice is "none", the thinking switch) and tokenized as ``/tokenize`` does: a prompt longer than the context is
counted, not refused. Errors come in Anthropic's shape, naming the Messages API's parameters.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scheduler_svc.http.completions import parse_body, read_body
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.conversion import chat_prompt, check_model, renamed_error
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.messages_api_input import RENAMES, prompt_fields, validated_chat
from scheduler_svc.http.messages_api_output import error_body
from scheduler_svc.http.messages_api_protocol import MessagesPrompt
from scheduler_svc.http.param_names import ParamNames
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.http.tools import template_tools
from scheduler_svc.http.unrecognized import refuse_unrecognized
from scheduler_svc.prompt_work import prompt_chars, run_prompt_work
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenization import tokenize
from stepahead_proto import generation_pb2

COUNT_TOKENS_ROUTE = "/v1/messages/count_tokens"


class CountTokensRoute:
    """The Messages API's token counting endpoint."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context

    async def count(self, request: Request) -> Response:
        """``POST /v1/messages/count_tokens``."""
        context = self.context
        trace = context.tracing.start("POST", COUNT_TOKENS_ROUTE, request.headers)
        names = ParamNames()
        try:
            context.authorize(request.headers)
            body = parse_body(MessagesPrompt, await read_body(request, context.max_body_bytes))
            refuse_unrecognized(body)
            fields, params = prompt_fields(body)
            names = ParamNames(tuple(params), RENAMES)
            answer = await self._count(validated_chat(fields, names))
        except ApiError as error:
            error = names.renamed(error)
            trace.close(error.status, error.message)
            context.engine.metrics.observe_http(COUNT_TOKENS_ROUTE, error.status)
            return JSONResponse(error_body(error), status_code=error.status)
        trace.close(200)
        context.engine.metrics.observe_http(COUNT_TOKENS_ROUTE, 200)
        return JSONResponse(answer)

    async def _count(self, chat: ChatCompletionRequest) -> dict[str, Any]:
        limits = self.context.limits
        request = generation_pb2.TokenizeRequest(model=check_model(chat.model, limits.model_name, limits.lora_adapters))
        tools = "" if chat.tool_choice == "none" else template_tools(chat.tools)
        request.chat.CopyFrom(chat_prompt(chat.messages, tools, chat))
        try:
            response = await run_prompt_work(prompt_chars(request), tokenize, request, self.context.tokenizer, limits)
        except InvalidRequestError as error:
            raise renamed_error(error, "chat") from None
        return {"input_tokens": len(response.token_ids)}

