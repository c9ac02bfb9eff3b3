"""The speculative-decoding part of the benchmark: measured speedup against what AL, V(K) and c predict.

With acceptance length AL (tokens per verify step), V(K) the cost of one verify forward of K + 1
tokens relative to a one-token decode step, and c the drafter's cost per draft token relative to
that step, speculation should speed decoding up by AL / (V(K) + K * c). The measured speedup over
the same run without speculation, divided by that, is the efficiency of the speculation machinery.
"""

from __future__ import annotations


def spec_variants(spec_method: str) -> list[str]:
    """The drafter settings one bench run compares: without speculation, then with the chosen drafter."""
    return ["none"] if spec_method == "none" else ["none", spec_method]


def speculation_ratios(runs: list[dict], bare_1: float, bare_verify: float, k: int) -> dict:
    """For each speculative run, the figures the issue asks for, paired with its no-speculation twin."""
    ratios: dict = {}
    v_k = bare_verify / bare_1
    ratios[f"V({k})"] = v_k
    baseline = {(r["concurrency"], r["max_inflight_steps"]): r for r in runs if r.get("spec_method") == "none"}
    for run in runs:
        if run.get("spec_method") in (None, "none") or "spec_drafted" not in run:
            continue
        twin = baseline.get((run["concurrency"], run["max_inflight_steps"]))
        if twin is None:
            continue
        draft_ms_per_token = 1000 * run["executor_draft_s"] / max(run["spec_drafted"], 1)
        c = draft_ms_per_token / bare_1
        expected = run["mean_acceptance_length"] / (v_k + k * c)
        measured = run["throughput_tok_s"] / twin["throughput_tok_s"]
        label = run["label"]
        ratios[f"acceptance_rate[{label}]"] = run["acceptance_rate"]
        ratios[f"mean_acceptance_length[{label}]"] = run["mean_acceptance_length"]
        ratios[f"drafter_cost_c[{label}]"] = c
        ratios[f"expected_speedup[{label}]"] = expected
        ratios[f"measured_speedup[{label}]"] = measured
        ratios[f"measured_over_expected[{label}]"] = measured / expected
    return ratios
