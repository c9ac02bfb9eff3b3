"""Starts the scheduler service: connects to its executor groups, then serves the public API."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from scheduler_svc.api_keys import ApiKeyChecker
from scheduler_svc.auth_interceptor import ApiKeyInterceptor
from scheduler_svc.block_manager import KVBlockManager
from scheduler_svc.config import SchedulerServiceConfig
from scheduler_svc.engine import Engine
from scheduler_svc.engine_groups import EngineGroups
from scheduler_svc.executor_connections import ExecutorConnection, connect_executors
from scheduler_svc.generation_defaults import GenerationDefaults
from scheduler_svc.group_readiness import GroupReadiness
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.response_store import ResponseStore
from scheduler_svc.lora_adapters import ServedAdapters
from scheduler_svc.lora_updates import LoraUpdates
from scheduler_svc.metrics import SchedulerMetrics
from scheduler_svc.readiness import GENERATION_SERVICE, ReadinessMonitor, executor_health_probe
from scheduler_svc.reasoning.thinking_bounds import thinking_bounds
from scheduler_svc.request_decoding import add_generation_service
from scheduler_svc.request_log import RequestLog
from scheduler_svc.scheduler import Scheduler
from scheduler_svc.servicer import GenerationServicer
from scheduler_svc.shutdown import GracefulShutdown
from scheduler_svc.spec_policy_setup import speculation_policy
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.tracing import SchedulerTracing
from scheduler_svc.validation import ModelLimits
from stepahead_common.ports import bind_grpc_port
from stepahead_common.tls import server_credentials
from stepahead_proto import executor_pb2

if TYPE_CHECKING:
    from scheduler_svc.http.front import HttpFront

logger = logging.getLogger(__name__)


def model_limits(
    config: SchedulerServiceConfig, descriptions: list[executor_pb2.ExecutorDescription], tokenizer: Tokenizer
) -> ModelLimits:
    """The limits requests are validated against; every group's KV cache must hold one request of max length."""
    first = descriptions[0]
    max_model_len = min(min(d.max_model_len, d.num_kv_blocks * d.block_size) for d in descriptions)
    eos = set(first.eos_token_ids) or set(tokenizer.eos_token_ids)
    defaults = GenerationDefaults.load(config.generation_config, config.model_dir)
    model_name = config.model_name or first.model
    if model_name in first.lora_adapters:
        raise ValueError(f"lora_modules: adapter name {model_name!r} is the served model's name; rename the adapter")
    if defaults.sampling_values or defaults.max_new_tokens:
        logger.info("default sampling for unset fields from %s: %s, max_tokens %s", config.generation_config,
                    defaults.sampling_values, defaults.max_new_tokens or config.default_max_tokens)
    return ModelLimits(
        model_name=model_name,
        max_model_len=max_model_len,
        vocab_size=first.vocab_size,
        eos_token_ids=frozenset(eos),
        default_max_tokens=defaults.max_new_tokens or config.default_max_tokens,
        structured_output=all(d.structured_output for d in descriptions),
        priority_scheduling=config.scheduling.scheduling_policy == "priority",
        request_chat_templates=config.trust_request_chat_template,
        generation_defaults=defaults,
        adapters=ServedAdapters(first.lora_adapters, min(d.max_loras for d in descriptions)),
        reasoning_parser=config.reasoning_parser,
        thinking_bounds=thinking_bounds(config.reasoning_parser, tokenizer) if config.reasoning_parser else None,
        tool_call_parser=config.tool_call_parser,
        chat_template_defaults=config.chat_template_defaults(),
    )


async def build_engines(
    config: SchedulerServiceConfig, connections: list[ExecutorConnection], tokenizer: Tokenizer,
    limits: ModelLimits, metrics: SchedulerMetrics, tracing: SchedulerTracing,
) -> EngineGroups:
    """One scheduler and engine per executor group, each with its own KV block pool and K policy."""
    engines = []
    for index, connection in enumerate(connections):
        description = connection.description
        block_manager = KVBlockManager(description.num_kv_blocks, description.block_size,
                                       config.scheduling.enable_prefix_caching)
        num_spec_tokens, k_policy = await speculation_policy(config, connection.stub, description, tokenizer)
        scheduler = Scheduler(config.scheduling, block_manager, limits.max_model_len, num_spec_tokens, k_policy,
                              first_step_id=index << STEP_ID_GROUP_SHIFT,
                              max_prediction_tokens=description.max_num_prediction_tokens)
        engines.append(Engine(
            scheduler, tokenizer, connection.stub, limits.max_model_len, config.scheduling.max_inflight_steps,
            metrics, tracing=tracing.engine, recovery_timeout_s=config.executor_recovery_timeout_s,
            name=connection.address, adapters=limits.adapters,
            request_log=RequestLog(config.log_requests, connection.address if len(connections) > 1 else ""),
        ))
    return EngineGroups(engines, metrics)


STEP_ID_GROUP_SHIFT = 48
"""Group i numbers its steps from i << 48: step ids stay unique across groups (traces, logs)."""


def readiness(
    config: SchedulerServiceConfig,
    connections: list[ExecutorConnection],
    engines: EngineGroups,
    health_servicer: health.aio.HealthServicer,
) -> GroupReadiness:
    """The Generation service's health status follows its executor groups' readiness and step progress:
    SERVING while at least one group is ready; each group also has its own status, named
    ``<Generation service>/<executor address>``."""
    metrics = engines.metrics

    async def publish(ready: bool, reason: str) -> None:
        await health_servicer.set(GENERATION_SERVICE, _serving_status(ready))
        metrics.ready.set(1 if ready else 0)
        logger.log(logging.INFO if ready else logging.WARNING, "readiness %s: %s", "on" if ready else "off", reason)

    async def publish_group(name: str, ready: bool, reason: str) -> None:
        await health_servicer.set(f"{GENERATION_SERVICE}/{name}", _serving_status(ready))
        metrics.group_ready.labels(group=name).set(1 if ready else 0)
        if len(connections) > 1:
            logger.log(logging.INFO if ready else logging.WARNING, "executor group %s %s: %s", name,
                       "ready" if ready else "not ready", reason)

    groups = GroupReadiness([c.address for c in connections], publish, publish_group)
    for connection, engine in zip(connections, engines.engines):
        groups.add(ReadinessMonitor(
            config.readiness,
            executor_health_probe(connection.channel, config.readiness.check_timeout_s),
            _progress_of(engine),
            groups.group_publisher(connection.address),
            on_unanswered=engine.abandon_unresponsive_executor,
        ))
    return groups


def _progress_of(engine: Engine) -> Callable[[], tuple[int, bool]]:
    return lambda: (engine.stats.steps, engine.scheduler.has_unfinished_requests)


def _serving_status(ready: bool) -> health_pb2.HealthCheckResponse.ServingStatus.ValueType:
    return health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING


def bind_public_port(server: grpc.aio.Server, config: SchedulerServiceConfig) -> int:
    """Listen for the public gRPC API, with TLS when configured; returns the bound port."""
    credentials = None
    if config.tls_cert is not None and config.tls_key is not None:
        credentials = server_credentials(config.tls_cert, config.tls_key)
    return bind_grpc_port(server, f"{config.host}:{config.port}", credentials)


async def start_http_front(
    config: SchedulerServiceConfig, context: ServingContext, http_port: int
) -> HttpFront:
    """The OpenAI-compatible HTTP front on the scheduler's loop and engine."""
    from scheduler_svc.http.app import create_app
    from scheduler_svc.http.front import HttpFront

    front = HttpFront(create_app(context), config.host, http_port, config.tls_cert, config.tls_key, config.root_path)
    await front.start()
    return front


async def serve(config: SchedulerServiceConfig) -> None:
    """Run the scheduler until cancelled."""
    tracing = SchedulerTracing.from_env(os.environ)
    # Long prompts are tokenized in worker threads with the GIL released (prompt_work.py); without rayon's pool,
    # which this single-item use does not need.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tokenizer = Tokenizer.from_dir(config.model_dir, release_gil=True, chat_template=config.chat_template_source())
    api_keys = ApiKeyChecker(config.load_api_keys())
    connections = await connect_executors(config)
    limits = model_limits(config, [c.description for c in connections], tokenizer)
    metrics = SchedulerMetrics()
    if config.metrics_vllm_names:
        metrics.add_vllm_names(limits.model_name)
    engine = await build_engines(config, connections, tokenizer, limits, metrics, tracing)

    interceptors = tracing.server_interceptors()
    if api_keys.enabled:
        interceptors.append(ApiKeyInterceptor(api_keys, lambda: metrics.count_error("UNAUTHENTICATED")))
    max_bytes = config.max_request_bytes
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[("grpc.max_receive_message_length", max_bytes), ("grpc.max_send_message_length", max_bytes)],
    )
    lora_updates = LoraUpdates(engine.engines, limits.adapters, limits.model_name,
                               allowed=config.allow_runtime_lora_updating)
    servicer = tracing.wrap_servicer(GenerationServicer(engine, tokenizer, limits, lora_updates), limits.model_name)
    add_generation_service(servicer, server, lambda: metrics.count_error(grpc.StatusCode.INVALID_ARGUMENT.name))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((GENERATION_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    port = bind_public_port(server, config)
    await server.start()
    engine.start()
    monitor_task: asyncio.Task[None] | None = None
    http_front = None
    try:  # from here on, a failed start-up (a metrics or HTTP port in use) stops what already runs
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)  # liveness
        monitor = readiness(config, connections, engine, health_servicer)
        await monitor.poll_once()
        monitor_task = asyncio.get_running_loop().create_task(monitor.run_forever())
        if config.metrics_port is not None:
            metrics_port = metrics.serve_http(config.host, config.metrics_port)
            print(f"stepahead scheduler metrics on {config.host}:{metrics_port}", flush=True)
        if config.http_port is not None:
            context = ServingContext(
                engine, tokenizer, limits, api_keys, tracing.http(), lambda: monitor.ready is True,
                metrics.registry if config.metrics_port is not None else None,
                tool_call_parser=config.tool_call_parser, allowed_origins=config.allowed_origins,
                max_body_bytes=max_bytes, lora_updates=lora_updates,
                response_store=ResponseStore(config.responses_store_size),
                force_include_usage=config.enable_force_include_usage,
            )
            http_front = await start_http_front(config, context, config.http_port)
            print(f"stepahead scheduler HTTP on {http_front.url}", flush=True)
        _announce(config, port, limits, api_keys, len(connections))
        # SIGTERM (docker stop, process-group stop): drain, then end the server cleanly (buffered spans get exported).
        shutdown = GracefulShutdown(engine, monitor, lambda: server.stop(grace=1.0), config.shutdown_grace_s)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, shutdown.begin)
        await server.wait_for_termination()
    finally:
        if monitor_task is not None:
            monitor_task.cancel()
        if http_front is not None:
            await http_front.stop()
            context.response_store.cancel_all()  # background responses: their requests end with the engine
        await engine.stop()
        await server.stop(grace=1.0)
        for connection in connections:
            await connection.channel.close()
        tracing.shutdown()


def _announce(config: SchedulerServiceConfig, port: int, limits: ModelLimits, api_keys: ApiKeyChecker,
              num_groups: int) -> None:
    security = ("TLS" if config.tls_enabled else "plaintext") + (", API keys" if api_keys.enabled else "")
    groups = f", {num_groups} executor groups" if num_groups > 1 else ""
    print(f"stepahead scheduler listening on {config.host}:{port} (model {limits.model_name}, {security}{groups})",
          flush=True)


def run(config: SchedulerServiceConfig) -> None:
    """Blocking entry point used by the CLI."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s scheduler %(levelname)s %(message)s")
    asyncio.run(serve(config))
