"""The scheduler's connections to its executor groups: channels, stubs and what each executor describes."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import grpc

from scheduler_svc.config import SchedulerServiceConfig
from stepahead_common.tls import channel_credentials
from stepahead_proto import executor_pb2, executor_pb2_grpc

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutorConnection:
    """One executor group as the scheduler reaches it (a TP group through its rank 0)."""

    address: str
    channel: grpc.aio.Channel
    stub: executor_pb2_grpc.ExecutorStub
    description: executor_pb2.ExecutorDescription


def executor_channel(config: SchedulerServiceConfig, address: str) -> grpc.aio.Channel:
    """A channel to one executor: TLS (mutual with a client certificate) when configured."""
    if not config.executor_tls_enabled:
        return grpc.aio.insecure_channel(address)
    credentials = channel_credentials(config.executor_tls_ca, config.executor_tls_cert, config.executor_tls_key)
    return grpc.aio.secure_channel(address, credentials)


class ExecutorUnreachableError(ConnectionError):
    """An executor did not answer within the connect timeout; the message names its address."""


WAITING_LOG_INTERVAL_S = 30.0


async def describe_executor(stub: executor_pb2_grpc.ExecutorStub, timeout_s: float,
                            address: str) -> executor_pb2.ExecutorDescription:
    """Wait for the executor (it may still be loading weights) and read what to plan with; logs every 30 s
    while it waits, and raises ExecutorUnreachableError once ``timeout_s`` has passed."""
    started = time.monotonic()
    deadline = started + timeout_s
    next_log = started + WAITING_LOG_INTERVAL_S
    while True:
        remaining = deadline - time.monotonic()
        try:
            description: executor_pb2.ExecutorDescription = await stub.Describe(
                executor_pb2.DescribeRequest(), wait_for_ready=True,
                timeout=max(min(remaining, WAITING_LOG_INTERVAL_S), 0.1),
            )
            return description
        except grpc.aio.AioRpcError as error:
            retryable = error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            if not retryable:
                raise
            if time.monotonic() >= deadline:
                raise ExecutorUnreachableError(
                    f"executor: no answer from {address} within {timeout_s:.0f} s ({error.code().name}: "
                    f"{error.details()})") from None
            if time.monotonic() >= next_log:  # a loading executor answers UNAVAILABLE at once: log, not spam
                logger.info("waiting for the executor at %s (%.0f s so far)", address, time.monotonic() - started)
                next_log += WAITING_LOG_INTERVAL_S
        await asyncio.sleep(0.2)


async def connect_executors(config: SchedulerServiceConfig) -> list[ExecutorConnection]:
    """Connect to every executor group (concurrently: they may all be loading) and check they serve one model."""
    channels = [executor_channel(config, address) for address in config.executor_addresses]
    stubs = [executor_pb2_grpc.ExecutorStub(channel) for channel in channels]
    try:
        descriptions = await asyncio.gather(
            *(describe_executor(stub, config.executor_connect_timeout_s, address)
              for stub, address in zip(stubs, config.executor_addresses))
        )
    except BaseException:
        for channel in channels:
            await channel.close()
        raise
    connections = [
        ExecutorConnection(address, channel, stub, description)
        for address, channel, stub, description in zip(config.executor_addresses, channels, stubs, descriptions)
    ]
    check_same_model(connections)
    return connections


def check_same_model(connections: list[ExecutorConnection]) -> None:
    """Every group must serve the same model with the same KV block size: a request may run on any of them."""
    first = connections[0]
    for other in connections[1:]:
        for name in ("model", "vocab_size", "block_size", "lora_adapters"):
            mine, theirs = getattr(first.description, name), getattr(other.description, name)
            if name == "lora_adapters":  # repeated fields compare as lists
                mine, theirs = list(mine), list(theirs)
            if mine != theirs:
                raise ValueError(
                    f"executor_addresses: every executor group must serve the same model; {first.address} has "
                    f"{name} {mine!r} but {other.address} has {theirs!r}"
                )
