"""``POST /v1/chat/completions`` and ``POST /v1/completions`` over the engine.

Both run the same steps: authorize, parse the body (pydantic, strict types), map it to
GenerateRequests and validate them with the gRPC API's own checks, add them to the engine, then
either collect every choice into one JSON body or stream chunks as server-sent events. A stream
answers once the first engine message is there, so a failure before any output (the executor is
unavailable, say) still gets its own HTTP status; a later one becomes an error event. A client
that disconnects aborts every unfinished choice, freeing its KV blocks.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.conversion import GenerationPlan, build_engine_requests, chat_plan, completion_plan
from scheduler_svc.http.engine_run import EngineRun
from scheduler_svc.http.errors import ApiError, from_validation_error
from scheduler_svc.http.logprobs import TokenTexts
from scheduler_svc.http.output_shape import OpenAIChunks, OutputShape
from scheduler_svc.http.protocol import ChatCompletionRequest, CompletionRequest
from scheduler_svc.http.request_ids import HEADER, base_request_id
from scheduler_svc.http.responses import ResponseBuilder
from scheduler_svc.http.streaming import ClientDisconnected, EventStream, unless_disconnected
from scheduler_svc.http.tracing import RequestTrace
from scheduler_svc.prompt_work import prompt_chars, run_prompt_work
from stepahead_proto import generation_pb2

logger = logging.getLogger(__name__)

CHAT_ROUTE = "/v1/chat/completions"
COMPLETIONS_ROUTE = "/v1/completions"
CLIENT_CLOSED = 499
"""Logged and counted (never sent) when the client went away first, as nginx does."""
Body = TypeVar("Body", bound=BaseModel)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or ApiError (400) once it exceeds ``limit`` bytes (never read further)."""
    declared = request.headers.get("content-length", "")
    too_large = ApiError(grpc.StatusCode.INVALID_ARGUMENT,
                         f"the body is larger than {limit} bytes (the server's --max-request-bytes)")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def parse_body(model: type[Body], raw: bytes) -> Body:
    """The request body as ``model``, or ApiError (400) naming the first wrong parameter."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        raise from_validation_error(error) from None


class CompletionRoutes:
    """The two generation endpoints, sharing one flow (serve, which the Responses and Messages APIs' routes run
    too, each in its own OutputShape)."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context
        self.texts = TokenTexts(context.tokenizer)

    async def chat(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        limits = self.context.limits
        return await self.serve(request, CHAT_ROUTE, lambda raw: self._usage_forced(chat_plan(
            parse_body(ChatCompletionRequest, raw), limits.model_name, self.context.tool_call_parser,
            limits.lora_adapters, limits.reasoning_parser, limits.thinking_bounds)), OpenAIChunks("chatcmpl"))

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``."""
        limits = self.context.limits
        return await self.serve(request, COMPLETIONS_ROUTE, lambda raw: self._usage_forced(completion_plan(
            parse_body(CompletionRequest, raw), limits.model_name, limits.lora_adapters)), OpenAIChunks("cmpl"))

    def _usage_forced(self, plan: GenerationPlan) -> GenerationPlan:
        """With --enable-force-include-usage, every stream ends with its usage chunk, as if include_usage."""
        return dataclasses.replace(plan, include_usage=True) if self.context.force_include_usage else plan

    async def serve(
        self, request: Request, route: str, make_plan: Callable[[bytes], GenerationPlan], output: OutputShape
    ) -> Response:
        """Authorize, plan (``make_plan`` of the body), run on the engine and answer in ``output``'s shape, with
        the request's id (request_ids.py) in the response's ``id``, its choices' engine requests and the
        ``X-Request-Id`` header."""
        context = self.context
        trace = context.tracing.start("POST", route, request.headers)
        run: EngineRun | None = None
        headers: dict[str, str] = {}
        given = False
        try:
            base, given = base_request_id(request.headers)
            headers[HEADER] = base
            response_id = output.response_id(base)
            context.authorize(request.headers)
            plan = make_plan(await read_body(request, context.max_body_bytes))
            for index, pb in enumerate(plan.requests):
                pb.request_id = f"{response_id}-{index}"
            # n samples of a prompt share its tokenization (build_engine_requests): count each prompt once.
            chars = sum({index: prompt_chars(pb) for pb, index in zip(plan.requests, plan.prompt_index)}.values())
            engine_requests = await run_prompt_work(chars, build_engine_requests, plan, context.tokenizer,
                                                     context.limits)
            run = EngineRun(context.engine, plan, trace)
            run.start(engine_requests)
            builder = ResponseBuilder(plan, self.texts, response_id, int(time.time()),
                                      [engine_request.prompt_token_ids for engine_request in engine_requests])
            if plan.stream:
                first = await unless_disconnected(run.next(), request.receive)
                self._count(route, 200)
                return EventStream(self._events(run, builder, output, first, trace),
                                   on_close=lambda: _close(run, trace), headers=headers)
            detached = output.detach(functools.partial(self._collect_detached, run, builder, trace))
            if detached is not None:
                self._count(route, 200)
                return JSONResponse(detached, headers=headers)
            body = output.body(await unless_disconnected(self._collect(run, builder), request.receive))
        except ApiError as error:
            if given and error.code == grpc.StatusCode.ALREADY_EXISTS:
                error = ApiError(grpc.StatusCode.ALREADY_EXISTS,
                                 f"{HEADER}: {headers[HEADER]!r} names a request that is still running", HEADER)
            return self._refuse(output.renamed(error), output, route, run, trace, headers)
        except ClientDisconnected:
            self._count(route, CLIENT_CLOSED)
            _close(run, trace, CLIENT_CLOSED)
            return Response(status_code=CLIENT_CLOSED, headers=headers)
        except BaseException as error:
            _close(run, trace, 500, f"{type(error).__name__}: {error}")
            raise
        trace.close(200)
        self._count(route, 200)
        return JSONResponse(body, headers=headers)

    async def _collect_detached(self, run: EngineRun, builder: ResponseBuilder,
                                trace: RequestTrace) -> dict[str, Any]:
        """A background request's whole body; cancelled or failed, its unfinished requests are aborted."""
        try:
            body = await self._collect(run, builder)
        except ApiError as error:
            _close(run, trace, error.status, error.message)
            raise
        except BaseException as error:
            _close(run, trace, CLIENT_CLOSED, f"{type(error).__name__}")
            raise
        trace.close(200)
        return body

    async def _collect(self, run: EngineRun, builder: ResponseBuilder) -> dict[str, Any]:
        while (item := await run.next()) is not None:
            builder.add(*item)
        return builder.body()

    async def _events(
        self,
        run: EngineRun,
        builder: ResponseBuilder,
        output: OutputShape,
        first: tuple[int, generation_pb2.GenerateResponse] | None,
        trace: RequestTrace,
    ) -> AsyncIterator[bytes]:
        for event in output.start_events(builder):
            yield event
        item = first
        while item is not None:
            for chunk in builder.chunks(*item):
                for event in output.chunk_events(chunk):
                    yield event
            try:
                item = await run.next()
            except ApiError as error:
                trace.close(200, error.message)
                for event in output.error_events(error):
                    yield event
                return
        trace.close(200)
        for event in output.end_events(builder):
            yield event

    def _refuse(self, error: ApiError, output: OutputShape, route: str, run: EngineRun | None, trace: RequestTrace,
                headers: dict[str, str]) -> Response:
        _close(run, trace, error.status, error.message)
        if run is None:  # refused before reaching the engine (which counts its own failures)
            self.context.engine.metrics.count_error(error.code.name)
        self._count(route, error.status)
        if error.code == grpc.StatusCode.UNAUTHENTICATED:
            headers = {**headers, "WWW-Authenticate": "Bearer"}
        return JSONResponse(output.error_payload(error), status_code=error.status, headers=headers)

    def _count(self, route: str, status: int) -> None:
        self.context.engine.metrics.observe_http(route, status)


def _close(run: EngineRun | None, trace: RequestTrace, status: int = 200, error: str | None = None) -> None:
    """Abort what is unfinished (the client is gone or the response failed) and end the trace."""
    if run is not None:
        run.abort()
    trace.close(status, error)
