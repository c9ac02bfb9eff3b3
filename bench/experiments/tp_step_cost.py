"""Tensor parallelism on the CPU: decode-step time of the default model's runner at TP = 1 and TP = 2 (gloo,
1 torch thread per rank), and how much of a TP = 2 step is spent inside collectives (all-reduce, all-gather),
at batch 1 and 16. Ranks run in-process pairs (torch.multiprocessing), no scheduler or gRPC beside them.

Usage: PYTHONPATH=.:proto python bench/experiments/tp_step_cost.py [STEPS]
"""

from __future__ import annotations

import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from runner_prefill import prefill

from client.model_resolver import ensure_default_model
from executor_svc.config import ExecutorConfig
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2

BLOCKS_PER_REQUEST, PROMPT_LEN = 12, 128


class CollectiveTimer:
    """Wraps dist.all_reduce and dist.all_gather to add up the seconds spent in them."""

    def __init__(self) -> None:
        self.seconds = 0.0
        for name in ("all_reduce", "all_gather"):
            setattr(dist, name, self._timed(getattr(dist, name)))

    def _timed(self, collective):
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return collective(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return run


def measure(tp: TensorParallel, steps: int) -> list[tuple[int, float, float]]:
    """(batch, ms per decode step, ms per step in collectives) for batch 1 and 16."""
    torch.set_num_threads(1)
    timer = CollectiveTimer()
    rows = []
    for batch in (1, 16):
        config = ExecutorConfig(model_dir=str(ensure_default_model()), num_kv_blocks=16 * BLOCKS_PER_REQUEST)
        runner, _ = build_runner(config, tp=tp)
        prefill(runner, batch, PROMPT_LEN, BLOCKS_PER_REQUEST)
        timer.seconds = 0.0
        start = time.perf_counter()
        for step_id in range(1, steps + 1):
            step = executor_pb2.StepRequest(step_id=step_id)
            for rid, state in runner.requests.items():
                step.cached_requests.add(request_id=rid, num_computed_tokens=state.num_computed_tokens,
                                         num_scheduled_tokens=1)
            runner.execute(step)
        elapsed = time.perf_counter() - start
        rows.append((batch, elapsed / steps * 1e3, timer.seconds / steps * 1e3))
    return rows


def rank_main(rank: int, port: int, steps: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(minutes=10))
    rows = measure(TensorParallel(rank, 2), steps)
    if rank == 0:
        for batch, step_ms, collective_ms in rows:
            print(f"TP=2 batch {batch:2d}: {step_ms:6.1f} ms/step, collectives {collective_ms:5.1f} ms "
                  f"({collective_ms / step_ms:.0%})", flush=True)
    dist.destroy_process_group()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    for _ in range(2):  # alternating rounds
        for batch, step_ms, _ in measure(SINGLE, steps):
            print(f"TP=1 batch {batch:2d}: {step_ms:6.1f} ms/step", flush=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        mp.spawn(rank_main, args=(port, steps), nprocs=2, join=True)


if __name__ == "__main__":
    main()
