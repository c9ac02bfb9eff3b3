"""ChatPrompt.tools_json and messages' tool_calls_json / tool_call_id: checked, given to the chat template as HF
transformers gives them (checked against it on a template that renders them), counted towards the prompt's
character limit, and the same for Generate and Tokenize."""

from __future__ import annotations

import json

import pytest
from tiny_tokenizers import build_byte_level, build_tool_calling

from scheduler_svc.tokenization import tokenize
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import MAX_PROMPT_CHARS_PER_TOKEN, InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2

MAX_MODEL_LEN = 512
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                           "parameters": WEATHER}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.fixture(scope="module")
def tool_dir(tmp_path_factory):
    return build_tool_calling(tmp_path_factory.mktemp("tools"))


@pytest.fixture(scope="module")
def tokenizer(tool_dir) -> Tokenizer:
    return Tokenizer.from_dir(tool_dir)


@pytest.fixture(scope="module")
def chatml(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("chatml")))


def limits_of(tokenizer: Tokenizer) -> ModelLimits:
    return ModelLimits("tiny", MAX_MODEL_LEN, tokenizer.vocab_size, frozenset({2}), 16)


def conversation(tools: object = TOOLS, calls: object = (CALL,), call_id: str = "call_1") -> generation_pb2.ChatPrompt:
    """User asks, the assistant calls a tool (empty content), the tool answers."""
    return generation_pb2.ChatPrompt(
        tools_json=tools if isinstance(tools, str) else json.dumps(tools),
        messages=[
            generation_pb2.ChatMessage(role="user", content="Weather in Paris?"),
            generation_pb2.ChatMessage(role="assistant", content="",
                                       tool_calls_json=calls if isinstance(calls, str) else json.dumps(list(calls))),
            generation_pb2.ChatMessage(role="tool", content="sunny", tool_call_id=call_id),
        ],
    )


def ids(chat: generation_pb2.ChatPrompt, tokenizer: Tokenizer) -> list[int]:
    return list(tokenize(generation_pb2.TokenizeRequest(chat=chat), tokenizer, limits_of(tokenizer)).token_ids)


def refused(chat: generation_pb2.ChatPrompt, tokenizer: Tokenizer) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        ids(chat, tokenizer)
    return caught.value


def test_the_template_gets_tools_and_tool_history_as_transformers_gives_them(tool_dir, tokenizer):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tool_dir))
    hf_call = {**CALL, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [hf_call]},
                {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}]
    expected = hf.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert '<call>get_weather {"city": "Paris"}</call>' in expected and "<id>call_1</id>" in expected
    assert ids(conversation(), tokenizer) == tokenizer.encode(expected, add_special_tokens=False)
    request = build_request(generation_pb2.GenerateRequest(chat=conversation()), tokenizer, limits_of(tokenizer))
    assert request.prompt_token_ids == ids(conversation(), tokenizer)


def test_arguments_given_as_an_object_empty_or_not_json_reach_the_template_as_hf_expects(tokenizer):
    def rendered_call(arguments: object) -> str:
        call = {**CALL, "function": {"name": "f", "arguments": arguments}}
        return tokenizer.decode(ids(conversation(calls=[call]), tokenizer), skip_special_tokens=False)

    assert '<call>f {"a": 1}</call>' in rendered_call({"a": 1})
    assert "<call>f {}</call>" in rendered_call("")
    assert '<call>f "not json"</call>' in rendered_call("not json")  # left as it is, for the template to judge
    assert '<call>f "[1]"</call>' in rendered_call("[1]")  # only a JSON object becomes an object


def test_no_tools_and_no_calls_leave_the_keys_out(tokenizer):
    plain = generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role="user", content="hi"),
                                                generation_pb2.ChatMessage(role="assistant", content="hello")])
    empty = generation_pb2.ChatPrompt()
    empty.CopyFrom(plain)
    empty.tools_json = "[]"
    empty.messages[1].tool_calls_json = "[]"
    text = tokenizer.decode(ids(empty, tokenizer), skip_special_tokens=False)
    assert ids(empty, tokenizer) == ids(plain, tokenizer) and "<tools>" not in text and "<call>" not in text


def test_a_template_that_ignores_tools_renders_as_before(chatml):
    with_tools = conversation()
    without = generation_pb2.ChatPrompt()
    without.CopyFrom(with_tools)
    without.tools_json = ""
    for message in without.messages:
        message.tool_calls_json, message.tool_call_id = "", ""
    assert ids(with_tools, chatml) == ids(without, chatml)
    assert "<|im_start|>assistant\n<|im_end|>" in chatml.decode(ids(with_tools, chatml), skip_special_tokens=False)


@pytest.mark.parametrize("chat, field, words", [
    (conversation(tools="{not json"), "chat.tools_json", "is not JSON"),
    (conversation(tools={"type": "function"}), "chat.tools_json", "must be a JSON array"),
    (conversation(tools=[1]), "chat.tools_json", "item 0 must be a JSON object"),
    (conversation(tools="[" * 10_000 + "]" * 10_000), "chat.tools_json", "nested too deeply"),
    (conversation(calls="[{]"), "chat.messages[1].tool_calls_json", "is not JSON"),
    (conversation(calls=["call"]), "chat.messages[1].tool_calls_json", "item 0 must be a JSON object"),
])
def test_bad_tools_and_tool_calls_name_their_field(tokenizer, chat, field, words):
    error = refused(chat, tokenizer)
    assert error.field == field and words in error.reason, error


def test_tool_calls_belong_to_assistants_and_call_ids_to_tools(tokenizer):
    chat = conversation()
    chat.messages[0].tool_calls_json = json.dumps([CALL])
    error = refused(chat, tokenizer)
    assert error.field == "chat.messages[0].tool_calls_json" and "not one of role 'user'" in error.reason
    chat = conversation()
    chat.messages[1].tool_call_id = "call_1"
    error = refused(chat, tokenizer)
    assert error.field == "chat.messages[1].tool_call_id" and "not one of role 'assistant'" in error.reason


def test_tools_and_calls_count_towards_the_character_limit_before_rendering(tokenizer, monkeypatch):
    limit = MAX_PROMPT_CHARS_PER_TOKEN * MAX_MODEL_LEN
    rendered = []
    monkeypatch.setattr(tokenizer, "apply_chat_template", lambda *args, **kwargs: rendered.append(args) or [1])
    huge = [{"type": "function", "function": {"name": "f", "description": "x" * limit}}]
    for chat in (conversation(tools=huge), conversation(calls=[{**CALL, "id": "x" * limit}]),
                 conversation(call_id="x" * limit)):
        for request in (generation_pb2.TokenizeRequest(chat=chat), generation_pb2.GenerateRequest(chat=chat)):
            with pytest.raises(InvalidRequestError) as caught:
                if isinstance(request, generation_pb2.TokenizeRequest):
                    tokenize(request, tokenizer, limits_of(tokenizer))
                else:
                    build_request(request, tokenizer, limits_of(tokenizer))
            assert caught.value.field == "chat" and "cannot fit" in str(caught.value)
    assert rendered == []


def test_a_template_failing_on_the_requests_data_is_invalid_argument(tmp_path):
    directory = build_byte_level(tmp_path / "items")
    (directory / "chat_template.jinja").write_text(
        "{% for m in messages %}{% for c in m.tool_calls or [] %}{% for k, v in c.function.arguments | items %}"
        "{{ k }}={{ v }}{% endfor %}{% endfor %}{{ m.content }}{% endfor %}")
    tokenizer = Tokenizer.from_dir(directory)
    assert ids(conversation(), tokenizer)  # an object: renders
    error = refused(conversation(calls=[{**CALL, "function": {"name": "f", "arguments": "[1]"}}]), tokenizer)
    assert error.field == "chat" and "the chat template failed" in error.reason


def test_an_authors_name_reaches_the_template_and_an_empty_one_is_left_out(tokenizer):
    named = generation_pb2.ChatPrompt(messages=[generation_pb2.ChatMessage(role="user", content="hi", name="ada")])
    text = tokenizer.decode(ids(named, tokenizer), skip_special_tokens=False)
    assert "<name>ada</name>" in text
    named.messages[0].name = ""
    assert "<name>" not in tokenizer.decode(ids(named, tokenizer), skip_special_tokens=False)
