"""gRPC server interceptor: the Generation service needs ``authorization: Bearer <key>`` call metadata.

Health checks and reflection stay open (container health checks and tools carry no key). A refused
call ends with UNAUTHENTICATED before the servicer sees it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from scheduler_svc.api_keys import ApiKeyChecker
from scheduler_svc.readiness import GENERATION_SERVICE

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    """Refuses Generation RPCs whose metadata lacks an accepted API key."""

    def __init__(self, checker: ApiKeyChecker, on_refused: Callable[[], None] | None = None) -> None:
        self.checker = checker
        self.on_refused = on_refused
        self._prefix = f"/{GENERATION_SERVICE}/"

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Req, Resp] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Req, Resp] | None:
        handler = await continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(self._prefix):
            return handler
        reason = self.checker.check(_authorization(handler_call_details))
        if reason is None:
            return handler
        if self.on_refused is not None:
            self.on_refused()
        return _refusing_handler(handler, reason)


def _authorization(details: grpc.HandlerCallDetails) -> str | None:
    for key, value in details.invocation_metadata or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return None


def _refusing_handler(handler: grpc.RpcMethodHandler[Req, Resp], reason: str) -> grpc.RpcMethodHandler[Req, Resp]:
    """A handler of the same shape as ``handler`` that ends the call with UNAUTHENTICATED."""

    async def refuse(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)

    async def refuse_stream(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        # An async generator, not a coroutine: other interceptors (OpenTelemetry's) iterate streaming handlers.
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
        yield  # never reached: abort raises

    deserializer, serializer = handler.request_deserializer, handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_stream, deserializer, serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, deserializer, serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse_stream, deserializer, serializer)
    return grpc.unary_unary_rpc_method_handler(refuse, deserializer, serializer)
