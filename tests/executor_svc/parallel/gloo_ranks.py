"""Run a function on two (or more) gloo ranks on the CPU, one process and one thread each, and collect what
each rank returns."""

from __future__ import annotations

import os
import pickle
import socket
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from executor_svc.parallel.tensor_parallel import TensorParallel


def results_on_ranks(body: Callable[..., Any], args: tuple, out_dir: Path, world_size: int = 2) -> list[Any]:
    """``body(tp, *args)`` on every rank of a fresh gloo group (``body``: a module-level function, as spawned
    processes import it); its return values, rank 0's first, passed back through pickles in ``out_dir``."""
    mp.spawn(_rank_main, args=(_free_port(), world_size, body, args, str(out_dir)), nprocs=world_size, join=True)
    return [pickle.loads((out_dir / f"rank{rank}.pkl").read_bytes()) for rank in range(world_size)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank_main(rank: int, port: int, world_size: int, body: Callable[..., Any], args: tuple, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=120))
    try:
        result = body(TensorParallel(rank, world_size), *args)
        (Path(out_dir) / f"rank{rank}.pkl").write_bytes(pickle.dumps(result))
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # Every rank is done: leave without gloo's teardown, which now and then aborts a rank whose peer already
    # left ("terminate called without an active exception") and fails the spawn after the results are written.
    os._exit(0)
