"""`stepahead bench --executor-groups 1 2 [--pin-executors]`: one scheduler over N executor groups vs one.

Each load configuration runs once per group count on a fresh stack, in an order that alternates
round by round (1, 2; then 2, 1; ...) so that drift of a shared machine favours neither. With
--pin-executors executor i runs on CPU i only (taskset) with --num-threads torch threads: one core per
group, the scale-out case on one machine; the scheduler and the load generator are not pinned. The
ratio is throughput with N groups over throughput with one, same round and configuration, its median
over rounds reported.
"""

from __future__ import annotations

import os
import statistics


def group_label(groups: int, counts: list[int]) -> str:
    """Suffix of a run's label naming its group count (none when only one group is benchmarked)."""
    return "" if counts == [1] else f" groups={groups}"


def executor_cpus(groups: int, pin: bool) -> list[str] | None:
    """CPU list of each executor when pinned (executor i on CPU i, wrapping around), else None."""
    if not pin:
        return None
    available = sorted(os.sched_getaffinity(0))
    return [str(available[index % len(available)]) for index in range(groups)]


def group_ratios(runs: list[dict]) -> dict[str, float]:
    """Median over rounds of throughput with N groups / throughput with one group, per configuration."""
    one_group = {(run.get("round", 0), run["label"].replace(" groups=1", "")): run
                 for run in runs if run.get("executor_groups", 1) == 1}
    samples: dict[str, list[float]] = {}
    for run in runs:
        groups = run.get("executor_groups", 1)
        if groups == 1:
            continue
        base_label = run["label"].replace(f" groups={groups}", "")
        twin = one_group.get((run.get("round", 0), base_label))
        if twin is None:
            continue
        samples.setdefault(f"throughput_groups{groups}_over_groups1[{base_label}]", []).append(
            run["throughput_tok_s"] / twin["throughput_tok_s"])
    return {name: statistics.median(values) for name, values in samples.items()}
