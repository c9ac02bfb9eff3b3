"""Runs the model's work on the process's main thread, in submission order.

gRPC handlers run on worker threads; measured here (torch 2.13 CPU, OpenMP backend), the same
forward runs about 2x slower from a worker thread than from the main thread that loaded the
model. So handlers only submit work and wait for its future; reading the next StepRequest off the
stream then also overlaps the current step's compute.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_STOP = object()


class ComputeLoop:
    """A single-consumer job queue drained by whichever thread calls run_forever (the main one)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self._stopped = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue fn(*args); its result or exception arrives on the returned future."""
        future: Future = Future()
        if self._stopped:
            future.set_exception(RuntimeError("the compute loop has stopped"))
        else:
            self._jobs.put((fn, args, future))
        return future

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn(*args) on the loop and wait for it (runs inline when already on the loop's thread)."""
        if threading.current_thread() is self.thread:
            return fn(*args)
        return self.submit(fn, *args).result()

    def stop(self) -> None:
        self._jobs.put(_STOP)

    def run_forever(self) -> None:
        """Execute jobs until stop() is called; jobs still queued then fail, so no caller waits forever."""
        self.thread = threading.current_thread()
        while True:
            job = self._jobs.get()
            if job is _STOP:
                self._stopped = True
                self._fail_queued()
                return
            fn, args, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # delivered to the waiting handler
                future.set_exception(error)

    def _fail_queued(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not _STOP:
                job[2].set_exception(RuntimeError("the compute loop has stopped"))
