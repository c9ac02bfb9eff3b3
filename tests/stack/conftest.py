"""Stack fixtures: real scheduler + executor processes on 127.0.0.1, always stopped, logs on failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.stack import LocalStack


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


class StackLauncher:
    """Starts stacks for one test or module and stops every one of them at teardown."""

    def __init__(self) -> None:
        self.stacks: list[LocalStack] = []

    def __call__(self, model_dir: Path, executor_flags=(), scheduler_flags=()) -> LocalStack:
        stack = LocalStack(
            str(model_dir),
            executor_flags=["--num-threads", "2", *executor_flags],
            scheduler_flags=list(scheduler_flags),
        )
        self.stacks.append(stack)
        stack.start(timeout_s=600)
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
