"""Writes the benchmark's JSON and PNG plot and prints its table."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


def write_json(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))


@dataclass(frozen=True)
class RoundSpread:
    """One figure of one configuration over the benchmark's rounds: the median and the extremes."""

    label: str
    median: float
    low: float
    high: float


def spread_per_label(runs: list[dict], key: str, scale: float = 1.0) -> list[RoundSpread]:
    """``run[key] * scale`` grouped by run label (first-seen order), one spread per label, so that
    several rounds of a configuration give one bar rather than bars drawn over each other."""
    values: dict[str, list[float]] = {}
    for run in runs:
        values.setdefault(run["label"], []).append(run[key] * scale)
    return [RoundSpread(label, statistics.median(v), min(v), max(v)) for label, v in values.items()]


def _bars(axis, spreads: list[RoundSpread], suffix: str, color: str) -> None:
    """Median bars with a min-max whisker (the whisker is empty for a single round)."""
    axis.bar(
        [s.label + suffix for s in spreads],
        [s.median for s in spreads],
        yerr=[[s.median - s.low for s in spreads], [s.high - s.median for s in spreads]],
        capsize=3,
        color=color,
    )


def _median_bare_forwards(report: dict) -> dict[int, float]:
    """The one-token bare forward's median time per batch size, over rounds."""
    per_batch: dict[int, list[float]] = {}
    for bare in report.get("bare_forward", []):
        if bare.get("query_len", 1) == 1:
            per_batch.setdefault(bare["batch_size"], []).append(bare["median_ms"])
    return {batch: statistics.median(times) for batch, times in sorted(per_batch.items())}


def write_plot(report: dict, path: Path) -> None:
    """Throughput (ours vs HF), ITL percentiles vs the bare forward, and the executor's bubble, per
    configuration: medians over the rounds, whiskers from the slowest to the fastest round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    rounds = max(Counter(run["label"] for run in runs).values())
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [2, 3, 2]})
    _bars(left, spread_per_label(runs, "throughput_tok_s"), "", "tab:blue")
    for hf in (h for h in report.get("hf", []) if h.get("round", 0) == 0):
        left.axhline(hf["throughput_tok_s"], linestyle="--", color="tab:orange" if hf["batch_size"] == 1 else "tab:red",
                     label=f"HF generate batch {hf['batch_size']}")
    left.set_ylabel("output tokens / s")
    left.set_title("Throughput")
    _bars(middle, spread_per_label(runs, "itl_ms_p50"), " p50", "tab:green")
    _bars(middle, spread_per_label(runs, "itl_ms_p99"), " p99", "tab:olive")
    for batch, median_ms in _median_bare_forwards(report).items():
        middle.axhline(median_ms, linestyle="--", color="black", label=f"bare forward, batch {batch}")
    middle.set_ylabel("ms")
    middle.set_title("Inter-token latency")
    _bars(right, spread_per_label(runs, "bubble_fraction", 100.0), "", "tab:gray")
    right.set_ylabel("% of wall time")
    right.set_title("Executor idle between steps (bubble)")
    for axis, size in ((left, 8), (middle, 7), (right, 8)):
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
        axis.tick_params(axis="x", labelrotation=25, labelsize=size)
    title = report.get("title", "stepahead bench")
    fig.suptitle(f"{title}; medians of {rounds} rounds, whiskers min-max" if rounds > 1 else title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_table(report: dict) -> str:
    """A plain-text summary of every run and baseline."""
    lines = [f"{'run':<28}{'tok/s':>9}{'TTFT p50':>10}{'ITL p50':>9}{'ITL p99':>9}{'TPOT':>7}{'step':>7}"
             f"{'bubble':>8}{'reqs':>6}"]
    several_rounds = any(r.get("round", 0) for r in report["runs"])
    labels = [f"{r['label']} r{r.get('round', 0)}" if several_rounds else r["label"] for r in report["runs"]]
    for label, r in zip(labels, report["runs"]):
        lines.append(f"{label:<28}{r['throughput_tok_s']:>9.1f}{r['ttft_ms_p50']:>10.1f}"
                     f"{r['itl_ms_p50']:>9.1f}{r['itl_ms_p99']:>9.1f}{r.get('tpot_ms_mean', float('nan')):>7.1f}"
                     f"{r['executor_step_ms_mean']:>7.1f}"
                     f"{100 * r['bubble_fraction']:>7.1f}%{r['num_requests']:>6}")
    lines.append("(ms; TPOT = time per output token after the first, mean over requests: unlike the per-token ITL"
                 " it is not 0 for tokens that share a stream message; step = the executor's mean compute time per"
                 " step during the run)")
    lines.append(f"{'run':<28}{'TTFT p99':>10}{'StepReq/tok':>12}{'sched/tok':>10}{'sched CPU ms/tok':>17}"
                 f"{'awaiting step':>14}{'result in':>10}{'step out':>9}")
    for label, r in zip(labels, report["runs"]):
        if "step_requests_per_token" in r:
            lines.append(f"{label:<28}{r['ttft_ms_p99']:>10.1f}{r['step_requests_per_token']:>12.3f}"
                         f"{r['scheduler_invocations_per_token']:>10.3f}"
                         f"{1000 * r['scheduler_cpu_s_per_token']:>17.3f}"
                         f"{100 * r.get('bubble_awaiting_step_fraction', float('nan')):>13.1f}%"
                         f"{r.get('result_delivery_ms_mean', float('nan')):>10.2f}"
                         f"{r.get('step_delivery_ms_mean', float('nan')):>9.2f}")
    lines.append("(awaiting step: executor idle before the next StepRequest had reached it, % of the run's time;"
                 " the rest of the bubble passed with it there. result in: ms from a step's end on the executor to"
                 " the scheduler reading its result; step out: ms from the scheduler writing a StepRequest to the"
                 " executor reading it; per step)")
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
    for hf in report.get("hf_compiled", []):
        lines.append(f"{'HF static compiled batch 1':<28}{hf['throughput_tok_s']:>9.1f}"
                     f"{'':>10}{'':>9}{'':>9}{hf['num_requests']:>6}")
    for label, r in zip(labels, report["runs"]):
        graph = r.get("bare_forward_graph")
        if graph is not None:
            lines.append(f"{label}: bare forward replayed from a CUDA graph {graph['median_ms']:.2f} ms "
                         f"(eager {r['bare_forward']['median_ms']:.2f} ms)")
    floor = report.get("weight_floor")
    if floor is not None:
        lines.append(f"weight-read floor: {floor['weight_bytes'] / 1e9:.2f} GB of weights / "
                     f"{floor['bandwidth_gb_s']:.0f} GB/s measured = {floor['floor_ms']:.2f} ms per decode step "
                     f"(at most {floor['max_tok_s_batch1']:.0f} tok/s at c=1)")
    for bare in report.get("bare_forward", []):
        contexts = bare.get("context_lens", [])
        lines.append(f"bare forward batch {bare['batch_size']} x {bare.get('query_len', 1)} tokens, "
                     f"context {min(contexts, default=0)}..{max(contexts, default=0)}: "
                     f"median {bare['median_ms']:.1f} ms "
                     f"(min {bare['min_ms']:.1f}, max {bare['max_ms']:.1f})")
    for name, value in report.get("ratios", {}).items():
        lines.append(f"{name}: {value:.3f}")
    return "\n".join(lines)
