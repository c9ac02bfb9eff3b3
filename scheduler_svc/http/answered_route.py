"""The frame of the HTTP front's routes that answer at once, without generating (tokenizing, counting, LoRA updates,
stored responses): the request traced, its API key checked, its answer or error counted by route and status."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
from starlette.requests import Request
from starlette.responses import Response

from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.errors import ApiError


def openai_error_response(error: ApiError) -> Response:
    """The error in OpenAI's shape; a missing or wrong API key also says how to send one (``WWW-Authenticate``)."""
    return error.response({"WWW-Authenticate": "Bearer"} if error.code == grpc.StatusCode.UNAUTHENTICATED else None)


async def answered(context: ServingContext, request: Request, method: str, route: str,
                   answer: Callable[[], Awaitable[Response]],
                   error_response: Callable[[ApiError], Response] = openai_error_response) -> Response:
    """``answer``'s response once the API key is checked, or ``error_response`` of the ApiError it (or the check)
    raised; either traced and counted as ``route``'s."""
    trace = context.tracing.start(method, route, request.headers)
    try:
        context.authorize(request.headers)
        response = await answer()
    except ApiError as error:  # counted by route and status only: no generation was asked for
        trace.close(error.status, error.message)
        context.engine.metrics.observe_http(route, error.status)
        return error_response(error)
    trace.close(response.status_code)
    context.engine.metrics.observe_http(route, response.status_code)
    return response
