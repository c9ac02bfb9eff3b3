"""Tests of the sampling fields that forbid tokens on the executor: allowed_token_ids (a token mask on every row) and
bad words (a token forbidden after its word's other tokens), from the sampler to the model runner, with speculation
and running ahead."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from stats_helpers import chi_square_p_value
from step_plans import BATCHES, GREEDY, PlannedRequest, plan_steps, requests_plain
from tiny_models import make_tiny_llama

from executor_svc.bad_words import (
    apply_banned_tokens,
    banned_tokens,
    build_banned_tokens,
    conditional_bans,
    deferrable_with,
)
from executor_svc.config import ExecutorConfig
from executor_svc.model_runner import StepError
from executor_svc.request_state import ExecutorRequestState
from executor_svc.sampler import Sampler
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata
from executor_svc.server import build_runner
from executor_svc.token_mask import TokenMask, token_bits, unpack_bits
from stepahead_proto import executor_pb2, sampling_pb2

VOCAB = 256
P = RowSamplingParams
PROMPT = [5, 9, 11, 3, 17, 40, 41]


# ---- bad words on logits ---------------------------------------------------------------------------


def test_a_word_forbids_its_last_token_where_the_output_ends_with_its_other_tokens():
    words = ((7,), (3, 4), (1, 2, 5))
    assert banned_tokens(words, []) == [7]
    assert banned_tokens(words, [3]) == [4, 7]
    assert banned_tokens(words, [9, 1, 2]) == [5, 7]
    assert banned_tokens(words, [2]) == [7]
    assert banned_tokens(words, [1, 2, 3]) == [4, 7]


def test_banned_pairs_are_minus_infinity_on_their_rows_only_and_the_input_is_untouched():
    params = [P(bad_words=((7,), (3, 4))), P(), P(bad_words=((3, 9),))]
    banned = build_banned_tokens(params, [[3], [3], [1]], "cpu")
    x = torch.randn(3, VOCAB)
    original = x.clone()
    out = apply_banned_tokens(x, banned)
    assert torch.equal(x, original)
    assert out[0, 4] == out[0, 7] == float("-inf")
    expected = original.clone()
    expected[0, [4, 7]] = float("-inf")
    assert torch.equal(out, expected)  # row 2's word needs a 3 before it: nothing banned there
    assert build_banned_tokens([P(), P()], [[], []], "cpu") is None
    assert build_banned_tokens([P(bad_words=((3, 4),))], [[1]], "cpu") is None


def test_greedy_takes_the_best_token_no_word_forbids_after_the_logit_bias_and_penalties():
    x = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(2))
    top2 = x[0].topk(2).indices.tolist()
    params = P(temperature=0.0, bad_words=((top2[0],),), logit_bias=((top2[0], 50.0),))
    meta = SamplingMetadata.build([params], [[]], [[]], VOCAB, "cpu")
    assert Sampler().sample(x, meta).token_ids.tolist() == [top2[1]]


def test_sampling_with_bad_words_draws_from_the_renormalised_distribution():
    logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(4)) * 2
    banned = logits.topk(5).indices.tolist()
    params = P(temperature=1.0, bad_words=tuple((t,) for t in banned))
    meta = SamplingMetadata.build([params] * 500, [[]] * 500, [[]] * 500, VOCAB, "cpu")
    sampler = Sampler(seed=3)
    counts = torch.zeros(VOCAB)
    for _ in range(8):
        counts += torch.bincount(sampler.sample(logits.expand(500, -1).contiguous(), meta).token_ids,
                                 minlength=VOCAB)
    assert counts[banned].sum() == 0
    expected = logits.clone()
    expected[banned] = float("-inf")
    assert chi_square_p_value(counts, expected.softmax(-1)) > 1e-3


def test_allowed_token_bits_allow_exactly_the_listed_ids():
    bits = token_bits([0, 31, 32, 255], VOCAB)
    allowed = unpack_bits(torch.from_numpy(bits[None]), VOCAB)[0]
    assert allowed.nonzero().flatten().tolist() == [0, 31, 32, 255]
    assert bits.dtype == np.int32 and bits.shape == (VOCAB // 32,)
    host = TokenMask.build({0: bits}, "cpu").allowed(VOCAB)[0]
    assert torch.equal(host, allowed)


# ---- through the model runner ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("restricted"), seed=5, vocab_size=VOCAB)


def runner_for(model_dir: Path, defer: bool = False, **overrides):
    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, defer_token_readback=defer, **overrides)
    return build_runner(config)[0]


def generate(model_dir: Path, prompt: list[int], sampling: sampling_pb2.SamplingParams, steps: int,
             bad_words: list[list[int]] | None = None) -> list[int]:
    """The tokens of ``steps`` steps of one request (a prefill, then decodes), without speculation."""
    planned = PlannedRequest(prompt, sampling, block_ids=list(range(8)), bad_words=bad_words or [])
    runner = runner_for(model_dir)
    return [t for step in plan_steps({"r": planned}, [["r"]] * steps) for o in runner.execute(step).outputs
            for t in o.token_ids]


def hf_greedy(model_dir: Path, prompt: list[int], count: int, allowed: Callable[[list[int]], torch.Tensor]):
    """HF's forward, argmax over the tokens ``allowed(output so far)`` leaves ([VOCAB] bool)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    tokens: list[int] = []
    with torch.no_grad():
        while len(tokens) < count:
            logits = model(torch.tensor([prompt + tokens])).logits[0, -1]
            tokens.append(int(logits.masked_fill(~allowed(tokens), float("-inf")).argmax()))
    return tokens


def not_after(words: list[list[int]]) -> Callable[[list[int]], torch.Tensor]:
    """The reference reading of bad words: a word's last token is out where the output ends with its others."""
    def allowed(output: list[int]) -> torch.Tensor:
        mask = torch.ones(VOCAB, dtype=torch.bool)
        for word in words:
            *context, last = word
            if not context or output[len(output) - len(context):] == context:
                mask[last] = False
        return mask
    return allowed


GREEDY_PLAIN = sampling_pb2.SamplingParams(temperature=0.0)


def test_bad_words_change_greedy_output_as_hf_with_the_words_forbidden(model_dir):
    free = generate(model_dir, PROMPT, GREEDY_PLAIN, steps=12)
    words = [[free[0]], [free[3], free[4]]]
    restricted = generate(model_dir, PROMPT, GREEDY_PLAIN, steps=12, bad_words=words)
    assert restricted == hf_greedy(model_dir, PROMPT, 12, not_after(words))
    assert restricted != free and restricted[0] != free[0]
    assert all(restricted[i:i + 2] != words[1] for i in range(len(restricted) - 1))


def test_allowed_token_ids_restrict_greedy_output_as_hf_masked(model_dir):
    free = generate(model_dir, PROMPT, GREEDY_PLAIN, steps=10)
    allowed_ids = [t for t in range(3, VOCAB, 7) if t not in free][:30]
    sampling = sampling_pb2.SamplingParams(temperature=0.0, allowed_token_ids=allowed_ids)
    restricted = generate(model_dir, PROMPT, sampling, steps=10)
    mask = torch.zeros(VOCAB, dtype=torch.bool)
    mask[allowed_ids] = True
    assert restricted == hf_greedy(model_dir, PROMPT, 10, lambda output: mask)
    assert set(restricted) <= set(allowed_ids)


def test_sampled_tokens_stay_inside_allowed_token_ids(model_dir):
    allowed_ids = [7, 8, 100, 200]
    for seed in range(4):
        sampling = sampling_pb2.SamplingParams(temperature=1.5, seed=seed, allowed_token_ids=allowed_ids)
        tokens = generate(model_dir, PROMPT, sampling, steps=8)
        assert set(tokens) <= set(allowed_ids), seed


@pytest.mark.parametrize("restriction", ["bad_words", "allowed_token_ids"])
def test_speculation_verifies_drafts_against_the_restricted_target(model_dir, restriction):
    """This model's free output starts 92 92 92 92 92 51 210 51 210: a third 92 in a row or 51 is forbidden, so the
    n-gram drafter's chains from the repetitions meet the restriction."""
    prompt = PROMPT * 3
    words = [[92, 92, 92]] if restriction == "bad_words" else []
    allowed = [t for t in range(VOCAB) if t != 51] if restriction == "allowed_token_ids" else []
    sampling = sampling_pb2.SamplingParams(temperature=0.0, allowed_token_ids=allowed)
    expected = generate(model_dir, prompt, sampling, steps=30, bad_words=words)
    runner = runner_for(model_dir, spec_method="ngram", num_spec_tokens=3)
    planned = PlannedRequest(prompt, sampling, num_spec=3, block_ids=list(range(8)), bad_words=words)
    outputs = [o for step in plan_steps({"r": planned}, [["r"]] * 12) for o in runner.execute(step).outputs]
    emitted = [t for o in outputs for t in o.token_ids]
    assert sum(o.num_accepted for o in outputs) > 0 and len(emitted) > 12
    assert emitted == expected[:len(emitted)]


def test_restricted_requests_run_ahead_and_no_token_changes(model_dir):
    """Request d's free output here starts 179 128: its bad word (179, 128) must forbid 128 while 179 is still only
    on the device (a conditional ban); its three-token word makes the step after that settle first (the device keeps
    only the newest token)."""
    requests = requests_plain()
    requests["a"].sampling = sampling_pb2.SamplingParams(temperature=0.0, allowed_token_ids=list(range(0, VOCAB, 3)))
    requests["d"] = PlannedRequest(requests["d"].prompt, GREEDY, block_ids=requests["d"].block_ids,
                                   bad_words=[[179, 128], [5, 6, 7]])
    steps = plan_steps(requests, BATCHES)
    one_at_a_time = runner_for(model_dir)
    expected = [one_at_a_time.execute(step) for step in steps]
    runner = runner_for(model_dir, defer=True)
    launched, unread_with_a, unread_with_d = [], [], []
    for step in steps:
        launched.append(runner.launch(step))
        unread = {rid: state.num_unread_tokens for rid, state in runner.requests.items()}
        unread_with_a.append(unread.get("a", 0))
        unread_with_d.append(unread.get("d", 0))
    assert max(unread_with_a) > 0 and max(unread_with_d) == 2
    actual = [runner.complete(item) for item in launched]
    assert [list(r.outputs) for r in actual] == [list(r.outputs) for r in expected]
    a_tokens = [t for r in actual for o in r.outputs if o.request_id == "a" for t in o.token_ids]
    assert all(t % 3 == 0 for t in a_tokens)
    d_tokens = [t for r in actual for o in r.outputs if o.request_id == "d" for t in o.token_ids]
    assert d_tokens[0] == 179 and d_tokens[1] != 128


def test_conditional_bans_wait_for_the_newest_token_on_the_device():
    words = ((7,), (3, 4), (1, 2, 5), (2, 9))
    assert conditional_bans(words, [1], num_unread=1) == ([7], [(2, 5), (2, 9), (3, 4)])
    assert conditional_bans(words, [8], num_unread=1) == ([7], [(2, 9), (3, 4)])
    assert conditional_bans(words, [1, 3], num_unread=0) == ([4, 7], [])
    assert deferrable_with(((3, 4),), 2) and not deferrable_with(words, 2) and deferrable_with(words, 1)
    params = [P(bad_words=((3, 4), (2, 4))), P(), P(bad_words=((3, 6),))]
    newest = torch.tensor([2, 3, 5])
    banned = build_banned_tokens(params, [[], [], []], "cpu", num_unread=[1, 0, 1], newest=newest)
    out = apply_banned_tokens(torch.zeros(3, VOCAB), banned)
    assert (out[0] == float("-inf")).nonzero().flatten().tolist() == [4]  # (2, 4) holds, (3, 4) does not
    assert not torch.isinf(out[1:]).any()
    with pytest.raises(ValueError, match="newest tokens"):
        build_banned_tokens(params, [[], [], []], "cpu", num_unread=[1, 0, 1])


@pytest.mark.parametrize("field", ["allowed_token_ids", "bad_words"])
def test_a_token_id_outside_the_vocabulary_is_a_step_error_naming_the_field(model_dir, field):
    runner = runner_for(model_dir)
    sampling = sampling_pb2.SamplingParams(allowed_token_ids=[1, VOCAB] if field == "allowed_token_ids" else [])
    new = executor_pb2.NewRequestData(request_id="r", prompt_token_ids=PROMPT, sampling=sampling,
                                      block_ids=[0], num_scheduled_tokens=len(PROMPT))
    if field == "bad_words":
        new.bad_words.add(ids=[3, VOCAB])
    with pytest.raises(StepError, match=f"{field} token id {VOCAB}"):
        runner.execute(executor_pb2.StepRequest(step_id=0, new_requests=[new]))


def test_drafts_stop_before_the_first_token_the_request_forbids():
    from executor_svc.model_runner import drafts_before_forbidden

    def state(allowed=None, bad_words=()):
        s = ExecutorRequestState("r", [1, 2], [7, 8], [0], P(bad_words=bad_words))
        s.allowed_tokens = None if allowed is None else token_bits(allowed, VOCAB)
        return s

    assert drafts_before_forbidden(state(), [4, 5, 6]) == [4, 5, 6]
    assert drafts_before_forbidden(state(allowed=[4, 5, 6, 250]), [4, 250, 9, 5]) == [4, 250]
    assert drafts_before_forbidden(state(allowed=[4]), [-1, 4]) == []
    # (8, 4): 4 is out right after the output's last token 8; (4, 5) forbids 5 after the draft 4.
    assert drafts_before_forbidden(state(bad_words=((8, 4),)), [4, 5]) == []
    assert drafts_before_forbidden(state(bad_words=((4, 5),)), [4, 5, 6]) == [4]
    assert drafts_before_forbidden(state(bad_words=((3,),)), [4, 5, 3]) == [4, 5]
