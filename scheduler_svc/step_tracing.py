"""The engine's tracing hooks: which span each request belongs to, and sampled spans per step.

A step serves many requests, each in its own trace. Its span is a child of the first served
request's span (so a request's trace shows the steps it led) and carries a link to the span of every
request it served. Its context travels to the executor in ``StepRequest.trace_context``, always as
W3C traceparent (it is part of the step protocol, whatever OTEL_PROPAGATORS says); the executor's
phase spans are its children. With no tracer every hook returns at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from scheduler_svc.scheduler_output import SchedulerOutput
from stepahead_proto import executor_pb2

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext, Tracer

STEP_SPAN_NAME = "stepahead.step"


def sampling_period(rate: float) -> int:
    """Trace one step in this many (0: none). Deterministic, so spans are evenly spread."""
    if rate <= 0.0:
        return 0
    return max(1, round(1.0 / rate))


class EngineTracing:
    """Request span registry and step spans for one engine; free when ``tracer`` is None."""

    def __init__(self, tracer: Tracer | None = None, step_trace_rate: float = 0.0) -> None:
        self.enabled = tracer is not None
        self._tracer = tracer
        self._period = sampling_period(step_trace_rate)
        self._steps_seen = 0
        self._request_spans: dict[str, SpanContext] = {}
        self._request_by_span: dict[int, str] = {}
        self._open_steps: dict[int, Span] = {}
        self._propagator = TraceContextTextMapPropagator()

    # ---- requests ----------------------------------------------------------------------------
    def register_request(self, request_id: str) -> None:
        """Remember the current span (the request's, set by the Generate wrapper) for ``request_id``."""
        if not self.enabled:
            return
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid and span_context.trace_flags.sampled:
            self._request_spans[request_id] = span_context
            self._request_by_span[span_context.span_id] = request_id

    def forget_request_span(self, span_context: SpanContext) -> None:
        """The request's span ended: steps scheduled from now on no longer refer to it."""
        request_id = self._request_by_span.pop(span_context.span_id, None)
        if request_id is not None:
            self._request_spans.pop(request_id, None)

    # ---- steps -------------------------------------------------------------------------------
    def start_step(self, output: SchedulerOutput, step: executor_pb2.StepRequest) -> None:
        """Maybe open a span for this step and put its context into ``step.trace_context``."""
        if not self.enabled or output.num_scheduled_requests == 0:
            return
        self._steps_seen += 1
        if self._period == 0 or (self._steps_seen - 1) % self._period:
            return
        served = self._served_request_spans(output)
        if not served:
            return
        parent = trace.set_span_in_context(trace.NonRecordingSpan(served[0]))
        links = [trace.Link(span_context) for span_context in served]  # no link attributes: they cost ~10 us each
        assert self._tracer is not None  # enabled
        span = self._tracer.start_span(STEP_SPAN_NAME, context=parent, links=links, attributes=_step_attributes(output))
        if not span.is_recording():
            return
        self._propagator.inject(step.trace_context, context=trace.set_span_in_context(span))
        self._open_steps[step.step_id] = span

    def end_step(self, result: executor_pb2.StepResult) -> None:
        """Close the step's span (if it has one) with what the executor reported."""
        if not self.enabled:
            return
        span = self._open_steps.pop(result.step_id, None)
        if span is None:
            return
        span.set_attributes(_result_attributes(result))
        span.end()

    def abandon_steps(self, reason: str, step_ids: Iterable[int] | None = None) -> None:
        """An Execute stream failed: end its open step spans (``step_ids``; None: every one) as errors."""
        chosen = list(self._open_steps) if step_ids is None else [i for i in step_ids if i in self._open_steps]
        for step_id in chosen:
            span = self._open_steps.pop(step_id)
            span.set_status(trace.Status(trace.StatusCode.ERROR, reason))
            span.end()

    def _served_request_spans(self, output: SchedulerOutput) -> list[SpanContext]:
        request_ids = [new.request.request_id for new in output.new_requests]
        request_ids += [cached.request_id for cached in output.cached_requests]
        spans = self._request_spans
        return [spans[request_id] for request_id in request_ids if request_id in spans]


def _step_attributes(output: SchedulerOutput) -> dict[str, int]:
    return {
        "stepahead.step.id": output.step_id,
        "stepahead.step.num_requests": output.num_scheduled_requests,
        "stepahead.step.num_new_requests": len(output.new_requests),
        "stepahead.step.num_scheduled_tokens": output.total_num_scheduled_tokens,
        "stepahead.step.num_draft_tokens": sum(output.num_draft_tokens.values()),
        "stepahead.step.num_finished_requests": len(output.finished_request_ids),
    }


def _result_attributes(result: executor_pb2.StepResult) -> dict[str, float | int]:
    return {
        "stepahead.executor.compute_s": result.compute_end_s - result.compute_start_s,
        "stepahead.executor.forward_s": result.forward_s,
        "stepahead.executor.sample_s": result.sample_s,
        "stepahead.executor.draft_s": result.draft_s,
        "stepahead.executor.num_device_input_ids": result.num_device_input_ids,
        "stepahead.step.num_drafted": sum(out.num_drafted for out in result.outputs),
        "stepahead.step.num_accepted": sum(out.num_accepted for out in result.outputs),
    }
