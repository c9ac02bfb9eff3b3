"""Prometheus metrics of the scheduler, in a registry of its own, served on /metrics when asked.

Cheap by construction: queue and KV gauges and the preemption counter are read from the engine only
when Prometheus scrapes; per step the engine makes a few .inc()/.observe() calls; per-request
histograms and token counters are observed once, when the request ends.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler_svc.engine_load import EngineLoad
from scheduler_svc.request import Request
from scheduler_svc.request_timing import RequestTiming
from scheduler_svc.vllm_metric_names import VllmNamesCollector
from stepahead_common.ports import serve_metrics
from stepahead_proto import generation_pb2

PREFIX = "stepahead_scheduler"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
"""TTFT and queue time, seconds."""
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0)
"""Inter-token latency, step time and executor gaps, seconds."""
SPEC_K_BUCKETS = tuple(float(k) for k in range(0, 17))


class EngineView(Protocol):
    """What the scrape-time collector reads from the engine (an Engine, or EngineGroups over several)."""

    def load(self) -> EngineLoad: ...

    def group_loads(self) -> list[tuple[str, EngineLoad]]: ...


def finish_reason_label(finish_reason: int) -> str:
    """FINISH_REASON_STOP -> "stop"."""
    name = generation_pb2.FinishReason.Name(finish_reason)
    return name.removeprefix("FINISH_REASON_").lower()


class _EngineStateCollector(Collector):
    """Running/waiting requests, KV blocks and preemptions, read from the engine at scrape time."""

    def __init__(self) -> None:
        self.engine: EngineView | None = None

    def collect(self) -> Iterator[Metric]:
        if self.engine is None:
            return
        load = self.engine.load()
        yield _gauge("requests_running", "Requests in the running batch.", load.num_running)
        yield _gauge("requests_waiting", "Requests waiting to be scheduled (new or preempted).", load.num_waiting)
        yield _gauge("kv_blocks_used", "KV cache blocks referenced by requests.",
                     load.num_kv_blocks - load.num_free_kv_blocks)
        yield _gauge("kv_blocks_free", "KV cache blocks free.", load.num_free_kv_blocks)
        yield _gauge("kv_blocks_total", "KV cache blocks on the executor.", load.num_kv_blocks)
        preemptions = CounterMetricFamily(f"{PREFIX}_preemptions", "Requests preempted (recomputed later) so far.")
        preemptions.add_metric([], load.num_preemptions)
        yield preemptions
        for name, documentation, value in (
            ("prefix_cache_queried_tokens", "Prompt tokens looked up in the prefix cache as requests started.",
             load.num_prefix_queried_tokens),
            ("prefix_cache_hit_tokens", "Of those, tokens whose KV blocks were found cached (not computed again).",
             load.num_prefix_hit_tokens),
        ):
            family = CounterMetricFamily(f"{PREFIX}_{name}", documentation)
            family.add_metric([], value)
            yield family
        yield from _group_series(self.engine.group_loads())

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names are only known once bound; keeps registration free of a collect() call


def _group_series(group_loads: list[tuple[str, EngineLoad]]) -> Iterator[Metric]:
    """Requests and KV blocks of each executor group, labelled with the group's executor address."""
    series = {
        "group_requests_running": ("Requests in the group's running batch.", "num_running"),
        "group_requests_waiting": ("Requests waiting in the group's queue.", "num_waiting"),
        "group_kv_blocks_free": ("KV cache blocks free on the group's executor.", "num_free_kv_blocks"),
        "group_kv_blocks_total": ("KV cache blocks on the group's executor.", "num_kv_blocks"),
    }
    for name, (documentation, attribute) in series.items():
        family = GaugeMetricFamily(f"{PREFIX}_{name}", documentation, labels=["group"])
        for group, load in group_loads:
            family.add_metric([group], getattr(load, attribute))
        yield family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value)


class SchedulerMetrics:
    """Every scheduler series; one instance per scheduler process (or per test)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._engine_state = _EngineStateCollector()
        self.registry.register(self._engine_state)
        ProcessCollector(registry=self.registry)
        self._define_request_series()
        self._define_step_series()
        self._define_speculation_series()
        self.ready = Gauge(
            f"{PREFIX}_ready", "1 while the scheduler reports ready (an executor group is).", registry=self.registry
        )
        self.group_ready = Gauge(f"{PREFIX}_group_ready", "1 while the executor group is ready.", ["group"],
                                 registry=self.registry)
        self.group_steps = Counter(f"{PREFIX}_group_steps", "Step results received from the executor group.",
                                   ["group"], registry=self.registry)

    def _define_request_series(self) -> None:
        registry = self.registry
        self.prompt_tokens = Counter(f"{PREFIX}_prompt_tokens", "Prompt tokens of ended requests.", registry=registry)
        self.generation_tokens = Counter(
            f"{PREFIX}_generation_tokens", "Output tokens streamed by ended requests.", registry=registry
        )
        self.ttft = Histogram(f"{PREFIX}_time_to_first_token_seconds", "Arrival to first output token.",
                              buckets=LATENCY_BUCKETS, registry=registry)
        self.itl = Histogram(
            f"{PREFIX}_inter_token_latency_seconds",
            "Gaps between a request's consecutive token deliveries.",
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        self.e2e = Histogram(f"{PREFIX}_e2e_request_latency_seconds", "Arrival to the last message.",
                             buckets=E2E_BUCKETS, registry=registry)
        self.queue_time = Histogram(f"{PREFIX}_request_queue_time_seconds", "Arrival to first scheduled.",
                                    buckets=LATENCY_BUCKETS, registry=registry)
        self.structured_output = Counter(
            f"{PREFIX}_structured_output_requests", "Ended requests whose output followed a format, by kind.",
            ["kind"], registry=registry)
        self.finished = Counter(f"{PREFIX}_requests_finished", "Requests that ended with a finish reason.",
                                ["finish_reason"], registry=registry)
        self.lora_requests = Counter(f"{PREFIX}_lora_requests_finished",
                                     "Requests run with a LoRA adapter that ended with a finish reason, by adapter.",
                                     ["adapter"], registry=registry)
        self.failed = Counter(f"{PREFIX}_requests_failed", "Requests that ended with a gRPC error, by status code.",
                              ["code"], registry=registry)
        self.executor_losses = Counter(f"{PREFIX}_executor_losses", "Times the Execute stream to the executor broke.",
                                       registry=registry)
        self.requests_moved = Counter(
            f"{PREFIX}_requests_moved", "Requests moved to another executor group after their group's executor "
            "was lost.", registry=registry,
        )
        self.executor_recoveries = Counter(
            f"{PREFIX}_executor_recoveries", "Times requests resumed on an executor after a loss.", registry=registry
        )
        self.http_requests = Counter(f"{PREFIX}_http_requests", "HTTP API responses, by route and status.",
                                     ["route", "status"], registry=registry)

    def _define_step_series(self) -> None:
        registry = self.registry
        self.steps = Counter(f"{PREFIX}_steps", "Step results received from the executor (one per sub-step).",
                             registry=registry)
        self.scheduler_invocations = Counter(
            f"{PREFIX}_scheduler_invocations", "Calls of the scheduler's schedule() (empty ones included).",
            registry=registry,
        )
        self.step_requests = Counter(
            f"{PREFIX}_step_requests", "StepRequests written to the executor (a multi-step one counts once).",
            registry=registry,
        )
        self.step_time = Histogram(f"{PREFIX}_step_time_seconds", "Executor compute time per step (end - start).",
                                   buckets=ITL_BUCKETS, registry=registry)
        self.bubble = Counter(
            f"{PREFIX}_executor_bubble_seconds",
            "Executor idle time between consecutive steps while work was in flight.",
            registry=registry,
        )
        self.bubble_awaiting_step = Counter(
            f"{PREFIX}_executor_bubble_awaiting_step_seconds",
            "Of the executor's idle time between steps, the part before the next StepRequest had reached it.",
            registry=registry,
        )
        self.bubble_gap = Histogram(f"{PREFIX}_executor_bubble_gap_seconds",
                                    "Executor idle gap before each step while work was in flight.",
                                    buckets=ITL_BUCKETS, registry=registry)

    def _define_speculation_series(self) -> None:
        registry = self.registry
        self.spec_drafted = Counter(f"{PREFIX}_spec_draft_tokens", "Draft tokens verified.", registry=registry)
        self.spec_accepted = Counter(f"{PREFIX}_spec_accepted_tokens", "Draft tokens accepted.", registry=registry)
        self.spec_accepted_per_position = Counter(
            f"{PREFIX}_spec_accepted_tokens_per_position", "Draft tokens accepted at each draft position (0-based).",
            ["position"], registry=registry,
        )
        self.spec_tried_per_position = Counter(
            f"{PREFIX}_spec_tried_tokens_per_position",
            "Verifies with a draft slot at each position (0-based) whose earlier positions were all accepted: "
            "accepted / tried is the position's conditional acceptance, also when K changes between steps.",
            ["position"], registry=registry,
        )
        self._position_children: dict[str, list[Counter]] = {"accepted": [], "tried": []}
        self.spec_k = Histogram(f"{PREFIX}_spec_num_draft_tokens", "K chosen per step (draft tokens to propose).",
                                buckets=SPEC_K_BUCKETS, registry=registry)

    # ---- wiring ------------------------------------------------------------------------------
    def add_vllm_names(self, model_name: str) -> None:
        """Also expose the main series under vLLM's names, labelled ``model_name`` (vllm_metric_names.py)."""
        sources = (self.prompt_tokens, self.generation_tokens, self.finished, self.ttft, self.itl, self.e2e,
                   self.queue_time, self.spec_drafted, self.spec_accepted, self.spec_accepted_per_position)
        self.registry.register(VllmNamesCollector(
            lambda: [*self._engine_state.collect(), *(family for source in sources for family in source.collect())],
            model_name))

    def bind_engine(self, engine: EngineView) -> None:
        """Read queue, KV and preemption series from this engine at scrape time."""
        self._engine_state.engine = engine

    def serve_http(self, host: str, port: int) -> int:
        """Serve /metrics on host:port (0: any free port) from a daemon thread; returns the bound port."""
        return serve_metrics(self.registry, host, port)

    # ---- observations ------------------------------------------------------------------------
    def observe_step(self, compute_s: float, bubble_s: float | None, awaiting_step_s: float = 0.0) -> None:
        """One step result: its compute time, the executor's idle gap before it (None after idling) and the part
        of that gap before the step had reached the executor."""
        self.steps.inc()
        self.step_time.observe(compute_s)
        if bubble_s is not None:
            self.bubble.inc(bubble_s)
            self.bubble_awaiting_step.inc(awaiting_step_s)
            self.bubble_gap.observe(bubble_s)

    def observe_finished(self, request: Request, timing: RequestTiming, finish_reason: int, now: float) -> None:
        """A request ended with a finish reason (stop, length, abort): tokens, latencies, outcome, and the kind of
        its structured output format if it had one."""
        self.finished.labels(finish_reason=finish_reason_label(finish_reason)).inc()
        if request.lora_adapter:
            self.lora_requests.labels(adapter=request.lora_adapter).inc()
        if request.sampling.HasField("structured_output"):
            kind = request.sampling.structured_output.WhichOneof("kind") or "none"
            self.structured_output.labels(kind=kind).inc()
        self.prompt_tokens.inc(len(request.prompt_token_ids))
        self.generation_tokens.inc(request.num_output_tokens)
        self.e2e.observe(now - timing.arrival)
        if timing.first_scheduled is not None:
            self.queue_time.observe(timing.first_scheduled - timing.arrival)
        if timing.deliveries:
            self.ttft.observe(timing.deliveries[0] - timing.arrival)
        for earlier, later in zip(timing.deliveries, timing.deliveries[1:]):
            self.itl.observe(later - earlier)

    def count_error(self, code_name: str) -> None:
        """A request ended with a gRPC error; ``code_name`` is the status code's name, e.g. "UNAVAILABLE"."""
        self.failed.labels(code=code_name).inc()

    def observe_http(self, route: str, status: int) -> None:
        """An HTTP API response was sent (or, for a stream, started) with ``status``."""
        self.http_requests.labels(route=route, status=str(status)).inc()

    def observe_speculation(
        self, drafted: int, accepted: int, accepted_per_position: Sequence[int], k: int | None = None,
        tried_per_position: Sequence[int] = (),
    ) -> None:
        """One step's speculation totals: drafts verified, accepted, accepted and tried at each position, and the
        K chosen."""
        self.spec_drafted.inc(drafted)
        self.spec_accepted.inc(accepted)
        for kind, counts in (("accepted", accepted_per_position), ("tried", tried_per_position)):
            for position, count in enumerate(counts):
                if count:
                    self._position_counter(kind, position).inc(count)
        if k is not None:
            self.spec_k.observe(k)

    def _position_counter(self, kind: str, position: int) -> Counter:
        family = self.spec_accepted_per_position if kind == "accepted" else self.spec_tried_per_position
        children = self._position_children[kind]
        while len(children) <= position:  # label lookups cached: one per position, ever
            children.append(family.labels(position=str(len(children))))
        return children[position]
