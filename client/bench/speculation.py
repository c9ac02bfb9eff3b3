"""The speculative-decoding part of the benchmark: measured speedup against what AL, V(K) and c predict.

With acceptance length AL (tokens per verify step), V(K) the cost of one verify forward of K + 1
tokens relative to a one-token decode step, and c the drafter's cost per draft token relative to
that step, speculation should speed decoding up by AL / (V(K) + K * c). The measured speedup over
the same run without speculation, divided by that, is the efficiency of the speculation machinery.
"""

from __future__ import annotations

import statistics


def spec_variants(spec_method: str, also: list[str] | None = None) -> list[str]:
    """The drafter settings one bench run compares: without speculation, then the chosen drafter and any
    ``also`` named (--also-spec-method), in that order."""
    if spec_method == "none":
        return ["none"]
    return ["none", spec_method, *[method for method in also or [] if method not in ("none", spec_method)]]


def speculation_ratios(runs: list[dict], bare_1: float, bare_verify: float, k: int) -> dict:
    """For each speculative configuration, the figures the issue asks for, each run paired with its
    no-speculation twin of the same round; the median over rounds."""
    v_k = bare_verify / bare_1
    baseline = {(r.get("round", 0), r["concurrency"], r["max_inflight_steps"], r.get("num_scheduler_steps", 1)): r
                for r in runs if r.get("spec_method") == "none"}
    samples: dict[str, list[float]] = {}
    for run in runs:
        if run.get("spec_method") in (None, "none") or "spec_drafted" not in run:
            continue
        twin = baseline.get((run.get("round", 0), run["concurrency"], run["max_inflight_steps"],
                             run.get("num_scheduler_steps", 1)))
        if twin is None:
            continue
        for name, value in _speculation_figures(run, twin, v_k, bare_1, k).items():
            samples.setdefault(f"{name}[{run['label']}]", []).append(value)
    return {f"V({k})": v_k, **{name: statistics.median(values) for name, values in samples.items()}}


def _speculation_figures(run: dict, twin: dict, v_k: float, bare_1: float, k: int) -> dict[str, float]:
    draft_ms_per_token = 1000 * run["executor_draft_s"] / max(run["spec_drafted"], 1)
    c = draft_ms_per_token / bare_1
    expected = run["mean_acceptance_length"] / (v_k + k * c)
    measured = run["throughput_tok_s"] / twin["throughput_tok_s"]
    return {
        "acceptance_rate": run["acceptance_rate"],
        "mean_acceptance_length": run["mean_acceptance_length"],
        "drafter_cost_c": c,
        "expected_speedup": expected,
        "measured_speedup": measured,
        "measured_over_expected": measured / expected,
    }
