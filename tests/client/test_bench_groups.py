"""`stepahead bench --executor-groups 1 2 --pin-executors`: alternating order, labels, pinning, ratios."""

from __future__ import annotations

import os

import pytest

from client.bench.groups_compare import executor_cpus, group_label, group_ratios
from client.stack import LocalStack


def test_labels_name_the_group_count_only_when_several_are_compared():
    assert group_label(1, [1]) == ""
    assert group_label(1, [1, 2]) == " groups=1" and group_label(2, [1, 2]) == " groups=2"


def test_pinning_gives_executor_i_cpu_i():
    cpus = sorted(os.sched_getaffinity(0))
    assert executor_cpus(2, pin=False) is None
    assert executor_cpus(2, pin=True) == [str(cpus[0]), str(cpus[1 % len(cpus)])]


def test_the_ratio_is_the_median_over_rounds_of_n_groups_over_one():
    runs = []
    for round_index, (one, two) in enumerate([(100, 180), (100, 150), (110, 220)]):
        runs.append({"round": round_index, "label": "c=16 inflight=2 groups=1", "executor_groups": 1,
                     "throughput_tok_s": one})
        runs.append({"round": round_index, "label": "c=16 inflight=2 groups=2", "executor_groups": 2,
                     "throughput_tok_s": two})
    assert group_ratios(runs) == {"throughput_groups2_over_groups1[c=16 inflight=2]": pytest.approx(1.8)}


def test_a_stack_pins_each_executor_with_taskset():
    stack = LocalStack("model", executor_groups=2, executor_cpus=["0", "1"])
    assert [executor.argv[:3] for executor in stack.executors] == [["taskset", "-c", "0"], ["taskset", "-c", "1"]]
    assert [executor.name for executor in stack.executors] == ["executor 0", "executor 1"]
    with pytest.raises(ValueError, match="executor_cpus: one CPU list per executor group"):
        LocalStack("model", executor_groups=2, executor_cpus=["0"])
    with pytest.raises(ValueError, match="executor_groups: must be >= 1"):
        LocalStack("model", executor_groups=0)
