"""ChatPrompt.chat_template: a request's own chat template renders its prompt as transformers renders it with that
template, only on a server that trusts request templates (--trust-request-chat-template); otherwise, and for a
template that does not compile or fails, INVALID_ARGUMENT naming chat.chat_template."""

from __future__ import annotations

import dataclasses

import pytest
from tiny_tokenizers import build_byte_level

from scheduler_svc.tokenization import tokenize
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import MAX_CHAT_TEMPLATE_CHARS, InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2

TEMPLATE = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[ASSISTANT] {% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = build_byte_level(tmp_path_factory.mktemp("request_template"))
    (directory / "chat_template.jinja").unlink()  # a base model: no template of its own
    return directory


@pytest.fixture(scope="module")
def tokenizer(model_dir) -> Tokenizer:
    return Tokenizer.from_dir(model_dir)


def limits_of(tokenizer: Tokenizer, trusted: bool = True) -> ModelLimits:
    return ModelLimits("tiny", 512, tokenizer.vocab_size, frozenset({2}), 16, request_chat_templates=trusted)


def chat(template: str) -> generation_pb2.ChatPrompt:
    return generation_pb2.ChatPrompt(
        messages=[generation_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in MESSAGES],
        chat_template=template)


def refusal(tokenizer: Tokenizer, prompt: generation_pb2.ChatPrompt, trusted: bool = True) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        build_request(generation_pb2.GenerateRequest(chat=prompt), tokenizer, limits_of(tokenizer, trusted))
    return caught.value


def test_a_trusted_request_template_renders_as_transformers_renders_it(model_dir, tokenizer):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    expected = hf.apply_chat_template(MESSAGES, chat_template=TEMPLATE, tokenize=False, add_generation_prompt=True)
    request = build_request(generation_pb2.GenerateRequest(chat=chat(TEMPLATE)), tokenizer, limits_of(tokenizer))
    assert tokenizer.decode(request.prompt_token_ids, skip_special_tokens=False) == expected
    assert "[SYSTEM] Be brief.\n[USER] Capital of France?\n[ASSISTANT] " in expected
    counted = tokenize(generation_pb2.TokenizeRequest(chat=chat(TEMPLATE)), tokenizer, limits_of(tokenizer))
    assert list(counted.token_ids) == request.prompt_token_ids


def test_without_a_request_template_the_models_own_is_needed(tokenizer):
    error = refusal(tokenizer, chat(""))
    assert error.field == "chat" and "no chat template" in error.reason


def test_an_untrusting_server_refuses_it_naming_the_flag(tokenizer):
    error = refusal(tokenizer, chat(TEMPLATE), trusted=False)
    assert error.field == "chat.chat_template" and "--trust-request-chat-template" in error.reason


@pytest.mark.parametrize(("template", "reason"), [
    ("{% for m in messages %}", "does not compile"),
    ("{{ raise_exception('no system messages') }}", "no system messages"),
    ("{{ 1 + messages[0]['content'] }}", "failed"),
    ("x" * (MAX_CHAT_TEMPLATE_CHARS + 1), f"at most {MAX_CHAT_TEMPLATE_CHARS}"),
], ids=["syntax", "raise_exception", "type-error", "too-long"])
def test_a_bad_template_is_refused_naming_it(tokenizer, template, reason):
    error = refusal(tokenizer, chat(template))
    assert error.field == "chat.chat_template" and reason in error.reason


def test_the_template_counts_toward_the_prompt_character_limit(tokenizer):
    small = dataclasses.replace(limits_of(tokenizer), max_model_len=8)
    padded = TEMPLATE + "{#" + "x" * 600 + "#}"
    with pytest.raises(InvalidRequestError) as caught:
        build_request(generation_pb2.GenerateRequest(chat=chat(padded)), tokenizer, small)
    assert caught.value.field == "chat" and "characters" in caught.value.reason
