"""Tracing across the stack: client span -> scheduler request span -> step spans -> executor spans.

The test runs its own OTLP receiver on 127.0.0.1, starts the stack with the OTEL_* environment
pointing at it (every step traced, short batch delay), and sends requests from the SDK inside client
spans exported to the same receiver. Request A is started first and keeps decoding while request B
runs, so some steps serve both: they are children of one request's span and link to both. The
executor runs n-gram speculation, so verify and draft phases and acceptance attributes show up too.
"""

from __future__ import annotations

import os

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from client.bench.otlp_receiver import OtlpReceiver, ReceivedSpan
from client.stack import LocalStack
from client.sync_client import Client

pytestmark = pytest.mark.stack

WAIT_S = 30.0
GENERATE_SPAN = "/stepahead.v1.Generation/Generate"


def tracing_env(endpoint: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="100", STEPAHEAD_STEP_TRACE_RATE="1.0")
    return env


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as started:
        yield started


@pytest.fixture(scope="module")
def traced_stack(request, tiny_model_dir, receiver):
    executor_flags = ["--num-threads", "1", "--spec-method", "ngram"]
    stack = LocalStack(str(tiny_model_dir), executor_flags, [], env=tracing_env(receiver.endpoint))
    failed_before = request.session.testsfailed
    try:
        stack.start(timeout_s=300)
        yield stack
    finally:
        if request.session.testsfailed > failed_before:
            print(stack.logs())
        stack.stop()


@pytest.fixture
def client_tracer(receiver):
    provider = TracerProvider(resource=Resource.create({"service.name": "test-client"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True)))
    yield provider.get_tracer("test")
    provider.shutdown()


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name == name]


def one(spans: list[ReceivedSpan], **fields) -> ReceivedSpan:
    found = [s for s in spans if all(getattr(s, key) == value for key, value in fields.items())]
    assert len(found) == 1, f"expected one span with {fields}, found {len(found)}: {found}"
    return found[0]


def request_span_of(spans: list[ReceivedSpan], request_id: str) -> ReceivedSpan | None:
    found = [s for s in spans if s.attributes.get("gen_ai.response.id") == request_id]
    return found[0] if found else None


def run_overlapping_requests(address: str, tracer) -> tuple:
    """A decodes 48 tokens; B (8 tokens) starts after A's first chunk, so B's steps also serve A."""
    with Client(address) as client:
        with tracer.start_as_current_span("client A") as span_a:
            stream_a = client.generate_stream("hello world", max_tokens=48, ignore_eos=True, temperature=0.0)
            first_chunk = next(stream_a)
        with tracer.start_as_current_span("client B") as span_b:
            result_b = client.generate("the quick brown fox", max_tokens=8, ignore_eos=True, temperature=0.0)
        with stream_a:
            request_id_a = first_chunk.request_id
            for _ in stream_a:
                pass
    return (span_a, request_id_a), (span_b, result_b)


def test_one_trace_from_client_to_executor(traced_stack, receiver, client_tracer):
    (span_a, request_a), (span_b, result_b) = run_overlapping_requests(traced_stack.address, client_tracer)
    trace_a = format(span_a.get_span_context().trace_id, "032x")
    trace_b = format(span_b.get_span_context().trace_id, "032x")

    def complete(spans: list[ReceivedSpan]) -> bool:
        finished = [request_span_of(spans, request_a), request_span_of(spans, result_b.request_id)]
        return all(finished) and len(by_name(spans, "executor.forward")) >= len(by_name(spans, "stepahead.step")) > 0

    assert receiver.wait_for(complete, WAIT_S), f"spans did not arrive: {[s.name for s in receiver.spans()]}"
    spans = receiver.spans()

    # client -> gRPC server span -> request span, all in the client's trace
    client_b = one(spans, name="client B", service_name="test-client")
    server_b = one(spans, name=GENERATE_SPAN, trace_id=trace_b)
    assert (server_b.service_name, server_b.kind) == ("stepahead-scheduler", trace_pb2.Span.SPAN_KIND_SERVER)
    assert server_b.parent_span_id == client_b.span_id
    request_b = request_span_of(spans, result_b.request_id)
    assert request_b.trace_id == trace_b and request_b.parent_span_id == server_b.span_id
    assert request_b.name.startswith("text_completion ")
    attributes = request_b.attributes
    assert attributes["gen_ai.operation.name"] == "text_completion"
    assert attributes["gen_ai.request.model"] == request_b.name.split(" ", 1)[1]
    assert attributes["gen_ai.request.max_tokens"] == 8
    assert attributes["gen_ai.usage.input_tokens"] == result_b.usage.prompt_tokens
    assert attributes["gen_ai.usage.output_tokens"] == 8
    assert attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert 0 < attributes["gen_ai.server.time_to_first_token"] <= attributes["stepahead.request.e2e_s"]

    # queue / prefill / decode phases tile the request's life
    phases = [one(spans, name=name, parent_span_id=request_b.span_id)
              for name in ("stepahead.queue", "stepahead.prefill", "stepahead.decode")]
    assert all(p.start_ns <= p.end_ns for p in phases)
    assert phases[0].end_ns == phases[1].start_ns and phases[1].end_ns == phases[2].start_ns

    # steps: children of a request span they served, linked to every request span they served
    request_span_a = request_span_of(spans, request_a)
    assert request_span_a.trace_id == trace_a
    request_spans = {request_span_a.span_id: request_span_a, request_b.span_id: request_b}
    steps = by_name(spans, "stepahead.step")
    assert steps
    for step in steps:
        assert step.service_name == "stepahead-scheduler"
        assert step.parent_span_id in request_spans
        assert request_spans[step.parent_span_id].trace_id == step.trace_id
        linked = {link.span_id for link in step.links}
        assert step.parent_span_id in linked and linked <= set(request_spans)
        assert len(step.links) == step.attributes["stepahead.step.num_requests"]
    shared = [step for step in steps if {link.span_id for link in step.links} == set(request_spans)]
    assert shared, "no step served both requests"
    assert any(step.trace_id == trace_a for step in shared)
    assert all(link.trace_id == request_spans[link.span_id].trace_id for step in shared for link in step.links)

    # executor phases: children of the step span, in its trace, inside the step's lifetime
    steps_by_id = {step.span_id: step for step in steps}
    executor_spans = [s for s in spans if s.service_name == "stepahead-executor"]
    executor_phases = {"executor.forward", "executor.sample", "executor.verify", "executor.draft"}
    assert {s.name for s in executor_spans} == executor_phases
    for span in executor_spans:
        step = steps_by_id[span.parent_span_id]
        assert span.trace_id == step.trace_id
        assert span.attributes["stepahead.step.id"] == step.attributes["stepahead.step.id"]
    assert len(by_name(executor_spans, "executor.forward")) == len(steps)
    in_trace_a = [s for s in executor_spans if s.trace_id == trace_a]
    assert in_trace_a, "trace A holds no executor span"

    # speculation: the request's acceptance, and the verify phases' counts add up to it
    spec = request_span_a.attributes
    assert 0 <= spec["stepahead.spec.accepted"] <= spec["stepahead.spec.drafted"]
    assert spec["stepahead.spec.acceptance_rate"] == spec["stepahead.spec.accepted"] / spec["stepahead.spec.drafted"]
    verify_spans = by_name(executor_spans, "executor.verify")
    assert sum(s.attributes["stepahead.spec.drafted"] for s in verify_spans) >= spec["stepahead.spec.drafted"]


def test_no_trace_context_without_a_client_span(traced_stack, receiver):
    """A call with no current span starts a new trace at the scheduler (a root server span)."""
    with Client(traced_stack.address) as client:
        result = client.generate("hello", max_tokens=2, temperature=0.0)
    assert receiver.wait_for(lambda spans: request_span_of(spans, result.request_id) is not None, WAIT_S)
    spans = receiver.spans()
    request = request_span_of(spans, result.request_id)
    server = one(spans, name=GENERATE_SPAN, trace_id=request.trace_id)
    assert server.parent_span_id == ""
    assert request.parent_span_id == server.span_id
