"""The bench's speculation figures: each speculative run against its no-speculation twin of the same round."""

from __future__ import annotations

import pytest

from client.bench.speculation import spec_variants, speculation_ratios


def run(round_index: int, spec_method: str, throughput: float) -> dict:
    label = f"c=1 inflight=2 spec={spec_method}"
    record = {"label": label, "round": round_index, "concurrency": 1, "max_inflight_steps": 2,
              "spec_method": spec_method, "throughput_tok_s": throughput}
    if spec_method != "none":
        record.update(spec_drafted=300, executor_draft_s=0.03, acceptance_rate=0.5, mean_acceptance_length=1.5)
    return record


def test_measured_speedup_pairs_runs_of_the_same_round_and_takes_the_median():
    runs = [run(0, "none", 40.0), run(0, "ngram", 60.0),   # 1.5
            run(1, "none", 20.0), run(1, "ngram", 26.0),   # 1.3
            run(2, "none", 30.0), run(2, "ngram", 42.0)]   # 1.4
    ratios = speculation_ratios(runs, bare_1=20.0, bare_verify=22.0, k=3)
    label = "c=1 inflight=2 spec=ngram"
    assert ratios["V(3)"] == pytest.approx(1.1)
    assert ratios[f"measured_speedup[{label}]"] == pytest.approx(1.4)
    c = (1000 * 0.03 / 300) / 20.0
    assert ratios[f"drafter_cost_c[{label}]"] == pytest.approx(c)
    assert ratios[f"expected_speedup[{label}]"] == pytest.approx(1.5 / (1.1 + 3 * c))


def test_a_speculative_run_without_a_twin_is_left_out():
    ratios = speculation_ratios([run(0, "ngram", 60.0)], bare_1=20.0, bare_verify=22.0, k=3)
    assert ratios == {"V(3)": pytest.approx(1.1)}


def test_the_drafters_one_run_compares():
    assert spec_variants("none", ["eagle"]) == ["none"]
    assert spec_variants("ngram") == ["none", "ngram"]
    assert spec_variants("eagle_ngram", ["eagle", "none", "eagle_ngram", "ngram"]) == [
        "none", "eagle_ngram", "eagle", "ngram"]


def test_two_drafters_of_one_run_each_get_their_figures():
    runs = [run(0, "none", 40.0), run(0, "eagle_ngram", 48.0), run(0, "eagle", 36.0)]
    ratios = speculation_ratios(runs, bare_1=20.0, bare_verify=22.0, k=3)
    assert ratios["measured_speedup[c=1 inflight=2 spec=eagle_ngram]"] == pytest.approx(1.2)
    assert ratios["measured_speedup[c=1 inflight=2 spec=eagle]"] == pytest.approx(0.9)
