"""`stepahead bench --sweep`: throughput over a list of concurrencies for every speculation configuration
(no speculation, each fixed K = 1..K_max, dynamic K), in one run, with one stack per configuration and
round; the report gives, per concurrency, dynamic K over the best other configuration, and per
configuration the sum over concurrencies.

Targets (issue 21): dynamic >= 0.95x the best other configuration at every concurrency (medians over the
rounds), and a higher sum over the concurrencies than every fixed K.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

NO_SPEC = "no spec"
DYNAMIC = "dynamic"
RATIO_TARGET = 0.95


@dataclass(frozen=True)
class SweepConfig:
    """One line of the sweep: the drafter on or off, and the scheduler's --num-spec-tokens."""

    label: str
    speculate: bool
    num_spec_tokens: str
    """"dynamic" or N (ignored without speculation)."""


def sweep_configs(max_k: int) -> list[SweepConfig]:
    """No speculation, K = 1..max_k fixed, dynamic."""
    if max_k < 1:
        raise ValueError(f"sweep_max_k: must be >= 1, got {max_k}")
    return [SweepConfig(NO_SPEC, False, "0"),
            *(SweepConfig(f"K={k}", True, str(k)) for k in range(1, max_k + 1)),
            SweepConfig(DYNAMIC, True, DYNAMIC)]


def sweep_plan(max_k: int, rounds: int) -> list[tuple[int, SweepConfig]]:
    """(round, config) in run order: the configurations' order reverses every other round, so slow drift of
    a shared machine does not favour whichever runs first."""
    if rounds < 1:
        raise ValueError(f"rounds: must be >= 1, got {rounds}")
    configs = sweep_configs(max_k)
    return [(r, config) for r in range(rounds) for config in (configs if r % 2 == 0 else configs[::-1])]


def executor_overrides(config: SweepConfig, spec_method: str, max_k: int, draft_model: str | None) -> dict:
    """Executor flag values of a configuration's stack: the drafter (drafting up to max_k) or none."""
    if not config.speculate:
        return {"spec_method": "none", "draft_model": None}
    return {"spec_method": spec_method, "num_spec_tokens": max_k,
            "draft_model": draft_model if spec_method == "draft_model" else None}


def scheduler_extra_flags(config: SweepConfig) -> list[str]:
    """The scheduler's --num-spec-tokens of a configuration (none without speculation)."""
    return ["--num-spec-tokens", config.num_spec_tokens] if config.speculate else []


def sweep_summary(runs: list[dict]) -> dict:
    """Median throughput per (config, concurrency) over rounds; dynamic / best other per concurrency; sums;
    whether the targets are met. ``runs``: dicts with config, concurrency, throughput_tok_s."""
    samples: dict[str, dict[int, list[float]]] = {}
    for run in runs:
        samples.setdefault(run["config"], {}).setdefault(run["concurrency"], []).append(run["throughput_tok_s"])
    medians = {label: {c: statistics.median(v) for c, v in sorted(per_c.items())} for label, per_c in samples.items()}
    concurrencies = sorted({c for per_c in medians.values() for c in per_c})
    sums = {label: sum(per_c.values()) for label, per_c in medians.items()}
    summary: dict = {"median_throughput_tok_s": medians, "sum_over_concurrencies": sums}
    if DYNAMIC not in medians:
        return summary
    ratios, best = {}, {}
    for c in concurrencies:
        others = {label: per_c[c] for label, per_c in medians.items() if label != DYNAMIC and c in per_c}
        if c in medians[DYNAMIC] and others:
            best[c] = max(others, key=others.__getitem__)
            ratios[c] = medians[DYNAMIC][c] / others[best[c]]
    fixed = [label for label in sums if label.startswith("K=")]
    mean_k: dict[int, list[float]] = {}
    for run in runs:
        if run["config"] == DYNAMIC and "mean_k" in run:
            mean_k.setdefault(run["concurrency"], []).append(run["mean_k"])
    summary.update(
        dynamic_mean_k={c: statistics.median(v) for c, v in sorted(mean_k.items())},
        dynamic_over_best_other=ratios,
        best_other=best,
        ratio_target_met=bool(ratios) and min(ratios.values()) >= RATIO_TARGET,
        sum_target_met=all(sums[DYNAMIC] > sums[label] for label in fixed),
    )
    return summary


def format_sweep(summary: dict) -> str:
    """The table: throughput per configuration and concurrency, the dynamic ratios and the sums."""
    medians = summary["median_throughput_tok_s"]
    concurrencies = sorted({c for per_c in medians.values() for c in per_c})
    lines = ["config    " + "".join(f"{'c=' + str(c):>9}" for c in concurrencies) + f"{'sum':>10}"]
    for label, per_c in medians.items():
        cells = "".join(f"{per_c[c]:9.1f}" if c in per_c else f"{'-':>9}" for c in concurrencies)
        lines.append(f"{label:<10}{cells}{summary['sum_over_concurrencies'][label]:10.1f}")
    ratios = summary.get("dynamic_over_best_other")
    if ratios:
        lines.append("dyn/best  " + "".join(f"{ratios[c]:9.2f}" if c in ratios else f"{'-':>9}"
                                          for c in concurrencies))
        mean_k = summary.get("dynamic_mean_k", {})
        lines.append("dyn K     " + "".join(f"{mean_k[c]:9.2f}" if c in mean_k else f"{'-':>9}" for c in concurrencies))
        lines.append(f"targets: dynamic >= {RATIO_TARGET}x best at every c: {summary['ratio_target_met']}; "
                     f"sum above every fixed K: {summary['sum_target_met']}")
    return "\n".join(lines)


def write_sweep_plot(summary: dict, title: str, path) -> None:
    """Throughput against concurrency, one line per configuration (log2 concurrency axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for label, per_c in summary["median_throughput_tok_s"].items():
        style = {"linewidth": 3, "color": "black"} if label == DYNAMIC else {"linestyle": "--" if label == NO_SPEC
                                                                                else "-"}
        axis.plot(list(per_c), list(per_c.values()), marker="o", label=label, **style)
    axis.set_xscale("log", base=2)
    concurrencies = sorted({c for per_c in summary["median_throughput_tok_s"].values() for c in per_c})
    axis.set_xticks(concurrencies, [str(c) for c in concurrencies])
    axis.set_xlabel("concurrency")
    axis.set_ylabel("throughput (output tok/s, median over rounds)")
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
