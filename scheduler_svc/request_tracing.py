"""One span per Generate call on the scheduler, with gen_ai.* attributes and its phases as child spans.

The span is current while the wrapped Generate runs, so the engine registers it for the request
(step spans link to it) and it is a child of the gRPC server span, itself a child of the caller's
span (W3C traceparent in the call metadata). It ends with the final message, which carries the
usage, timings and speculation counts: the queue / prefill / decode child spans are laid out from
those timings then, so the step loop does no per-request span work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
from opentelemetry import trace

from scheduler_svc.step_tracing import EngineTracing
from stepahead_proto import generation_pb2

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

FINISH_REASON_NAMES = {
    generation_pb2.FINISH_REASON_STOP: "stop",
    generation_pb2.FINISH_REASON_LENGTH: "length",
    generation_pb2.FINISH_REASON_ABORT: "abort",
}
PHASE_SPAN_NAMES = ("stepahead.queue", "stepahead.prefill", "stepahead.decode")


class TracedGenerationServicer:
    """Wraps a Generation servicer: Generate gets a request span, every other RPC passes through."""

    def __init__(self, inner: Any, tracer: Tracer, engine_tracing: EngineTracing, model_name: str) -> None:
        self.inner = inner
        self.tracer = tracer
        self.engine_tracing = engine_tracing
        self.model_name = model_name

    async def Generate(
        self, request: generation_pb2.GenerateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[generation_pb2.GenerateResponse]:
        operation = "chat" if request.WhichOneof("prompt") == "chat" else "text_completion"
        model = request.model or self.model_name
        with self.tracer.start_as_current_span(
            f"{operation} {model}",
            attributes=request_attributes(request, operation, model),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                async for item in self.inner.Generate(request, context):
                    if item.finish_reason != generation_pb2.FINISH_REASON_UNSPECIFIED:
                        record_final_message(span, self.tracer, item)
                    yield item
            except (asyncio.CancelledError, GeneratorExit):
                span.set_attribute("stepahead.request.cancelled", True)
                raise
            except BaseException as error:
                record_error(span, error, context)
                raise
            finally:
                self.engine_tracing.forget_request_span(span.get_span_context())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def request_attributes(request: generation_pb2.GenerateRequest, operation: str, model: str) -> dict[str, Any]:
    """gen_ai.* request attributes known before the request runs."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "stepahead",
        "gen_ai.request.model": model,
    }
    if request.request_id:
        attributes["stepahead.request.id"] = request.request_id
    sampling, stopping = request.sampling, request.stopping
    for field, name in (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"), ("seed", "seed")):
        if sampling.HasField(field):
            attributes[f"gen_ai.request.{name}"] = getattr(sampling, field)
    if stopping.HasField("max_tokens"):
        attributes["gen_ai.request.max_tokens"] = stopping.max_tokens
    return attributes


def record_final_message(span: Span, tracer: Tracer, item: generation_pb2.GenerateResponse) -> None:
    """Usage, finish reason, latencies and speculation counts of a finished request; its phase spans."""
    timings = item.timings
    span.set_attributes(
        {
            "stepahead.request.id": item.request_id,
            "gen_ai.response.id": item.request_id,
            "gen_ai.response.finish_reasons": [FINISH_REASON_NAMES.get(item.finish_reason, "unknown")],
            "gen_ai.usage.input_tokens": item.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": item.usage.completion_tokens,
            "stepahead.request.num_preemptions": item.usage.num_preemptions,
            "stepahead.request.cached_prompt_tokens": item.usage.cached_prompt_tokens,
            "stepahead.request.queue_s": timings.queue_s,
            "stepahead.request.e2e_s": timings.e2e_s,
            "stepahead.request.itl_mean_s": timings.itl_mean_s,
        }
    )
    if timings.ttft_s > 0:
        span.set_attribute("gen_ai.server.time_to_first_token", timings.ttft_s)
    if item.stop_reason:
        span.set_attribute("stepahead.request.stop_reason", item.stop_reason)
    if item.HasField("spec") and item.spec.drafted > 0:
        span.set_attributes(_speculation_attributes(item.spec))
    _record_phases(tracer, span, timings, time.time_ns())


def _speculation_attributes(spec: generation_pb2.SpecStats) -> dict[str, Any]:
    return {
        "stepahead.spec.drafted": spec.drafted,
        "stepahead.spec.accepted": spec.accepted,
        "stepahead.spec.acceptance_rate": spec.accepted / spec.drafted,
        "stepahead.spec.mean_acceptance_length": spec.mean_acceptance_length,
        "stepahead.spec.verify_steps": spec.verify_steps,
        "stepahead.spec.accepted_per_position": list(spec.accepted_per_position),
    }


def _record_phases(tracer: Tracer, parent: Span, timings: generation_pb2.Timings, now_ns: int) -> None:
    """queue: arrival..first scheduled; prefill: ..first token; decode: ..finish (from the scheduler's timings)."""
    arrival_ns = now_ns - int(timings.e2e_s * 1e9)
    marks = [0.0]
    if timings.queue_s > 0 or timings.ttft_s > 0:
        marks.append(timings.queue_s)
    if timings.ttft_s > 0:
        marks += [timings.ttft_s, timings.e2e_s]
    else:
        marks.append(timings.e2e_s)
    context = trace.set_span_in_context(parent)
    for name, start_s, end_s in zip(PHASE_SPAN_NAMES, marks, marks[1:]):
        span = tracer.start_span(name, context=context, start_time=arrival_ns + int(start_s * 1e9))
        span.end(end_time=arrival_ns + int(end_s * 1e9))


def record_error(span: Span, error: BaseException, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """An aborted call: the gRPC status code and details when the servicer set them."""
    code = context.code() if isinstance(error, grpc.aio.AbortError) else None
    if isinstance(code, grpc.StatusCode):
        span.set_attribute("error.type", code.name)
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{code.name}: {context.details() or ''}"))
    else:
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
        span.record_exception(error)
