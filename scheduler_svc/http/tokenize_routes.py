"""``POST /tokenize`` and ``POST /detokenize``, in vLLM's shapes, over the gRPC API's Tokenize and Detokenize.

/tokenize takes ``prompt`` (text, tokenized as /v1/completions does) or ``messages`` (rendered with the chat
template as /v1/chat/completions does; ``tools`` are given to the template as a chat completion that calls tools
gives them, and ``add_generation_prompt``, ``continue_final_message``, ``chat_template_kwargs``, ``documents`` and
``chat_template`` are the chat endpoint's, refused with ``prompt``) and answers ``{"count", "max_model_len",
"tokens"}``; /detokenize takes ``tokens`` and answers ``{"prompt": text}``. Both need the API key when one is
configured; errors have OpenAI's shape and name the parameter. ``model`` may name the served model or one of its LoRA
adapters (which tokenize as the base model does).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scheduler_svc.http.answered_route import answered
from scheduler_svc.http.completions import parse_body, read_body
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.conversion import chat_prompt, check_model, renamed_error
from scheduler_svc.http.errors import invalid
from scheduler_svc.http.protocol import DetokenizeRequest, Endpoint, TokenizeRequest
from scheduler_svc.http.tools import template_tools
from scheduler_svc.http.unrecognized import is_neutral, refuse_unrecognized
from scheduler_svc.prompt_work import prompt_chars, run_prompt_work
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenization import detokenize, tokenize
from stepahead_proto import generation_pb2

TOKENIZE_ROUTE = "/tokenize"
DETOKENIZE_ROUTE = "/detokenize"


class TokenizeRoutes:
    """The two tokenizer endpoints."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context

    async def tokenize(self, request: Request) -> Response:
        """``POST /tokenize``."""
        return await self._serve(request, TOKENIZE_ROUTE, self._tokenize)

    async def detokenize(self, request: Request) -> Response:
        """``POST /detokenize``."""
        return await self._serve(request, DETOKENIZE_ROUTE, self._detokenize)

    async def _serve(self, request: Request, route: str,
                     answer: Callable[[bytes], Awaitable[dict[str, Any]]]) -> Response:
        async def respond() -> Response:
            return JSONResponse(await answer(await read_body(request, self.context.max_body_bytes)))

        return await answered(self.context, request, "POST", route, respond)

    async def _tokenize(self, raw: bytes) -> dict[str, Any]:
        body = parse_body(TokenizeRequest, raw)
        model = self._model(body.model)
        refuse_unrecognized(body)
        request = generation_pb2.TokenizeRequest(model=model)
        endpoint: Endpoint
        if body.prompt is not None and body.messages is None:
            endpoint = "completion"
            _refuse_not_true(body.add_special_tokens, "add_special_tokens")
            if body.add_generation_prompt is not None:
                raise invalid("add_generation_prompt", "applies to messages only")
            for param, value in (("tools", body.tools), ("continue_final_message", body.continue_final_message),
                                 ("chat_template_kwargs", body.chat_template_kwargs), ("documents", body.documents),
                                 ("chat_template", body.chat_template)):
                if not is_neutral(value):
                    raise invalid(param, "applies to messages only")
            request.text = body.prompt
        elif body.messages is not None and body.prompt is None:
            endpoint = "chat"
            if body.add_special_tokens is not None:
                raise invalid("add_special_tokens", "applies to prompt only (the chat template adds special tokens)")
            request.chat.CopyFrom(chat_prompt(body.messages, template_tools(body.tools), body))
        else:
            raise invalid("prompt", "give exactly one of prompt or messages")
        try:
            response = await run_prompt_work(prompt_chars(request), tokenize, request, self.context.tokenizer,
                                             self.context.limits)
        except InvalidRequestError as error:
            raise renamed_error(error, endpoint) from None
        tokens = list(response.token_ids)
        return {"count": len(tokens), "max_model_len": response.max_model_len, "tokens": tokens}

    async def _detokenize(self, raw: bytes) -> dict[str, Any]:
        body = parse_body(DetokenizeRequest, raw)
        model = self._model(body.model)
        refuse_unrecognized(body)
        request = generation_pb2.DetokenizeRequest(model=model, token_ids=body.tokens)
        if body.skip_special_tokens is not None:
            request.skip_special_tokens = body.skip_special_tokens
        try:
            response = detokenize(request, self.context.tokenizer, self.context.limits)
        except InvalidRequestError as error:
            raise invalid(error.field.replace("token_ids", "tokens", 1), error.reason) from None
        return {"prompt": response.text}

    def _model(self, requested: str | None) -> str:
        """The model the request names (the served one or a LoRA adapter, which shares its tokenizer); 404 else."""
        limits = self.context.limits
        return check_model(requested, limits.model_name, limits.lora_adapters)


def _refuse_not_true(value: bool | None, param: str) -> None:
    if value is False:
        raise invalid(param, "only true is supported")
