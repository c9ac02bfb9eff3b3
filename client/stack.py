"""A scheduler and an executor started as two local processes: what `stepahead serve` runs."""

from __future__ import annotations

from collections.abc import Sequence

from client.launcher import ServiceProcess, wait_until_serving
from stepahead_common.tls import channel_credentials

EXECUTOR_BOUND = r"executor bound to (\S+),"
SCHEDULER_LISTENING = r"scheduler listening on (\S+) "
SCHEDULER_HTTP = r"scheduler HTTP on (\S+)"


class LocalStack:
    """Starts executor then scheduler on 127.0.0.1; stops both (process groups) on exit.

    With --tls-cert among the scheduler's flags its health is checked over TLS trusting ``tls_ca``;
    without a CA to trust, the line the scheduler prints once it is serving is the readiness signal.
    ``http_url`` is the HTTP front's base URL when --http-port is among the flags.
    """

    def __init__(
        self,
        model_dir: str,
        executor_flags: Sequence[str] = (),
        scheduler_flags: Sequence[str] = (),
        port: int = 0,
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        tls_ca: str | None = None,
    ) -> None:
        self.executor = ServiceProcess(
            "executor",
            ServiceProcess.cli_argv("executor", "--model", model_dir, "--host", host, "--port", "0", *executor_flags),
            env,
        )
        self._scheduler_args = (
            "scheduler", "--model", model_dir, "--host", host, "--port", str(port), *scheduler_flags
        )
        self._env = env
        self._tls = "--tls-cert" in scheduler_flags
        self._tls_ca = tls_ca
        self.scheduler: ServiceProcess | None = None
        self.address = ""
        self.executor_address = ""
        self.http_url: str | None = None

    def start(self, timeout_s: float = 600.0) -> str:
        """Start both services and wait until the scheduler is SERVING; returns its address."""
        try:
            self.executor_address = self.executor.start(EXECUTOR_BOUND, timeout_s)
            self.scheduler = ServiceProcess(
                "scheduler",
                ServiceProcess.cli_argv(*self._scheduler_args, "--executor", self.executor_address),
                self._env,
            )
            self.address = self.scheduler.start(SCHEDULER_LISTENING, timeout_s)
            self.http_url = self.scheduler.find(SCHEDULER_HTTP)
            if not self._tls:
                wait_until_serving(self.address, timeout_s)
            elif self._tls_ca is not None:
                wait_until_serving(self.address, timeout_s, credentials=channel_credentials(self._tls_ca))
        except BaseException:
            self.stop()
            raise
        return self.address

    def restart_executor(self, timeout_s: float = 600.0) -> None:
        """Start a new executor at the address of the current one (which exited or is stopped now); the
        scheduler resumes its requests there."""
        port = self.executor_address.rpartition(":")[2]
        argv = list(self.executor.argv)
        argv[argv.index("--port") + 1] = port
        self.executor.stop()
        self.executor = ServiceProcess("executor", argv, self.executor.env)
        self.executor.start(EXECUTOR_BOUND, timeout_s)

    def stop(self, scheduler_timeout_s: float = 10.0) -> None:
        """Stop the scheduler (SIGTERM; it drains for up to ``scheduler_timeout_s``), then the executor."""
        if self.scheduler is not None:
            self.scheduler.stop(timeout_s=scheduler_timeout_s)
        self.executor.stop()

    def logs(self) -> str:
        """Both services' recent output, for failure messages."""
        scheduler_log = self.scheduler.log() if self.scheduler else ""
        return f"--- executor ---\n{self.executor.log()}\n--- scheduler ---\n{scheduler_log}"

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
