"""The Generate wrapper: one span per call with gen_ai.* attributes, phase spans, errors, cancellation."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from opentelemetry import trace

from scheduler_svc.request_tracing import PHASE_SPAN_NAMES, TracedGenerationServicer
from scheduler_svc.scheduler_output import ScheduledCachedRequest, SchedulerOutput
from scheduler_svc.step_tracing import EngineTracing
from stepahead_proto import executor_pb2, generation_pb2, sampling_pb2


class FakeContext:
    """The parts of grpc.aio.ServicerContext the wrapper reads."""

    def __init__(self) -> None:
        self._code = None
        self._details = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details
        raise grpc.aio.AbortError()

    def code(self):
        return self._code

    def details(self):
        return self._details


def final_message(request_id: str) -> generation_pb2.GenerateResponse:
    return generation_pb2.GenerateResponse(
        request_id=request_id,
        token_ids=[9],
        finish_reason=generation_pb2.FINISH_REASON_LENGTH,
        usage=generation_pb2.Usage(prompt_tokens=5, completion_tokens=3, cached_prompt_tokens=2),
        timings=generation_pb2.Timings(queue_s=0.01, ttft_s=0.05, e2e_s=0.2, itl_mean_s=0.075),
        spec=generation_pb2.SpecStats(drafted=4, accepted=3, accepted_per_position=[2, 1], mean_acceptance_length=2.5),
    )


class FakeGeneration:
    """Registers the request with the engine tracing (as Engine.add_request does), then streams."""

    def __init__(self, engine_tracing: EngineTracing, abort_with: grpc.StatusCode | None = None) -> None:
        self.engine_tracing = engine_tracing
        self.abort_with = abort_with

    async def Generate(self, request, context):
        if self.abort_with is not None:
            await context.abort(self.abort_with, "bad request")
        self.engine_tracing.register_request("r1")
        self.traced_while_running = step_is_traced(self.engine_tracing, "r1")
        yield generation_pb2.GenerateResponse(request_id="r1", token_ids=[7, 8], prompt_tokens=5)
        yield final_message("r1")




def generate_request() -> generation_pb2.GenerateRequest:
    return generation_pb2.GenerateRequest(
        text="hi",
        sampling=sampling_pb2.SamplingParams(temperature=0.5),
        stopping=sampling_pb2.StoppingParams(max_tokens=3),
    )


def step_is_traced(engine_tracing: EngineTracing, request_id: str) -> bool:
    """Whether a step serving ``request_id`` gets a span (it does while its request span is registered)."""
    output = SchedulerOutput(step_id=0, cached_requests=[ScheduledCachedRequest(request_id, [], 0, 1)])
    step = executor_pb2.StepRequest(step_id=0)
    engine_tracing.start_step(output, step)
    return bool(step.trace_context)


async def collect(servicer, request, context, limit=None) -> list:
    items = []
    stream = servicer.Generate(request, context)
    async for item in stream:
        items.append(item)
        if limit is not None and len(items) == limit:
            await stream.aclose()
            break
    return items


def test_request_span_attributes_and_phases(tracer, exporter):
    engine_tracing = EngineTracing(tracer, 1.0)
    inner = FakeGeneration(engine_tracing)
    servicer = TracedGenerationServicer(inner, tracer, engine_tracing, "tiny")
    items = asyncio.run(collect(servicer, generate_request(), FakeContext()))
    assert len(items) == 2
    assert inner.traced_while_running

    spans = {span.name: span for span in exporter.get_finished_spans()}
    request_span = spans["text_completion tiny"]
    attributes = request_span.attributes
    assert attributes["gen_ai.operation.name"] == "text_completion"
    assert attributes["gen_ai.request.model"] == "tiny"
    assert attributes["gen_ai.request.max_tokens"] == 3
    assert attributes["gen_ai.request.temperature"] == 0.5
    assert "gen_ai.request.top_p" not in attributes
    assert attributes["gen_ai.response.id"] == "r1"
    assert attributes["gen_ai.response.finish_reasons"] == ("length",)
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (5, 3)
    assert attributes["stepahead.request.cached_prompt_tokens"] == 2
    assert attributes["gen_ai.server.time_to_first_token"] == 0.05
    assert attributes["stepahead.spec.acceptance_rate"] == 0.75
    assert attributes["stepahead.spec.accepted_per_position"] == (2, 1)
    assert request_span.status.status_code == trace.StatusCode.UNSET

    phases = [spans[name] for name in PHASE_SPAN_NAMES]
    assert all(p.parent.span_id == request_span.context.span_id for p in phases)
    durations = [(p.end_time - p.start_time) / 1e9 for p in phases]
    assert durations == pytest.approx([0.01, 0.04, 0.15], abs=1e-6)
    assert phases[0].end_time == phases[1].start_time and phases[1].end_time == phases[2].start_time
    assert not step_is_traced(engine_tracing, "r1")  # forgotten when the span ended


def test_chat_requests_are_chat_operations(tracer, exporter):
    engine_tracing = EngineTracing(tracer, 1.0)
    servicer = TracedGenerationServicer(FakeGeneration(engine_tracing), tracer, engine_tracing, "tiny")
    chat = generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role="user", content="hi")])
    request = generation_pb2.GenerateRequest(chat=chat)
    asyncio.run(collect(servicer, request, FakeContext()))
    assert "chat tiny" in {span.name for span in exporter.get_finished_spans()}


def test_an_aborted_call_records_its_status_code(tracer, exporter):
    engine_tracing = EngineTracing(tracer, 1.0)
    inner = FakeGeneration(engine_tracing, abort_with=grpc.StatusCode.INVALID_ARGUMENT)
    servicer = TracedGenerationServicer(inner, tracer, engine_tracing, "tiny")
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(collect(servicer, generate_request(), FakeContext()))
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.status.description == "INVALID_ARGUMENT: bad request"
    assert span.attributes["error.type"] == "INVALID_ARGUMENT"


def test_a_cancelled_call_ends_its_span(tracer, exporter):
    engine_tracing = EngineTracing(tracer, 1.0)
    servicer = TracedGenerationServicer(FakeGeneration(engine_tracing), tracer, engine_tracing, "tiny")
    asyncio.run(collect(servicer, generate_request(), FakeContext(), limit=1))
    (span,) = exporter.get_finished_spans()
    assert span.attributes["stepahead.request.cancelled"] is True
    assert "gen_ai.response.finish_reasons" not in span.attributes
    assert not step_is_traced(engine_tracing, "r1")


def test_other_rpcs_pass_through(tracer):
    class Inner:
        async def GetModelInfo(self, request, context):
            return "info"

    servicer = TracedGenerationServicer(Inner(), tracer, EngineTracing(tracer, 1.0), "tiny")
    assert asyncio.run(servicer.GetModelInfo(None, None)) == "info"
