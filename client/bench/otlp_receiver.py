"""A minimal OTLP/gRPC trace receiver on 127.0.0.1: keeps or counts the spans services export to it.

Used by `stepahead bench --tracing` (a sink that costs the services what a real collector would)
and by the tracing tests (which read the spans back).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2


@dataclass(frozen=True)
class ReceivedLink:
    """A span link as received: the linked span and the link's attributes."""

    trace_id: str
    span_id: str
    attributes: dict


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids as hex strings, attributes as plain Python values."""

    service_name: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    """Empty for a root span."""
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict = field(default_factory=dict)
    links: tuple[ReceivedLink, ...] = ()


def any_value(value: common_pb2.AnyValue):
    """An OTLP AnyValue as a Python value (arrays as lists)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(key_values) -> dict:
    return {kv.key: any_value(kv.value) for kv in key_values}


def spans_of(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """Flatten one Export request into ReceivedSpans."""
    spans = []
    for resource_spans in request.resource_spans:
        service = _attributes(resource_spans.resource.attributes).get("service.name", "")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        service_name=service,
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        status_code=span.status.code,
                        attributes=_attributes(span.attributes),
                        links=tuple(
                            ReceivedLink(link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))
                            for link in span.links
                        ),
                    )
                )
    return spans


class OtlpReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Serves TraceService.Export on 127.0.0.1 (any free port); thread-safe access to what arrived."""

    def __init__(self, keep_spans: bool = True) -> None:
        """``keep_spans``: False only counts them (for long benchmark runs)."""
        self.keep_spans = keep_spans
        self.num_spans = 0
        self._spans: list[ReceivedSpan] = []
        self._changed = threading.Condition()
        self._server: grpc.Server | None = None
        self.endpoint = ""

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context):
        spans = spans_of(request)
        with self._changed:
            self.num_spans += len(spans)
            if self.keep_spans:
                self._spans.extend(spans)
            self._changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def start(self) -> str:
        """Start serving; returns the endpoint for OTEL_EXPORTER_OTLP_ENDPOINT (http://127.0.0.1:PORT)."""
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        return self.endpoint

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None

    def spans(self) -> list[ReceivedSpan]:
        """A snapshot of the spans received so far."""
        with self._changed:
            return list(self._spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout_s: float) -> bool:
        """Block until ``predicate(spans)`` holds (checked on every export) or the timeout; returns it."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._spans), timeout=timeout_s)

    def __enter__(self) -> OtlpReceiver:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
