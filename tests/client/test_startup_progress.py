"""client/startup_progress.py relays the services' own lines as `serve`'s phase lines (fake log lines, no model),
and launcher.ServiceProcess hands every output line to its listener without letting one that fails stop it."""

from __future__ import annotations

import sys

import pytest

from client.launcher import ServiceProcess
from client.startup_progress import StartupProgress

PROFILE = "/cache/profiles/profile-0123456789abcdef.json"
EXECUTOR_BOUND = "stepahead executor bound to 127.0.0.1:40001, loading /models/tiny"
EXECUTOR_LISTENING = "stepahead executor listening on 127.0.0.1:40001 (model tiny, 2621 KV blocks, 2 threads)"
PROFILING = (f"2026-01-01 00:00:00,000 scheduler INFO profiling the executor (batch sizes [1, 2, 4], K 0..5) "
             f"for {PROFILE}")
PROFILED = f"2026-01-01 00:00:00,000 scheduler INFO step profile measured in 70.9 s, cached in {PROFILE}"
CACHED = f"2026-01-01 00:00:00,000 scheduler INFO step profile from {PROFILE}"
SCHEDULER_LISTENING = "stepahead scheduler listening on 127.0.0.1:50051 (model tiny, plaintext)"


class FakeClock:
    """monotonic() stand-in the test moves on."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lines() -> list[str]:
    return []


@pytest.fixture
def progress(lines: list[str], clock: FakeClock) -> StartupProgress:
    return StartupProgress(lines.append, clock)


def test_a_start_that_measures_the_step_profile(progress, lines, clock):
    executor = progress.executor_starting("executor", "/models/tiny")
    executor(EXECUTOR_BOUND)
    clock.now += 0.5
    scheduler = progress.scheduler_starting()
    clock.now += 11.8
    executor(EXECUTOR_LISTENING)
    clock.now += 1.0
    scheduler(PROFILING)
    clock.now += 74.14
    scheduler(PROFILED)
    clock.now += 0.2
    scheduler(SCHEDULER_LISTENING)
    assert lines == [
        "starting the executor (loading /models/tiny) ...",
        "starting the scheduler ...",
        "executor ready on 127.0.0.1:40001 (12.3 s)",
        "scheduler: measuring the step profile for dynamic speculative decoding (once per model, drafter and "
        f"thread count; a minute or two; cached in {PROFILE}) ...",
        "scheduler: step profile ready (74.1 s)",
        "scheduler ready (87.1 s)",
    ]


def test_a_cached_step_profile_is_no_phase(progress, lines, clock):
    scheduler = progress.scheduler_starting()
    clock.now += 2.0
    for line in (CACHED, PROFILED, SCHEDULER_LISTENING):  # a "measured" line without "profiling" first: ignored
        scheduler(line)
    assert lines == ["starting the scheduler ...", "scheduler ready (2.0 s)"]


def test_executor_groups_are_reported_each_by_name(progress, lines, clock):
    listeners = [progress.executor_starting(f"executor {index}", "/models/tiny") for index in range(2)]
    clock.now += 3.0
    listeners[1](EXECUTOR_LISTENING.replace("40001", "40002"))
    listeners[0](EXECUTOR_LISTENING)
    assert lines == [
        "starting executor 0 (loading /models/tiny) ...",
        "starting executor 1 (loading /models/tiny) ...",
        "executor 1 ready on 127.0.0.1:40002 (3.0 s)",
        "executor 0 ready on 127.0.0.1:40001 (3.0 s)",
    ]


def test_nothing_is_reported_after_close(progress, lines):
    scheduler = progress.scheduler_starting()
    progress.close()
    scheduler(PROFILING)
    scheduler(SCHEDULER_LISTENING)
    assert lines == ["starting the scheduler ..."]
    assert progress.scheduler_starting()  # a listener still, just a silent one
    assert lines == ["starting the scheduler ..."]


def test_a_report_function_that_fails_is_dropped(clock):
    calls = []

    def broken(line: str) -> None:
        calls.append(line)
        raise OSError("stderr is gone")

    progress = StartupProgress(broken, clock)
    scheduler = progress.scheduler_starting()  # does not raise: the start goes on
    scheduler(PROFILING)
    scheduler(SCHEDULER_LISTENING)
    assert calls == ["starting the scheduler ..."]


def _printer(*lines: str) -> list[str]:
    """argv of a child that prints ``lines`` and exits."""
    return [sys.executable, "-c", f"for line in {list(lines)!r}: print(line, flush=True)"]


def test_the_listener_sees_each_line_before_a_waiter_does():
    seen: list[str] = []
    service = ServiceProcess("printer", _printer("one", "two", "ready on 127.0.0.1:1"))
    service.line_listener = seen.append
    try:
        assert service.start(r"ready on (\S+)", timeout_s=30) == "127.0.0.1:1"
        assert seen == ["one", "two", "ready on 127.0.0.1:1"]
    finally:
        service.stop()


def test_a_listener_that_raises_is_dropped_and_the_output_still_read():
    calls: list[str] = []

    def broken(line: str) -> None:
        calls.append(line)
        raise ValueError("bad listener")

    service = ServiceProcess("printer", _printer("one", "two", "ready on 127.0.0.1:1"))
    service.line_listener = broken
    try:
        assert service.start(r"ready on (\S+)", timeout_s=30) == "127.0.0.1:1"
        assert calls == ["one"]
        assert service.log().splitlines() == ["one", "two", "ready on 127.0.0.1:1"]
    finally:
        service.stop()
