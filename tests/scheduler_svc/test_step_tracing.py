"""Step spans: sampled at the configured rate, children of a served request's span, linked to all."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from scheduler_svc.request import Request, StopParams
from scheduler_svc.scheduler_output import ScheduledCachedRequest, ScheduledNewRequest, SchedulerOutput
from scheduler_svc.step_tracing import STEP_SPAN_NAME, EngineTracing, sampling_period
from stepahead_proto import executor_pb2, sampling_pb2


def step_output(step_id: int, new_ids=(), cached_ids=()) -> SchedulerOutput:
    stop = StopParams(max_tokens=4)
    return SchedulerOutput(
        step_id=step_id,
        new_requests=[
            ScheduledNewRequest(Request(rid, [1, 2], sampling_pb2.SamplingParams(), stop), [0], 0, 2) for rid in new_ids
        ],
        cached_requests=[ScheduledCachedRequest(rid, [], 3, 1) for rid in cached_ids],
    )


def register(tracing: EngineTracing, tracer, request_id: str):
    """Register a request under a fresh span of its own, as the Generate wrapper does."""
    with tracer.start_as_current_span(f"request {request_id}") as span:
        tracing.register_request(request_id)
    return span


def run_step(tracing: EngineTracing, output: SchedulerOutput) -> executor_pb2.StepRequest:
    step = executor_pb2.StepRequest(step_id=output.step_id)
    tracing.start_step(output, step)
    tracing.end_step(executor_pb2.StepResult(step_id=output.step_id, compute_start_s=1.0, compute_end_s=1.5))
    return step


def test_sampling_period():
    assert [sampling_period(rate) for rate in (0.0, 0.1, 0.25, 0.3, 1.0)] == [0, 10, 4, 3, 1]


def test_disabled_does_nothing():
    tracing = EngineTracing()
    tracing.register_request("a")
    step = run_step(tracing, step_output(0, new_ids=["a"]))
    assert not tracing.enabled and not step.trace_context


def test_step_span_parent_links_and_context(tracer, exporter):
    tracing = EngineTracing(tracer, step_trace_rate=1.0)
    span_a, span_b = register(tracing, tracer, "a"), register(tracing, tracer, "b")
    exporter.clear()
    step = run_step(tracing, step_output(7, new_ids=["b"], cached_ids=["a", "unknown"]))

    (step_span,) = exporter.get_finished_spans()
    assert step_span.name == STEP_SPAN_NAME
    assert step_span.parent.span_id == span_b.get_span_context().span_id  # the first served request
    assert step_span.context.trace_id == span_b.get_span_context().trace_id
    linked = [link.context.span_id for link in step_span.links]
    assert linked == [span_b.get_span_context().span_id, span_a.get_span_context().span_id]
    assert step_span.attributes["stepahead.step.id"] == 7
    assert step_span.attributes["stepahead.step.num_requests"] == 3
    assert step_span.attributes["stepahead.executor.compute_s"] == 0.5
    carried = trace.get_current_span(TraceContextTextMapPropagator().extract(dict(step.trace_context)))
    assert carried.get_span_context().span_id == step_span.context.span_id


def test_rate_samples_evenly(tracer, exporter):
    tracing = EngineTracing(tracer, step_trace_rate=0.25)
    register(tracing, tracer, "a")
    exporter.clear()
    carried = [bool(run_step(tracing, step_output(i, cached_ids=["a"])).trace_context) for i in range(8)]
    assert carried == [True, False, False, False, True, False, False, False]
    assert [s.attributes["stepahead.step.id"] for s in exporter.get_finished_spans()] == [0, 4]


def test_steps_of_untraced_or_forgotten_requests_get_no_span(tracer, exporter):
    tracing = EngineTracing(tracer, step_trace_rate=1.0)
    span = register(tracing, tracer, "a")
    tracing.register_request("no-span-current")
    tracing.forget_request_span(span.get_span_context())
    exporter.clear()
    assert not run_step(tracing, step_output(0, cached_ids=["a", "no-span-current"])).trace_context
    assert exporter.get_finished_spans() == ()


def test_abandoned_steps_end_as_errors(tracer, exporter):
    tracing = EngineTracing(tracer, step_trace_rate=1.0)
    register(tracing, tracer, "a")
    exporter.clear()
    tracing.start_step(step_output(0, cached_ids=["a"]), executor_pb2.StepRequest(step_id=0))
    tracing.abandon_steps("executor failed")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == trace.StatusCode.ERROR and span.status.description == "executor failed"
