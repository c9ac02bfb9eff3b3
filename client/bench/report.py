"""Writes the benchmark's JSON and PNG plot and prints its table."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))


def write_plot(report: dict, path: Path) -> None:
    """Throughput per concurrency (ours vs HF) and ITL percentiles vs the bare forward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = [f"{r['label']}" for r in runs]
    left.bar(labels, [r["throughput_tok_s"] for r in runs], color="tab:blue", label="stepahead")
    for hf in (h for h in report.get("hf", []) if h.get("round", 0) == 0):
        left.axhline(hf["throughput_tok_s"], linestyle="--", color="tab:orange" if hf["batch_size"] == 1 else "tab:red",
                     label=f"HF generate batch {hf['batch_size']}")
    left.set_ylabel("output tokens / s")
    left.set_title("Throughput")
    left.legend(fontsize=8)
    left.tick_params(axis="x", labelrotation=20, labelsize=8)
    right.bar([l + " p50" for l in labels], [r["itl_ms_p50"] for r in runs], color="tab:green")
    right.bar([l + " p99" for l in labels], [r["itl_ms_p99"] for r in runs], color="tab:olive")
    for bare in report.get("bare_forward", []):
        if bare.get("query_len", 1) == 1:
            right.axhline(bare["median_ms"], linestyle="--", color="black",
                          label=f"bare forward, batch {bare['batch_size']}")
    right.set_ylabel("ms")
    right.set_title("Inter-token latency")
    right.legend(fontsize=8)
    right.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.suptitle(report.get("title", "stepahead bench"), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_table(report: dict) -> str:
    """A plain-text summary of every run and baseline."""
    lines = [f"{'run':<28}{'tok/s':>9}{'TTFT p50':>10}{'ITL p50':>9}{'ITL p99':>9}{'step':>7}{'bubble':>8}{'reqs':>6}"]
    several_rounds = any(r.get("round", 0) for r in report["runs"])
    labels = [f"{r['label']} r{r.get('round', 0)}" if several_rounds else r["label"] for r in report["runs"]]
    for label, r in zip(labels, report["runs"]):
        lines.append(f"{label:<28}{r['throughput_tok_s']:>9.1f}{r['ttft_ms_p50']:>10.1f}"
                     f"{r['itl_ms_p50']:>9.1f}{r['itl_ms_p99']:>9.1f}{r['executor_step_ms_mean']:>7.1f}"
                     f"{100 * r['bubble_fraction']:>7.1f}%{r['num_requests']:>6}")
    lines.append("(ms; step = the executor's mean compute time per step during the run)")
    for label, r in zip(labels, report["runs"]):
        if r.get("steps"):
            bare = r.get("bare_forward", {}).get("median_ms", float("nan"))
            lines.append(f"{label}: executor step {r['executor_step_ms_mean']:.1f} ms, of which forward "
                         f"{r.get('executor_forward_ms_mean', float('nan')):.1f} (updates + flatten + model, no LM "
                         f"head); bare forward + LM head right after the run {bare:.1f} ms on decode contexts "
                         f"{min(r.get('decode_contexts') or [0])}..{max(r.get('decode_contexts') or [0])}")
    for hf in report.get("hf", []):
        lines.append(f"{'HF generate batch ' + str(hf['batch_size']):<28}{hf['throughput_tok_s']:>9.1f}"
                     f"{'':>10}{'':>9}{'':>9}{hf['num_requests']:>6}")
    for bare in report.get("bare_forward", []):
        contexts = bare.get("context_lens", [])
        lines.append(f"bare forward batch {bare['batch_size']} x {bare.get('query_len', 1)} tokens, "
                     f"context {min(contexts, default=0)}..{max(contexts, default=0)}: median {bare['median_ms']:.1f} ms "
                     f"(min {bare['min_ms']:.1f}, max {bare['max_ms']:.1f})")
    for name, value in report.get("ratios", {}).items():
        lines.append(f"{name}: {value:.3f}")
    return "\n".join(lines)
