"""`stepahead bench --api grpc http`: the same load through the gRPC API and the HTTP front, one stack.

Both APIs run against the same scheduler process, one after the other at each concurrency, in an
order that alternates round by round (grpc, http; then http, grpc; ...) so that drift of a shared
machine favours neither. The ratio is HTTP throughput over gRPC throughput of the same round and
configuration, its median over rounds reported. On a shared machine the executor's speed drifts
between runs by more than the front could cost, so a second ratio divides that out: output tokens
per second of executor compute, HTTP over gRPC (1.0: the front never held the executor back; the
bubble, the executor's idle time between steps, is in each run's figures too).
"""

from __future__ import annotations

import statistics

API_CHOICES = ("grpc", "http")


def api_label(api: str) -> str:
    """Suffix of a run's label naming its API (none for gRPC, so existing labels and ratios keep their names)."""
    return "" if api == "grpc" else f" api={api}"


def http_ratios(runs: list[dict]) -> dict[str, float]:
    """Median over rounds of HTTP throughput / gRPC throughput, per configuration."""
    grpc_runs = {(run.get("round", 0), run["label"]): run for run in runs if run.get("api", "grpc") == "grpc"}
    samples: dict[str, list[float]] = {}
    for run in runs:
        if run.get("api") != "http":
            continue
        base_label = run["label"].replace(api_label("http"), "")
        twin = grpc_runs.get((run.get("round", 0), base_label))
        if twin is None:
            continue
        samples.setdefault(f"throughput_http_over_grpc[{base_label}]", []).append(
            run["throughput_tok_s"] / twin["throughput_tok_s"])
        if run.get("executor_busy_s") and twin.get("executor_busy_s"):
            samples.setdefault(f"tokens_per_executor_second_http_over_grpc[{base_label}]", []).append(
                (run["output_tokens"] / run["executor_busy_s"]) / (twin["output_tokens"] / twin["executor_busy_s"]))
    return {name: statistics.median(values) for name, values in samples.items()}
