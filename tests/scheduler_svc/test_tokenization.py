"""Tokenize gives the ids Generate starts from; Detokenize turns ids back into text; both name bad fields."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_byte_level, build_metaspace

from scheduler_svc.tokenization import detokenize, tokenize
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import MAX_PROMPT_CHARS_PER_TOKEN, InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2

MAX_MODEL_LEN = 128
MESSAGES = [("user", "Hello world"), ("assistant", "Hi."), ("user", "the quick brown fox")]


@pytest.fixture(scope="module", params=["byte_level", "metaspace"])
def tokenizer(request, tmp_path_factory) -> Tokenizer:
    build = build_byte_level if request.param == "byte_level" else build_metaspace
    return Tokenizer.from_dir(build(tmp_path_factory.mktemp(request.param)))


@pytest.fixture(scope="module")
def limits(tokenizer) -> ModelLimits:
    return ModelLimits("tiny", MAX_MODEL_LEN, tokenizer.vocab_size, frozenset({2}), 16)


def chat(*messages: tuple[str, str]) -> generation_pb2.ChatPrompt:
    return generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role=r, content=c) for r, c in messages])


def refused(call, *args) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        call(*args)
    return caught.value


def test_the_ids_are_those_generate_starts_from(tokenizer, limits):
    for form in ({"text": "The quick brown fox jumps"}, {"chat": chat(*MESSAGES)}):
        response = tokenize(generation_pb2.TokenizeRequest(**form), tokenizer, limits)
        generated = build_request(generation_pb2.GenerateRequest(**form), tokenizer, limits)
        assert list(response.token_ids) == generated.prompt_token_ids and response.max_model_len == MAX_MODEL_LEN
    text = tokenize(generation_pb2.TokenizeRequest(text="Hello world"), tokenizer, limits)
    assert list(text.token_ids) == tokenizer.encode("Hello world")


def test_a_prompt_too_long_to_generate_from_is_still_counted(tokenizer, limits):
    long_text = "the lazy dog sleeps " * 40
    ids = tokenizer.encode(long_text)
    assert len(ids) >= MAX_MODEL_LEN
    assert refused(build_request, generation_pb2.GenerateRequest(text=long_text), tokenizer, limits).field == "prompt"
    response = tokenize(generation_pb2.TokenizeRequest(text=long_text), tokenizer, limits)
    assert list(response.token_ids) == ids


@pytest.mark.parametrize("request_fields, field, words", [
    ({}, "prompt", "one of text or chat is required"),
    ({"text": ""}, "text", "empty"),
    ({"text": "x" * (MAX_PROMPT_CHARS_PER_TOKEN * MAX_MODEL_LEN + 1)}, "text", "cannot fit"),
    ({"chat": chat()}, "chat.messages", "at least one"),
    ({"chat": chat(("robot", "hi"))}, "chat.messages[0].role", "'robot' is not one of"),
    ({"model": "other", "text": "hi"}, "model", "unknown model 'other'"),
])
def test_a_bad_tokenize_request_names_its_field(tokenizer, limits, request_fields, field, words):
    error = refused(tokenize, generation_pb2.TokenizeRequest(**request_fields), tokenizer, limits)
    assert error.field == field and words in str(error)


def test_detokenize_round_trips_and_skips_special_tokens_by_default(tokenizer, limits):
    ids = tokenizer.encode("Hello world, café")
    assert detokenize(generation_pb2.DetokenizeRequest(token_ids=ids), tokenizer, limits).text == "Hello world, café"
    templated = tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}])
    assert any(tokenizer.is_special(token) for token in templated)
    plain = detokenize(generation_pb2.DetokenizeRequest(token_ids=templated), tokenizer, limits).text
    assert plain == tokenizer.decode(templated, skip_special_tokens=True)
    kept = generation_pb2.DetokenizeRequest(token_ids=templated, skip_special_tokens=False)
    assert detokenize(kept, tokenizer, limits).text == tokenizer.decode(templated, skip_special_tokens=False) != plain
    assert detokenize(generation_pb2.DetokenizeRequest(), tokenizer, limits).text == ""


@pytest.mark.parametrize("request_fields, field", [
    ({"token_ids": [5, 10_000]}, "token_ids[1]"),
    ({"token_ids": [-1]}, "token_ids[0]"),
    ({"token_ids": [5] * (MAX_MODEL_LEN + 1)}, "token_ids"),
    ({"model": "other", "token_ids": [5]}, "model"),
])
def test_a_bad_detokenize_request_names_its_field(tokenizer, limits, request_fields, field):
    error = refused(detokenize, generation_pb2.DetokenizeRequest(**request_fields), tokenizer, limits)
    assert error.field == field


def test_many_empty_chat_messages_are_refused_before_the_template_renders(tokenizer, limits, monkeypatch):
    from scheduler_svc.validation import CHAT_MESSAGE_CHARS

    def render(*args, **kwargs):
        raise AssertionError("rendered")

    monkeypatch.setattr(tokenizer, "apply_chat_template", render)
    count = MAX_PROMPT_CHARS_PER_TOKEN * MAX_MODEL_LEN // (len("user") + CHAT_MESSAGE_CHARS) + 1
    empty = chat(*[("user", "")] * count)
    for request in (generation_pb2.TokenizeRequest(chat=empty), generation_pb2.GenerateRequest(chat=empty)):
        call = tokenize if isinstance(request, generation_pb2.TokenizeRequest) else build_request
        error = refused(call, request, tokenizer, limits)
        assert error.field == "chat" and "cannot fit" in str(error)
