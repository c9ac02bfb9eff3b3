"""Start-up progress of `stepahead serve`: one line per phase, with its seconds, relayed from the services' output.

Each service's own lines (the executor's "listening on", the scheduler's step-profile log lines) are watched as
they are read (launcher.ServiceProcess.line_listener), so nothing polls. Reporting never stops a start: a report
function that raises is dropped and start-up goes on silently.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable

Report = Callable[[str], None]
LineListener = Callable[[str], None]

EXECUTOR_READY = re.compile(r"executor listening on (\S+) ")
PROFILING = re.compile(r"profiling the executor \(.*?\) for (.+)$")
PROFILED = re.compile(r"step profile measured in ")
SCHEDULER_READY = re.compile(r"scheduler listening on ")


def print_to_stderr(line: str) -> None:
    """Report ``line`` on stderr at once (a closed stderr is ignored)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def seconds(elapsed_s: float) -> str:
    """A phase's duration as the progress lines show it."""
    return f"{elapsed_s:.1f} s"


class StartupProgress:
    """Reports start-up phases through ``report`` until close(); each phase is timed from its own start."""

    def __init__(self, report: Report, clock: Callable[[], float] = time.monotonic) -> None:
        self._report: Report | None = report
        self.clock = clock
        self._lock = threading.Lock()  # lines come from each service's reader thread

    def emit(self, line: str) -> None:
        """Report one line (nothing once closed, or once the report function has failed)."""
        with self._lock:
            if self._report is None:
                return
            try:
                self._report(line)
            except Exception:
                self._report = None

    def close(self) -> None:
        """Report nothing more (the services' later output is theirs alone)."""
        with self._lock:
            self._report = None

    def executor_starting(self, name: str, model_dir: str) -> LineListener:
        """Report that executor ``name`` starts; returns the listener of its output that reports it ready."""
        self.emit(f"starting {_with_article(name)} (loading {model_dir}) ...")
        return _ExecutorRelay(self, name, self.clock())

    def scheduler_starting(self) -> LineListener:
        """Report that the scheduler starts; returns the listener of its output that reports its phases."""
        self.emit("starting the scheduler ...")
        return _SchedulerRelay(self, self.clock())


def _with_article(name: str) -> str:
    """The service's name as a phase line's object: "the executor", but "executor 1" (one of several)."""
    return name if " " in name else f"the {name}"


class _ExecutorRelay:
    """Turns an executor's "listening on" line into "executor ready on ADDRESS (N s)"."""

    def __init__(self, progress: StartupProgress, name: str, started: float) -> None:
        self._progress = progress
        self._name = name
        self._started = started

    def __call__(self, line: str) -> None:
        match = EXECUTOR_READY.search(line)
        if match:
            elapsed = self._progress.clock() - self._started
            self._progress.emit(f"{self._name} ready on {match.group(1)} ({seconds(elapsed)})")


class _SchedulerRelay:
    """Relays the scheduler's step profiling (only when it really measures one) and its readiness."""

    def __init__(self, progress: StartupProgress, started: float) -> None:
        self._progress = progress
        self._started = started
        self._profiling_since: float | None = None

    def __call__(self, line: str) -> None:
        profiling = PROFILING.search(line)
        if profiling:
            self._profiling_since = self._progress.clock()
            self._progress.emit(
                "scheduler: measuring the step profile for dynamic speculative decoding (once per model, drafter "
                f"and thread count; a minute or two; cached in {profiling.group(1)}) ...")
        elif PROFILED.search(line) and self._profiling_since is not None:
            elapsed = self._progress.clock() - self._profiling_since
            self._progress.emit(f"scheduler: step profile ready ({seconds(elapsed)})")
        elif SCHEDULER_READY.search(line):
            self._progress.emit(f"scheduler ready ({seconds(self._progress.clock() - self._started)})")
