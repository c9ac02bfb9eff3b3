"""The executor's OpenTelemetry tracing: phase spans of traced steps, children of the scheduler's step span.

A StepRequest carries the W3C context of its step span in ``trace_context`` only when the scheduler
sampled that step. For such a step the runner's measured phases become spans, in the order the
runner runs them: ``executor.forward`` (state updates, batch, forward), then ``executor.sample`` or
``executor.verify`` (when drafts were verified), then ``executor.draft`` (proposing the next drafts).
They are recorded from the StepResult's timings after the step, so tracing adds nothing inside the
compute itself. Off (no tracer), ``record`` returns at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from stepahead_common.tracing_config import TracingConfig, process_tracer
from stepahead_proto import executor_pb2

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

DEFAULT_SERVICE_NAME = "stepahead-executor"
TRACER_NAME = "stepahead.executor"


class StepPhaseTracer:
    """Turns a traced step's measured phases into child spans of its step span."""

    def __init__(self, tracer: Tracer | None = None) -> None:
        self.enabled = tracer is not None
        self._tracer = tracer
        self._propagator = TraceContextTextMapPropagator()

    def record(self, step: executor_pb2.StepRequest, result: executor_pb2.StepResult) -> None:
        """Record the phase spans of ``step`` if tracing is on and the scheduler traced the step."""
        if self._tracer is None or not step.trace_context:
            return
        parent = self._propagator.extract(dict(step.trace_context))
        start_ns = int(result.compute_start_s * 1e9)
        for name, duration_s, attributes in _phases(step, result):
            end_ns = start_ns + int(duration_s * 1e9)
            span = self._tracer.start_span(name, context=parent, start_time=start_ns, attributes=attributes)
            span.end(end_time=end_ns)
            start_ns = end_ns


def _phases(step: executor_pb2.StepRequest, result: executor_pb2.StepResult) -> list[tuple[str, float, dict]]:
    """(span name, duration, attributes) of each phase the step ran, in the runner's order."""
    num_tokens = sum(new.num_scheduled_tokens for new in step.new_requests) + sum(
        cached.num_scheduled_tokens + cached.num_draft_tokens for cached in step.cached_requests
    )
    common = {"stepahead.step.id": step.step_id, "stepahead.step.num_requests": len(result.outputs)}
    phases = [("executor.forward", result.forward_s, {**common, "stepahead.step.num_tokens": num_tokens})]
    num_drafted = sum(output.num_drafted for output in result.outputs)
    if any(cached.num_draft_tokens for cached in step.cached_requests):
        verified = {"stepahead.spec.drafted": num_drafted,
                    "stepahead.spec.accepted": sum(output.num_accepted for output in result.outputs)}
        phases.append(("executor.verify", result.sample_s, {**common, **verified}))
    else:
        phases.append(("executor.sample", result.sample_s, common))
    num_proposed = sum(new.num_spec_tokens for new in step.new_requests) + sum(
        cached.num_spec_tokens for cached in step.cached_requests
    )
    if num_proposed:
        phases.append(("executor.draft", result.draft_s, {**common, "stepahead.spec.num_spec_tokens": num_proposed}))
    return phases


class ExecutorTracing:
    """Tracing of one executor process, configured by the OTEL_* environment variables."""

    def __init__(self, config: TracingConfig, provider: TracerProvider | None = None) -> None:
        """``provider``: an SDK TracerProvider to use (tests); built from ``config`` when None."""
        self.enabled = config.enabled
        self.provider, tracer = process_tracer(config, TRACER_NAME, provider)
        self.phase_tracer = StepPhaseTracer(tracer)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ExecutorTracing:
        """Off unless an exporter is configured (see stepahead_common.tracing_config)."""
        return cls(TracingConfig.from_env(environ, DEFAULT_SERVICE_NAME))

    def shutdown(self) -> None:
        """Flush and stop the exporters (no-op when off)."""
        if self.provider is not None:
            self.provider.shutdown()
