"""Configuration of the scheduler service."""

from __future__ import annotations

from dataclasses import dataclass, field


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field_name}: {message}")


@dataclass(frozen=True)
class SchedulingConfig:
    """Limits of continuous batching: how much work one step may hold."""

    max_num_seqs: int = 64
    """Most requests running at once."""
    max_num_batched_tokens: int = 512
    """Token budget of one step (prefill chunks + decode tokens)."""
    max_inflight_steps: int = 2
    """StepRequests outstanding on the Execute stream (1 = synchronous)."""
    num_scheduler_steps: int = 1
    """Decode sub-steps per StepRequest when every scheduled request only decodes (multi-step)."""

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_inflight_steps", "num_scheduler_steps"):
            value = getattr(self, name)
            _require(value >= 1, name, f"must be >= 1, got {value}")


@dataclass(frozen=True)
class ReadinessConfig:
    """How the scheduler decides it is ready: its executor answers health checks and makes progress."""

    executor_stall_timeout_s: float = 5.0
    """Not ready when no step result arrived for this long while requests are queued or running."""
    poll_interval_s: float = 0.5
    """How often the executor's readiness and step progress are checked."""
    check_timeout_s: float = 1.0
    """Deadline of one health Check to the executor (a stopped process never answers)."""

    def __post_init__(self) -> None:
        for name in ("executor_stall_timeout_s", "poll_interval_s", "check_timeout_s"):
            value = getattr(self, name)
            _require(value > 0, name, f"must be > 0, got {value}")


@dataclass(frozen=True)
class SchedulerServiceConfig:
    """Everything the scheduler process needs to start."""

    model_dir: str
    """HF model directory holding the tokenizer (tokenizer.json) and chat template."""
    executor_address: str
    """host:port of the executor's Execute service."""
    model_name: str = ""
    """Name clients must use in GenerateRequest.model (empty: the executor's model name)."""
    host: str = "127.0.0.1"
    port: int = 50051
    scheduling: SchedulingConfig = field(default_factory=SchedulingConfig)
    default_max_tokens: int = 256
    executor_connect_timeout_s: float = 600.0
    """How long to wait for the executor to answer Describe at start-up (it may be loading weights)."""
    metrics_port: int | None = None
    """Port of the Prometheus /metrics endpoint (None: off, 0: any free port)."""
    readiness: ReadinessConfig = field(default_factory=ReadinessConfig)

    def __post_init__(self) -> None:
        _require(bool(self.model_dir), "model_dir", "must be set")
        _require(":" in self.executor_address, "executor_address", f"must be host:port, got {self.executor_address!r}")
        _require(0 <= self.port < 65536, "port", f"must be in [0, 65535], got {self.port}")
        _require(
            self.metrics_port is None or 0 <= self.metrics_port < 65536,
            "metrics_port",
            f"must be in [0, 65535], got {self.metrics_port}",
        )
        _require(self.default_max_tokens >= 1, "default_max_tokens", f"must be >= 1, got {self.default_max_tokens}")
        _require(
            self.executor_connect_timeout_s > 0,
            "executor_connect_timeout_s",
            f"must be > 0, got {self.executor_connect_timeout_s}",
        )
