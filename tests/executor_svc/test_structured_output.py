"""Structured output on the executor: the matcher's masks (drafts included), where the sampler applies them, and
whole generations through the model runner, exact against HF's forward masked by an independent matcher."""

from __future__ import annotations

import json
import re
from pathlib import Path

import llguidance
import numpy as np
import pytest
import torch
from constrained_runs import (
    EOS,
    REGEX,
    VOCAB,
    allowed_of,
    build_constrained_model,
    decode,
    fresh_matcher,
    generate,
    llg_tokenizer_of,
    runner_for,
)
from stats_helpers import chi_square_p_value
from step_plans import BATCHES, PlannedRequest, plan_steps, requests_plain
from tiny_models import make_tiny_llama

from executor_svc.config import ExecutorConfig
from executor_svc.grammar import GrammarCompiler
from executor_svc.model_runner import StepError
from executor_svc.sampler import Sampler
from executor_svc.sampling_metadata import RowSamplingParams, SamplingMetadata
from executor_svc.server import build_runner
from executor_svc.token_mask import TokenMask, apply_token_mask, mask_words, unpack_bits
from stepahead_proto import executor_pb2, sampling_pb2

SO = sampling_pb2.StructuredOutput


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_constrained_model(tmp_path_factory.mktemp("constrained"))


@pytest.fixture(scope="module")
def llg_tokenizer(model_dir) -> llguidance.LLTokenizer:
    return llg_tokenizer_of(model_dir)


# ---- masks ---------------------------------------------------------------------------------------


def test_the_mask_unpacks_bit_t_as_token_t_on_the_host_and_with_the_devices_tensor_ops():
    rng = np.random.default_rng(0)
    bits = rng.integers(-2**31, 2**31, size=(3, mask_words(VOCAB)), dtype=np.int64).astype(np.int32)
    mask = TokenMask.build({0: bits[0], 2: bits[1], 5: bits[2]}, "cpu")
    expected = np.unpackbits(bits.view(np.uint8), bitorder="little").reshape(3, -1)[:, :VOCAB].astype(bool)
    assert mask is not None and mask.rows.tolist() == [0, 2, 5]
    assert torch.equal(mask.allowed(VOCAB), torch.from_numpy(expected))
    assert torch.equal(unpack_bits(torch.from_numpy(bits), VOCAB), torch.from_numpy(expected))  # the GPU's path


def test_only_constrained_rows_are_masked_and_the_input_is_untouched():
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(1))
    original = logits.clone()
    bits = np.zeros(mask_words(VOCAB), dtype=np.int32)
    bits[0] = 0b1010  # tokens 1 and 3
    masked = apply_token_mask(logits, TokenMask.build({1: bits}, "cpu"))
    assert torch.equal(logits, original)
    assert torch.equal(masked[[0, 2]], original[[0, 2]])
    assert torch.isfinite(masked[1]).nonzero().flatten().tolist() == [1, 3]
    assert torch.equal(masked[1, [1, 3]], original[1, [1, 3]])


def test_a_forbidden_token_stays_forbidden_whatever_its_bias_and_greedy_takes_the_best_allowed():
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(2))
    bits = np.zeros(mask_words(VOCAB), dtype=np.int32)
    bits[1] = 0b111  # tokens 32, 33, 34
    params = [RowSamplingParams(temperature=0.0, logit_bias=((7, 100.0),))]
    meta = SamplingMetadata.build(params, [[]], [[]], VOCAB, "cpu")
    meta.token_mask = TokenMask.build({0: bits}, "cpu")
    token = Sampler().sample(logits, meta).token_ids.item()
    assert token == 32 + int(logits[0, 32:35].argmax())


def test_sampling_draws_from_the_model_distribution_renormalised_over_the_allowed_tokens():
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(3)) * 2
    allowed = torch.zeros(VOCAB, dtype=torch.bool)
    allowed[torch.randperm(VOCAB, generator=torch.Generator().manual_seed(4))[:12]] = True
    bits = np.packbits(allowed.numpy().astype(np.uint8), bitorder="little")
    bits = np.pad(bits, (0, mask_words(VOCAB) * 4 - bits.size)).view(np.int32)
    rows = 20_000
    meta = SamplingMetadata.build([RowSamplingParams(temperature=0.8)] * rows, [[]] * rows, [[]] * rows, VOCAB,
                                  "cpu")
    meta.token_mask = TokenMask.build(dict.fromkeys(range(rows), bits), "cpu")
    tokens = Sampler(seed=0).sample(logits.expand(rows, -1).contiguous(), meta).token_ids
    assert bool(allowed[tokens].all())
    expected = (logits[0] / 0.8).masked_fill(~allowed, float("-inf")).softmax(-1)
    counts = torch.bincount(tokens, minlength=VOCAB)
    assert chi_square_p_value(counts[allowed], expected[allowed]) > 1e-3


def test_draft_rows_are_masked_as_after_the_drafts_and_the_matcher_is_left_where_it_was(model_dir, llg_tokenizer):
    compiler = GrammarCompiler.for_model(model_dir, VOCAB, [EOS])
    assert compiler is not None
    format_ = SO(regex=REGEX)
    grammar = compiler.request_grammar(format_)
    digits = llg_tokenizer.tokenize_str("12")
    grammar.consume(digits[:1])
    drafts = llg_tokenizer.tokenize_str("2-ab")
    masks = grammar.masks(drafts + [llg_tokenizer.tokenize_str("Z")[0], 7])
    reference = fresh_matcher(llg_tokenizer, format_)
    reference.consume_tokens(digits[:1])
    for j in range(len(drafts) + 1):
        unpacked = np.unpackbits(masks[j:j + 1].view(np.uint8), bitorder="little")[:VOCAB].astype(bool)
        assert np.array_equal(unpacked, allowed_of(reference)), j
        if j < len(drafts):
            assert reference.consume_token(drafts[j])
    assert (masks[len(drafts) + 1:] == -1).all()  # after the forbidden "Z": never reached, nothing masked
    again = grammar.masks([])
    assert np.array_equal(again[0], masks[0])  # rolled back to where it was


def test_drafts_take_the_tokens_the_format_forces_then_the_drafters_while_the_format_allows_them(model_dir,
                                                                                                 llg_tokenizer):
    compiler = GrammarCompiler.for_model(model_dir, VOCAB, [EOS])
    assert compiler is not None
    grammar = compiler.request_grammar(SO(regex=r"answer=[0-9]{2}!"))
    literal, answer = llg_tokenizer.tokenize_str("answer="), llg_tokenizer.tokenize_str("answer=12!")
    before = grammar.masks([])
    assert grammar.constrain_drafts([], 3) == literal[:3]
    assert grammar.constrain_drafts([], 10) == literal  # the digits are not forced: the drafter has none
    assert grammar.constrain_drafts(answer, 10) == answer  # forced, then the drafter's own chain
    assert grammar.constrain_drafts(answer, 7) == answer[:7]
    # A drafter that drafted other tokens where the format forces these: its later drafts followed its own.
    assert grammar.constrain_drafts(llg_tokenizer.tokenize_str("an12!"), 10) == literal
    grammar.consume(llg_tokenizer.tokenize_str("answer=1"))
    # The drafter's "2" is allowed; its "Z" is not, but the "!" after two digits is forced.
    assert grammar.constrain_drafts(llg_tokenizer.tokenize_str("2Z"), 3) == llg_tokenizer.tokenize_str("2!")
    assert grammar.constrain_drafts(llg_tokenizer.tokenize_str("Z2"), 3) == []  # forbidden: certain to be rejected
    fresh = compiler.request_grammar(SO(regex=r"answer=[0-9]{2}!"))
    assert np.array_equal(fresh.masks([]), before)
    fresh.consume(llg_tokenizer.tokenize_str("answer=1"))
    assert np.array_equal(grammar.masks([]), fresh.masks([]))  # left where it was


# ---- through the model runner ----------------------------------------------------------------------


def hf_constrained_greedy(model_dir: Path, llg_tokenizer, prompt: list[int], format_, max_tokens: int) -> list[int]:
    """HF's forward, argmax over the tokens an independent matcher allows."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    matcher = fresh_matcher(llg_tokenizer, format_)
    tokens: list[int] = []
    with torch.no_grad():
        while len(tokens) < max_tokens and (not tokens or tokens[-1] != EOS):
            logits = model(torch.tensor([prompt + tokens])).logits[0, -1]
            allowed = torch.from_numpy(allowed_of(matcher))
            token = int(logits.masked_fill(~allowed, float("-inf")).argmax())
            assert matcher.consume_token(token)
            tokens.append(token)
    return tokens


PROMPT = [5, 9, 11, 3, 17, 40, 41]


@pytest.mark.parametrize("format_", [SO(regex=REGEX), SO(choice=sampling_pb2.ChoiceList(choices=["yes", "no"])),
                                     SO(json_schema=json.dumps({"type": "object", "properties": {
                                         "n": {"type": "integer"}}, "required": ["n"]}))],
                         ids=["regex", "choice", "json_schema"])
def test_greedy_constrained_generation_equals_hf_masked_by_an_independent_matcher(model_dir, llg_tokenizer,
                                                                                   format_):
    runner, description = runner_for(model_dir)
    assert description.structured_output
    greedy = sampling_pb2.SamplingParams(temperature=0.0, structured_output=format_)
    tokens = generate(runner, PROMPT, greedy, max_tokens=40)
    assert tokens == hf_constrained_greedy(model_dir, llg_tokenizer, PROMPT, format_, max_tokens=40)
    if format_.HasField("regex"):
        assert tokens[-1] == EOS and re.fullmatch(REGEX, decode(model_dir, tokens[:-1]))
    if format_.HasField("choice"):
        assert tokens[-1] == EOS and decode(model_dir, tokens[:-1]) in ("yes", "no")


def test_free_greedy_text_would_not_match_so_the_mask_did_the_work(model_dir):
    runner, _ = runner_for(model_dir)
    free = generate(runner, PROMPT, sampling_pb2.SamplingParams(temperature=0.0), max_tokens=12)
    assert not re.fullmatch(REGEX, decode(model_dir, free))


def test_sampled_constrained_outputs_all_match(model_dir):
    runner, _ = runner_for(model_dir)
    for seed in range(8):
        sampling = sampling_pb2.SamplingParams(temperature=1.0, seed=seed, structured_output=SO(regex=REGEX))
        tokens = generate(runner, PROMPT, sampling, max_tokens=40)
        assert tokens[-1] == EOS and re.fullmatch(REGEX, decode(model_dir, tokens[:-1])), seed
        runner.execute(executor_pb2.StepRequest(step_id=99, finished_request_ids=["r"]))


def test_a_resumed_request_continues_its_format_from_the_outputs_it_brings(model_dir):
    sampling = sampling_pb2.SamplingParams(temperature=0.0, structured_output=SO(regex=REGEX))
    runner, _ = runner_for(model_dir)
    whole = generate(runner, PROMPT, sampling, max_tokens=40)
    resumed_runner, _ = runner_for(model_dir)
    assert whole[:3] + generate(resumed_runner, PROMPT, sampling, max_tokens=40, output=whole[:3]) == whole


def test_a_constrained_request_settles_earlier_steps_and_running_ahead_changes_no_token(model_dir):
    requests = requests_plain()
    requests["d"] = PlannedRequest(requests["d"].prompt, sampling_pb2.SamplingParams(
        temperature=0.0, structured_output=SO(regex=REGEX)), block_ids=requests["d"].block_ids)
    steps = plan_steps(requests, BATCHES)
    one_at_a_time = runner_for(model_dir)[0]
    expected = [one_at_a_time.execute(step) for step in steps]
    runner = runner_for(model_dir, defer=True)[0]
    launched, unread_before_d = [], []
    for step in steps:
        launched.append(runner.launch(step))
        unread = sum(state.num_unread_tokens for state in runner.requests.values())
        if any(state.grammar is not None for state in runner.requests.values()):
            assert unread == 0
        else:
            unread_before_d.append(unread)
    assert max(unread_before_d) > 0  # the steps before d did run ahead
    actual = [runner.complete(item) for item in launched]
    assert [list(r.outputs) for r in actual] == [list(r.outputs) for r in expected]
    d_tokens = [t for r in actual for o in r.outputs if o.request_id == "d" for t in o.token_ids]
    assert re.fullmatch(r"[0-9]{1,4}(-[a-z]{0,6}!?)?", decode(model_dir, d_tokens))


def test_speculation_verifies_drafts_against_the_masked_target(model_dir):
    sampling = sampling_pb2.SamplingParams(temperature=0.0, structured_output=SO(regex=REGEX))
    prompt = PROMPT + PROMPT  # the n-gram drafter finds matches in a repeated prompt
    expected = generate(runner_for(model_dir)[0], prompt, sampling, max_tokens=40)
    runner, _ = runner_for(model_dir, spec_method="ngram", num_spec_tokens=3)
    steps = plan_steps({"r": PlannedRequest(prompt, sampling, num_spec=3, block_ids=list(range(8)))}, [["r"]] * 8)
    outputs = [o for step in steps for o in runner.execute(step).outputs]
    emitted = [t for o in outputs for t in o.token_ids]
    assert sum(o.num_drafted for o in outputs) > 0
    emitted = emitted[:emitted.index(EOS) + 1] if EOS in emitted else emitted
    assert len(emitted) >= 8 and emitted == expected[:len(emitted)]


def test_the_tokens_the_format_forces_are_drafted_where_the_drafter_finds_none_and_accepted(model_dir,
                                                                                           llg_tokenizer, monkeypatch):
    """The n-gram lookup finds no match in this prompt; the regex's literal "kqzv=" (one allowed token at each
    position here, so the masked target must take them) is drafted anyway and accepted, with the same output."""
    sampling = sampling_pb2.SamplingParams(temperature=0.0, structured_output=SO(regex=r"kqzv=[0-9]{2}!"))
    expected = generate(runner_for(model_dir)[0], PROMPT, sampling, max_tokens=20)

    def speculate() -> list[executor_pb2.RequestStepOutput]:
        runner, _ = runner_for(model_dir, spec_method="ngram", num_spec_tokens=3)
        steps = plan_steps({"r": PlannedRequest(PROMPT, sampling, num_spec=3, block_ids=list(range(8)))}, [["r"]] * 6)
        return [o for step in steps for o in runner.execute(step).outputs]

    outputs = speculate()
    emitted = [t for o in outputs for t in o.token_ids]
    assert emitted[:emitted.index(EOS) + 1] == expected
    assert emitted[:5] == llg_tokenizer.tokenize_str("kqzv=")
    assert [o.num_accepted for o in outputs[:2]] == [0, 3]  # the prefill's "k", then "qzv" accepted and "="
    from executor_svc.grammar import RequestGrammar

    monkeypatch.setattr(RequestGrammar, "constrain_drafts", lambda self, proposed, limit: proposed[:limit])
    assert sum(o.num_drafted for o in speculate()) == 0  # the drafter alone drafts nothing here


def test_an_executor_without_a_tokenizer_refuses_structured_output_by_name(tmp_path):
    bare = make_tiny_llama(tmp_path / "bare", seed=5, vocab_size=VOCAB)
    runner, description = runner_for(bare)
    assert not description.structured_output
    sampling = sampling_pb2.SamplingParams(structured_output=SO(json_object=True))
    with pytest.raises(StepError, match="'r' asks for structured output, which this executor cannot apply"):
        generate(runner, PROMPT, sampling, max_tokens=2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("defer", [False, True])
def test_on_cuda_constrained_greedy_equals_hf_and_masks_unpack_on_the_device(model_dir, llg_tokenizer, defer):
    bits = np.random.default_rng(1).integers(-2**31, 2**31, size=(2, mask_words(VOCAB)), dtype=np.int64)
    bits = bits.astype(np.int32)
    on_device = TokenMask.build({0: bits[0], 3: bits[1]}, "cuda")
    assert on_device is not None and on_device.bits.is_cuda
    on_host = TokenMask.build({0: bits[0], 3: bits[1]}, "cpu")
    assert torch.equal(on_device.allowed(VOCAB).cpu(), on_host.allowed(VOCAB))
    format_ = SO(regex=REGEX)
    runner, _ = runner_for(model_dir, defer=defer, device="cuda", dtype="float32", enforce_eager=False)
    tokens = generate(runner, PROMPT, sampling_pb2.SamplingParams(temperature=0.0, structured_output=format_), 40)
    assert tokens == hf_constrained_greedy(model_dir, llg_tokenizer, PROMPT, format_, max_tokens=40)


def test_replayed_decode_steps_mask_as_eager_steps(model_dir, llg_tokenizer):
    """The step graphs' path (a CPU stand-in re-running the captured forward): masking happens on the replayed
    step's logits, after the graph, and gives the eager tokens."""
    from executor_svc.cuda_graphs.step_graphs import EagerStandIn

    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, attention_backend="torch_padded",
                            max_num_seqs=4)
    runner = build_runner(config, make_capture=EagerStandIn)[0]
    format_ = SO(regex=REGEX)
    tokens = generate(runner, PROMPT, sampling_pb2.SamplingParams(temperature=0.0, structured_output=format_), 40)
    assert runner.forward.num_replays > 0
    assert tokens == hf_constrained_greedy(model_dir, llg_tokenizer, PROMPT, format_, max_tokens=40)
