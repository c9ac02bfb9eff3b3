"""`stepahead bench --tracing`: the same load with tracing off and on, and the throughput ratio on/off.

With tracing on, both services export to an OTLP receiver inside the bench process (so the export
path costs what it would with a real collector) with the step sampling rate at its default, unless
STEPAHEAD_STEP_TRACE_RATE is set. Off and on stacks alternate (off, on, on, off, ...) so that slow
drift of a shared machine does not favour one side; the ratio compares medians.
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from collections.abc import Mapping

from stepahead_common.tracing_config import DEFAULT_STEP_TRACE_RATE, STEP_TRACE_RATE_VAR


def tracing_order(rounds: int) -> list[bool]:
    """Whether each successive stack traces: pairs off/on, every other pair reversed."""
    if rounds < 1:
        raise ValueError(f"--tracing-rounds: must be >= 1, got {rounds}")
    return [on for i in range(rounds) for on in ((False, True) if i % 2 == 0 else (True, False))]


def stack_env(tracing_on: bool, endpoint: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The services' environment: this one without OTEL_*, then an OTLP endpoint or the SDK disabled."""
    environ = os.environ if environ is None else environ
    env = {key: value for key, value in environ.items() if not key.startswith("OTEL_")}
    if tracing_on:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    else:
        env["OTEL_SDK_DISABLED"] = "true"
    return env


def step_trace_rate(environ: Mapping[str, str] | None = None) -> str:
    """The step sampling rate the services will use (for the report)."""
    environ = os.environ if environ is None else environ
    return environ.get(STEP_TRACE_RATE_VAR) or f"{DEFAULT_STEP_TRACE_RATE} (default)"


def mode_label(tracing_on: bool) -> str:
    """Suffix of a load run's label naming its tracing mode."""
    return " trace=on" if tracing_on else " trace=off"


def tracing_ratios(runs: list[dict]) -> dict[str, float]:
    """Median throughput with tracing on over off, per concurrency, inflight depth and drafter."""
    throughputs: dict[tuple[int, int, str], dict[bool, list[float]]] = defaultdict(lambda: {False: [], True: []})
    for run in runs:
        if "tracing" in run:
            configuration = (run["concurrency"], run["max_inflight_steps"], run.get("spec_method", "none"))
            throughputs[configuration][run["tracing"]].append(run["throughput_tok_s"])
    ratios = {}
    for (concurrency, inflight, spec_method), by_mode in sorted(throughputs.items()):
        if by_mode[False] and by_mode[True]:
            spec = "" if spec_method == "none" else f" spec={spec_method}"
            key = f"throughput_tracing_on_over_off[c={concurrency} inflight={inflight}{spec}]"
            ratios[key] = statistics.median(by_mode[True]) / statistics.median(by_mode[False])
    return ratios
