"""The SDK forwards the caller's current span as W3C traceparent metadata, and nothing without one."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

from client.requests import call_metadata
from client.tracing import trace_metadata


def test_no_span_no_metadata():
    assert trace_metadata() == ()
    assert call_metadata() == ()


def test_current_span_becomes_traceparent():
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("caller") as span:
        metadata = dict(call_metadata())
    context = span.get_span_context()
    version, trace_id, span_id, flags = metadata["traceparent"].split("-")
    assert (version, trace_id, span_id) == ("00", f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert int(flags, 16) & 0x01  # sampled
    assert all(key == key.lower() for key in metadata)
