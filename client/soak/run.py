"""`stepahead soak --minutes N`: randomized load (lengths, sampling, cancels, deadlines) on a stack it starts
with a small KV pool (preemption pressure) or on `--server`, optionally killing the executor every few
seconds (a self-started stack restarts it); reports leaked KV blocks, hung streams, RSS growth after warm-up
and outcomes by status code, as JSON. Exits 1 when a block leaked or a stream hung."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from client.soak.workload import SoakLoad, SoakWorkers

SERVED_ADAPTER = "soak-lora"
"""The adapter the self-started stack serves from its start (--lora)."""
CHURN_ADAPTER = "soak-lora-churn"
"""The adapter the soak loads and unloads while it runs."""


def add_soak_parser(commands) -> None:
    """Register the `soak` subcommand."""
    from client.cli_values import positive_float, positive_int

    soak = commands.add_parser("soak", help="long randomized load: leaked blocks, hung streams, RSS growth, errors")
    soak.add_argument("--minutes", type=positive_float, required=True, help="how long to send requests")
    soak.add_argument("--model", default=None, help="model of the self-started stack (default: SmolLM2-135M)")
    soak.add_argument("--server", default=None, help="host:port of a running server instead of starting one")
    soak.add_argument("--concurrency", type=positive_int, default=8)
    soak.add_argument("--max-prompt-tokens", type=positive_int, default=200)
    soak.add_argument("--max-output-tokens", type=positive_int, default=128)
    soak.add_argument("--num-kv-blocks", type=positive_int, default=64,
                      help="KV pool of the self-started stack (default 64)")
    soak.add_argument("--num-threads", type=positive_int, default=2)
    soak.add_argument("--kill-executor-every-s", type=positive_float, default=None,
                      help="kill -9 the self-started executor this often and start a new one (default: never)")
    soak.add_argument("--hang-s", type=positive_float, default=60.0,
                      help="a stream silent this long counts as stalled, 5x as long as hung (default 60)")
    soak.add_argument("--lora", action=argparse.BooleanOptionalAction, default=True,
                      help="the self-started stack serves a random LoRA adapter that requests name, and a second "
                           "one is loaded and unloaded every few seconds (default on)")
    soak.add_argument("--seed", type=int, default=0)
    soak.add_argument("--out", default=None, help="also write the report as JSON here")


def run_soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run the soak; print and return the report (exit code 1 when something leaked or hung)."""
    from client.out_paths import writable_file
    from client.stack import LocalStack

    if args.server is not None and args.kill_executor_every_s is not None:
        raise SystemExit("error: --kill-executor-every-s needs a self-started stack (no --server)")
    if args.out:
        writable_file("out", args.out)
    stack = None if args.server is not None else _start_stack(args)
    try:
        address = args.server or stack.address  # type: ignore[union-attr]
        report = asyncio.run(_soak(args, address, stack))
    finally:
        if isinstance(stack, LocalStack):
            stack.stop()
        if getattr(args, "lora_dir", None) is not None:
            shutil.rmtree(args.lora_dir, ignore_errors=True)
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    if report["leaked_kv_blocks"] or report["hung_streams"] or report["requests_left"] or report["format_mismatches"]:
        raise SystemExit(1)
    return report


def _start_stack(args: argparse.Namespace):
    from client.model_resolver import resolve_model
    from client.stack import LocalStack

    model_dir = str(resolve_model(args.model))
    executor = ["--num-kv-blocks", str(args.num_kv_blocks), "--num-threads", str(args.num_threads)]
    scheduler = ["--max-num-seqs", str(max(args.concurrency, 2))]
    if args.lora:
        from client.soak.random_adapter import write_random_lora

        root = args.lora_dir = Path(tempfile.mkdtemp(prefix="stepahead-soak-lora-"))
        served = write_random_lora(model_dir, root / "served", seed=args.seed + 1)
        args.churn_adapter = str(write_random_lora(model_dir, root / "churn", seed=args.seed + 2))
        executor += ["--lora-modules", f"{SERVED_ADAPTER}={served}", "--max-loras", "2", "--max-lora-rank", "8"]
        scheduler.append("--allow-runtime-lora-updating")
    stack = LocalStack(model_dir, executor, scheduler)
    stack.start()
    return stack


async def _soak(args: argparse.Namespace, address: str, stack) -> dict[str, Any]:
    from client.sync_client import Client

    with Client(address) as client:
        info = client.model_info()
    vocab, adapters = info.vocab_size, list(info.lora_adapters)
    load = SoakLoad(concurrency=args.concurrency, max_prompt_tokens=args.max_prompt_tokens,
                    max_output_tokens=args.max_output_tokens, vocab_size=vocab, hang_s=args.hang_s)
    started = time.monotonic()
    stop_at = started + 60.0 * args.minutes
    samples: list[tuple[float, dict[str, int]]] = []
    kills: list[float] = []
    side_tasks = [asyncio.create_task(_sample_rss(stack, samples, stop_at))]
    if args.kill_executor_every_s:
        side_tasks.append(asyncio.create_task(_kill_executor(stack, args.kill_executor_every_s, stop_at, kills)))
    workers = SoakWorkers(address, load, args.seed, adapters)
    churn = getattr(args, "churn_adapter", None)
    if churn is not None and stack is not None:
        side_tasks.append(asyncio.create_task(_churn_adapter(address, churn, adapters, workers.tally.lora, stop_at)))
    tally = await workers.run(stop_at)
    await asyncio.gather(*side_tasks)
    leaked, left, counters = await asyncio.to_thread(_settled_state, address)
    return {
        "minutes": args.minutes,
        "requests": sum(tally.outcomes.values()),
        "outcomes": dict(sorted(tally.outcomes.items())),
        "tokens": tally.tokens,
        "hung_streams": tally.hung_streams,
        "stalled_streams": tally.stalled_streams,
        "max_silence_s": round(tally.max_silence_s, 1),
        "constrained_checked": dict(sorted(tally.constrained.items())),
        "format_mismatches": tally.format_mismatches,
        "lora": dict(sorted(tally.lora.items())),
        "leaked_kv_blocks": leaked,
        "requests_left": left,
        "executor_kills": len(kills),
        "server_counters": counters,
        "rss_growth_after_warmup": _rss_growth(samples, started, stop_at, executor_killed=bool(kills)),
        "wall_s": round(time.monotonic() - started, 1),
    }


async def _sample_rss(stack, samples: list[tuple[float, dict[str, int]]], stop_at: float) -> None:
    import psutil

    while stack is not None and time.monotonic() < stop_at:
        rss = {}
        for name, service in (("scheduler", stack.scheduler), ("executor", stack.executor)):
            try:
                rss[name] = psutil.Process(service.process.pid).memory_info().rss
            except (psutil.NoSuchProcess, AttributeError):
                pass
        samples.append((time.monotonic(), rss))
        await asyncio.sleep(1.0)


async def _kill_executor(stack, every_s: float, stop_at: float, kills: list[float]) -> None:
    while time.monotonic() + every_s < stop_at:
        await asyncio.sleep(every_s)
        os.killpg(stack.executor.process.pid, signal.SIGKILL)
        kills.append(time.monotonic())
        await asyncio.to_thread(stack.restart_executor)


async def _churn_adapter(address: str, path: str, adapters: list[str], counts, stop_at: float,
                         every_s: float = 3.0) -> None:
    """Load the churn adapter, let requests name it, unload it (refused while one uses it: tried again later), and
    so on until ``stop_at``; ``adapters`` (what workers choose from) follows. An executor being replaced answers
    UNAVAILABLE meanwhile: that round is skipped."""
    from client.async_client import AsyncClient
    from client.errors import StepaheadError

    async with AsyncClient(address) as client:
        while time.monotonic() + every_s < stop_at:
            await asyncio.sleep(every_s)
            try:
                if CHURN_ADAPTER in adapters:
                    adapters.remove(CHURN_ADAPTER)  # no new request names it from here on
                    try:
                        await client.unload_lora_adapter(CHURN_ADAPTER)
                        counts["unloads"] += 1
                    except StepaheadError:
                        adapters.append(CHURN_ADAPTER)  # still in use (or the executor is away): later
                        counts["unloads_refused"] += 1
                else:
                    await client.load_lora_adapter(CHURN_ADAPTER, path)
                    adapters.append(CHURN_ADAPTER)
                    counts["loads"] += 1
            except StepaheadError:
                counts["changes_refused"] += 1


def _settled_state(address: str, timeout_s: float = 30.0) -> tuple[int, int, dict[str, int]]:
    """(KV blocks still held, requests still running or waiting, the server's counters) once the server has
    settled. The counters are what it did over its life (what the soak exercised): preemptions, prompt tokens
    looked up in the prefix cache and found there, drafts verified and accepted; a server started before the soak
    counts its earlier requests too."""
    from client.sync_client import Client

    deadline = time.monotonic() + timeout_s
    with Client(address) as client:
        while True:
            info = client.model_info()
            leaked, left = info.num_kv_blocks - info.num_free_kv_blocks, info.num_running + info.num_waiting
            if not (leaked or left) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    stats = info.stats
    counters = {"preemptions": stats.num_preemptions, "prefix_cache_queried_tokens": stats.prefix_cache_queried_tokens,
                "prefix_cache_hit_tokens": stats.prefix_cache_hit_tokens, "spec_drafted": stats.spec_drafted,
                "spec_accepted": stats.spec_accepted}
    return leaked, left, counters


def _rss_growth(samples, started: float, stop_at: float, executor_killed: bool) -> dict[str, float]:
    """Per service: last RSS over the first one after warm-up (the first fifth of the run, at least 10 s),
    minus 1. The executor's is left out when it was killed (each new one starts from nothing)."""
    warm = started + max(10.0, 0.2 * (stop_at - started))
    after = [rss for at, rss in samples if at >= warm]
    growth = {}
    for name in ("scheduler", "executor"):
        if name == "executor" and executor_killed:
            continue
        values = [rss[name] for rss in after if name in rss]
        if len(values) >= 2:
            growth[name] = round(values[-1] / values[0] - 1.0, 4)
    return growth
