"""Tracing configuration from the standard OTEL_* environment variables, and the SDK provider it builds.

Tracing is on only when an exporter is configured: OTEL_TRACES_EXPORTER names one (other than
"none"), or an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
OTEL_SDK_DISABLED=true turns it off regardless. When off, nothing of the SDK is imported or built.
Everything else (sampler, batch processor, exporter endpoint, headers, resource attributes) is read
by the SDK itself from its own OTEL_* variables.

Shared by both services: this module imports nothing from either of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

OTLP_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
OTLP_PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
STEP_TRACE_RATE_VAR = "STEPAHEAD_STEP_TRACE_RATE"
DEFAULT_STEP_TRACE_RATE = 0.1
"""One step in ten gets a span (plus its executor child spans): a few spans a second at most."""

_OTLP_ENTRY_POINTS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
_EXPORTER_GROUP = "opentelemetry_traces_exporter"


@dataclass(frozen=True)
class TracingConfig:
    """Whether and how a stepahead service traces."""

    enabled: bool = False
    service_name: str = "stepahead"
    """The resource's service.name: OTEL_SERVICE_NAME, else the service's own default."""
    exporters: tuple[str, ...] = ("otlp",)
    """OTEL_TRACES_EXPORTER names: "otlp", "console", or any installed exporter entry point."""
    otlp_protocol: str = "grpc"
    step_trace_rate: float = DEFAULT_STEP_TRACE_RATE
    """Fraction of steps that get a span on the scheduler (STEPAHEAD_STEP_TRACE_RATE, 0..1)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.step_trace_rate <= 1.0:
            raise ValueError(f"{STEP_TRACE_RATE_VAR}: must be in [0, 1], got {self.step_trace_rate}")
        if self.otlp_protocol not in _OTLP_ENTRY_POINTS:
            raise ValueError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL: must be one of {sorted(_OTLP_ENTRY_POINTS)}, got {self.otlp_protocol!r}"
            )
        if self.enabled and not self.exporters:
            raise ValueError("OTEL_TRACES_EXPORTER: tracing is on but no exporter is named")
        if not self.service_name:
            raise ValueError("OTEL_SERVICE_NAME: must not be empty")

    @classmethod
    def from_env(cls, environ: Mapping[str, str], default_service_name: str) -> TracingConfig:
        """Read the standard OTEL_* variables (and STEPAHEAD_STEP_TRACE_RATE) from ``environ``."""
        named = [name.strip() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
        exporters = tuple(name for name in named if name != "none")
        if named:
            enabled = bool(exporters)
        else:
            enabled = any(environ.get(var) for var in OTLP_ENDPOINT_VARS)
            exporters = ("otlp",)
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            enabled = False
        protocol = next((environ[var] for var in OTLP_PROTOCOL_VARS if environ.get(var)), "grpc")
        return cls(
            enabled=enabled,
            service_name=environ.get("OTEL_SERVICE_NAME") or default_service_name,
            exporters=exporters,
            otlp_protocol=protocol.strip(),
            step_trace_rate=_parse_rate(environ.get(STEP_TRACE_RATE_VAR)),
        )


def _parse_rate(text: str | None) -> float:
    if text is None or not text.strip():
        return DEFAULT_STEP_TRACE_RATE
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{STEP_TRACE_RATE_VAR}: not a number: {text!r}") from None


def process_tracer(
    config: TracingConfig, tracer_name: str, provider: TracerProvider | None = None
) -> tuple[TracerProvider | None, Tracer | None]:
    """A process's tracer provider and tracer, or (None, None) when tracing is off.

    ``provider``: an SDK TracerProvider to use instead of building one from ``config`` (tests).
    """
    if not config.enabled:
        return None, None
    provider = provider or build_tracer_provider(config)
    return provider, provider.get_tracer(tracer_name)


def build_tracer_provider(config: TracingConfig) -> TracerProvider:
    """An SDK TracerProvider with one batch processor per configured exporter.

    The sampler comes from OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, batching from OTEL_BSP_*.
    The provider flushes its spans at interpreter exit; call shutdown() to flush earlier.
    """
    # Imported here so that a service with tracing off never loads the SDK.
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from stepahead_common.version import package_version

    resource = Resource.create({SERVICE_NAME: config.service_name, SERVICE_VERSION: package_version()})
    provider = TracerProvider(resource=resource)
    for name in config.exporters:
        provider.add_span_processor(BatchSpanProcessor(load_span_exporter(name, config.otlp_protocol)))
    return provider


def load_span_exporter(name: str, otlp_protocol: str = "grpc") -> SpanExporter:
    """Instantiate the exporter registered under an OTEL_TRACES_EXPORTER name (its own env config applies)."""
    from importlib.metadata import entry_points

    entry_name = _OTLP_ENTRY_POINTS[otlp_protocol] if name == "otlp" else name
    found = entry_points(group=_EXPORTER_GROUP, name=entry_name)
    if not found:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER: no installed span exporter named {entry_name!r} "
            f"(installed: {sorted(e.name for e in entry_points(group=_EXPORTER_GROUP))})"
        )
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter
