"""Starts stepahead services as child processes and stops them, process group and all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stepahead_common.parent_watch import LAUNCHER_PID_VARIABLE


class ServiceStartError(RuntimeError):
    """A service process exited or did not become ready in time; carries its log.

    ``exit_code``: the status the process exited with on its own (2: it refused its settings), or None when it
    was stopped for not becoming ready in time.
    """

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ServiceProcess:
    """One `stepahead <service>` child process in its own process group, with its output kept.

    ``line_listener``, when set before launch(), sees every line of the output as it comes (on the thread that
    reads it; one that raises is dropped, the output is still read).
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None, log_lines: int = 400) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.line_listener: Callable[[str], None] | None = None
        self.process: subprocess.Popen | None = None
        self._lines: deque[str] = deque(maxlen=log_lines)
        self._match: re.Match | None = None
        self._matched = threading.Event()
        self._pattern: re.Pattern | None = None

    @staticmethod
    def cli_argv(*args: str) -> list[str]:
        """argv that runs the stepahead CLI with this interpreter (no reliance on PATH)."""
        return [sys.executable, "-m", "client.cli", *args]

    def start(self, address_pattern: str, timeout_s: float = 300.0,
              still_needed: Callable[[], None] | None = None) -> str:
        """Start the process (unless launch() did) and return the address captured by the first group of
        ``address_pattern`` in its output. ``still_needed``: called while waiting; raises (after this process is
        stopped) when what this one waits for cannot come any more (an executor it needs exited)."""
        self._pattern = re.compile(address_pattern)
        if self.process is None:
            self.launch()
        assert self.process is not None
        printed = self.find(address_pattern)  # a line printed before the pattern was set (after launch())
        if printed is not None:
            return printed
        deadline = time.monotonic() + timeout_s
        while not self._matched.wait(0.1):
            if still_needed is not None:
                try:
                    still_needed()
                except BaseException:
                    self.stop()
                    raise
            exit_code = self.process.poll()
            if exit_code is not None or time.monotonic() > deadline:
                self.stop()
                raise ServiceStartError(f"{self.name} did not start (exit {self.process.returncode}):\n{self.log()}",
                                        exit_code)
        assert self._match is not None  # set before _matched
        return self._match.group(1)

    def launch(self) -> None:
        """Start the process without waiting for it (start() then waits for its address)."""
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[LAUNCHER_PID_VARIABLE] = str(os.getpid())  # the child stops if this process dies without stopping it
        self.process = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._pump, name=f"{self.name}-log", daemon=True).start()

    def _pump(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            text = line.rstrip("\n")
            self._tell_listener(text)  # first: whoever waits for this line then sees what the listener reported
            self._lines.append(text)
            pattern = self._pattern
            if not self._matched.is_set() and pattern is not None:
                match = pattern.search(line)
                if match:
                    self._match = match
                    self._matched.set()

    def _tell_listener(self, line: str) -> None:
        listener = self.line_listener
        if listener is None:
            return
        try:
            listener(line)
        except Exception:  # a broken listener must not stop the output being read (the child would block on it)
            self.line_listener = None

    def log(self) -> str:
        """The last lines the process printed."""
        return "\n".join(self._lines)

    def find(self, pattern: str) -> str | None:
        """The first group of ``pattern`` in the first kept log line that matches it, or None."""
        compiled = re.compile(pattern)
        for line in list(self._lines):
            match = compiled.search(line)
            if match:
                return match.group(1)
        return None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it if it lingers. Safe to call twice."""
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


def wait_until_serving(
    address: str, timeout_s: float = 300.0, service: str = "", credentials: grpc.ChannelCredentials | None = None,
    still_needed: Callable[[], None] | None = None,
) -> None:
    """Poll grpc.health.v1 until ``service`` reports SERVING (never a fixed sleep); TLS with ``credentials``;
    ``still_needed`` as in ServiceProcess.start."""
    deadline = time.monotonic() + timeout_s
    channel = grpc.insecure_channel(address) if credentials is None else grpc.secure_channel(address, credentials)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if still_needed is not None:
                still_needed()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address} not SERVING after {timeout_s} s")
            time.sleep(0.1)
