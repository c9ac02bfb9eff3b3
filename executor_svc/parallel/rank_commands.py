"""How the ranks of a tensor-parallel executor stay in step: only rank 0 talks to the scheduler; every job
of its compute loop that drives the model runner is broadcast to the other ranks first, and they run the
same job on their own runner, so every rank executes the same collectives in the same order and samples
the same tokens. Only rank 0 writes StepResults.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch.distributed as dist

from executor_svc.compute_loop import ComputeLoop
from executor_svc.model_runner import ModelRunner
from executor_svc.parallel.tensor_parallel import TensorParallel
from executor_svc.profile_service import run_profile
from stepahead_proto import executor_pb2

logger = logging.getLogger(__name__)

MIRRORED_METHODS = frozenset({"execute", "execute_sub_step", "reset", "load_lora_adapter", "unload_lora_adapter"})
"""ModelRunner methods rank 0 sends to the others (deferred read-back's launch/complete is off under TP)."""
STOP = ("stop",)

Command = tuple[Any, ...]


class RankChannel:
    """Rank 0 -> every other rank, in order, over torch.distributed (the tensor-parallel group)."""

    def __init__(self, tp: TensorParallel) -> None:
        self.tp = tp

    def send(self, command: Command) -> None:
        dist.broadcast_object_list([command], src=0, group=self.tp.group)

    def receive(self) -> Command:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=self.tp.group)
        return tuple(box[0])


def mirrored_command(fn: Callable[..., Any], args: tuple[Any, ...]) -> Command | None:
    """The command that makes another rank run ``fn(*args)`` on its own runner; None for work that touches no
    runner state. ValueError for runner work that cannot be mirrored."""
    if fn is run_profile:  # (runner, description, request): the other ranks pass their own runner
        return ("profile", args[2])
    owner, name = getattr(fn, "__self__", None), getattr(fn, "__name__", "")
    if isinstance(owner, ModelRunner):
        if name not in MIRRORED_METHODS:
            raise ValueError(f"ModelRunner.{name} cannot run under tensor parallelism")
        return ("runner", name, args)
    return None


class MirroringComputeLoop(ComputeLoop):
    """Rank 0's compute loop: a job that drives the runner is broadcast to the other ranks as it starts."""

    def __init__(self, channel: RankChannel, on_job_failure: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self.channel = channel
        self.on_job_failure = on_job_failure
        """Called when a mirrored job raises (before the error goes on): RankGroup.exit_if_broken."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        return super().submit(*self._mirrored(fn, args))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return super().call(*self._mirrored(fn, args))  # inline on the loop's thread too, still sent first

    def _mirrored(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, ...]:
        """(fn, *args) to run here: unchanged for work no other rank needs, else sent to the ranks first."""
        command = mirrored_command(fn, args)
        return (fn, *args) if command is None else (self._send_then_run, command, fn, args)

    def _send_then_run(self, command: Command, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        try:
            self.channel.send(command)
            return fn(*args)
        except Exception:
            self.on_job_failure()
            raise

    def run_forever(self) -> None:
        try:
            super().run_forever()
        finally:
            try:
                self.channel.send(STOP)
            except Exception:  # the other ranks are gone already
                pass


def follow(runner: ModelRunner, description: executor_pb2.ExecutorDescription, channel: RankChannel) -> None:
    """Ranks 1..N-1: run rank 0's commands on this rank's runner until it says stop. A step rank 0 refuses
    is refused here the same way (the checks are deterministic) and the loop goes on; losing rank 0 raises."""
    while True:
        command = channel.receive()
        if command == STOP:
            return
        try:
            if command[0] == "runner":
                _, name, args = command
                getattr(runner, name)(*args)
            elif command[0] == "profile":
                run_profile(runner, description, command[1])
            else:
                raise RuntimeError(f"unknown rank command {command[0]!r}")
        except ValueError as error:  # StepError included
            logger.info("rank %d: %s (refused on rank 0 too)", channel.tp.rank, error)
