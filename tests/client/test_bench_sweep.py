"""`stepahead bench --sweep` without a model: the plan, each configuration's flags, the summary (ratios,
sums, targets), the table and the plot; and the code prompt set."""

from __future__ import annotations

import pytest

from client.bench.prompt_sets import load_prompts
from client.bench.sweep import (
    DYNAMIC,
    NO_SPEC,
    executor_overrides,
    format_sweep,
    scheduler_extra_flags,
    sweep_configs,
    sweep_plan,
    sweep_summary,
    write_sweep_plot,
)


def test_the_plan_covers_every_configuration_each_round_alternating_the_order():
    labels = [c.label for c in sweep_configs(5)]
    assert labels == [NO_SPEC, "K=1", "K=2", "K=3", "K=4", "K=5", DYNAMIC]
    plan = sweep_plan(2, rounds=2)
    assert [(r, c.label) for r, c in plan] == [
        (0, NO_SPEC), (0, "K=1"), (0, "K=2"), (0, DYNAMIC), (1, DYNAMIC), (1, "K=2"), (1, "K=1"), (1, NO_SPEC)]
    with pytest.raises(ValueError, match="sweep_max_k"):
        sweep_configs(0)
    with pytest.raises(ValueError, match="rounds"):
        sweep_plan(2, 0)


def test_each_configuration_starts_the_drafter_and_the_scheduler_it_names():
    configs = {c.label: c for c in sweep_configs(3)}
    assert executor_overrides(configs[NO_SPEC], "ngram", 3, None)["spec_method"] == "none"
    assert scheduler_extra_flags(configs[NO_SPEC]) == []
    assert executor_overrides(configs["K=2"], "ngram", 3, "/d") == {
        "spec_method": "ngram", "num_spec_tokens": 3, "draft_model": None}
    assert scheduler_extra_flags(configs["K=2"]) == ["--num-spec-tokens", "2"]
    assert executor_overrides(configs[DYNAMIC], "draft_model", 3, "/d")["draft_model"] == "/d"
    assert scheduler_extra_flags(configs[DYNAMIC]) == ["--num-spec-tokens", "dynamic"]


def runs(table: dict[str, list[float]], concurrencies=(1, 8), rounds=2) -> list[dict]:
    """Runs of every round; round 1 is 10% slower (the median of two is their mean)."""
    return [{"config": label, "concurrency": c, "round": r, "throughput_tok_s": values[i] * (1 - 0.1 * r),
             "mean_k": 2.0 if c == 1 else 0.5}
            for r in range(rounds) for label, values in table.items() for i, c in enumerate(concurrencies)]


def test_summary_ratios_sums_and_targets():
    summary = sweep_summary(runs({NO_SPEC: [20, 100], "K=1": [30, 90], "K=3": [40, 60], DYNAMIC: [39, 99]}))
    assert summary["median_throughput_tok_s"][DYNAMIC] == {1: pytest.approx(37.05), 8: pytest.approx(94.05)}
    assert summary["best_other"] == {1: "K=3", 8: NO_SPEC}
    assert summary["dynamic_over_best_other"] == {1: pytest.approx(39 / 40), 8: pytest.approx(0.99)}
    assert summary["ratio_target_met"] and summary["sum_target_met"]
    assert summary["dynamic_mean_k"] == {1: 2.0, 8: 0.5}
    table = format_sweep(summary)
    assert "dyn/best" in table and "0.97" in table and "True" in table and "dyn K" in table


def test_targets_fail_when_dynamic_loses():
    slow = sweep_summary(runs({NO_SPEC: [20, 100], "K=1": [30, 90], DYNAMIC: [25, 80]}))
    assert not slow["ratio_target_met"] and slow["dynamic_over_best_other"][1] == pytest.approx(25 / 30)
    below_fixed_sum = sweep_summary(runs({"K=1": [30, 80], "K=2": [40, 80], DYNAMIC: [39, 80]}))
    assert below_fixed_sum["ratio_target_met"] and not below_fixed_sum["sum_target_met"]
    assert "dynamic_over_best_other" not in sweep_summary(runs({NO_SPEC: [1, 2]}))


def test_the_plot_has_one_line_per_configuration(tmp_path):
    summary = sweep_summary(runs({NO_SPEC: [20, 100], "K=1": [30, 90], DYNAMIC: [39, 99]}))
    path = tmp_path / "sweep.png"
    write_sweep_plot(summary, "test", path)
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"


def test_code_prompts_are_python_completions():
    prompts = load_prompts("code")
    assert len(prompts) >= 64 and all("```python\ndef " in p for p in prompts)
    assert len(set(prompts)) == len(prompts)
    with pytest.raises(ValueError, match="prompts"):
        load_prompts("poetry")
