"""ChatPrompt's chat template controls: add_generation_prompt, continue_final_message and template_kwargs_json render
as HF transformers' apply_chat_template renders them (checked against it), every bad value is an InvalidRequestError
naming its field, Generate and Tokenize read them alike, and the prompt's length is the rendered prompt's."""

from __future__ import annotations

import json

import pytest
from tiny_tokenizers import build_byte_level, build_thinking

from scheduler_svc.prompt_work import prompt_chars
from scheduler_svc.tokenization import tokenize
from scheduler_svc.tokenizer import ContinuationError, Tokenizer, template_names
from scheduler_svc.validation import (
    MAX_PROMPT_CHARS_PER_TOKEN,
    MAX_TEMPLATE_KWARGS_CHARS,
    InvalidRequestError,
    ModelLimits,
    build_request,
)
from stepahead_proto import generation_pb2

MAX_MODEL_LEN = 512
QUESTION = {"role": "user", "content": "Capital of France?"}
PREFILL = {"role": "assistant", "content": "The capital is"}


@pytest.fixture(scope="module")
def thinking_dir(tmp_path_factory):
    return build_thinking(tmp_path_factory.mktemp("thinking"))


@pytest.fixture(scope="module")
def chatml_dir(tmp_path_factory):
    return build_byte_level(tmp_path_factory.mktemp("chatml"))


@pytest.fixture(scope="module")
def tokenizer(thinking_dir) -> Tokenizer:
    return Tokenizer.from_dir(thinking_dir)


def limits_of(tokenizer: Tokenizer) -> ModelLimits:
    return ModelLimits("tiny", MAX_MODEL_LEN, tokenizer.vocab_size, frozenset({2}), 16)


def chat(*messages: dict[str, str], add_generation_prompt: bool | None = None, continue_final_message: bool = False,
         kwargs: object = None) -> generation_pb2.ChatPrompt:
    prompt = generation_pb2.ChatPrompt(
        messages=[generation_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in messages],
        continue_final_message=continue_final_message)
    if add_generation_prompt is not None:
        prompt.add_generation_prompt = add_generation_prompt
    if kwargs is not None:
        prompt.template_kwargs_json = kwargs if isinstance(kwargs, str) else json.dumps(kwargs)
    return prompt


def ids(prompt: generation_pb2.ChatPrompt, tokenizer: Tokenizer) -> list[int]:
    return list(tokenize(generation_pb2.TokenizeRequest(chat=prompt), tokenizer, limits_of(tokenizer)).token_ids)


def text(prompt: generation_pb2.ChatPrompt, tokenizer: Tokenizer) -> str:
    return tokenizer.decode(ids(prompt, tokenizer), skip_special_tokens=False)


def refused(prompt: generation_pb2.ChatPrompt, tokenizer: Tokenizer) -> InvalidRequestError:
    """The error of Tokenize, checked to be Generate's too."""
    with pytest.raises(InvalidRequestError) as caught:
        ids(prompt, tokenizer)
    with pytest.raises(InvalidRequestError) as generated:
        build_request(generation_pb2.GenerateRequest(chat=prompt), tokenizer, limits_of(tokenizer))
    assert str(generated.value) == str(caught.value)
    return caught.value


CASES = [
    # (messages, add_generation_prompt, continue_final_message, template kwargs)
    ([QUESTION], True, False, {}),
    ([QUESTION], False, False, {}),
    ([QUESTION], True, False, {"enable_thinking": False}),
    ([QUESTION], True, False, {"enable_thinking": True, "persona": "Terse."}),
    ([QUESTION, PREFILL], False, True, {}),
    ([QUESTION, PREFILL], False, True, {"enable_thinking": False, "persona": "Terse."}),
    ([QUESTION, {"role": "assistant", "content": "The capital is "}], False, True, {}),  # trailing space
    ([QUESTION, {"role": "assistant", "content": ""}], False, True, {}),
    ([QUESTION, {"role": "assistant", "content": "Paris."}], False, False, {"enable_thinking": False}),
]


@pytest.mark.parametrize("template", ["thinking", "chatml"])
@pytest.mark.parametrize("messages, add_generation_prompt, continue_final_message, kwargs", CASES)
def test_rendering_is_transformers_apply_chat_template(thinking_dir, chatml_dir, template, messages,
                                                       add_generation_prompt, continue_final_message, kwargs):
    transformers = pytest.importorskip("transformers")
    directory = thinking_dir if template == "thinking" else chatml_dir
    hf = transformers.AutoTokenizer.from_pretrained(str(directory))
    ours = Tokenizer.from_dir(directory)
    expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                      continue_final_message=continue_final_message, **kwargs)
    assert ours.render_chat(messages, add_generation_prompt=add_generation_prompt,
                            continue_final_message=continue_final_message, template_kwargs=kwargs) == expected
    prompt = chat(*messages, add_generation_prompt=add_generation_prompt,
                  continue_final_message=continue_final_message, kwargs=kwargs)
    expected_ids = ours.encode(expected, add_special_tokens=False)
    assert ids(prompt, ours) == expected_ids
    request = build_request(generation_pb2.GenerateRequest(chat=prompt), ours, limits_of(ours))
    assert request.prompt_token_ids == expected_ids  # the length checks and max_tokens' room count these ids
    assert request.stop_params.max_tokens == min(16, MAX_MODEL_LEN - len(expected_ids))


def test_the_controls_change_the_prompt_as_asked(tokenizer):
    default = text(chat(QUESTION), tokenizer)
    assert default.endswith("<|im_start|>assistant\n") and text(chat(QUESTION, add_generation_prompt=True),
                                                                 tokenizer) == default
    assert text(chat(QUESTION, add_generation_prompt=False), tokenizer).endswith("France?<|im_end|>\n")
    assert text(chat(QUESTION, kwargs={"enable_thinking": False}), tokenizer).endswith("<think>\n\n</think>\n\n")
    assert text(chat(QUESTION, kwargs={}), tokenizer) == text(chat(QUESTION, kwargs=""), tokenizer) == default
    continued = text(chat(QUESTION, PREFILL, continue_final_message=True), tokenizer)
    assert continued.endswith("<|im_start|>assistant\nThe capital is")  # unterminated, no new header
    # add_generation_prompt unset with continue_final_message is false; set false, the same
    assert continued == text(chat(QUESTION, PREFILL, add_generation_prompt=False, continue_final_message=True),
                             tokenizer)


def test_continuing_leaves_the_callers_messages_alone_and_finds_the_last_occurrence(tokenizer):
    messages = [{"role": "user", "content": "Say: The capital is"}, dict(PREFILL)]
    rendered = tokenizer.render_chat(messages, add_generation_prompt=False, continue_final_message=True)
    assert rendered.endswith("Say: The capital is<|im_end|>\n<|im_start|>assistant\nThe capital is")
    assert messages[1] == PREFILL


def test_both_generation_prompt_and_continuation_is_refused_naming_add_generation_prompt(tokenizer):
    error = refused(chat(QUESTION, PREFILL, add_generation_prompt=True, continue_final_message=True), tokenizer)
    assert error.field == "chat.add_generation_prompt" and "continue_final_message" in error.reason
    with pytest.raises(ValueError, match="add_generation_prompt"):
        tokenizer.render_chat([QUESTION, PREFILL], continue_final_message=True)


@pytest.mark.parametrize("last", ["user", "system", "tool"])
def test_only_an_assistants_last_message_is_continued(tokenizer, last):
    error = refused(chat(PREFILL, {"role": last, "content": "x"}, continue_final_message=True), tokenizer)
    assert error.field == "chat.continue_final_message", error
    assert "chat.messages[1]" in error.reason and f"not one of role {last!r}" in error.reason


def test_a_template_that_rewrites_the_last_message_cannot_continue_it(tmp_path):
    directory = build_byte_level(tmp_path / "upper")
    (directory / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m.role }}>{{ m.content | upper }}</{{ m.role }}>{% endfor %}")
    tokenizer = Tokenizer.from_dir(directory)
    error = refused(chat(QUESTION, PREFILL, continue_final_message=True), tokenizer)
    assert error.field == "chat.continue_final_message" and "cannot end with it" in error.reason
    with pytest.raises(ContinuationError):
        tokenizer.render_chat([QUESTION, PREFILL], add_generation_prompt=False, continue_final_message=True)
    with pytest.raises(ContinuationError):
        tokenizer.render_chat([], add_generation_prompt=False, continue_final_message=True)
    assert ids(chat(QUESTION, PREFILL, add_generation_prompt=False), tokenizer)  # renders when not continuing


@pytest.mark.parametrize("kwargs, field, words", [
    ("{not json", "chat.template_kwargs_json", "is not JSON"),
    ("[1]", "chat.template_kwargs_json", "must be a JSON object, got an array"),
    ('"enable_thinking"', "chat.template_kwargs_json", "must be a JSON object, got a string"),
    ("null", "chat.template_kwargs_json", "must be a JSON object, got null"),
    ("[" * 10_000 + "]" * 10_000, "chat.template_kwargs_json", "nested too deeply"),
    ({"messages": []}, "chat.template_kwargs_json.messages", "sets this template variable itself"),
    ({"enable_thinking": False, "bos_token": "<s>"}, "chat.template_kwargs_json.bos_token", "itself"),
    ({"pad_token": "x"}, "chat.template_kwargs_json.pad_token", "itself"),  # reserved even if the model has none
    ({"add_generation_prompt": False}, "chat.template_kwargs_json.add_generation_prompt", "itself"),
    ({"continue_final_message": True}, "chat.template_kwargs_json.continue_final_message", "itself"),
    ({"tools": []}, "chat.template_kwargs_json.tools", "itself"),
    ({"raise_exception": 1}, "chat.template_kwargs_json.raise_exception", "itself"),
    ({"namespace": "x"}, "chat.template_kwargs_json.namespace", "itself"),
    ({"x": "a" * MAX_TEMPLATE_KWARGS_CHARS}, "chat.template_kwargs_json",
     f"at most {MAX_TEMPLATE_KWARGS_CHARS}"),
])
def test_bad_template_kwargs_name_their_field(tokenizer, kwargs, field, words):
    error = refused(chat(QUESTION, kwargs=kwargs), tokenizer)
    assert error.field == field and words in error.reason, error


def test_every_name_the_server_sets_is_reserved(tokenizer):
    assert {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token", "unk_token",
            "raise_exception", "strftime_now"} <= template_names()
    with pytest.raises(ValueError, match="eos_token"):
        tokenizer.render_chat([QUESTION], template_kwargs={"eos_token": "x"})


def test_template_kwargs_count_toward_the_character_limit_and_the_threading(tokenizer, monkeypatch):
    limit = MAX_PROMPT_CHARS_PER_TOKEN * MAX_MODEL_LEN
    fitting = {"role": "user", "content": "x" * (limit - 500)}
    kwargs = json.dumps({"persona": "y" * 600})
    assert prompt_chars(generation_pb2.TokenizeRequest(chat=chat(fitting))) <= limit  # alone, it would render
    assert prompt_chars(generation_pb2.TokenizeRequest(chat=chat(fitting, kwargs=kwargs))) > limit  # thread too
    monkeypatch.setattr(tokenizer, "apply_chat_template", lambda *args, **kwargs: pytest.fail("rendered"))
    error = refused(chat(fitting, kwargs=kwargs), tokenizer)
    assert error.field == "chat" and "cannot fit" in error.reason


def test_a_template_failing_on_a_kwarg_is_invalid_argument(tmp_path):
    directory = build_byte_level(tmp_path / "strict")
    (directory / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m.content }}{% endfor %}{{ suffix | join(',') }}")
    tokenizer = Tokenizer.from_dir(directory)
    assert text(chat(QUESTION, kwargs={"suffix": ["a", "b"]}), tokenizer).endswith("France?a,b")
    error = refused(chat(QUESTION, kwargs={"suffix": 5}), tokenizer)
    assert error.field == "chat" and "the chat template failed" in error.reason
