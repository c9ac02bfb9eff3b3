"""Starts the executor service: loads the model, sizes the KV cache, warms up, serves."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any, cast

import grpc
import torch
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from executor_svc.attention.kernel_warmup import warm_up_attention_kernels
from executor_svc.attention.selection import build_attention_backend, is_graph_safe
from executor_svc.compute_loop import ComputeLoop
from executor_svc.config import ExecutorConfig
from executor_svc.cuda_graphs.step_graphs import GraphCapture, StepGraphs, cuda_graph_factory
from executor_svc.drafters.draft_model import DraftModelDrafter
from executor_svc.drafters.factory import build_drafter
from executor_svc.grammar import GrammarCompiler
from executor_svc.kv_cache import PagedKVCache
from executor_svc.lora.adapter_files import read_adapter
from executor_svc.lora.module_spec import parse_lora_modules
from executor_svc.lora.served_adapters import ServedLoraAdapters
from executor_svc.lora.stacking import stack_adapters
from executor_svc.metrics import ExecutorMetrics
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.model_runner import ModelRunner
from executor_svc.models.kv_layout import kv_layout
from executor_svc.models.rope import rope_context_limit
from executor_svc.models.variants import variant_for
from executor_svc.parallel.launch import RankGroup, join_tensor_parallel_group
from executor_svc.parallel.rank_commands import MirroringComputeLoop, RankChannel, follow
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel
from executor_svc.profile_service import model_fingerprint
from executor_svc.servicer import ExecutorServicer
from executor_svc.tracing import ExecutorTracing
from executor_svc.warmup import warm_up
from stepahead_common.ports import bind_grpc_port
from stepahead_common.tls import server_credentials
from stepahead_proto import executor_pb2, executor_pb2_grpc

logger = logging.getLogger(__name__)

EXECUTOR_SERVICE = executor_pb2.DESCRIPTOR.services_by_name["Executor"].full_name


STEP_MESSAGE_LIMIT_BYTES = 256 * 1024 * 1024
"""Largest StepRequest / StepResult the Execute stream carries."""

def eos_token_ids(model_dir: str, hf_config) -> list[int]:
    """EOS ids from generation_config.json when present, else from config.json."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:
        eos = None
    if eos is None:
        eos = hf_config.eos_token_id
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else list(eos)


def build_runner(
    config: ExecutorConfig, make_capture: Callable[[], GraphCapture] | None = None, tp: TensorParallel = SINGLE
) -> tuple[ModelRunner, executor_pb2.ExecutorDescription]:
    """Load the model, allocate the KV cache and capture the step graphs as configured.

    ``make_capture``: how to record a step graph; None: CUDA graphs on a CUDA device (unless
    enforce_eager), none elsewhere. Tests pass a CPU stand-in to run the graph path here.
    ``tp``: this rank's tensor-parallel group; the model and the KV cache hold its share of the heads
    (the drafter is replicated: every rank drafts the same tokens). Steps run eagerly under TP."""
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    device = torch.device(config.device)
    dtype = getattr(torch, config.torch_dtype_name)
    hf_config = load_hf_config(config.model_dir, config.load_format)
    head_dim, triton_lacks = kv_layout(hf_config).head_dim, variant_for(hf_config).triton_lacks
    backend = build_attention_backend(config.attention_backend, device, head_dim, triton_lacks)
    max_model_len = _max_model_len(config, hf_config)
    num_blocks = _num_kv_blocks(config, hf_config, dtype, tp)
    model = load_model(config.model_dir, dtype, device, backend, max_model_len=_rope_positions(config, hf_config,
                                                                                               num_blocks),
                       load_format=config.load_format, tp=tp, pack_cpu_weights=config.cpu_weight_packing)
    lora = _serve_adapters(config, model, hf_config)
    if tp.enabled:
        make_capture = None
    elif make_capture is None and device.type == "cuda" and not config.enforce_eager and is_graph_safe(backend):
        make_capture = cuda_graph_factory()
    # A replayed step's padded rows may write to a scratch block.
    scratch_blocks = 1 if make_capture is not None else 0
    kv_cache = kv_layout(hf_config, tp).cache(hf_config.num_hidden_layers, num_blocks, config.block_size, dtype,
                                              device, scratch_blocks=scratch_blocks)
    # A verify step reads up to K positions past the request's length.
    max_blocks_per_seq = -(-(max_model_len + 1 + config.num_spec_tokens) // config.block_size)
    draft_backend = build_attention_backend(config.attention_backend, device, head_dim, triton_lacks)
    drafter = build_drafter(config, hf_config, num_blocks, draft_backend, make_capture, max_blocks_per_seq,
                            target_model=model, tp=tp)
    _warm_up_eager_kernels(model, kv_cache, backend, drafter, draft_backend, device, tp)
    max_query_len = 1 + config.num_spec_tokens if drafter is not None else 1
    graphs = None
    if make_capture is not None:
        graphs = StepGraphs(model, kv_cache, config.max_num_seqs, max_query_len, max_blocks_per_seq, make_capture,
                            keep_hidden=drafter is not None and drafter.reads_target_hidden,
                            adapters=lora is not None)
        started = time.monotonic()
        graphs.capture_all()
        logger.info("captured %d step graphs in %.1f s", len(graphs.shapes), time.monotonic() - started)
    grammars = GrammarCompiler.for_model(config.model_dir, hf_config.vocab_size,
                                         eos_token_ids(config.model_dir, hf_config))
    runner = ModelRunner(model, kv_cache, config.block_size, hf_config.vocab_size, device, drafter,
                         defer_readback=config.defers_token_readback, graphs=graphs, grammars=grammars,
                         lora=lora)
    description = _describe(config, hf_config, max_model_len, num_blocks, device, backend.name, drafter)
    description.structured_output = grammars is not None
    if lora is not None:
        description.lora_adapters.extend(lora.names)
        description.max_loras, description.max_lora_rank = lora.num_slots, model.lora_rank
    return runner, description


def _serve_adapters(config: ExecutorConfig, model: Any, hf_config: Any) -> ServedLoraAdapters | None:
    """The --lora-modules adapters stacked into the model with room for --max-loras of --max-lora-rank (None: no
    LoRA at all)."""
    specs = parse_lora_modules(config.lora_modules)
    adapters = [read_adapter(spec, hf_config) for spec in specs]
    stack = stack_adapters(model, adapters, config.max_loras, config.max_lora_rank)
    if stack is None:
        return None
    return ServedLoraAdapters(stack, hf_config, {spec.name: spec.path for spec in specs})


def _num_kv_blocks(config: ExecutorConfig, hf_config: Any, dtype: torch.dtype, tp: TensorParallel) -> int:
    """The blocks the scheduler hands out: --num-kv-blocks, or as many as --kv-cache-memory-gb holds (every rank the
    same number, sized for the rank holding the most KV heads)."""
    per_block = kv_layout(hf_config, tp).bytes_per_block(hf_config.num_hidden_layers, config.block_size, dtype)
    return config.num_kv_blocks or max(1, int(config.kv_cache_memory_gb * 2**30) // per_block)


def _rope_positions(config: ExecutorConfig, hf_config: Any, num_blocks: int) -> int:
    """Rows of the RoPE tables: every position the model can meet, i.e. every slot of the cache (and a scratch
    block, and a verify step's drafts past them), where that is fewer than max_position_embeddings (Llama 4 Scout's
    10M positions would take 2.7 GB of bf16 tables)."""
    slots = (num_blocks + 1) * config.block_size + config.num_spec_tokens + 1
    return min(int(hf_config.max_position_embeddings), slots)


def _max_model_len(config: ExecutorConfig, hf_config: Any) -> int:
    """The configured context length, or the longest the model serves exactly; ValueError naming max_model_len
    when the configured one is longer than that."""
    limit, why = rope_context_limit(hf_config)
    if config.max_model_len is not None and config.max_model_len > limit:
        raise ValueError(f"max_model_len: {config.max_model_len} is longer than this model serves exactly ({limit}: "
                         f"{why})")
    return config.max_model_len or limit


def _describe(config: ExecutorConfig, hf_config: Any, max_model_len: int, num_blocks: int, device: torch.device,
              attention_backend: str, drafter: Any) -> executor_pb2.ExecutorDescription:
    """What Describe answers: the served model's limits, the cache, the drafter and the weights' fingerprint."""
    return executor_pb2.ExecutorDescription(
        model=config.model_name or Path(config.model_dir).name,
        max_model_len=max_model_len,
        vocab_size=hf_config.vocab_size,
        eos_token_ids=eos_token_ids(config.model_dir, hf_config),
        block_size=config.block_size,
        num_kv_blocks=num_blocks,
        device=str(device),
        dtype=config.torch_dtype_name,
        attention_backend=attention_backend,
        num_threads=torch.get_num_threads(),
        spec_method=drafter.name if drafter is not None else "none",
        max_num_spec_tokens=config.num_spec_tokens if drafter is not None else 0,
        max_num_prediction_tokens=config.num_spec_tokens,
        model_fingerprint=model_fingerprint(config, drafter.source_dir if drafter is not None else None),
    )


def _warm_up_eager_kernels(model: torch.nn.Module, kv_cache: PagedKVCache, backend: object, drafter: object,
                           draft_backend: object, device: torch.device, tp: TensorParallel) -> None:
    """Compile the attention kernels eager steps can launch, for the target and a draft model (an EAGLE head has
    the target's attention shape, so the target's kernels serve it). Not for a tensor-parallel target: every rank
    would have to run the same forwards in step, so its eager steps compile in use."""
    started = time.monotonic()
    forwards = 0 if tp.enabled else warm_up_attention_kernels(model, kv_cache, backend, device)
    if isinstance(drafter, DraftModelDrafter):  # replicated on every rank: no collectives in its forwards
        draft_model = cast(torch.nn.Module, drafter.model)  # a model the loader built, typed by its call protocol
        forwards += warm_up_attention_kernels(draft_model, drafter.kv_cache, draft_backend, device)
    if forwards:
        logger.info("compiled the eager attention kernels in %d forwards, %.1f s", forwards, time.monotonic() - started)


def serve(config: ExecutorConfig) -> None:
    """Run the executor until terminated (under tensor parallelism: rank 0 serves, the other ranks follow it)."""
    ranks = join_tensor_parallel_group(config.tensor_parallel_size, config.device)
    rank = ranks.tp.rank
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s executor{f' rank {rank}' if rank else ''} "
                        "%(levelname)s %(message)s")
    if rank != 0:
        serve_follower_rank(config, ranks)
        return
    tracing = ExecutorTracing.from_env(os.environ)
    # A StepRequest carries new requests' whole prompts: allow more than gRPC's default 4 MiB from the scheduler.
    limit = [("grpc.max_receive_message_length", STEP_MESSAGE_LIMIT_BYTES),
             ("grpc.max_send_message_length", STEP_MESSAGE_LIMIT_BYTES)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=limit)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)  # liveness
    health_servicer.set(EXECUTOR_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)  # readiness: after warm-up
    compute = (MirroringComputeLoop(RankChannel(ranks.tp), ranks.exit_if_broken) if ranks.tp.enabled
               else ComputeLoop())
    metrics = ExecutorMetrics()
    executor_servicer = ExecutorServicer(compute, metrics)
    executor_pb2_grpc.add_ExecutorServicer_to_server(executor_servicer, server)
    reflection.enable_server_reflection((EXECUTOR_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    credentials = None
    if config.tls_cert is not None and config.tls_key is not None:
        credentials = server_credentials(config.tls_cert, config.tls_key, config.tls_client_ca)
    port = bind_grpc_port(server, f"{config.host}:{config.port}", credentials)
    server.start()
    try:
        if config.metrics_port is not None:
            metrics_port = metrics.serve_http(config.host, config.metrics_port)
            print(f"stepahead executor metrics on {config.host}:{metrics_port}", flush=True)
        print(f"stepahead executor bound to {config.host}:{port}, loading {config.model_dir}", flush=True)
        runner, description = build_runner(config, tp=ranks.tp)
        warm_up(runner)
    except BaseException:
        server.stop(grace=None)  # its threads would otherwise keep a failed executor alive
        raise
    runner.tracer = tracing.phase_tracer
    executor_servicer.set_ready(runner, description)
    metrics.bind_runner(lambda: len(runner.requests), description.num_kv_blocks)
    health_servicer.set(EXECUTOR_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    print(
        f"stepahead executor listening on {config.host}:{port} (model {description.model}, "
        f"{description.num_kv_blocks} KV blocks, {description.num_threads} threads)",
        flush=True,
    )
    def stop(*_: object) -> None:
        ranks.stop_watching()
        compute.stop()

    signal.signal(signal.SIGTERM, stop)
    try:
        compute.run_forever()  # model work stays on this (main) thread; see compute_loop.py
    except KeyboardInterrupt:
        ranks.stop_watching()
    finally:
        server.stop(grace=1.0).wait()
        tracing.shutdown()
        ranks.stop()


def serve_follower_rank(config: ExecutorConfig, ranks: RankGroup) -> None:
    """Ranks 1..N-1: load this rank's shard, warm up with rank 0, then run what rank 0 sends until it stops."""
    for stop_signal in (signal.SIGTERM, signal.SIGINT):  # rank 0 decides when the group stops
        signal.signal(stop_signal, signal.SIG_IGN)
    runner, description = build_runner(config, tp=ranks.tp)
    warm_up(runner)
    logging.getLogger(__name__).info("rank %d of %d ready", ranks.tp.rank, ranks.tp.world_size)
    try:
        follow(runner, description, RankChannel(ranks.tp))
    except Exception as error:  # rank 0 or another rank is gone: this group's collectives can never complete
        logging.getLogger(__name__).error("rank %d: the group broke (%s); exiting", ranks.tp.rank, error)
        os._exit(1)  # at once: an orderly teardown of a broken process group can take seconds
