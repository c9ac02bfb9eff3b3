"""truncate_prompt_tokens: the scheduler keeps a prompt's last tokens (after the chat template), so a prompt longer
than the context is served instead of refused; the room to generate is counted on what is kept."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_byte_level

from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("truncation")))


@pytest.fixture(scope="module")
def limits(tokenizer) -> ModelLimits:
    return ModelLimits("tiny", MAX_MODEL_LEN, tokenizer.vocab_size, frozenset({2}), 16)


TEXT = "the quick brown fox jumps over the lazy dog " * 4


def test_the_last_tokens_are_kept(tokenizer, limits):
    whole = tokenizer.encode(TEXT)
    request = build_request(generation_pb2.GenerateRequest(text=TEXT, truncate_prompt_tokens=10), tokenizer, limits)
    assert request.prompt_token_ids == whole[-10:]
    short = build_request(generation_pb2.GenerateRequest(text="hi", truncate_prompt_tokens=10), tokenizer, limits)
    assert short.prompt_token_ids == tokenizer.encode("hi")


def test_a_prompt_longer_than_the_context_is_served_when_truncated(tokenizer, limits):
    ids = list(range(3, 3 + 3 * MAX_MODEL_LEN))
    with pytest.raises(InvalidRequestError) as caught:
        build_request(generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIdsPrompt(ids=ids)),
                      tokenizer, limits)
    assert caught.value.field == "prompt"
    longest = build_request(generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIdsPrompt(ids=ids),
                                                           truncate_prompt_tokens=-1), tokenizer, limits)
    assert longest.prompt_token_ids == ids[-(MAX_MODEL_LEN - 1):]
    assert longest.stop_params.max_tokens == 1  # the default max_tokens, capped at the room left


def test_chat_prompts_are_truncated_after_the_template(tokenizer, limits):
    chat = generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role="user", content=TEXT)])
    whole = build_request(generation_pb2.GenerateRequest(chat=chat, truncate_prompt_tokens=MAX_MODEL_LEN - 1),
                          tokenizer, limits)
    kept = build_request(generation_pb2.GenerateRequest(chat=chat, truncate_prompt_tokens=5), tokenizer, limits)
    assert kept.prompt_token_ids == whole.prompt_token_ids[-5:]


def test_max_tokens_is_checked_against_the_kept_prompt(tokenizer, limits):
    pb = generation_pb2.GenerateRequest(text=TEXT, truncate_prompt_tokens=20)
    pb.stopping.max_tokens = MAX_MODEL_LEN - 20
    assert len(build_request(pb, tokenizer, limits).prompt_token_ids) == 20
    pb.stopping.max_tokens += 1
    with pytest.raises(InvalidRequestError) as caught:
        build_request(pb, tokenizer, limits)
    assert caught.value.field == "stopping.max_tokens"


@pytest.mark.parametrize("value", [0, -2, -(2**31)])
def test_values_other_than_minus_one_or_positive_are_refused_by_name(tokenizer, limits, value):
    with pytest.raises(InvalidRequestError) as caught:
        build_request(generation_pb2.GenerateRequest(text="hi", truncate_prompt_tokens=value), tokenizer, limits)
    assert caught.value.field == "truncate_prompt_tokens" and str(value) in caught.value.reason


def test_a_truncated_token_prompt_still_has_a_size_limit(tokenizer, limits):
    ids = [3] * (64 * MAX_MODEL_LEN + 1)
    with pytest.raises(InvalidRequestError) as caught:
        build_request(generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIdsPrompt(ids=ids),
                                                     truncate_prompt_tokens=4), tokenizer, limits)
    assert caught.value.field == "token_ids.ids"
