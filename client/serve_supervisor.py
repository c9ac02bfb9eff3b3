"""What `stepahead serve` does while serving: restarts a crashed executor or scheduler, each a bounded number of
times with backoff, and exits 1 once a service's restarts are used up."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from client.stack import LocalStack


@dataclass(frozen=True)
class RestartLimits:
    """How often `serve` restarts a crashed service: each executor, the scheduler."""

    executor: int
    scheduler: int

    def __post_init__(self) -> None:
        for name in ("executor", "scheduler"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name}-max-restarts: must be >= 0, got {getattr(self, name)}")


def _restart_delay_s(restarts_so_far: int) -> float:
    """Backoff before a service's next restart: 1, 2, 4, ... s, at most 30 s."""
    return min(2.0 ** restarts_so_far, 30.0)


def supervise(stack: LocalStack, stop: threading.Event, limits: RestartLimits, recovery_timeout_s: float) -> None:
    """Until ``stop``: restart a crashed executor or scheduler (bounded, with backoff); exit 1 once a service's
    restarts are used up (for an executor, after the scheduler's recovery timeout: its requests end with
    UNAVAILABLE and it answers health meanwhile)."""
    executor_restarts = [0] * len(stack.executors)
    scheduler_restarts = 0
    while not stop.wait(0.5):
        if stack.scheduler is None or not stack.scheduler.is_running():
            if not _restart_scheduler(stack, stop, scheduler_restarts, limits.scheduler):
                return
            scheduler_restarts += 1
        for index, executor in enumerate(stack.executors):
            if executor.is_running():
                continue
            if not _restart_executor(stack, stop, index, executor_restarts[index], limits.executor,
                                     recovery_timeout_s):
                return
            executor_restarts[index] += 1


def _restart_executor(stack: LocalStack, stop: threading.Event, index: int, restarts_so_far: int, max_restarts: int,
                      recovery_timeout_s: float) -> bool:
    """Restart exited executor ``index`` at its address after the backoff; False if ``stop`` came meanwhile. When
    the restarts are used up, exits 1 with the services' logs once the scheduler has ended its requests."""
    executor = stack.executors[index]
    code = executor.process.returncode if executor.process else None
    if restarts_so_far >= max_restarts:
        print(f"{executor.name} exited (code {code}) and --executor-max-restarts {max_restarts} are used up; exiting "
              f"once its requests have ended (--executor-recovery-timeout-s {recovery_timeout_s:g}):\n"
              f"{stack.logs()}", file=sys.stderr, flush=True)
        stop.wait(recovery_timeout_s + 5.0)
        raise SystemExit(1)
    delay = _restart_delay_s(restarts_so_far)
    print(f"{executor.name} exited (code {code}); restart {restarts_so_far + 1} of {max_restarts} in {delay:g} s",
          file=sys.stderr, flush=True)
    if stop.wait(delay):
        return False
    stack.restart_executor(index=index)
    print(f"{executor.name} restarted on {stack.executor_addresses[index]}", file=sys.stderr, flush=True)
    return True


def _restart_scheduler(stack: LocalStack, stop: threading.Event, restarts_so_far: int, max_restarts: int) -> bool:
    """Restart the exited scheduler on its ports after the backoff; False if ``stop`` came meanwhile. Exits 1 with
    the services' logs when the restarts are used up."""
    code = stack.scheduler.process.returncode if stack.scheduler and stack.scheduler.process else None
    if restarts_so_far >= max_restarts:
        print(f"the scheduler exited (code {code}) and --scheduler-max-restarts {max_restarts} are used up:\n"
              f"{stack.logs()}", file=sys.stderr, flush=True)
        raise SystemExit(1)
    delay = _restart_delay_s(restarts_so_far)
    print(f"the scheduler exited (code {code}); restart {restarts_so_far + 1} of {max_restarts} in {delay:g} s; its "
          f"requests end UNAVAILABLE", file=sys.stderr, flush=True)
    if stop.wait(delay):
        return False
    address = stack.restart_exited_scheduler()
    print(f"the scheduler restarted on {address}", file=sys.stderr, flush=True)
    return True
