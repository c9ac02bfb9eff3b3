"""The CPU matmul plan: every choice computes F.linear, the timed plan keeps the fastest per row count (F.linear
unless another clearly wins), and loading a model on the CPU times its widest projection."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tiny_models import make_tiny_llama

from executor_svc.models import cpu_matmul_plan
from executor_svc.models.cpu_matmul_plan import (
    CHOICES,
    DEFAULT_PLAN,
    LINEAR,
    PACKED,
    ROW_BUCKETS,
    STATIONARY,
    CpuMatmulPlan,
    CpuMatmulPlans,
    add_plans_for,
    cached_or_measured_plans,
    current_plans,
    measure_plan,
    measure_plans,
    pack_for_cpu_matmul,
    run_choice,
    use_plans,
    weight_stationary_rows,
)
from executor_svc.models.layers import linear


@pytest.fixture(autouse=True)
def restore_plan():
    before = current_plans()
    yield
    use_plans(before)


@pytest.mark.parametrize("choice", CHOICES)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 9, 17, 64, 65, 200])
@pytest.mark.parametrize("with_bias", [False, True])
def test_every_choice_computes_f_linear(choice, rows, with_bias):
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 48, generator=generator)
    weight = torch.randn(80, 48, generator=generator)
    bias = torch.randn(80, generator=generator) if with_bias else None
    out = run_choice(choice, x, weight, bias, pack_for_cpu_matmul(weight))
    torch.testing.assert_close(out, F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
    for packed in (pack_for_cpu_matmul(weight), None):  # the helper the models call, by the plan in use
        torch.testing.assert_close(linear(x, weight, bias, packed), F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
    transposed = torch.randn(48, rows, generator=generator).T  # a non-contiguous input
    torch.testing.assert_close(run_choice(choice, transposed, weight, bias, pack_for_cpu_matmul(weight)),
                               F.linear(transposed, weight, bias), atol=1e-5, rtol=1e-5)


def test_the_timed_plan_keeps_the_fastest_and_the_incumbent_within_the_margin():
    costs = {  # seconds per call by choice, for each bucket in order
        LINEAR: [1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0, 9.0],
        STATIONARY: [2.0, 0.5, 0.95, 2.5, 1.5, 2.0, 2.9, 4.0, 9.0],
        PACKED: [1.5, 0.6, 0.5, 1.0, 1.6, 1.0, 2.95, 5.5, 8.95],
    }
    asked = []

    def timer(choice, rows):
        asked.append(rows)
        return costs[choice][ROW_BUCKETS.index(rows)]

    plan = measure_plan(torch.zeros(4, 4), timer)
    assert set(asked) == set(ROW_BUCKETS)
    # Against a packed copy the weight-stationary product only competes for 1-2 rows (its transposed output costs the
    # next operations); without one, at every count.
    # From 3 rows the packed copy stays unless F.linear takes at most MARGIN of its time.
    assert plan.choices == (LINEAR, STATIONARY, PACKED, PACKED, PACKED, PACKED, PACKED, PACKED, PACKED)
    costs[LINEAR][-1] = 8.0  # 8.0 <= 0.9 * 8.95: F.linear takes 64 rows over
    assert measure_plan(torch.zeros(4, 4), timer).choices[-1] == LINEAR
    assert plan.unpacked_choices == (LINEAR, STATIONARY, LINEAR, LINEAR, STATIONARY, STATIONARY, LINEAR, STATIONARY,
                                     LINEAR)


def test_a_row_count_takes_its_bucket_and_large_ones_the_packed_copy():
    plan = CpuMatmulPlan((LINEAR, STATIONARY, PACKED, PACKED, LINEAR, LINEAR, LINEAR, LINEAR, STATIONARY),
                         (LINEAR,) * 8 + (STATIONARY,))
    assert [plan.choice(n, True) for n in (1, 2, 3, 4, 5, 6, 7)] == [LINEAR, STATIONARY, PACKED, PACKED, LINEAR,
                                                                     LINEAR, LINEAR]
    assert plan.choice(40, True) == STATIONARY and plan.choice(40, False) == STATIONARY
    assert plan.choice(65, True) == PACKED and plan.choice(65, False) == LINEAR
    assert plan.choice(3, False) == LINEAR


def test_a_plan_of_the_wrong_shape_or_names_is_refused():
    with pytest.raises(ValueError, match="choices"):
        CpuMatmulPlan((LINEAR,), DEFAULT_PLAN.unpacked_choices)
    with pytest.raises(ValueError, match="unpacked_choices"):
        CpuMatmulPlan(DEFAULT_PLAN.choices, (PACKED,) * len(ROW_BUCKETS))


def test_linear_follows_the_plan_of_its_weights_shape(monkeypatch):
    seen = []
    monkeypatch.setattr("executor_svc.models.layers.run_choice",
                        lambda choice, *args: seen.append(choice) or run_choice(choice, *args))
    use_plans(CpuMatmulPlans({(8, 4): CpuMatmulPlan((STATIONARY,) * len(ROW_BUCKETS), (LINEAR,) * len(ROW_BUCKETS))}))
    weight = torch.randn(8, 4)
    linear(torch.randn(3, 4), weight, packed=pack_for_cpu_matmul(weight))
    linear(torch.randn(3, 4), weight)
    other = torch.randn(6, 4)  # a shape nobody timed: the default plan (packed copy from 4 rows)
    linear(torch.randn(5, 4), other, packed=pack_for_cpu_matmul(other))
    linear(torch.randn(2, 4), other, packed=pack_for_cpu_matmul(other))
    assert seen == [STATIONARY, LINEAR, DEFAULT_PLAN.choice(5, True), LINEAR]
    assert DEFAULT_PLAN.choice(5, True) == PACKED


def test_weight_stationary_rows_are_padded_to_fast_counts():
    assert [weight_stationary_rows(n) for n in (1, 2, 3, 4, 5, 7, 9, 15, 64)] == [2, 2, 4, 4, 5, 8, 9, 16, 64]
    assert weight_stationary_rows(65) is None


def test_loading_on_the_cpu_times_each_projection_shape_once(tmp_path, monkeypatch):
    from executor_svc.attention.torch_backend import TorchAttentionBackend
    from executor_svc.model_loader import load_model

    timed = []
    use_plans(CpuMatmulPlans({}))
    monkeypatch.setenv("STEPAHEAD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cpu_matmul_plan, "measure_plan",
                        lambda weight: timed.append(tuple(weight.shape)) or DEFAULT_PLAN)
    model = load_model(make_tiny_llama(tmp_path, seed=3), torch.float32, "cpu", TorchAttentionBackend(64))
    layer = model.layers[0]
    shapes = {tuple(w.shape) for w in (layer.attn.qkv_weight, layer.attn.o_weight, layer.mlp.gate_up_weight,
                                       layer.mlp.down_weight, model.lm_head_weight)}
    assert sorted(timed) == sorted(shapes) and set(current_plans().by_shape) == shapes
    load_model(tmp_path, torch.bfloat16, "cpu", TorchAttentionBackend(64))
    assert len(timed) == len(shapes)  # only float32 weights are timed (and packed)
    load_model(tmp_path, torch.float32, "cpu", TorchAttentionBackend(64))
    assert len(timed) == len(shapes) and set(current_plans().by_shape) == shapes  # the machine's plans, cached
    use_plans(CpuMatmulPlans({}))
    load_model(tmp_path, torch.float32, "cpu", TorchAttentionBackend(64))
    assert len(timed) == len(shapes) and set(current_plans().by_shape) == shapes


def test_a_second_models_shapes_join_the_plans_in_use(tmp_path):
    first = CpuMatmulPlan((STATIONARY,) * len(ROW_BUCKETS), (STATIONARY,) * len(ROW_BUCKETS))
    use_plans(CpuMatmulPlans({(6, 4): first}))
    add_plans_for([torch.zeros(6, 4), torch.zeros(5, 4), torch.zeros(5, 4, dtype=torch.bfloat16), torch.zeros(3)],
                  tmp_path)
    assert set(current_plans().by_shape) == {(6, 4), (5, 4)} and current_plans().by_shape[(6, 4)] is first


def test_plans_are_kept_per_machine_and_threads_and_timed_again_when_unreadable(tmp_path, monkeypatch):
    timed = []
    odd = CpuMatmulPlan((STATIONARY,) * len(ROW_BUCKETS), (STATIONARY,) * len(ROW_BUCKETS))
    monkeypatch.setattr(cpu_matmul_plan, "measure_plan", lambda weight: timed.append(tuple(weight.shape)) or odd)
    weights = [torch.zeros(6, 4), torch.zeros(3, 4)]
    first = cached_or_measured_plans(weights, tmp_path)
    again = cached_or_measured_plans(weights, tmp_path)
    assert len(timed) == 2 and first == again and again.by_shape[(6, 4)] == odd
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        cached_or_measured_plans(weights, tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert len(timed) == 4  # another thread count ranks the matmuls anew
    for path in tmp_path.glob("*.json"):
        path.write_text("[{]")
    cached_or_measured_plans(weights, tmp_path)
    assert len(timed) == 6
    (tmp_path / "read-only").write_text("a file where the folder should be")
    assert cached_or_measured_plans(weights, tmp_path / "read-only").by_shape[(3, 4)] == odd


def test_timing_real_weights_gives_a_plan_per_shape():
    plans = measure_plans([torch.randn(64, 32), torch.randn(16, 32), torch.randn(64, 32)])
    assert set(plans.by_shape) == {(64, 32), (16, 32)}
    for plan in plans.by_shape.values():
        assert set(plan.unpacked_choices) <= {LINEAR, STATIONARY}
    assert measure_plan(torch.randn(8, 8)).choices[0] in CHOICES and cpu_matmul_plan.MARGIN < 1
