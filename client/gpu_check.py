"""`stepahead gpu-check --out DIR`: what a GPU machine must show, in one command, with raw logs kept.

1. The GPU tests (skipped elsewhere): every captured step shape replays to eager's tokens (target, and the
   runner with the drafters' graphs too: draft model, EAGLE-style head), the Triton attention kernels match
   the torch reference on mixed batches, fp32 greedy through the stack on CUDA equals HF transformers (sync
   and async, with and without speculation; the real default model where it is converted, and random weights
   of its shape).
2. The benchmark on CUDA for each model shape asked for: bf16, MT-Bench first turns, fixed-length
   outputs, with HF eager and HF static-cache compiled generate and our bare forward (eager and
   graph-replayed) measured in the same run.

Run it from a checkout (the tests live there). Each part writes its log under DIR and runs whatever an
earlier part gave.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

GPU_TESTS = (
    "tests/executor_svc/cuda_graphs/test_cuda_replay.py",
    "tests/executor_svc/cuda_graphs/test_cuda_families.py",
    "tests/executor_svc/test_step_forward.py::test_cuda_graphs_replay_to_the_tokens_of_eager_cuda_steps",
    "tests/executor_svc/test_lora.py::test_cuda_graph_replays_of_adapter_steps_give_pefts_tokens",
    "tests/executor_svc/test_moe.py::test_a_cuda_graph_of_the_block_replays_to_the_eager_sums",
    "tests/executor_svc/test_triton_attention.py",
    "tests/executor_svc/test_host_transfer.py",
    "tests/executor_svc/test_kernel_warmup.py",
    "tests/executor_svc/test_dummy_weights.py",
    "tests/stack/test_cuda_vs_hf.py",
)
SHAPE_CONCURRENCY = {"default": ["1", "16", "64"], "small": ["1", "16"], "1.7b": ["1", "64"], "8b": ["1", "64"],
                     "moe": ["1", "16", "64"]}
SHAPE_HF_PEERS = {"default": ["eager", "compiled"], "small": ["eager", "compiled"], "1.7b": ["compiled"], "8b": [],
                  "moe": ["eager"]}
"""What each shape's acceptance compares with: 1.7B only HF compiled at c=1 (HF eager at batch 64 takes minutes
there), 8B none (its figures and the weight-read floor); the MoE shape (no acceptance target) HF eager."""
ACCEPTANCE_SHAPES = ["default", "small", "1.7b", "8b"]
"""The shapes gpu-check benchmarks unless --shapes names others: what the GPU issue's acceptance asks for."""


def add_gpu_check_parser(commands: argparse._SubParsersAction) -> None:
    """Register the `gpu-check` subcommand."""
    check = commands.add_parser("gpu-check", help="GPU tests and the CUDA benchmark, logs under --out")
    check.add_argument("--out", required=True, help="directory for the logs, JSON reports and plots")
    check.add_argument("--shapes", nargs="*", default=list(ACCEPTANCE_SHAPES), choices=sorted(SHAPE_CONCURRENCY),
                       help="model shapes to benchmark, each in its own bench run (small: the 2-layer checkpoint; "
                            "moe: the default model's layers with 8 experts; default: default, small, 1.7b and 8b, "
                            "what the GPU acceptance asks for)")
    check.add_argument("--max-tokens", type=int, default=128, help="tokens per request (default 128)")
    check.add_argument("--skip-tests", action="store_true", help="only the benchmark")
    check.add_argument("--skip-bench", action="store_true", help="only the tests")


def run_gpu_check(args: argparse.Namespace) -> int:
    """Run the parts asked for; the exit status is the first failing part's (0 when all pass)."""
    import torch

    if not torch.cuda.is_available():
        print("error: gpu-check needs a CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    statuses = []
    if not args.skip_tests:
        statuses.append(_run_logged(_pytest_command(out), out / "gpu-tests.log"))
    if not args.skip_bench:
        for shape in args.shapes:
            statuses.append(_run_logged(_bench_command(shape, args.max_tokens, out), out / f"bench-{shape}.log"))
    return next((status for status in statuses if status != 0), 0)


def _pytest_command(out: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *GPU_TESTS,
            f"--junitxml={out / 'gpu-tests.xml'}"]


def _bench_command(shape: str, max_tokens: int, out: Path) -> list[str]:
    command = [sys.executable, "-m", "client.cli", "bench", "--device", "cuda", "--dtype", "bfloat16",
               "--max-tokens", str(max_tokens), "--ignore-eos", "--max-inflight-steps", "1", "2",
               "--concurrency", *SHAPE_CONCURRENCY[shape], "--out", str(out / f"bench-{shape}"),
               "--num-threads", "4", "--kv-cache-memory-gb", "8"]
    peers = SHAPE_HF_PEERS[shape]
    command += ["--hf-peers", *peers] if peers else ["--no-hf"]
    if shape == "small":
        return [*command, "--small-model"]
    return [*command, "--model-shape", shape]


def _run_logged(command: list[str], log: Path) -> int:
    """Run ``command``, its output both printed and written to ``log``; returns its exit status."""
    print(f"$ {' '.join(command)}  (log: {log})", flush=True)
    with log.open("w") as file, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                 text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            file.write(line)
    return process.returncode
