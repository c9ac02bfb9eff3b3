"""Starting the ranks of a tensor-parallel executor and joining them with torch.distributed.

Rendezvous is torchrun's env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), so ranks may live on several
hosts when started by torchrun or by hand. Without RANK in the environment, the process is rank 0 and
starts the other ranks itself on this host (same command line, RANK set), on a free loopback port. A
rank that dies takes the group down: rank 0 watches the ranks it started and exits when one does (the
scheduler sees the Execute stream break), at once when a job fails on the broken group, else at the watcher's next
look; a rank whose rank 0 died exits too.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import torch.distributed as dist

from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel

logger = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.2
"""How often the ranks watch each other (a dead rank is noticed well within 2 s)."""


class RankGroup:
    """This process's tensor-parallel rank, the rank processes it started, and the watcher that ends the
    process when the group breaks."""

    def __init__(self, tp: TensorParallel, children: list[subprocess.Popen]) -> None:
        self.tp = tp
        self.children = children
        self._stopping = threading.Event()
        self._broken: tuple[Callable[[], bool], str] | None = None
        """What the watcher checks, and how it names the failure."""

    def watch(self) -> None:
        """Exit this process when a rank it started exits, or when its rank 0 is gone (a local rank)."""
        if self.children:
            self._watch(lambda: any(child.poll() is not None for child in self.children), "a rank exited")
        elif os.environ.get("STEPAHEAD_RANK_PARENT"):
            parent = int(os.environ["STEPAHEAD_RANK_PARENT"])
            self._watch(lambda: os.getppid() != parent, "rank 0 exited")

    def stop_watching(self) -> None:
        """A clean shutdown has begun: ranks exiting from now on are not a failure."""
        self._stopping.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """A clean shutdown: stop watching, wait for the started ranks (rank 0 told them to stop), kill the rest."""
        self._stopping.set()
        deadline = time.monotonic() + timeout_s
        for child in self.children:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()

    def exit_if_broken(self) -> None:
        """A job failed on this rank: when the group is broken, exit now rather than at the watcher's next look,
        so no new Execute stream is accepted by a group that can no longer compute (the scheduler would see it
        come back, resume its requests there and lose them again)."""
        if self._broken is not None and not self._stopping.is_set() and self._broken[0]():
            self._exit(self._broken[1])

    def _watch(self, failed: Callable[[], bool], what: str) -> None:
        self._broken = (failed, what)

        def loop() -> None:
            while not failed():
                if self._stopping.wait(WATCH_INTERVAL_S):
                    return
            if not self._stopping.is_set():
                self._exit(what)

        threading.Thread(target=loop, name="rank-watch", daemon=True).start()

    @staticmethod
    def _exit(what: str) -> None:
        logger.error("tensor-parallel group lost: %s; exiting", what)
        os._exit(1)  # the group's collectives can never complete now


def join_tensor_parallel_group(size: int, device: str) -> RankGroup:
    """Join (or, as rank 0 without RANK set, start and join) a group of ``size`` ranks; size 1: no group."""
    if size == 1:
        return RankGroup(SINGLE, [])
    environ = os.environ
    children: list[subprocess.Popen] = []
    if "RANK" not in environ:
        environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(size), RANK="0")
        environ.setdefault("GLOO_SOCKET_IFNAME", _loopback_interface())
        children = [_start_rank(rank) for rank in range(1, size)]
    rank, world_size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
    if world_size != size:
        raise ValueError(f"tensor_parallel_size: {size}, but WORLD_SIZE is {world_size}")
    backend = "nccl" if device.startswith("cuda") else "gloo"
    group = RankGroup(TensorParallel(rank, size), children)
    group.watch()  # from the rendezvous on: a rank that dies while the others wait for it ends them too
    # Idle ranks wait for rank 0's next step without a deadline; a lost rank is noticed by the watchers.
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size, timeout=timedelta(days=1))
    return group


def _start_rank(rank: int) -> subprocess.Popen:
    environ = {**os.environ, "RANK": str(rank), "STEPAHEAD_RANK_PARENT": str(os.getpid())}
    command = [sys.executable, *sys.orig_argv[1:]]
    logger.info("starting tensor-parallel rank %d", rank)
    return subprocess.Popen(command, env=environ, stdin=subprocess.DEVNULL)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _loopback_interface() -> str:
    names = [name for _, name in socket.if_nameindex()]
    return "lo" if "lo" in names else (names[0] if names else "lo")
