"""W3C trace context propagation from the SDK's caller to the scheduler.

The SDK creates no spans and installs no provider: it forwards the caller's current span, if any,
as ``traceparent`` (and ``tracestate``/``baggage``, per OTEL_PROPAGATORS) call metadata, so the
scheduler's spans join the caller's trace. With no active span nothing is sent.
"""

from __future__ import annotations

from opentelemetry import trace


def trace_metadata() -> tuple[tuple[str, str], ...]:
    """gRPC metadata carrying the current trace context; empty when no valid span is current."""
    if not trace.get_current_span().get_span_context().is_valid:
        return ()
    # Loaded on first use: its import reads OTEL_PROPAGATORS and loads the propagator entry points.
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple((key.lower(), value) for key, value in carrier.items())
