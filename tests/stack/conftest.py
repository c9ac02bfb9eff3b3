"""Stack fixtures: real scheduler + executor processes on 127.0.0.1, always stopped, logs on failure."""

from __future__ import annotations

import json
from collections.abc import Sequence
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
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return ["--kv-cache-memory-gb", TINY_KV_CACHE_GB] if config.get("hidden_size", 0) < 512 else []


class StackLauncher:
    """Starts stacks for one test or module and stops every one of them at teardown."""

    def __init__(self) -> None:
        self.stacks: list[LocalStack] = []
        self._by_executor: dict[tuple[str, tuple[str, ...]], LocalStack] = {}

    def __call__(self, model_dir: Path, executor_flags=(), scheduler_flags=(), executor_groups: int = 1) -> LocalStack:
        stack = LocalStack(
            str(model_dir),
            executor_flags=["--num-threads", executor_threads(), *small_kv_cache(model_dir, executor_flags),
                            *executor_flags],
            scheduler_flags=list(scheduler_flags),
            executor_groups=executor_groups,
        )
        self.stacks.append(stack)
        stack.start(timeout_s=600)
        return stack

    def with_scheduler(self, model_dir: Path, executor_flags: Sequence[str] = (),
                       scheduler_flags: Sequence[str] = ()) -> LocalStack:
        """A stack on this launcher's running executor of the same model and flags, with a new scheduler of
        ``scheduler_flags`` (an executor start costs several times a scheduler's); a new stack if none runs."""
        key = (str(model_dir), tuple(executor_flags))
        stack = self._by_executor.get(key)
        if stack is None or any(executor.process.poll() is not None for executor in stack.executors):
            stack = self._by_executor[key] = self(model_dir, executor_flags, scheduler_flags)
        else:
            stack.restart_scheduler(scheduler_flags)
        return stack

    def stop_all(self, failed: bool) -> None:
        for stack in self.stacks:
            if failed:
                print(stack.logs())
            stack.stop()


@pytest.fixture
def launch_stack(request):
    """Call with (model_dir, executor_flags, scheduler_flags); returns a started LocalStack."""
    launcher = StackLauncher()
    yield launcher
    report = getattr(request.node, "report_call", None)
    launcher.stop_all(failed=report is None or report.failed)


@pytest.fixture(scope="module")
def launch_module_stack(request):
    """Like launch_stack, shared by a module's tests."""
    launcher = StackLauncher()
    yield launcher
    failed = request.session.testsfailed > 0
    launcher.stop_all(failed=failed)
