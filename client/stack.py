"""A scheduler and an executor started as two local processes: what `stepahead serve` runs."""

from __future__ import annotations

from collections.abc import Sequence

from client.launcher import ServiceProcess, ServiceStartError, wait_until_serving
from client.startup_progress import Report, StartupProgress
from stepahead_common.tls import channel_credentials

EXECUTOR_BOUND = r"executor bound to (\S+),"
SCHEDULER_LISTENING = r"scheduler listening on (\S+) "
SCHEDULER_HTTP = r"scheduler HTTP on (\S+)"
SCHEDULER_METRICS = r"scheduler metrics on (\S+)"


class LocalStack:
    """Starts the executor(s) then the scheduler on 127.0.0.1; stops them all (process groups) on exit.

    ``executor_groups`` executors are started (each a TP group when --tensor-parallel-size is among the
    executor flags) and the scheduler drives them all; ``executor_cpus`` pins executor i to the CPUs
    ``executor_cpus[i]`` (a taskset list such as "0" or "2-3"). With --tls-cert among the scheduler's flags its
    health is checked over TLS trusting ``tls_ca``; without a CA to trust, the line the scheduler prints once
    it is serving is the readiness signal. ``http_url`` is the HTTP front's base URL when --http-port is among
    the flags, ``metrics_address`` the scheduler's /metrics host:port when --metrics-port is. With ``progress``,
    start() reports its phases through it (client/startup_progress.py); without, it is silent.
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
        executor_groups: int = 1,
        executor_cpus: Sequence[str] | None = None,
        progress: Report | None = None,
    ) -> None:
        if executor_groups < 1:
            raise ValueError(f"executor_groups: must be >= 1, got {executor_groups}")
        if executor_cpus is not None and len(executor_cpus) != executor_groups:
            raise ValueError(f"executor_cpus: one CPU list per executor group ({executor_groups}), "
                             f"got {list(executor_cpus)}")
        argv = ServiceProcess.cli_argv("executor", "--model", model_dir, "--host", host, "--port", "0", *executor_flags)
        self.executors = [
            ServiceProcess(
                "executor" if executor_groups == 1 else f"executor {index}",
                (["taskset", "-c", executor_cpus[index]] if executor_cpus else []) + argv,
                env,
            )
            for index in range(executor_groups)
        ]
        self._scheduler_base = ("scheduler", "--model", model_dir, "--host", host, "--port", str(port))
        self._scheduler_flags = list(scheduler_flags)
        self._env = env
        self._tls_ca = tls_ca
        self.scheduler: ServiceProcess | None = None
        self.address = ""
        self.executor_addresses: list[str] = []
        self.http_url: str | None = None
        self.metrics_address: str | None = None
        self._model_dir = model_dir
        self._progress = StartupProgress(progress) if progress is not None else None

    @property
    def executor(self) -> ServiceProcess:
        """The first executor (the only one without executor groups)."""
        return self.executors[0]

    @property
    def executor_address(self) -> str:
        return self.executor_addresses[0] if self.executor_addresses else ""

    def start(self, timeout_s: float = 600.0) -> str:
        """Start the services and wait until the scheduler is SERVING; returns its address."""
        try:
            for executor in self.executors:
                if self._progress is not None:
                    executor.line_listener = self._progress.executor_starting(executor.name, self._model_dir)
                executor.launch()  # every executor loads its model at the same time
            self.executor_addresses = [executor.start(EXECUTOR_BOUND, timeout_s) for executor in self.executors]
            self._start_scheduler(timeout_s)
        except BaseException:
            self.stop()
            raise
        finally:
            if self._progress is not None:
                self._progress.close()  # later restarts are reported by their caller, if at all
        return self.address

    def restart_scheduler(self, scheduler_flags: Sequence[str], timeout_s: float = 600.0) -> str:
        """Stop the scheduler, then start one with ``scheduler_flags`` on the same executors (an executor serves
        one scheduler at a time and forgets the previous one's requests); returns its address."""
        self._scheduler_flags = list(scheduler_flags)
        return self._replace_scheduler(timeout_s, {})

    def restart_exited_scheduler(self, timeout_s: float = 600.0) -> str:
        """Start a scheduler with the exited one's flags on the ports it had bound (gRPC, and HTTP and metrics
        where it served them): clients reach it where they reached the old one. The executors keep their models
        and forget the old scheduler's requests. Returns its address."""
        bound = {"--port": self.address, "--http-port": self.http_url, "--metrics-port": self.metrics_address}
        return self._replace_scheduler(timeout_s, {flag: at.rpartition(":")[2] for flag, at in bound.items() if at})

    def _replace_scheduler(self, timeout_s: float, ports: dict[str, str]) -> str:
        """Stop the scheduler and start one on ``ports`` (see _start_scheduler); the whole stack stops if that
        fails. Returns its address."""
        if self.scheduler is not None:
            self.scheduler.stop()
        try:
            self._start_scheduler(timeout_s, ports)
        except BaseException:
            self.stop()
            raise
        return self.address

    def _start_scheduler(self, timeout_s: float, ports: dict[str, str] | None = None) -> None:
        """``ports``: port flags whose values replace those given (a restart keeps the bound ports)."""
        executor_flags = [flag for address in self.executor_addresses for flag in ("--executor", address)]
        flags = _with_values([*self._scheduler_base, *self._scheduler_flags], ports or {})
        argv = ServiceProcess.cli_argv(*flags, *executor_flags)
        self.scheduler = ServiceProcess("scheduler", argv, self._env)
        if self._progress is not None:
            self.scheduler.line_listener = self._progress.scheduler_starting()
        self.address = self.scheduler.start(SCHEDULER_LISTENING, timeout_s, self._executors_alive)
        self.http_url = self.scheduler.find(SCHEDULER_HTTP)
        self.metrics_address = self.scheduler.find(SCHEDULER_METRICS)
        if "--tls-cert" not in self._scheduler_flags:
            wait_until_serving(self.address, timeout_s, still_needed=self._executors_alive)
        elif self._tls_ca is not None:
            wait_until_serving(self.address, timeout_s, credentials=channel_credentials(self._tls_ca),
                               still_needed=self._executors_alive)

    def _executors_alive(self) -> None:
        """ServiceStartError with its log when an executor exited while the scheduler waited for it (it crashed
        loading its model, say): starting fails at once instead of at the timeout."""
        for executor in self.executors:
            code = executor.process.poll() if executor.process is not None else None
            if code is not None:
                raise ServiceStartError(f"{executor.name} exited (code {code}) before the scheduler was serving:\n"
                                        f"{executor.log()}", code)

    def restart_executor(self, timeout_s: float = 600.0, index: int = 0) -> None:
        """Start a new executor at the address of executor ``index`` (which exited or is stopped now); the
        scheduler resumes its requests there (or on another executor group)."""
        port = self.executor_addresses[index].rpartition(":")[2]
        old = self.executors[index]
        argv = list(old.argv)
        argv[argv.index("--port") + 1] = port
        old.stop()
        self.executors[index] = ServiceProcess(old.name, argv, old.env)
        self.executors[index].start(EXECUTOR_BOUND, timeout_s)

    def stop(self, scheduler_timeout_s: float = 10.0) -> None:
        """Stop the scheduler (SIGTERM; it drains for up to ``scheduler_timeout_s``), then the executors."""
        if self.scheduler is not None:
            self.scheduler.stop(timeout_s=scheduler_timeout_s)
        for executor in self.executors:
            executor.stop()

    def logs(self) -> str:
        """Every service's recent output, for failure messages."""
        scheduler_log = self.scheduler.log() if self.scheduler else ""
        executors = "".join(f"--- {executor.name} ---\n{executor.log()}\n" for executor in self.executors)
        return f"{executors}--- scheduler ---\n{scheduler_log}"

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _with_values(argv: Sequence[str], values: dict[str, str]) -> list[str]:
    """``argv`` with the value after each flag in ``values`` replaced by its value there."""
    words = list(argv)
    for index, word in enumerate(words[:-1]):
        if word in values:
            words[index + 1] = values[word]
    return words
