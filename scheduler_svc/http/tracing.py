"""Spans of HTTP requests, laid out as the gRPC API's are.

``POST /v1/chat/completions`` (SERVER) continues the caller's trace from the W3C ``traceparent``
header (the propagators OTEL_PROPAGATORS names); under it, one ``<operation> <model>`` span per
engine request (n samples: n spans) with the gen_ai.* attributes and queue / prefill / decode
children of request_tracing.py, current while the engine registers the request so step spans link
to it. Off (no tracer), every hook does nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry import trace

from scheduler_svc.request_tracing import record_final_message, request_attributes
from scheduler_svc.step_tracing import EngineTracing
from stepahead_proto import generation_pb2

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

OPERATIONS = {"chat": "chat", "completion": "text_completion"}


class RequestTrace:
    """The spans of one HTTP request; this base class records nothing (tracing off)."""

    @contextmanager
    def engine_request(
        self, index: int, pb: generation_pb2.GenerateRequest, endpoint: str, model: str
    ) -> Iterator[None]:
        """Make choice ``index``'s request span current (while the engine registers the request)."""
        yield

    def finished(self, index: int, item: generation_pb2.GenerateResponse) -> None:
        """Choice ``index`` got its final message."""

    def close(self, status: int, error: str | None = None) -> None:
        """The HTTP response ended with ``status``; spans of unfinished choices end too. Only the first call counts."""


class _RecordingTrace(RequestTrace):
    def __init__(self, tracer: Tracer, engine_tracing: EngineTracing, server_span: Span) -> None:
        self._tracer = tracer
        self._engine_tracing = engine_tracing
        self._server_span = server_span
        self._spans: dict[int, Span] = {}
        self._closed = False

    @contextmanager
    def engine_request(
        self, index: int, pb: generation_pb2.GenerateRequest, endpoint: str, model: str
    ) -> Iterator[None]:
        operation = OPERATIONS.get(endpoint, endpoint)
        span = self._tracer.start_span(
            f"{operation} {model}",
            context=trace.set_span_in_context(self._server_span),
            attributes=request_attributes(pb, operation, model),
        )
        self._spans[index] = span
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield

    def finished(self, index: int, item: generation_pb2.GenerateResponse) -> None:
        span = self._spans.pop(index, None)
        if span is not None:
            record_final_message(span, self._tracer, item)
            self._end(span)

    def close(self, status: int, error: str | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        for span in self._spans.values():
            if error is None:
                span.set_attribute("stepahead.request.cancelled", True)
            else:
                span.set_status(trace.Status(trace.StatusCode.ERROR, error))
            self._end(span)
        self._spans.clear()
        self._server_span.set_attribute("http.response.status_code", status)
        if status >= 500 or error is not None:
            self._server_span.set_status(trace.Status(trace.StatusCode.ERROR, error or str(status)))
        self._server_span.end()

    def _end(self, span: Span) -> None:
        self._engine_tracing.forget_request_span(span.get_span_context())
        span.end()


class HttpTracing:
    """Starts a :class:`RequestTrace` per HTTP request: recording with a tracer, a no-op without."""

    def __init__(self, tracer: Tracer | None = None, engine_tracing: EngineTracing | None = None) -> None:
        self._tracer = tracer
        self._engine_tracing = engine_tracing or EngineTracing()
        self._off = RequestTrace()

    def start(self, method: str, route: str, headers: Mapping[str, str]) -> RequestTrace:
        """The trace of one request, continuing the trace its headers carry."""
        if self._tracer is None:
            return self._off
        from opentelemetry import propagate  # reads OTEL_PROPAGATORS on import: only when tracing is on

        span = self._tracer.start_span(
            f"{method} {route}",
            context=propagate.extract(headers),
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": method, "http.route": route, "url.path": route},
        )
        return _RecordingTrace(self._tracer, self._engine_tracing, span)
