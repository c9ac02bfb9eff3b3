"""Where the executor's multi-step time goes on the small checkpoint (c=16): one ModelRunner in-process,
with no scheduler or client beside it, timing a decode sub-step at n=1 and n=8 (alternating).

Usage: PYTHONPATH=.:proto python bench/experiments/multistep_runner_cost.py [THREADS]
"""

from __future__ import annotations

import sys
import time

import torch
from runner_prefill import prefill

from client.bench.small_model import make_small_checkpoint
from client.cache import stepahead_cache_dir
from client.model_resolver import ensure_default_model
from executor_svc.config import ExecutorConfig
from executor_svc.model_runner import ModelRunner
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2

BATCH, BLOCKS_PER_REQUEST, PROMPT_LEN = 16, 40, 100


def prefilled_runner() -> ModelRunner:
    small = make_small_checkpoint(stepahead_cache_dir() / "models" / "small-random-llama", ensure_default_model())
    runner, _ = build_runner(ExecutorConfig(model_dir=str(small), num_kv_blocks=BATCH * BLOCKS_PER_REQUEST))
    prefill(runner, BATCH, PROMPT_LEN, BLOCKS_PER_REQUEST)
    return runner


def decode(runner: ModelRunner, step_id: int, num_steps: int) -> None:
    step = executor_pb2.StepRequest(step_id=step_id, num_steps=num_steps)
    for rid, state in runner.requests.items():
        step.cached_requests.add(request_id=rid, num_computed_tokens=state.num_computed_tokens, num_scheduled_tokens=1)
    for sub_step in range(num_steps):
        if num_steps > 1:
            runner.execute_sub_step(step, sub_step)
        else:
            runner.execute(step)


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    runner = prefilled_runner()
    step_id = 1
    for num_steps in (1, 8, 1, 8):
        repeats = 80 // num_steps
        start = time.perf_counter()
        for _ in range(repeats):
            decode(runner, step_id, num_steps)
            step_id += 1
        per_sub_step = (time.perf_counter() - start) / (repeats * num_steps) * 1e3
        print(f"threads={torch.get_num_threads()} n={num_steps}: {per_sub_step:.2f} ms per sub-step", flush=True)


if __name__ == "__main__":
    main()
