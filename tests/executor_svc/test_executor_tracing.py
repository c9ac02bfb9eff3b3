"""Executor phase spans: children of the step span carried in the StepRequest, laid out from its timings."""

from __future__ import annotations

from opentelemetry.trace import set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from executor_svc.tracing import StepPhaseTracer
from stepahead_proto import executor_pb2


def traced_step(tracer, num_draft_tokens: int = 0, num_spec_tokens: int = 0):
    """A StepRequest carrying a step span's context (as the scheduler sends it), and that span."""
    step_span = tracer.start_span("stepahead.step")
    step = executor_pb2.StepRequest(step_id=3)
    step.new_requests.add(request_id="n", num_scheduled_tokens=5, num_spec_tokens=num_spec_tokens)
    step.cached_requests.add(request_id="c", num_scheduled_tokens=1, num_draft_tokens=num_draft_tokens,
                             num_spec_tokens=num_spec_tokens)
    TraceContextTextMapPropagator().inject(step.trace_context, context=set_span_in_context(step_span))
    return step, step_span


def step_result(draft_s: float = 0.0) -> executor_pb2.StepResult:
    result = executor_pb2.StepResult(step_id=3, compute_start_s=100.0, forward_s=0.03, sample_s=0.01, draft_s=draft_s)
    result.outputs.add(request_id="n", num_drafted=0)
    result.outputs.add(request_id="c", num_drafted=2, num_accepted=1)
    return result


def test_forward_and_sample_are_children_of_the_step_span(tracer, exporter):
    step, step_span = traced_step(tracer)
    StepPhaseTracer(tracer).record(step, step_result())
    forward, sample = exporter.get_finished_spans()
    assert (forward.name, sample.name) == ("executor.forward", "executor.sample")
    for span in (forward, sample):
        assert span.parent.span_id == step_span.get_span_context().span_id
        assert span.context.trace_id == step_span.get_span_context().trace_id
    start_ns = 100_000_000_000
    assert (forward.start_time, forward.end_time, sample.end_time) == (
        start_ns, start_ns + 30_000_000, start_ns + 40_000_000
    )
    assert sample.start_time == forward.end_time
    assert forward.attributes["stepahead.step.num_tokens"] == 6
    assert forward.attributes["stepahead.step.id"] == 3


def test_speculative_step_has_verify_and_draft_phases(tracer, exporter):
    step, _ = traced_step(tracer, num_draft_tokens=2, num_spec_tokens=2)
    StepPhaseTracer(tracer).record(step, step_result(draft_s=0.005))
    forward, verify, draft = exporter.get_finished_spans()
    assert [s.name for s in (forward, verify, draft)] == ["executor.forward", "executor.verify", "executor.draft"]
    assert forward.attributes["stepahead.step.num_tokens"] == 8
    assert (verify.attributes["stepahead.spec.drafted"], verify.attributes["stepahead.spec.accepted"]) == (2, 1)
    assert draft.attributes["stepahead.spec.num_spec_tokens"] == 4
    assert draft.start_time == verify.end_time and draft.end_time - draft.start_time == 5_000_000


def test_untraced_steps_and_disabled_tracer_record_nothing(tracer, exporter):
    StepPhaseTracer(tracer).record(executor_pb2.StepRequest(step_id=1), step_result())
    step, _ = traced_step(tracer)
    StepPhaseTracer().record(step, step_result())
    assert exporter.get_finished_spans() == ()
