"""Starts the scheduler service: connects to the executor, then serves the public API."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from stepahead_proto import executor_pb2, executor_pb2_grpc, generation_pb2, generation_pb2_grpc

from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulerServiceConfig
from scheduler_svc.engine import Engine
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.servicer import GenerationServicer
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits

logger = logging.getLogger(__name__)

GENERATION_SERVICE = generation_pb2.DESCRIPTOR.services_by_name["Generation"].full_name


async def describe_executor(stub: executor_pb2_grpc.ExecutorStub, timeout_s: float) -> executor_pb2.ExecutorDescription:
    """Wait for the executor (it may still be loading weights) and read what to plan with."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            return await stub.Describe(executor_pb2.DescribeRequest(), wait_for_ready=True, timeout=max(remaining, 0.1))
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE or remaining <= 0:
                raise
        await asyncio.sleep(0.2)


def model_limits(config: SchedulerServiceConfig, description: executor_pb2.ExecutorDescription, tokenizer: Tokenizer) -> ModelLimits:
    """The limits requests are validated against; the KV cache must hold one request of max length."""
    kv_capacity = description.num_kv_blocks * description.block_size
    eos = set(description.eos_token_ids) or set(tokenizer.eos_token_ids)
    return ModelLimits(
        model_name=config.model_name or description.model,
        max_model_len=min(description.max_model_len, kv_capacity),
        vocab_size=description.vocab_size,
        eos_token_ids=frozenset(eos),
        default_max_tokens=config.default_max_tokens,
    )


async def serve(config: SchedulerServiceConfig) -> None:
    """Run the scheduler until cancelled."""
    tokenizer = Tokenizer.from_dir(config.model_dir)
    channel = grpc.aio.insecure_channel(config.executor_address)
    executor = executor_pb2_grpc.ExecutorStub(channel)
    description = await describe_executor(executor, config.executor_connect_timeout_s)
    limits = model_limits(config, description, tokenizer)
    block_manager = KVBlockManager(description.num_kv_blocks, description.block_size)
    scheduler = Scheduler(config.scheduling, block_manager, limits.max_model_len)
    engine = Engine(scheduler, tokenizer, executor, limits.max_model_len, config.scheduling.max_inflight_steps)

    server = grpc.aio.server()
    generation_pb2_grpc.add_GenerationServicer_to_server(GenerationServicer(engine, tokenizer, limits), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((GENERATION_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    port = server.add_insecure_port(f"{config.host}:{config.port}")
    if port == 0:
        raise OSError(f"port: cannot bind {config.host}:{config.port}")
    await server.start()
    engine.start()
    for service in ("", GENERATION_SERVICE):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    print(f"stepahead scheduler listening on {config.host}:{port} (model {limits.model_name})", flush=True)
    try:
        await server.wait_for_termination()
    finally:
        await engine.stop()
        await server.stop(grace=1.0)
        await channel.close()


def run(config: SchedulerServiceConfig) -> None:
    """Blocking entry point used by the CLI."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s scheduler %(levelname)s %(message)s")
    asyncio.run(serve(config))
