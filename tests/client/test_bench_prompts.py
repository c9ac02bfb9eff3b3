"""Which MT-Bench prompts a bench run sends."""

from __future__ import annotations

from client.bench.cli import _prompts_for

PROMPTS = [f"prompt {i}" for i in range(80)]


def test_batched_runs_use_every_prompt_by_default():
    assert _prompts_for(16, None, PROMPTS) == PROMPTS


def test_concurrency_one_uses_eight_prompts_spread_over_the_set_by_default():
    """One per MT-Bench category (the set lists ten of each kind in turn), not the first eight writing ones."""
    assert _prompts_for(1, None, PROMPTS) == PROMPTS[::10]


def test_more_than_twice_the_concurrency_cycles_through_the_prompts():
    chosen = _prompts_for(64, None, PROMPTS)
    assert len(chosen) == 128
    assert chosen[80:] == PROMPTS[:48]


def test_an_explicit_count_wins():
    assert _prompts_for(16, 5, PROMPTS) == [PROMPTS[i] for i in (0, 16, 32, 48, 64)]
    assert _prompts_for(1, 16, PROMPTS) == PROMPTS[::5]


def test_prompts_per_client_scales_with_concurrency_from_a_floor_of_eight():
    assert len(_prompts_for(1, None, PROMPTS, per_client=2)) == 8
    assert len(_prompts_for(16, 5, PROMPTS, per_client=2)) == 32
    assert len(_prompts_for(32, None, PROMPTS, per_client=2)) == 64
