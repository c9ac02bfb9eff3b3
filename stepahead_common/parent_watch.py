"""A service started by another stepahead process stops when that process is gone.

`stepahead serve` (and bench, soak, the tests) start the scheduler and executor as child processes. When the launcher
is killed outright (SIGKILL, an out-of-memory kill) it cannot stop them, and they would serve on forever, holding
their ports and gigabytes of memory. So the launcher names itself in the child's environment (LAUNCHER_PID_VARIABLE),
and the child watches: once its parent is no longer that process (it was re-parented to init or a subreaper), it sends
itself SIGTERM, the signal of a graceful stop. A process started by hand, or by docker, has no such variable and is
never watched.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping

LAUNCHER_PID_VARIABLE = "STEPAHEAD_LAUNCHER_PID"
"""The pid of the process that started this one (set by client.launcher.ServiceProcess)."""
POLL_INTERVAL_S = 0.5


def launcher_pid(environ: Mapping[str, str]) -> int | None:
    """The launcher named in ``environ``, None when there is none (or the value is not a pid)."""
    raw = environ.get(LAUNCHER_PID_VARIABLE, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 1 else None


def stop_when_launcher_exits(environ: MutableMapping[str, str], interval_s: float = POLL_INTERVAL_S,
                             stop: Callable[[], None] | None = None) -> threading.Thread | None:
    """Watch the launcher named in ``environ`` from a daemon thread and call ``stop`` (default: SIGTERM to this
    process) once this process's parent is another; returns the thread, None when there is no launcher to watch.
    The variable is taken out of ``environ``: it names this process's parent, not its children's (a process this one
    starts without ServiceProcess, such as a tensor-parallel rank, must not watch this process's launcher)."""
    expected = launcher_pid(environ)
    environ.pop(LAUNCHER_PID_VARIABLE, None)
    if expected is None:
        return None
    stop = stop or (lambda: os.kill(os.getpid(), signal.SIGTERM))

    def watch() -> None:
        while os.getppid() == expected:
            time.sleep(interval_s)
        stop()

    thread = threading.Thread(target=watch, name="launcher-watch", daemon=True)
    thread.start()
    return thread
