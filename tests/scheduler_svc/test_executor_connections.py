"""Executor groups in the scheduler's config and at connection: addresses validated, one model for all."""

from __future__ import annotations

import asyncio
import logging
import socket

import grpc
import pytest

from scheduler_svc import executor_connections
from scheduler_svc.config import SchedulerServiceConfig
from scheduler_svc.executor_connections import (
    ExecutorConnection,
    ExecutorUnreachableError,
    check_same_model,
    describe_executor,
)
from scheduler_svc.server import model_limits
from stepahead_proto import executor_pb2, executor_pb2_grpc


def config(addresses) -> SchedulerServiceConfig:
    return SchedulerServiceConfig(model_dir="m", executor_addresses=addresses)


def test_several_executor_addresses_are_accepted():
    assert config(("a:1", "b:2")).executor_addresses == ("a:1", "b:2")


@pytest.mark.parametrize("addresses, message", [
    ((), "executor_addresses: must be a non-empty tuple"),
    (("a:1", "nocolon"), r"executor_addresses\[1\]: must be host:port"),
    (("a:1", "a:1"), "executor_addresses: must not repeat an address"),
    ("a:1", "executor_addresses: must be a non-empty tuple"),
])
def test_bad_executor_addresses_are_refused_naming_the_field(addresses, message):
    with pytest.raises(ValueError, match=message):
        config(addresses)


def description(**fields) -> executor_pb2.ExecutorDescription:
    base = dict(model="tiny", vocab_size=400, block_size=16, num_kv_blocks=8, max_model_len=512)
    return executor_pb2.ExecutorDescription(**{**base, **fields})


def connection(address: str, **fields) -> ExecutorConnection:
    return ExecutorConnection(address, channel=None, stub=None, description=description(**fields))  # type: ignore[arg-type]


def test_groups_must_serve_one_model_with_one_block_size():
    check_same_model([connection("a:1"), connection("b:2", num_kv_blocks=20)])  # sizes may differ
    for field, value in (("model", "other"), ("vocab_size", 401), ("block_size", 32)):
        with pytest.raises(ValueError, match=f"executor_addresses: .*a:1 has {field} .* but b:2 has"):
            check_same_model([connection("a:1"), connection("b:2", **{field: value})])


def test_the_longest_request_fits_every_group():
    from types import SimpleNamespace

    tokenizer = SimpleNamespace(eos_token_ids=[2])
    limits = model_limits(config(("a:1", "b:2")), [description(num_kv_blocks=8), description(num_kv_blocks=40)],
                          tokenizer)  # type: ignore[arg-type]
    assert limits.max_model_len == 8 * 16


def test_an_executor_that_never_answers_is_named_after_the_timeout(caplog, monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"

    async def main() -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            await describe_executor(executor_pb2_grpc.ExecutorStub(channel), 1.2, address)

    monkeypatch.setattr(executor_connections, "WAITING_LOG_INTERVAL_S", 0.5)
    with caplog.at_level(logging.INFO), pytest.raises(ExecutorUnreachableError,
                                                      match=f"^executor: no answer from {address} within 1 s"):
        asyncio.run(main())
    assert 1 <= caplog.text.count(f"waiting for the executor at {address}") <= 2  # every 0.5 s, not every retry


class _LoadingExecutor(executor_pb2_grpc.ExecutorServicer):
    """An executor still loading its weights: Describe answers UNAVAILABLE at once."""

    async def Describe(self, request, context):
        await context.abort(grpc.StatusCode.UNAVAILABLE, "executor is loading")


def test_a_loading_executor_is_retried_quietly_until_the_timeout(caplog, monkeypatch):
    async def main() -> str:
        server = grpc.aio.server()
        executor_pb2_grpc.add_ExecutorServicer_to_server(_LoadingExecutor(), server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                with pytest.raises(ExecutorUnreachableError, match="UNAVAILABLE: executor is loading"):
                    await describe_executor(executor_pb2_grpc.ExecutorStub(channel), 1.2, address)
        finally:
            await server.stop(None)
        return address

    monkeypatch.setattr(executor_connections, "WAITING_LOG_INTERVAL_S", 0.5)
    with caplog.at_level(logging.INFO):
        address = asyncio.run(main())
    assert 1 <= caplog.text.count(f"waiting for the executor at {address}") <= 2  # ~6 retries, 2 lines at most
