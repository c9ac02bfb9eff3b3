"""Starts the scheduler service: connects to the executor, then serves the public API."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from scheduler_svc.api_keys import ApiKeyChecker
from scheduler_svc.auth_interceptor import ApiKeyInterceptor
from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulerServiceConfig
from scheduler_svc.engine import Engine
from scheduler_svc.http.context import ServingContext
from scheduler_svc.metrics import SchedulerMetrics
from scheduler_svc.readiness import GENERATION_SERVICE, ReadinessMonitor, executor_health_probe
from scheduler_svc.request_decoding import add_generation_service
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.servicer import GenerationServicer
from scheduler_svc.shutdown import GracefulShutdown
from scheduler_svc.spec_policy_setup import speculation_policy
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.tracing import SchedulerTracing
from scheduler_svc.validation import ModelLimits
from stepahead_common.tls import channel_credentials, server_credentials
from stepahead_proto import executor_pb2, executor_pb2_grpc

if TYPE_CHECKING:
    from scheduler_svc.http.front import HttpFront

logger = logging.getLogger(__name__)


async def describe_executor(stub: executor_pb2_grpc.ExecutorStub, timeout_s: float) -> executor_pb2.ExecutorDescription:
    """Wait for the executor (it may still be loading weights) and read what to plan with."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            description: executor_pb2.ExecutorDescription = await stub.Describe(
                executor_pb2.DescribeRequest(), wait_for_ready=True, timeout=max(remaining, 0.1)
            )
            return description
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE or remaining <= 0:
                raise
        await asyncio.sleep(0.2)


def model_limits(
    config: SchedulerServiceConfig, description: executor_pb2.ExecutorDescription, tokenizer: Tokenizer
) -> ModelLimits:
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


def readiness_monitor(
    config: SchedulerServiceConfig,
    channel: grpc.aio.Channel,
    engine: Engine,
    health_servicer: health.aio.HealthServicer,
) -> ReadinessMonitor:
    """The Generation service's health status follows the executor's readiness and step progress."""

    async def publish(ready: bool, reason: str) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        await health_servicer.set(GENERATION_SERVICE, status)
        engine.metrics.ready.set(1 if ready else 0)
        logger.log(logging.INFO if ready else logging.WARNING, "readiness %s: %s", "on" if ready else "off", reason)

    probe = executor_health_probe(channel, config.readiness.check_timeout_s)
    return ReadinessMonitor(
        config.readiness,
        probe,
        lambda: (engine.stats.steps, engine.scheduler.has_unfinished_requests),
        publish,
        on_unanswered=engine.abandon_unresponsive_executor,
    )


def executor_channel(config: SchedulerServiceConfig) -> grpc.aio.Channel:
    """The channel to the executor: TLS (mutual with a client certificate) when configured."""
    if not config.executor_tls_enabled:
        return grpc.aio.insecure_channel(config.executor_address)
    credentials = channel_credentials(config.executor_tls_ca, config.executor_tls_cert, config.executor_tls_key)
    return grpc.aio.secure_channel(config.executor_address, credentials)


def bind_public_port(server: grpc.aio.Server, config: SchedulerServiceConfig) -> int:
    """Listen for the public gRPC API, with TLS when configured; returns the bound port."""
    address = f"{config.host}:{config.port}"
    if config.tls_cert is not None and config.tls_key is not None:
        port = server.add_secure_port(address, server_credentials(config.tls_cert, config.tls_key))
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"port: cannot bind {address}")
    return port


async def start_http_front(
    config: SchedulerServiceConfig, context: ServingContext, http_port: int
) -> HttpFront:
    """The OpenAI-compatible HTTP front on the scheduler's loop and engine."""
    from scheduler_svc.http.app import create_app
    from scheduler_svc.http.front import HttpFront

    front = HttpFront(create_app(context), config.host, http_port, config.tls_cert, config.tls_key)
    await front.start()
    return front


async def serve(config: SchedulerServiceConfig) -> None:
    """Run the scheduler until cancelled."""
    tracing = SchedulerTracing.from_env(os.environ)
    tokenizer = Tokenizer.from_dir(config.model_dir)
    api_keys = ApiKeyChecker(config.load_api_keys())
    channel = executor_channel(config)
    executor = executor_pb2_grpc.ExecutorStub(channel)
    description = await describe_executor(executor, config.executor_connect_timeout_s)
    limits = model_limits(config, description, tokenizer)
    block_manager = KVBlockManager(description.num_kv_blocks, description.block_size)
    num_spec_tokens, k_policy = await speculation_policy(config, executor, description, tokenizer)
    scheduler = Scheduler(config.scheduling, block_manager, limits.max_model_len, num_spec_tokens, k_policy)
    metrics = SchedulerMetrics()
    engine = Engine(
        scheduler, tokenizer, executor, limits.max_model_len, config.scheduling.max_inflight_steps, metrics,
        tracing=tracing.engine, recovery_timeout_s=config.executor_recovery_timeout_s,
    )

    interceptors = tracing.server_interceptors()
    if api_keys.enabled:
        interceptors.append(ApiKeyInterceptor(api_keys, lambda: metrics.count_error("UNAUTHENTICATED")))
    max_bytes = config.max_request_bytes
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[("grpc.max_receive_message_length", max_bytes), ("grpc.max_send_message_length", max_bytes)],
    )
    servicer = tracing.wrap_servicer(GenerationServicer(engine, tokenizer, limits), limits.model_name)
    add_generation_service(servicer, server, lambda: metrics.count_error(grpc.StatusCode.INVALID_ARGUMENT.name))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((GENERATION_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    port = bind_public_port(server, config)
    await server.start()
    engine.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)  # liveness
    monitor = readiness_monitor(config, channel, engine, health_servicer)
    await monitor.poll_once()
    monitor_task = asyncio.get_running_loop().create_task(monitor.run_forever())
    http_front = None
    if config.metrics_port is not None:
        metrics_port = metrics.serve_http(config.host, config.metrics_port)
        print(f"stepahead scheduler metrics on {config.host}:{metrics_port}", flush=True)
    if config.http_port is not None:
        context = ServingContext(
            engine, tokenizer, limits, api_keys, tracing.http(), lambda: monitor.ready is True,
            metrics.registry if config.metrics_port is not None else None,
        )
        http_front = await start_http_front(config, context, config.http_port)
        print(f"stepahead scheduler HTTP on {http_front.url}", flush=True)
    security = ("TLS" if config.tls_enabled else "plaintext") + (", API keys" if api_keys.enabled else "")
    print(f"stepahead scheduler listening on {config.host}:{port} (model {limits.model_name}, {security})", flush=True)
    # SIGTERM (docker stop, process-group stop): drain, then end the server cleanly (buffered spans get exported).
    shutdown = GracefulShutdown(engine, monitor, lambda: server.stop(grace=1.0), config.shutdown_grace_s)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, shutdown.begin)
    try:
        await server.wait_for_termination()
    finally:
        monitor_task.cancel()
        if http_front is not None:
            await http_front.stop()
        await engine.stop()
        await server.stop(grace=1.0)
        await channel.close()
        tracing.shutdown()


def run(config: SchedulerServiceConfig) -> None:
    """Blocking entry point used by the CLI."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s scheduler %(levelname)s %(message)s")
    asyncio.run(serve(config))
