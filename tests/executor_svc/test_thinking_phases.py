"""A structured output format that waits for the thinking to end (NewRequestData.format_after_thinking): masks and
drafts walk the phases as the output will (with and without a format and a thinking budget), and whole generations
through the model runner equal HF's forward, free while thinking and masked by an independent matcher after it, with
and without speculation and resumed. The budget's own generations: test_thinking_budget.py."""

from __future__ import annotations

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
from hypothesis import given, settings
from hypothesis import strategies as st
from step_plans import PlannedRequest, plan_steps

from executor_svc.grammar import GrammarCompiler
from executor_svc.model_runner import StepError
from executor_svc.thinking_phases import ThinkingPhases
from executor_svc.token_mask import token_allowed
from stepahead_proto import executor_pb2, sampling_pb2

SO = sampling_pb2.StructuredOutput
END = [300, 301]  # ids standing for the tokens that end the thinking
OPENER = 302
PROMPT = [5, 9, 11, 3, 17, 40, 41]
EVERYTHING = -1  # a mask word allowing all 32 tokens
NUM_WALKS = 300
"""Random outputs walked by the property test (derandomized; raise it locally for a longer run)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_constrained_model(tmp_path_factory.mktemp("thinking_then_format"))


@pytest.fixture(scope="module")
def compiler(model_dir) -> GrammarCompiler:
    compiler = GrammarCompiler.for_model(model_dir, VOCAB, [EOS])
    assert compiler is not None
    return compiler


@pytest.fixture(scope="module")
def llg_tokenizer(model_dir) -> llguidance.LLTokenizer:
    return llg_tokenizer_of(model_dir)


def after_thinking(compiler: GrammarCompiler, regex: str = REGEX, openers: tuple[int, ...] = ()) -> ThinkingPhases:
    return ThinkingPhases(compiler.request_grammar(SO(regex=regex)), VOCAB, END, list(openers))


def format_rows(compiler: GrammarCompiler, answer: list[int], regex: str = REGEX) -> np.ndarray:
    """The rows the format alone gives at the answer's start, walking ``answer`` as drafts."""
    return compiler.request_grammar(SO(regex=regex)).masks(answer)


# ---- masks and drafts ------------------------------------------------------------------------------


def test_rows_allow_everything_until_the_end_tokens_then_follow_the_format(compiler, llg_tokenizer):
    grammar = after_thinking(compiler)
    grammar.consume([7, END[0]])  # the end tokens begin in what was consumed and complete in the drafts
    answer = llg_tokenizer.tokenize_str("12-ab")
    masks = grammar.masks([END[1], *answer])
    assert (masks[:1] == EVERYTHING).all()  # the token after "...7 300" may be anything: still thinking
    assert np.array_equal(masks[1:], format_rows(compiler, answer))
    assert (grammar.masks([5, END[1], *answer]) == EVERYTHING).all()  # "300 5 301" does not end it
    assert grammar.thinking
    grammar.consume([END[1]])
    assert not grammar.thinking and np.array_equal(grammar.masks(answer), format_rows(compiler, answer))


def test_the_end_tokens_count_across_consumes_but_only_in_order(compiler):
    grammar = after_thinking(compiler)
    grammar.consume([END[0], 5, END[1], END[1]])
    assert grammar.thinking
    grammar.consume([END[0]])
    grammar.consume([END[1]])
    assert not grammar.thinking


def test_a_deciding_first_row_allows_the_openers_and_the_formats_first_tokens(compiler, llg_tokenizer):
    answer = llg_tokenizer.tokenize_str("12-ab")
    grammar = after_thinking(compiler, openers=(OPENER,))
    answering = grammar.masks(answer)
    expected = format_rows(compiler, answer)
    assert np.array_equal(answering[1:], expected[1:])
    assert token_allowed(answering[0], OPENER) and not token_allowed(expected[0], OPENER)
    answering[0][OPENER // 32] &= ~(1 << (OPENER % 32))
    assert np.array_equal(answering[0], expected[0])
    thinking = grammar.masks([OPENER, 9, *END, *answer])
    assert np.array_equal(thinking[0], grammar.masks([])[0])
    assert (thinking[1:4] == EVERYTHING).all()  # after the opener, 9 and the first end token
    assert np.array_equal(thinking[4:], expected)
    assert grammar.thinking  # nothing was kept: the masks walked a copy of the phases


def test_an_output_that_does_not_open_thinking_is_answer_from_its_first_token(compiler, llg_tokenizer):
    grammar = after_thinking(compiler, openers=(OPENER,))
    grammar.consume(llg_tokenizer.tokenize_str("1"))
    assert not grammar.thinking
    rest = llg_tokenizer.tokenize_str("2-ab")
    reference = compiler.request_grammar(SO(regex=REGEX))
    reference.consume(llg_tokenizer.tokenize_str("1"))
    assert np.array_equal(grammar.masks([*END, *rest]), reference.masks([*END, *rest]))


HEADER_END = 303


def test_with_a_header_the_answer_starts_after_the_headers_end(compiler, llg_tokenizer):
    """gpt-oss: ``<|channel|>final`` then a header (``<|constrain|>json``, say) up to ``<|message|>``."""
    grammar = ThinkingPhases(compiler.request_grammar(SO(regex=REGEX)), VOCAB, END, [], HEADER_END)
    answer = llg_tokenizer.tokenize_str("12-ab")
    masks = grammar.masks([*END, 7, 8, HEADER_END, *answer])
    assert (masks[:5] == EVERYTHING).all()  # the header's tokens are free too
    assert np.array_equal(masks[5:], format_rows(compiler, answer))
    assert (grammar.masks([HEADER_END, *answer]) == EVERYTHING).all()  # a header end outside a header is thinking
    assert grammar.constrain_drafts([*END, HEADER_END, 77], 9)[:3] == [*END, HEADER_END]
    grammar.consume([*END, 9])
    assert grammar.thinking
    grammar.consume([HEADER_END, *answer[:1]])
    assert not grammar.thinking and np.array_equal(grammar.masks(answer[1:]), format_rows(compiler, answer)[1:])


def test_a_padded_slot_ends_the_walk(compiler, llg_tokenizer):
    grammar = after_thinking(compiler)
    masks = grammar.masks([END[0], -1, END[1], *llg_tokenizer.tokenize_str("12")])
    assert (masks == EVERYTHING).all()


def test_thinking_drafts_are_the_drafters_and_the_answers_are_shaped_by_the_format(compiler, llg_tokenizer):
    regex = r"answer=[0-9]{2}!"
    grammar = after_thinking(compiler, regex=regex)
    literal = llg_tokenizer.tokenize_str("answer=")
    thinking = [9, 12, 300, 5]
    assert grammar.constrain_drafts(thinking + [7, 7], 5) == thinking + [7]
    assert grammar.constrain_drafts([9, *END, 77], 8) == [9, *END, *literal[:5]]  # the format forces "answe"
    assert grammar.constrain_drafts([9, *END], 2) == [9, END[0]]
    grammar.consume([9, *END])
    assert grammar.constrain_drafts([], 3) == literal[:3]


# ---- through the model runner ----------------------------------------------------------------------


def thinking_request(end: list[int], openers: list[int] = ()) -> dict[str, executor_pb2.FormatAfterThinking]:
    return {"format_after_thinking": executor_pb2.FormatAfterThinking(end_token_ids=end, opener_token_ids=openers)}


def hf_greedy_after_thinking(model_dir: Path, llg_tokenizer, prompt: list[int], end: list[int], openers: list[int],
                             max_tokens: int) -> list[int]:
    """HF's forward, argmax: free while thinking, over what an independent matcher allows once it ended (on the
    first token, the matcher's tokens and the openers when there are openers)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    matcher = fresh_matcher(llg_tokenizer, SO(regex=REGEX))
    phase, thought_from, tokens = ("deciding" if openers else "thinking"), 0, []
    with torch.no_grad():
        while len(tokens) < max_tokens and (not tokens or tokens[-1] != EOS):
            logits = model(torch.tensor([prompt + tokens])).logits[0, -1]
            allowed = torch.ones(VOCAB, dtype=torch.bool)
            if phase != "thinking":
                allowed = torch.from_numpy(allowed_of(matcher))
            if phase == "deciding":
                allowed[openers] = True
            token = int(logits.masked_fill(~allowed, float("-inf")).argmax())
            tokens.append(token)
            if phase == "deciding":
                phase, thought_from = ("thinking", len(tokens)) if token in openers else ("answering", 0)
            if phase == "answering":
                assert matcher.consume_token(token)
            elif tokens[thought_from:][-len(end):] == end:
                phase = "answering"
    return tokens


@pytest.fixture(scope="module")
def free_greedy(model_dir) -> list[int]:
    return generate(runner_for(model_dir)[0], PROMPT, sampling_pb2.SamplingParams(temperature=0.0), max_tokens=8)


CONSTRAINED = sampling_pb2.SamplingParams(temperature=0.0, structured_output=SO(regex=REGEX))


def test_greedy_thinks_freely_then_answers_in_the_format_as_hf_masked_after_the_thinking(model_dir, llg_tokenizer,
                                                                                        free_greedy):
    end = free_greedy[2:4]  # the thinking ends where the free output writes these two tokens
    tokens = generate(runner_for(model_dir)[0], PROMPT, CONSTRAINED, max_tokens=40, **thinking_request(end))
    assert tokens == hf_greedy_after_thinking(model_dir, llg_tokenizer, PROMPT, end, [], max_tokens=40)
    assert tokens[:4] == free_greedy[:4]
    assert tokens[-1] == EOS and re.fullmatch(REGEX, decode(model_dir, tokens[4:-1]))


@pytest.mark.parametrize("opens", [True, False], ids=["opens", "answers"])
def test_an_opener_as_first_token_thinks_and_any_other_answers_at_once(model_dir, llg_tokenizer, free_greedy, opens):
    openers = [free_greedy[0]] if opens else [OPENER]
    end = free_greedy[3:5]
    tokens = generate(runner_for(model_dir)[0], PROMPT, CONSTRAINED, max_tokens=40, **thinking_request(end, openers))
    assert tokens == hf_greedy_after_thinking(model_dir, llg_tokenizer, PROMPT, end, openers, max_tokens=40)
    answer = tokens[5:-1] if opens else tokens[:-1]
    assert tokens[-1] == EOS and re.fullmatch(REGEX, decode(model_dir, answer))
    assert (tokens[:5] == free_greedy[:5]) == opens


def test_a_resumed_request_continues_from_inside_its_end_tokens(model_dir, free_greedy):
    end = free_greedy[2:4]
    whole = generate(runner_for(model_dir)[0], PROMPT, CONSTRAINED, max_tokens=40, **thinking_request(end))
    resumed = generate(runner_for(model_dir)[0], PROMPT, CONSTRAINED, max_tokens=40, output=whole[:3],
                       **thinking_request(end))
    assert whole[:3] + resumed == whole


def test_speculation_across_the_end_of_the_thinking_keeps_the_output(model_dir):
    prompt = PROMPT + PROMPT  # the n-gram drafter finds matches in a repeated prompt
    free = generate(runner_for(model_dir)[0], prompt, sampling_pb2.SamplingParams(temperature=0.0), max_tokens=8)
    after = executor_pb2.FormatAfterThinking(end_token_ids=free[3:5])
    expected = generate(runner_for(model_dir)[0], prompt, CONSTRAINED, max_tokens=40, format_after_thinking=after)
    runner, _ = runner_for(model_dir, spec_method="ngram", num_spec_tokens=3)
    planned = PlannedRequest(prompt, CONSTRAINED, num_spec=3, block_ids=list(range(8)), format_after_thinking=after)
    outputs = [o for step in plan_steps({"r": planned}, [["r"]] * 12) for o in runner.execute(step).outputs]
    emitted = [t for o in outputs for t in o.token_ids]
    assert sum(o.num_drafted for o in outputs) > 0
    emitted = emitted[:emitted.index(EOS) + 1] if EOS in emitted else emitted
    assert len(emitted) >= 12 and emitted == expected[:len(emitted)]


@pytest.mark.parametrize(("after", "problem"), [
    (executor_pb2.FormatAfterThinking(), "end_token_ids is empty"),
    (executor_pb2.FormatAfterThinking(end_token_ids=[3], header_end_token_id=VOCAB + 1), f"token id {VOCAB + 1} is"),
    (executor_pb2.FormatAfterThinking(end_token_ids=[3, VOCAB]), f"token id {VOCAB} is outside the vocabulary"),
    (executor_pb2.FormatAfterThinking(end_token_ids=[3], opener_token_ids=[-1]), "token id -1 is outside"),
])
def test_bad_thinking_bounds_are_refused_by_name(model_dir, after, problem):
    runner, _ = runner_for(model_dir)
    with pytest.raises(StepError, match=f"'r' format_after_thinking: {problem}"):
        generate(runner, PROMPT, CONSTRAINED, max_tokens=2, format_after_thinking=after)


def test_without_a_format_the_bounds_change_nothing(model_dir, free_greedy):
    free = sampling_pb2.SamplingParams(temperature=0.0)
    assert generate(runner_for(model_dir)[0], PROMPT, free, max_tokens=8, **thinking_request([1, 2])) == free_greedy


# ---- the phases walked by drafts are the phases of one token at a time ------------------------------


@settings(max_examples=NUM_WALKS, derandomize=True, deadline=None, database=None)
@given(data=st.data())
def test_masks_and_consumes_walk_drafts_as_one_token_at_a_time(compiler, llg_tokenizer, data):
    """Any output, cut anywhere, consumed in any pieces, with or without a format and a budget: the rows masks()
    gives for drafts equal the rows of a grammar that consumed them one by one, up to the first draft that row
    forbids (the rows after it are never reached); and the drafts constrain_drafts shapes from them are each allowed
    where they stand."""
    alphabet = [*{t for text in ("12-abc!", "7z") for t in llg_tokenizer.tokenize_str(text)}, *END, OPENER, HEADER_END]
    end = data.draw(st.lists(st.sampled_from(END + [OPENER]), min_size=1, max_size=3), label="end")
    openers = data.draw(st.sampled_from([[], [OPENER]]), label="openers")
    header_end = data.draw(st.sampled_from([None, HEADER_END]), label="header_end")
    budget = data.draw(st.sampled_from([None, 0, 1, 2, 4]), label="budget")
    with_format = data.draw(st.booleans(), label="with_format")
    tokens = data.draw(st.lists(st.sampled_from(alphabet), max_size=14), label="tokens")
    cut = data.draw(st.integers(0, len(tokens)), label="cut")

    def fresh() -> ThinkingPhases:
        inner = compiler.request_grammar(SO(regex=REGEX)) if with_format else None
        return ThinkingPhases(inner, VOCAB, end, openers, header_end, budget)

    walked = fresh()
    pieces = data.draw(st.lists(st.integers(1, 3), max_size=8), label="pieces")
    start = 0
    for size in pieces:  # consumed in pieces up to the cut
        walked.consume(tokens[start:min(cut, start + size)])
        start = min(cut, start + size)
    walked.consume(tokens[start:cut])
    drafts = tokens[cut:]
    rows = walked.masks(drafts)
    stepped = fresh()
    stepped.consume(tokens[:cut])
    for j in range(len(drafts) + 1):
        expected = stepped.masks([])[0]
        assert np.array_equal(rows[j], expected), (j, tokens, cut)
        if j == len(drafts) or not token_allowed(expected, drafts[j]):
            break
        stepped.consume([drafts[j]])
    shaped = walked.constrain_drafts(drafts, len(drafts) + 2)
    stepped = fresh()
    stepped.consume(tokens[:cut])
    for draft in shaped:
        assert token_allowed(stepped.masks([])[0], draft), (shaped, tokens, cut)
        stepped.consume([draft])
