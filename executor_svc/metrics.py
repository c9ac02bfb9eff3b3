"""Prometheus metrics of the executor, in a registry of its own, served on /metrics when asked.

Observed on the gRPC thread that writes results (never on the compute thread): a few .inc() and
.observe() calls per step. Requests held is read from the runner only when Prometheus scrapes.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from stepahead_common.ports import serve_metrics
from stepahead_proto import executor_pb2

PREFIX = "stepahead_executor"

TIME_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0)


def tokens_computed(step: executor_pb2.StepRequest) -> int:
    """Tokens the step's forward processes: prefill chunks, decode tokens and drafts to verify."""
    new = sum(request.num_scheduled_tokens for request in step.new_requests)
    cached = sum(request.num_scheduled_tokens + request.num_draft_tokens for request in step.cached_requests)
    return new + cached


class ExecutorMetrics:
    """Every executor series; one instance per executor process (or per test)."""

    def __init__(self) -> None:
        registry = self.registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        self.steps = Counter(f"{PREFIX}_steps", "Steps computed.", registry=registry)
        self.tokens = Counter(f"{PREFIX}_tokens_computed", "Tokens run through the model forward.", registry=registry)
        self.step_compute = Histogram(
            f"{PREFIX}_step_compute_seconds",
            "Compute time per step (start to tokens on host).",
            buckets=TIME_BUCKETS,
            registry=registry,
        )
        self.forward = Histogram(f"{PREFIX}_forward_seconds", "Model forward time per step.",
                                 buckets=TIME_BUCKETS, registry=registry)
        self.sample = Histogram(f"{PREFIX}_sample_seconds", "Sampling (and verification) time per step.",
                                buckets=TIME_BUCKETS, registry=registry)
        self.draft = Histogram(f"{PREFIX}_draft_seconds", "Draft proposal time per step (speculative decoding).",
                               buckets=TIME_BUCKETS, registry=registry)
        self.device_input_ids = Counter(
            f"{PREFIX}_device_input_ids", "Input ids read on the device because the step that sampled them "
            "was not read back yet (deferred read-back).", registry=registry)
        self.requests_held = Gauge(
            f"{PREFIX}_requests_held", "Requests whose state the executor holds.", registry=registry
        )
        self.kv_blocks_total = Gauge(f"{PREFIX}_kv_blocks_total", "KV cache blocks allocated.", registry=registry)
        self.ready = Gauge(f"{PREFIX}_ready", "1 once the model is loaded and warmed up.", registry=registry)

    def bind_runner(self, count_requests: Callable[[], int], num_kv_blocks: int) -> None:
        """Once the model is ready: requests held is read through ``count_requests`` at scrape time."""
        self.requests_held.set_function(count_requests)
        self.kv_blocks_total.set(num_kv_blocks)
        self.ready.set(1)

    def serve_http(self, host: str, port: int) -> int:
        """Serve /metrics on host:port (0: any free port) from a daemon thread; returns the bound port."""
        return serve_metrics(self.registry, host, port)

    def observe_step(self, step: executor_pb2.StepRequest, result: executor_pb2.StepResult) -> None:
        """One computed step."""
        self.steps.inc()
        num_tokens = tokens_computed(step)
        if num_tokens == 0:  # a step that only drops finished requests: no forward to time
            return
        self.tokens.inc(num_tokens)
        self.device_input_ids.inc(result.num_device_input_ids)
        self.step_compute.observe(result.compute_end_s - result.compute_start_s)
        self.forward.observe(result.forward_s)
        self.sample.observe(result.sample_s)
        if result.draft_s:
            self.draft.observe(result.draft_s)
