"""The scheduler's OpenTelemetry tracing, configured by the standard OTEL_* environment variables.

Spans (when on):
- ``/stepahead.v1.Generation/<Method>`` (SERVER): the gRPC instrumentation's server span; it
  continues the caller's trace from the W3C ``traceparent`` call metadata. Health checks and
  reflection are not traced.
- ``<operation> <model>`` (e.g. ``text_completion SmolLM2``): one per Generate call, from its start
  to its final message, with gen_ai.* attributes; children ``stepahead.queue``,
  ``stepahead.prefill``, ``stepahead.decode``.
- ``POST /v1/...`` (SERVER): the HTTP front's span per request, continuing the ``traceparent``
  header, over the same ``<operation> <model>`` spans (one per choice); see http/tracing.py.
- ``stepahead.step``: one per sampled step (STEPAHEAD_STEP_TRACE_RATE, default 0.1), see
  step_tracing.py; the executor's ``executor.*`` phase spans are its children.

Off, no SDK object exists: the hooks test one boolean and return.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scheduler_svc.http.tracing import HttpTracing
from scheduler_svc.request_tracing import TracedGenerationServicer
from scheduler_svc.step_tracing import EngineTracing
from stepahead_common.tracing_config import TracingConfig, process_tracer
from stepahead_proto import generation_pb2, generation_pb2_grpc

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

DEFAULT_SERVICE_NAME = "stepahead-scheduler"
TRACER_NAME = "stepahead.scheduler"
GENERATION_SERVICE = generation_pb2.DESCRIPTOR.services_by_name["Generation"].full_name


class SchedulerTracing:
    """Tracing of one scheduler process: the engine hooks, the Generate wrapper, the gRPC interceptor."""

    def __init__(self, config: TracingConfig, provider: TracerProvider | None = None) -> None:
        """``provider``: an SDK TracerProvider to use (tests); built from ``config`` when None."""
        self.config = config
        self.enabled = config.enabled
        self.provider, tracer = process_tracer(config, TRACER_NAME, provider)
        self._tracer = tracer
        self.engine = EngineTracing(tracer, config.step_trace_rate)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> SchedulerTracing:
        """Tracing as the OTEL_* variables in ``environ`` configure it (off unless an exporter is set)."""
        return cls(TracingConfig.from_env(environ, DEFAULT_SERVICE_NAME))

    def server_interceptors(self) -> list[Any]:
        """Interceptors for grpc.aio.server(): a server span per Generation RPC (none when off)."""
        if not self.enabled:
            return []
        from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

        interceptor = aio_server_interceptor(  # type: ignore[no-untyped-call]  # untyped in the instrumentation
            self.provider, filter_=filters.service_name(GENERATION_SERVICE)
        )
        return [interceptor]

    def wrap_servicer(self, servicer: generation_pb2_grpc.GenerationServicer, model_name: str) -> Any:
        """The servicer to register: ``servicer`` itself when off, else one that traces each Generate."""
        if self._tracer is None:
            return servicer
        return TracedGenerationServicer(servicer, self._tracer, self.engine, model_name)

    def http(self) -> HttpTracing:
        """Spans of the HTTP front's requests (no-ops when off)."""
        return HttpTracing(self._tracer, self.engine)

    def shutdown(self) -> None:
        """Flush and stop the exporters (no-op when off)."""
        if self.provider is not None:
            self.provider.shutdown()
