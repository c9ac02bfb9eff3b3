"""API keys: the shared check, the key file, and the gRPC interceptor (Generation guarded, health open)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from scheduler_svc.api_keys import ApiKeyChecker, read_api_key_file
from scheduler_svc.auth_interceptor import ApiKeyInterceptor
from stepahead_proto import generation_pb2, generation_pb2_grpc


def test_checker_accepts_only_a_configured_bearer_key():
    checker = ApiKeyChecker(["k1", "k2"])
    assert checker.enabled
    assert checker.check("Bearer k1") is None and checker.check("bearer k2") is None
    assert checker.check("Bearer  k2 ") is None
    for header, reason in ((None, "missing"), ("", "missing"), ("k1", "Bearer"), ("Basic k1", "Bearer"),
                           ("Bearer k3", "invalid"), ("Bearer k1k2", "invalid"), ("Bearer ", "invalid")):
        message = checker.check(header)
        assert message is not None and reason in message and "k1" not in message


def test_no_keys_lets_everyone_in():
    checker = ApiKeyChecker([])
    assert not checker.enabled and checker.check(None) is None and checker.check("Bearer x") is None


def test_key_file_one_per_line_comments_and_blanks_skipped(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# team A\n  alpha  \n\nbeta\n   # indented comment\n")
    assert read_api_key_file(str(path)) == ["alpha", "beta"]


class _Generation(generation_pb2_grpc.GenerationServicer):
    async def Generate(self, request, context):
        yield generation_pb2.GenerateResponse(request_id="r", text="ok")

    async def GetModelInfo(self, request, context):
        return generation_pb2.ModelInfo(model="m")


def _tracing_interceptors() -> list:
    """OpenTelemetry's server interceptor, placed before the key check as the scheduler does when tracing is on."""
    from opentelemetry.instrumentation.grpc import aio_server_interceptor
    from opentelemetry.sdk.trace import TracerProvider

    return [aio_server_interceptor(tracer_provider=TracerProvider())]


async def _exercise(metadata, refused: list[int], traced: bool = False):
    key_check = ApiKeyInterceptor(ApiKeyChecker(["secret"]), lambda: refused.append(1))
    server = grpc.aio.server(interceptors=[*(_tracing_interceptors() if traced else []), key_check])
    generation_pb2_grpc.add_GenerationServicer_to_server(_Generation(), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = generation_pb2_grpc.GenerationStub(channel)
            codes = []
            for call in (lambda: stub.GetModelInfo(generation_pb2.GetModelInfoRequest(), metadata=metadata),
                         lambda: _drain(stub.Generate(generation_pb2.GenerateRequest(text="x"), metadata=metadata))):
                try:
                    await call()
                    codes.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as error:
                    codes.append(error.code())
                    assert "secret" not in (error.details() or "")
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            return codes
    finally:
        await server.stop(None)


async def _drain(call):
    return [message async for message in call]


@pytest.mark.parametrize("metadata, expected", [
    ((), grpc.StatusCode.UNAUTHENTICATED),
    ((("authorization", "Bearer nope"),), grpc.StatusCode.UNAUTHENTICATED),
    ((("authorization", "secret"),), grpc.StatusCode.UNAUTHENTICATED),
    ((("authorization", "Bearer secret"),), grpc.StatusCode.OK),
])
@pytest.mark.parametrize("traced", [False, True], ids=["plain", "traced"])
def test_interceptor_guards_generation_unary_and_streaming(metadata, expected, traced):
    refused: list[int] = []
    assert asyncio.run(_exercise(metadata, refused, traced)) == [expected, expected]
    assert len(refused) == (0 if expected == grpc.StatusCode.OK else 2)
