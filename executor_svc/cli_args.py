"""Command-line flags of `stepahead executor` (no torch import: the CLI builds the config first)."""

from __future__ import annotations

import argparse
from pathlib import Path

from executor_svc.config import (
    ATTENTION_BACKENDS,
    EAGLE_METHODS,
    LOAD_FORMATS,
    SPEC_METHODS,
    SUPPORTED_DTYPES,
    ExecutorConfig,
)

READBACK_CHOICES = {"auto": None, "on": True, "off": False}


def spec_tokens_value(text: str) -> str:
    """--num-spec-tokens of `serve`: "dynamic" or a number N >= 0."""
    if text == "dynamic" or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"must be dynamic or a number >= 0, got {text!r}")


def add_executor_arguments(parser: argparse.ArgumentParser, dynamic_k: bool = False, spec_default: str = "auto"
                           ) -> None:
    """Flags shared by `stepahead executor` and `stepahead serve` (``dynamic_k``: serve's --num-spec-tokens,
    dynamic or N, with --max-num-spec-tokens the most K a dynamic choice may take; ``spec_default``: the
    --spec-method default, none for the benchmark, which names what it compares)."""
    group = parser.add_argument_group("executor")
    group.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    group.add_argument("--dtype", default="auto", choices=SUPPORTED_DTYPES,
                       help="weights and KV cache dtype (default auto: bfloat16 on CUDA, float32 on CPU)")
    group.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default 16)")
    group.add_argument(
        "--num-kv-blocks", type=int, default=None, help="KV cache blocks (default: fill --kv-cache-memory-gb)"
    )
    group.add_argument(
        "--kv-cache-memory-gb", type=float, default=1.0, help="KV cache size when --num-kv-blocks is unset (default 1)"
    )
    group.add_argument("--max-model-len", type=int, default=None, help="longest prompt+output (default: the model's)")
    group.add_argument("--num-threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    group.add_argument("--spec-method", default=spec_default, choices=SPEC_METHODS,
                       help="speculative decoding drafter: auto (eagle_ngram with the EAGLE-style drafter shipped "
                            "for the model if there is one, else none), none, ngram, draft_model, eagle, or "
                            "eagle_ngram (n-gram lookup drafts where the context has a match, the EAGLE-style "
                            f"head's elsewhere) (default {spec_default})")
    if dynamic_k:
        group.add_argument("--num-spec-tokens", type=spec_tokens_value, default="dynamic",
                           help="draft tokens per step with a drafter: dynamic (chosen each step from a step "
                                "profile, measured on first start and cached, and live acceptance) or a fixed N "
                                "(default dynamic)")
        group.add_argument("--max-num-spec-tokens", type=int, default=5,
                           help="most draft tokens a dynamic choice may take, K_max (default 5)")
    else:
        group.add_argument("--num-spec-tokens", type=int, default=3, help="draft tokens per step, K (default 3)")
    group.add_argument(
        "--draft-model", default=None, help="HF directory of the draft model (--spec-method draft_model)"
    )
    group.add_argument("--eagle-drafter", default=None,
                       help="directory of an EAGLE-style drafter from `stepahead train-drafter` (--spec-method "
                            "eagle, eagle_ngram or auto; default: the one shipped for the model)")
    group.add_argument("--ngram-min-n", type=int, default=2, help="shortest n-gram to look up (default 2)")
    group.add_argument("--ngram-max-n", type=int, default=4, help="longest n-gram to look up (default 4)")
    group.add_argument("--attention-backend", default="auto", choices=ATTENTION_BACKENDS,
                       help="paged attention kernels (default auto: triton on CUDA, torch on CPU)")
    group.add_argument("--enforce-eager", action="store_true",
                       help="never replay captured CUDA graphs (default: graphs for decode and verify steps on CUDA)")
    group.add_argument("--cpu-weight-packing", action=argparse.BooleanOptionalAction, default=True,
                       help="CPU float32: keep oneDNN-packed copies of the weights for steps of 3+ tokens (faster "
                            "verify, batched decode and prefill; twice the weights' memory; default on)")
    group.add_argument("--load-format", default="auto", choices=LOAD_FORMATS,
                       help="auto: the checkpoint's weights; dummy: random weights of its shape (default auto)")
    group.add_argument("--tensor-parallel-size", type=int, default=1,
                       help="shard the model over N ranks, one process each, joined by torch.distributed "
                            "(rank 0 serves the Execute API; default 1)")
    group.add_argument("--lora-modules", nargs="+", default=None, metavar="NAME=PATH",
                       help="LoRA adapters (peft directories) to serve over the model; a request names one as its "
                            "model (default none)")
    group.add_argument("--max-loras", type=int, default=None,
                       help="LoRA adapter slots: more than the --lora-modules count lets a scheduler started with "
                            "--allow-runtime-lora-updating load adapters while serving (default: the --lora-modules "
                            "count)")
    group.add_argument("--max-lora-rank", type=int, default=None,
                       help="largest LoRA rank a slot holds (default: the largest of --lora-modules, else 16)")
    group.add_argument("--defer-token-readback", default="auto", choices=tuple(READBACK_CHOICES),
                       help="launch the next step before this one's tokens reach the host "
                            "(default auto: on for CUDA, off for CPU)")


def add_executor_tls_arguments(parser: argparse.ArgumentParser, server_certificate: bool = True) -> None:
    """TLS flags of the executor. Under `serve` its certificate is the one of --tls-cert/--tls-key (the
    scheduler's flags), so only --tls-client-ca is added there (``server_certificate`` False)."""
    group = parser.add_argument_group("executor TLS")
    if server_certificate:
        group.add_argument("--tls-cert", default=None, help="PEM certificate: serve the Execute API over TLS")
        group.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    group.add_argument("--tls-client-ca", default=None,
                       help="mutual TLS: accept only clients with a certificate this CA signed (the scheduler's)")


def add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    """--metrics-port and --max-num-seqs of `stepahead executor` (under `serve` both belong to the scheduler,
    and the executor gets the scheduler's --max-num-seqs)."""
    parser.add_argument("--max-num-seqs", type=int, default=64,
                        help="largest batch a CUDA graph is captured for: the scheduler's --max-num-seqs (default 64)")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve the executor's Prometheus /metrics on this port (0: any free port; default off)")


def executor_config_from_args(args: argparse.Namespace, model_dir: str, port: int, host: str) -> ExecutorConfig:
    """Build the validated config from parsed flags; a drafter directory that cannot be read is a ValueError
    naming its flag, before anything loads."""
    _require_config_json("draft_model", args.draft_model)
    if args.spec_method in EAGLE_METHODS:
        _require_config_json("eagle_drafter", getattr(args, "eagle_drafter", None))
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
        eagle_dir=getattr(args, "eagle_drafter", None),
        ngram_min_n=args.ngram_min_n,
        ngram_max_n=args.ngram_max_n,
        metrics_port=getattr(args, "metrics_port", None),
        attention_backend=args.attention_backend,
        enforce_eager=args.enforce_eager,
        cpu_weight_packing=args.cpu_weight_packing,
        max_num_seqs=args.max_num_seqs,
        load_format=args.load_format,
        defer_token_readback=READBACK_CHOICES[args.defer_token_readback],
        tls_cert=getattr(args, "tls_cert", None),
        tls_key=getattr(args, "tls_key", None),
        tls_client_ca=getattr(args, "tls_client_ca", None),
        tensor_parallel_size=args.tensor_parallel_size,
        lora_modules=tuple(getattr(args, "lora_modules", None) or ()),
        max_loras=getattr(args, "max_loras", None),
        max_lora_rank=getattr(args, "max_lora_rank", None),
    )


def _require_config_json(flag: str, directory: str | None) -> None:
    if directory is None:
        return
    if not Path(directory).is_dir():
        raise ValueError(f"{flag}: {directory} is not a directory")
    if not (Path(directory) / "config.json").is_file():
        raise ValueError(f"{flag}: {directory} has no config.json")


def executor_flags(args: argparse.Namespace) -> list[str]:
    """The same flags as a list, to start an executor process from `stepahead serve`."""
    flags = ["--device", args.device, "--dtype", args.dtype, "--block-size", str(args.block_size)]
    flags += ["--kv-cache-memory-gb", str(args.kv_cache_memory_gb)]
    flags += ["--spec-method", args.spec_method, "--num-spec-tokens", str(executor_max_k(args))]
    flags += ["--ngram-min-n", str(args.ngram_min_n), "--ngram-max-n", str(args.ngram_max_n)]
    flags += ["--defer-token-readback", args.defer_token_readback]
    flags += ["--attention-backend", args.attention_backend, "--load-format", args.load_format]
    flags += ["--max-num-seqs", str(args.max_num_seqs), "--tensor-parallel-size", str(args.tensor_parallel_size)]
    if getattr(args, "lora_modules", None):
        flags += ["--lora-modules", *args.lora_modules]
    for name in ("max_loras", "max_lora_rank"):
        if getattr(args, name, None) is not None:
            flags += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.enforce_eager:
        flags.append("--enforce-eager")
    if not args.cpu_weight_packing:
        flags.append("--no-cpu-weight-packing")
    for name in ("num_kv_blocks", "max_model_len", "num_threads", "draft_model", "eagle_drafter"):
        value = getattr(args, name, None)
        if name == "eagle_drafter" and args.spec_method not in EAGLE_METHODS:
            continue
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    return flags + executor_tls_flags(args)


def executor_max_k(args: argparse.Namespace) -> int:
    """The executor's K (its K_max): --max-num-spec-tokens under serve's dynamic K, else N (at least 1)."""
    if args.num_spec_tokens == "dynamic":
        return int(args.max_num_spec_tokens)
    return max(1, int(args.num_spec_tokens))


def executor_tls_flags(args: argparse.Namespace) -> list[str]:
    """Under `serve`: the executor serves TLS with --tls-cert/--tls-key when the scheduler-executor hop is
    secured (any --executor-tls-* flag or --tls-client-ca); none of them: plaintext."""
    hop = [getattr(args, name, None) for name in
           ("executor_tls_ca", "executor_tls_cert", "executor_tls_key", "tls_client_ca")]
    if not any(value is not None for value in hop):
        return []
    cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if cert is None or key is None:
        raise ValueError("tls_cert: --tls-cert and --tls-key are required to secure the scheduler-executor hop "
                         "(the executor serves TLS with them)")
    flags = ["--tls-cert", cert, "--tls-key", key]
    if getattr(args, "tls_client_ca", None) is not None:
        flags += ["--tls-client-ca", args.tls_client_ca]
    return flags
