"""Registers the Generation service so that a request that does not parse (invalid UTF-8 in a string field,
a truncated or garbage message) is answered INVALID_ARGUMENT with the parser's reason, not UNKNOWN: gRPC's
own deserializer would raise before the servicer runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from stepahead_proto import generation_pb2

SERVICE_NAME = "stepahead.v1.Generation"


@dataclass(frozen=True)
class MalformedRequest:
    """What the servicer receives in place of a request that did not parse."""

    message: str


def _lenient(message_type: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except DecodeError as error:
            return MalformedRequest(f"request: not a valid {message_type.DESCRIPTOR.full_name} ({error})")
    return parse


def _guard_stream(method: Callable[..., AsyncIterator[Any]], on_malformed: Callable[[], None]) -> Callable[..., Any]:
    async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        if isinstance(request, MalformedRequest):
            on_malformed()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        async for item in method(request, context):
            yield item
    return handler


def _guard_unary(method: Callable[..., Any], on_malformed: Callable[[], None]) -> Callable[..., Any]:
    async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, MalformedRequest):
            on_malformed()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await method(request, context)
    return handler


def add_generation_service(servicer: Any, server: grpc.aio.Server, on_malformed: Callable[[], None]) -> None:
    """Register ``servicer``'s Generate, Abort, GetModelInfo, Tokenize and Detokenize with parse errors answered
    INVALID_ARGUMENT."""
    pb = generation_pb2
    handlers = {
        "Generate": grpc.unary_stream_rpc_method_handler(
            _guard_stream(servicer.Generate, on_malformed),
            request_deserializer=_lenient(pb.GenerateRequest),
            response_serializer=pb.GenerateResponse.SerializeToString,
        ),
    }
    unary: dict[str, tuple[Any, Any]] = {
        "Abort": (pb.AbortRequest, pb.AbortResponse),
        "GetModelInfo": (pb.GetModelInfoRequest, pb.ModelInfo),
        "Tokenize": (pb.TokenizeRequest, pb.TokenizeResponse),
        "Detokenize": (pb.DetokenizeRequest, pb.DetokenizeResponse),
        "LoadLoraAdapter": (pb.LoadLoraAdapterRequest, pb.LoraAdaptersResponse),
        "UnloadLoraAdapter": (pb.UnloadLoraAdapterRequest, pb.LoraAdaptersResponse),
    }
    for name, (request_type, response_type) in unary.items():
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            _guard_unary(getattr(servicer, name), on_malformed),
            request_deserializer=_lenient(request_type),
            response_serializer=response_type.SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
