"""The dynamic-K policy without a model: interpolation of the profiled step time, the choice of K
(0 when drafting cannot pay), and the acceptance estimate following the workload."""

from __future__ import annotations

import pytest

from scheduler_svc.dynamic_k import AcceptanceEstimate, DynamicKPolicy, FixedK, StepTimeProfile

# A CPU-like profile: verifying K drafts costs more the larger the batch.
PROFILE = StepTimeProfile(
    batch_sizes=(1, 8, 32),
    step_ms=((20.0, 21.0, 22.0, 23.0), (30.0, 40.0, 50.0, 60.0), (60.0, 110.0, 160.0, 210.0)),
    acceptance_prior=(0.8, 0.7, 0.6),
)


def test_step_time_is_linear_between_profiled_batch_sizes_and_clamped_outside():
    assert PROFILE.step_time(1, 2) == 22.0
    assert PROFILE.step_time(4, 0) == pytest.approx(20.0 + 3 / 7 * 10.0)
    assert PROFILE.step_time(20, 3) == pytest.approx(60.0 + 12 / 24 * 150.0)
    assert PROFILE.step_time(64, 1) == 110.0  # beyond the grid: the largest profiled batch
    with pytest.raises(ValueError, match="num_spec_tokens"):
        PROFILE.step_time(1, 4)


def test_a_profile_is_validated_naming_the_field():
    with pytest.raises(ValueError, match="batch_sizes"):
        StepTimeProfile((8, 1), ((1.0,), (1.0,)), ())
    with pytest.raises(ValueError, match="step_ms"):
        StepTimeProfile((1,), ((1.0, 2.0), (1.0,)), (0.5,))
    with pytest.raises(ValueError, match="acceptance_prior"):
        StepTimeProfile((1,), ((1.0, 2.0),), (1.5,))
    assert StepTimeProfile.from_dict(PROFILE.to_dict()) == PROFILE


def test_expected_tokens_multiply_the_conditional_rates():
    estimate = AcceptanceEstimate([0.5, 0.5, 1.0])
    assert [estimate.expected_tokens(k) for k in range(4)] == [1.0, 1.5, 1.75, 2.0]


def test_high_acceptance_at_batch_one_drafts_the_most():
    assert DynamicKPolicy(PROFILE).choose(1) == 3


def test_no_drafts_when_drafting_cannot_pay():
    assert DynamicKPolicy(PROFILE).choose(32) == 0  # verify cost grows faster than the accepted tokens
    low = StepTimeProfile(PROFILE.batch_sizes, PROFILE.step_ms, (0.05, 0.05, 0.05))
    assert DynamicKPolicy(low).choose(1) == 0


def test_acceptance_follows_observed_verifies():
    estimate = AcceptanceEstimate([0.5, 0.5], decay=0.1)
    for _ in range(50):
        estimate.observe(num_drafted=2, num_accepted=2)
    assert estimate.rates[0] > 0.99 and estimate.rates[1] > 0.99
    for _ in range(50):
        estimate.observe(num_drafted=2, num_accepted=0)  # position 2 is never reached: unchanged
    assert estimate.rates[0] < 0.01 and estimate.rates[1] > 0.99
    with pytest.raises(ValueError, match="num_accepted"):
        estimate.observe(num_drafted=1, num_accepted=2)


def test_a_workload_switch_moves_k_within_a_bounded_number_of_steps():
    policy = DynamicKPolicy(PROFILE, decay=0.05)
    batch = 4
    for _ in range(100):  # predictable text: every draft accepted
        policy.observe(3, 3)
    assert policy.choose(batch) >= 2
    steps = 0
    while policy.choose(batch) != 0 and steps < 200:  # unpredictable text: every first draft rejected
        policy.observe(3, 0)
        steps += 1
    assert policy.choose(batch) == 0 and steps <= 60


def test_acceptance_moves_off_the_prior_after_a_warm_up_of_verifies():
    policy = DynamicKPolicy(StepTimeProfile(PROFILE.batch_sizes, PROFILE.step_ms, (0.05, 0.05, 0.05)), decay=0.05)
    assert policy.best_k(1) == 0  # the prior says drafts are rejected
    for _ in range(40):  # live verifies say they are accepted
        policy.observe(3, 3)
    assert policy.best_k(1) == 3 and policy.acceptance.rates[0] > 0.8


def test_k_zero_is_probed_with_one_draft_now_and_then_so_a_predictable_workload_is_noticed():
    low = StepTimeProfile(PROFILE.batch_sizes, PROFILE.step_ms, (0.05, 0.05, 0.05))
    policy = DynamicKPolicy(low, probe_budget=0.0125)  # a probe costs 1 ms more than a 20 ms step: every 4th
    choices = [policy.choose(1) for _ in range(8)]
    assert choices == [0, 0, 0, 1, 0, 0, 0, 1]
    # Where a probe costs more (B = 32: 110 ms against 60 ms), probes are rarer: the same budget of time.
    large_batch = DynamicKPolicy(low, probe_budget=0.0125)
    assert sum(large_batch.choose(32) for _ in range(200)) == 200 // 67
    never = DynamicKPolicy(low, probe_budget=0.0)
    assert sum(never.choose(1) for _ in range(50)) == 0
    with pytest.raises(ValueError, match="probe_budget"):
        DynamicKPolicy(low, probe_budget=1.0)
    steps = 0
    while policy.best_k(1) == 0 and steps < 100:  # predictable text again: every probe's draft is accepted
        if policy.choose(1) > 0:
            policy.observe(1, 1)
        steps += 1
    assert policy.best_k(1) > 0 and steps <= 10


def test_a_draft_that_looks_free_in_the_profile_must_still_pay_by_min_gain():
    # As measured at B = 1 on a noisy machine: ITL(1, 1) == ITL(1, 0) after the profile's monotone repair.
    flat = StepTimeProfile((1,), ((20.0, 20.0, 21.0),), (0.02, 0.9))
    assert DynamicKPolicy(flat).best_k(1) == 0  # 2 accepted drafts in 100 do not pay for drafting
    assert DynamicKPolicy(flat, min_gain=0.0).best_k(1) == 1  # the bare argmax would draft
    paying = StepTimeProfile((1,), ((20.0, 20.0, 21.0),), (0.2, 0.9))
    assert DynamicKPolicy(paying).best_k(1) == 2
    with pytest.raises(ValueError, match="min_gain"):
        DynamicKPolicy(flat, min_gain=1.0)


def test_a_probe_that_looks_free_is_counted_at_min_gain_so_k_zero_stays_mostly_zero():
    flat = StepTimeProfile((1,), ((20.0, 20.0),), (0.0,))
    policy = DynamicKPolicy(flat, probe_budget=0.01, min_gain=0.03)
    choices = [policy.choose(1) for _ in range(30)]
    assert sum(choices) == 10 and choices[:3] == [0, 0, 1]  # one probe per 3 steps, not one every step


def test_fixed_k_never_changes():
    fixed = FixedK(2)
    fixed.observe(2, 0)
    assert [fixed.choose(b) for b in (1, 8, 64)] == [2, 2, 2]
    with pytest.raises(ValueError, match="num_spec_tokens"):
        FixedK(-1)
