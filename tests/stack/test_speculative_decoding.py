"""Speculative decoding through the stack: greedy output never changes, acceptance behaves, and sync
and async scheduling verify exactly the same drafts."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from client import Client

pytestmark = pytest.mark.stack

MAX_TOKENS = 40


def make_prompts(count: int = 8, vocab_size: int = 400) -> list[list[int]]:
    """Random prompts with a repeated stretch, so n-gram lookup finds matches too."""
    rng = random.Random(11)
    prompts = []
    for index in range(count):
        stretch = [rng.randrange(3, vocab_size) for _ in range(rng.choice([3, 6, 10]))]
        noise = [rng.randrange(3, vocab_size) for _ in range(rng.choice([2, 15, 40]))]
        prompts.append(noise + stretch + noise[: index % 5] + stretch)
    return prompts


def run_all(address: str, prompts: list[list[int]], **params) -> list[tuple]:
    """(token_ids, drafted, accepted) per prompt, all sent concurrently; greedy, fixed length."""

    def one(prompt):
        with Client(address) as client:
            result = client.generate(token_ids=prompt, max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True,
                                     **params)
        spec = result.spec
        return result.token_ids, spec.drafted if spec else 0, spec.accepted if spec else 0

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, prompts))


def assert_all_blocks_free(address: str) -> None:
    with Client(address) as client:
        info = client.model_info()
    assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0


@pytest.fixture(scope="module")
def reference(tiny_model_dir, launch_module_stack):
    stack = launch_module_stack.with_scheduler(tiny_model_dir)
    return [tokens for tokens, _, _ in run_all(stack.address, make_prompts())]


FORCED = (["--num-kv-blocks", "24"], ["--max-num-batched-tokens", "32"])
PLAIN = ([], [])
GRID = [
    ("same", 1, PLAIN), ("same", 3, FORCED), ("same", 5, PLAIN), ("same", 5, FORCED),
    ("other", 1, PLAIN), ("other", 3, FORCED), ("other", 5, PLAIN), ("ngram", 3, FORCED),
    ("eagle", 3, FORCED), ("eagle", 5, PLAIN), ("eagle_ngram", 3, FORCED),
]


MAX_K = 5
EXECUTOR_K = ["--num-spec-tokens", str(MAX_K)]
"""Executors draft up to MAX_K and each scheduler asks for its K (as dynamic K does per step): one executor per
drafter serves every K."""


def scheduler_k(k: int) -> list[str]:
    """The scheduler's --num-spec-tokens for K (none at MAX_K: the executor's K is the default)."""
    return [] if k == MAX_K else ["--num-spec-tokens", str(k)]


def drafter_flags(drafter: str, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir) -> list[str]:
    """--spec-method and its drafter for: ngram, eagle (a trained head with a 200-of-400 draft vocabulary),
    eagle_ngram (that head where the lookup finds no match), draft_model or "same"/"other" (the draft model is
    the target itself / another tiny model)."""
    if drafter == "ngram":
        return ["--spec-method", drafter]
    if drafter in ("eagle", "eagle_ngram"):
        return ["--spec-method", drafter, "--eagle-drafter", str(tiny_eagle_dir)]
    draft = tiny_model_dir if drafter == "same" else tiny_draft_model_dir
    return ["--spec-method", "draft_model", "--draft-model", str(draft)]


@pytest.mark.parametrize(
    "drafter, k, constraints", GRID, ids=[f"{d}-K{k}-{'forced' if c is FORCED else 'plain'}" for d, k, c in GRID]
)
def test_greedy_output_is_unchanged_by_speculation(
    drafter, k, constraints, reference, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir, launch_stack
):
    executor_flags, scheduler_flags = constraints
    spec = drafter_flags(drafter, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir)
    stack = launch_stack.with_scheduler(tiny_model_dir, [*executor_flags, *spec, *EXECUTOR_K],
                                        [*scheduler_flags, *scheduler_k(k)])
    results = run_all(stack.address, make_prompts())
    assert [tokens for tokens, _, _ in results] == reference
    drafted = sum(d for _, d, _ in results)
    accepted = sum(a for _, _, a in results)
    assert drafted > 0 and accepted <= drafted
    if drafter == "same":
        assert accepted == drafted, "a drafter with the target's weights must be accepted every time"
    if drafter == "other":
        assert accepted / drafted < 0.2
    assert_all_blocks_free(stack.address)


def test_opt_out_request_is_not_speculated(tiny_model_dir, launch_stack):
    stack = launch_stack.with_scheduler(tiny_model_dir, [*drafter_flags("same", tiny_model_dir, None, None),
                                                         *EXECUTOR_K])
    with Client(stack.address) as client:
        prompt = make_prompts(1)[0]
        opted_out = client.generate(token_ids=prompt, max_tokens=10, temperature=0.0, disable_speculation=True,
                                    logprobs=2)
        speculated = client.generate(token_ids=prompt, max_tokens=10, temperature=0.0, logprobs=2)
    assert opted_out.spec is None and speculated.spec is not None and speculated.spec.drafted > 0
    assert opted_out.token_ids == speculated.token_ids
    # Logprobs of accepted drafts come from the verify rows: the same values as one token at a time.
    assert [p.sampled.logprob for p in speculated.logprobs] == pytest.approx(
        [p.sampled.logprob for p in opted_out.logprobs], abs=1e-4)
    assert [[t.token_id for t in p.top] for p in speculated.logprobs] == [
        [t.token_id for t in p.top] for p in opted_out.logprobs]
    assert speculated.spec.mean_acceptance_length > 1


def test_logit_bias_applies_to_verified_drafts(tiny_model_dir, launch_stack):
    """The target drafting for itself proposes its unbiased argmax; verification must apply the request's bias, so
    biased outputs equal those without speculation (greedy and seeded) while some drafts get rejected."""
    stack = launch_stack.with_scheduler(tiny_model_dir, [*drafter_flags("same", tiny_model_dir, None, None),
                                                         *EXECUTOR_K], scheduler_k(3))
    prompt = make_prompts(1)[0]
    with Client(stack.address) as client:
        plain = client.generate(token_ids=prompt, max_tokens=24, temperature=0.0, ignore_eos=True).token_ids
        bias = {plain[2]: -100.0, plain[9]: -100.0, 17: 2.0}
        runs = {}
        for name, sampling in (("greedy", dict(temperature=0.0)), ("seeded", dict(temperature=0.8, seed=11))):
            for opt_out in (True, False):
                runs[name, opt_out] = client.generate(token_ids=prompt, max_tokens=24, ignore_eos=True,
                                                      logit_bias=bias, disable_speculation=opt_out, **sampling)
    for name in ("greedy", "seeded"):
        assert runs[name, False].token_ids == runs[name, True].token_ids
        assert not {plain[2], plain[9]} & set(runs[name, False].token_ids)
    greedy = runs["greedy", False].spec
    assert greedy.drafted > 0 and greedy.accepted < greedy.drafted
    assert runs["greedy", False].token_ids != plain
    assert_all_blocks_free(stack.address)


@pytest.mark.parametrize("drafter", ["other", "ngram", "eagle", "eagle_ngram"])
def test_sync_and_async_verify_identical_drafts(drafter, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir,
                                                launch_stack):
    spec = [*drafter_flags(drafter, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir), *EXECUTOR_K]
    prompts = make_prompts(20)
    outcomes = {}
    for inflight in (1, 2):
        stack = launch_stack.with_scheduler(tiny_model_dir, spec, ["--max-inflight-steps", str(inflight),
                                                                   *scheduler_k(3)])
        outcomes[inflight] = run_all(stack.address, prompts)
        assert_all_blocks_free(stack.address)
    assert outcomes[1] == outcomes[2]
    assert sum(a for _, _, a in outcomes[1]) > 0


def run_seeded(address: str, prompts: list[list[int]]) -> list[tuple]:
    """(token_ids, drafted, accepted) per prompt, all sent concurrently: seeded sampling with
    penalties, each prompt with its own seed."""

    def one(index_prompt):
        index, prompt = index_prompt
        with Client(address) as client:
            result = client.generate(token_ids=prompt, max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.9,
                                     top_k=50, top_p=0.95, seed=100 + index, repetition_penalty=1.1,
                                     presence_penalty=0.2, frequency_penalty=0.2)
        spec = result.spec
        return result.token_ids, spec.drafted if spec else 0, spec.accepted if spec else 0

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, enumerate(prompts)))


@pytest.fixture(scope="module")
def seeded_reference(tiny_model_dir, launch_module_stack):
    stack = launch_module_stack.with_scheduler(tiny_model_dir)
    return [tokens for tokens, _, _ in run_seeded(stack.address, make_prompts())]


SEEDED_GRID = [("same", 3, 1), ("same", 3, 2), ("other", 2, 2)]


@pytest.mark.parametrize("drafter, k, inflight", SEEDED_GRID, ids=[f"{d}-K{k}-inflight{i}" for d, k, i in SEEDED_GRID])
def test_seeded_sampling_is_unchanged_by_speculation(
    drafter, k, inflight, seeded_reference, tiny_model_dir, tiny_draft_model_dir, launch_module_stack
):
    """Verification draws each position's token as plain sampling does, so a seeded request gets the
    same tokens with speculation, in sync and async mode, whatever drafts were offered."""
    spec = [*drafter_flags(drafter, tiny_model_dir, tiny_draft_model_dir, None), *EXECUTOR_K]
    stack = launch_module_stack.with_scheduler(tiny_model_dir, spec, ["--max-inflight-steps", str(inflight),
                                                                      *scheduler_k(k)])
    results = run_seeded(stack.address, make_prompts())
    assert [tokens for tokens, _, _ in results] == seeded_reference
    drafted, accepted = sum(d for _, d, _ in results), sum(a for _, _, a in results)
    assert drafted > 0
    if drafter == "same":
        assert 0 < accepted < drafted, "argmax drafts are accepted only where the sample is the argmax"
    assert_all_blocks_free(stack.address)
