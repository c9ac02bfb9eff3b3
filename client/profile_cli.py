"""`stepahead profile --out FILE`: measure an executor's step profile for dynamic speculative decoding
(step time per decode batch size and K, acceptance per draft position on calibration prompts) and
write it as JSON, the same document `stepahead serve` caches."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any


def add_profile_parser(commands) -> None:
    """Register the `profile` subcommand."""
    from client.cli_values import positive_int
    from executor_svc.cli_args import add_executor_arguments

    profile = commands.add_parser("profile", help="measure the step profile that dynamic K plans with")
    profile.add_argument("--out", required=True, help="JSON file to write")
    profile.add_argument("--model", default=None, help="model (default: SmolLM2-135M-Instruct)")
    profile.add_argument("--executor", default=None,
                         help="host:port of a running executor with no scheduler attached (default: start one)")
    profile.add_argument("--max-num-seqs", type=positive_int, default=64,
                         help="largest decode batch to profile: the scheduler's --max-num-seqs (default 64)")
    profile.add_argument("--host", default="127.0.0.1")
    add_executor_arguments(profile)


async def _measure(address: str, model_dir: str, max_num_seqs: int) -> dict[str, Any]:
    import grpc

    from scheduler_svc.executor_connections import describe_executor
    from scheduler_svc.spec_profile import batch_grid, measure
    from scheduler_svc.tokenizer import Tokenizer
    from stepahead_proto import executor_pb2_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = executor_pb2_grpc.ExecutorStub(channel)
        description = await describe_executor(stub, 600.0, address)
        return await measure(stub, Tokenizer.from_dir(model_dir), description, batch_grid(max_num_seqs))


def best_k_table(document: dict[str, Any]) -> list[tuple[int, int]]:
    """(B, K*) for each profiled batch size under the profile's acceptance prior."""
    from scheduler_svc.dynamic_k import DynamicKPolicy, StepTimeProfile

    policy = DynamicKPolicy(StepTimeProfile.from_dict(document["profile"]))
    return [(size, policy.best_k(size)) for size in document["profile"]["batch_sizes"]]


def run_profile(args: argparse.Namespace) -> dict[str, Any]:
    """Profile a running executor, or one started for the purpose; write and return the document."""
    from client.launcher import ServiceProcess, wait_until_serving
    from client.model_resolver import resolve_model
    from client.out_paths import writable_file
    from client.stack import EXECUTOR_BOUND
    from executor_svc.cli_args import executor_flags
    from scheduler_svc.spec_profile import write_document
    from stepahead_proto import executor_pb2

    writable_file("out", args.out)
    model_dir = str(resolve_model(args.model))
    executor = None
    address = args.executor
    try:
        if address is None:
            flags = executor_flags(args)
            executor = ServiceProcess("executor", ServiceProcess.cli_argv(
                "executor", "--model", model_dir, "--host", args.host, "--port", "0", *flags))
            address = executor.start(EXECUTOR_BOUND)
            wait_until_serving(address, service=executor_pb2.DESCRIPTOR.services_by_name["Executor"].full_name)
        document = asyncio.run(_measure(address, model_dir, args.max_num_seqs))
    finally:
        if executor is not None:
            executor.stop()
    write_document(Path(args.out), document)
    print(f"profiled in {document['profile_s']:.1f} s; acceptance prior "
          f"{[round(a, 3) for a in document['profile']['acceptance_prior']]}")
    print("best K per batch size (prior): " + ", ".join(f"B={b}: {k}" for b, k in best_k_table(document)))
    print(f"wrote {args.out}")
    return document
