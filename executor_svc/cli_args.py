"""Command-line flags of `stepahead executor` (no torch import: the CLI builds the config first)."""

from __future__ import annotations

import argparse

from executor_svc.config import ExecutorConfig

READBACK_CHOICES = {"auto": None, "on": True, "off": False}


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by `stepahead executor` and `stepahead serve`."""
    group = parser.add_argument_group("executor")
    group.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    group.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    group.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default 16)")
    group.add_argument("--num-kv-blocks", type=int, default=None, help="KV cache blocks (default: fill --kv-cache-memory-gb)")
    group.add_argument("--kv-cache-memory-gb", type=float, default=1.0, help="KV cache size when --num-kv-blocks is unset (default 1)")
    group.add_argument("--max-model-len", type=int, default=None, help="longest prompt+output (default: the model's)")
    group.add_argument("--num-threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    group.add_argument("--spec-method", default="none", choices=("none", "ngram", "draft_model"),
                       help="speculative decoding drafter (default none)")
    group.add_argument("--num-spec-tokens", type=int, default=3, help="draft tokens per step, K (default 3)")
    group.add_argument("--draft-model", default=None, help="HF directory of the draft model (--spec-method draft_model)")
    group.add_argument("--ngram-min-n", type=int, default=2, help="shortest n-gram to look up (default 2)")
    group.add_argument("--ngram-max-n", type=int, default=4, help="longest n-gram to look up (default 4)")
    group.add_argument("--defer-token-readback", default="auto", choices=tuple(READBACK_CHOICES),
                       help="launch the next step before this one's tokens reach the host "
                            "(default auto: on for CUDA, off for CPU)")


def add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    """--metrics-port of `stepahead executor` (under `serve` the flag belongs to the scheduler)."""
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve the executor's Prometheus /metrics on this port (0: any free port; default off)")


def executor_config_from_args(args: argparse.Namespace, model_dir: str, port: int, host: str) -> ExecutorConfig:
    """Build the validated config from parsed flags."""
    return ExecutorConfig(
        model_dir=model_dir,
        model_name=getattr(args, "served_model_name", "") or "",
        host=host,
        port=port,
        device=args.device,
        dtype=args.dtype,
        block_size=args.block_size,
        num_kv_blocks=args.num_kv_blocks,
        kv_cache_memory_gb=args.kv_cache_memory_gb,
        max_model_len=args.max_model_len,
        num_threads=args.num_threads,
        spec_method=args.spec_method,
        num_spec_tokens=args.num_spec_tokens,
        draft_model_dir=args.draft_model,
        ngram_min_n=args.ngram_min_n,
        ngram_max_n=args.ngram_max_n,
        metrics_port=getattr(args, "metrics_port", None),
        defer_token_readback=READBACK_CHOICES[args.defer_token_readback],
    )


def executor_flags(args: argparse.Namespace) -> list[str]:
    """The same flags as a list, to start an executor process from `stepahead serve`."""
    flags = ["--device", args.device, "--dtype", args.dtype, "--block-size", str(args.block_size)]
    flags += ["--kv-cache-memory-gb", str(args.kv_cache_memory_gb)]
    flags += ["--spec-method", args.spec_method, "--num-spec-tokens", str(args.num_spec_tokens)]
    flags += ["--ngram-min-n", str(args.ngram_min_n), "--ngram-max-n", str(args.ngram_max_n)]
    flags += ["--defer-token-readback", args.defer_token_readback]
    for name in ("num_kv_blocks", "max_model_len", "num_threads", "draft_model"):
        value = getattr(args, name)
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    return flags
