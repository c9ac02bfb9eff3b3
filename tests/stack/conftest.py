"""Stack fixtures: real scheduler + executor processes on 127.0.0.1, always stopped, logs on failure."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from cpu_share import executor_threads

from client.stack import LocalStack


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


TINY_KV_CACHE_GB = "0.02"
"""KV cache of a tiny test checkpoint when a test sets none: thousands of blocks, where the default 1 GB (131,072
blocks) costs 0.6 s of zeroing on every executor start."""


def small_kv_cache(model_dir: Path, executor_flags) -> list[str]:
    """--kv-cache-memory-gb for a tiny checkpoint (hidden size under 512) unless the flags size the cache."""
    if {"--num-kv-blocks", "--kv-cache-memory-gb"} & set(executor_flags):
        return []
    return ["--kv-cache-memory-gb", TINY_KV_CACHE_GB] if is_tiny(model_dir) else []


def is_tiny(model_dir: Path) -> bool:
    """Whether the checkpoint is one of the tests' tiny ones (hidden size under 512)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return config.get("hidden_size", 0) < 512


class SharedExecutors:
    """Executors kept for the whole session (per pytest-xdist worker), keyed by model and executor flags, each
    with the scheduler of its latest borrower: an executor start costs seconds of CPU (torch and transformers
    imports: a third of the suite's CPU went to 133 of them), a scheduler's under one. Kept stacks weigh what their
    memory does, a tiny checkpoint's 1 (about 0.4 GB), another's LARGE_WEIGHT (the default model's, about 2.7 GB), and
    weigh at most ``capacity`` together; the least recently borrowed are stopped first."""

    LARGE_WEIGHT = 4

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._stacks: OrderedDict[tuple[str, tuple[str, ...]], LocalStack] = OrderedDict()
        self._weights: dict[tuple[str, tuple[str, ...]], int] = {}

    def borrow(self, start: Callable[[], LocalStack], model_dir: Path, executor_flags: Sequence[str],
               scheduler_flags: Sequence[str]) -> LocalStack:
        """The kept stack of this model and these executor flags with a new scheduler of ``scheduler_flags`` (the
        executor forgets the previous scheduler's requests), else ``start()``'s. Valid until the next borrow of the
        same key."""
        key = (str(model_dir), tuple(executor_flags))
        stack = self._stacks.pop(key, None)
        if stack is not None and any(executor.process.poll() is not None for executor in stack.executors):
            stack.stop()
            stack = None
        if stack is None:
            weight = 1 if is_tiny(model_dir) else self.LARGE_WEIGHT
            while self._stacks and sum(self._weights[kept] for kept in self._stacks) + weight > self.capacity:
                self._stacks.popitem(last=False)[1].stop()
            self._weights[key] = weight
            stack = start()
        else:
            stack.restart_scheduler(scheduler_flags)
        self._stacks[key] = stack
        return stack

    def stop_all(self) -> None:
        while self._stacks:
            self._stacks.popitem()[1].stop()


class StackLauncher:
    """Starts stacks for one test or module and stops every one of them at teardown; ``with_scheduler`` borrows
    from the session's SharedExecutors instead."""

    def __init__(self, shared: SharedExecutors) -> None:
        self.stacks: list[LocalStack] = []
        self.borrowed: list[LocalStack] = []
        self._shared = shared

    def __call__(self, model_dir: Path, executor_flags=(), scheduler_flags=(), executor_groups: int = 1) -> LocalStack:
        stack = self._start(model_dir, executor_flags, scheduler_flags, executor_groups)
        self.stacks.append(stack)
        return stack

    def with_scheduler(self, model_dir: Path, executor_flags: Sequence[str] = (),
                       scheduler_flags: Sequence[str] = ()) -> LocalStack:
        """A stack on a running executor of the same model and flags (kept for the session), with a new scheduler
        of ``scheduler_flags``; a new stack if none runs. Only for tests that leave the executor as they found it:
        no kills, no runtime adapter loads, no executor counters read."""
        stack = self._shared.borrow(lambda: self._start(model_dir, executor_flags, scheduler_flags), model_dir,
                                    executor_flags, scheduler_flags)
        self.borrowed.append(stack)
        return stack

    def _start(self, model_dir: Path, executor_flags, scheduler_flags, executor_groups: int = 1) -> LocalStack:
        stack = LocalStack(
            str(model_dir),
            executor_flags=["--num-threads", executor_threads(), *small_kv_cache(model_dir, executor_flags),
                            *executor_flags],
            scheduler_flags=list(scheduler_flags),
            executor_groups=executor_groups,
        )
        stack.start(timeout_s=600)
        return stack

    def stop_all(self, failed: bool) -> None:
        for stack in self.stacks:
            if failed:
                print(stack.logs())
            stack.stop()
        if failed:
            for stack in self.borrowed:
                print(stack.logs())


@pytest.fixture(scope="session")
def shared_executors():
    """The session's SharedExecutors, stopped at its end."""
    shared = SharedExecutors()
    yield shared
    shared.stop_all()


@pytest.fixture
def launch_stack(request, shared_executors):
    """Call with (model_dir, executor_flags, scheduler_flags); returns a started LocalStack."""
    launcher = StackLauncher(shared_executors)
    yield launcher
    report = getattr(request.node, "report_call", None)
    launcher.stop_all(failed=report is None or report.failed)


@pytest.fixture(scope="module")
def launch_module_stack(request, shared_executors):
    """Like launch_stack, shared by a module's tests."""
    launcher = StackLauncher(shared_executors)
    yield launcher
    failed = request.session.testsfailed > 0
    launcher.stop_all(failed=failed)
