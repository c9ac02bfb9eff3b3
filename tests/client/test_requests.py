"""Tests of client/requests.py: keyword parameters -> GenerateRequest."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from client.requests import (
    GenerateOptions,
    build_generate_request,
    build_tokenize_request,
    call_metadata,
    check_timeout,
    resolve_timeout,
)


def test_text_prompt_leaves_unset_params_unset() -> None:
    request = build_generate_request("hello")
    assert request.WhichOneof("prompt") == "text"
    assert request.text == "hello"
    assert request.request_id == "" and request.model == ""
    assert not request.HasField("skip_special_tokens")
    for name in ("temperature", "top_p", "top_k", "repetition_penalty", "seed", "logprobs", "prompt_logprobs"):
        assert not request.sampling.HasField(name), name
    assert not request.stopping.HasField("max_tokens")
    assert list(request.stopping.stop) == []


def test_none_options_are_left_unset() -> None:
    request = build_generate_request("x", temperature=None, seed=None, max_tokens=None, stop=None)
    assert not request.sampling.HasField("temperature")
    assert not request.sampling.HasField("seed")
    assert not request.stopping.HasField("max_tokens")


def test_zero_values_are_set_explicitly() -> None:
    request = build_generate_request("x", temperature=0.0, top_k=-1, logprobs=0, prompt_logprobs=0)
    assert request.sampling.HasField("temperature") and request.sampling.temperature == 0.0
    assert request.sampling.top_k == -1
    assert request.sampling.HasField("logprobs") and request.sampling.logprobs == 0
    assert request.sampling.HasField("prompt_logprobs") and request.sampling.prompt_logprobs == 0


def test_all_options_reach_their_fields() -> None:
    request = build_generate_request(
        "x",
        request_id="r1",
        model="m",
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        repetition_penalty=1.1,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        seed=2**40,
        logprobs=3,
        prompt_logprobs=4,
        logit_bias={5: -100, 9: 2.5},
        max_tokens=7,
        min_tokens=2,
        stop=["a", "b"],
        stop_token_ids=[5, 6],
        ignore_eos=True,
        include_stop_str_in_output=True,
        skip_special_tokens=False,
    )
    sampling, stopping = request.sampling, request.stopping
    assert (request.request_id, request.model) == ("r1", "m")
    assert sampling.temperature == pytest.approx(0.5) and sampling.top_p == pytest.approx(0.9)
    assert sampling.top_k == 40 and sampling.min_p == pytest.approx(0.05)
    assert sampling.repetition_penalty == pytest.approx(1.1)
    assert sampling.presence_penalty == pytest.approx(0.5)
    assert sampling.frequency_penalty == pytest.approx(-0.5)
    assert sampling.seed == 2**40 and sampling.logprobs == 3 and sampling.prompt_logprobs == 4
    assert dict(sampling.logit_bias) == {5: -100.0, 9: 2.5}
    assert stopping.max_tokens == 7 and stopping.min_tokens == 2
    assert list(stopping.stop) == ["a", "b"] and list(stopping.stop_token_ids) == [5, 6]
    assert stopping.ignore_eos and stopping.include_stop_str_in_output
    assert request.HasField("skip_special_tokens") and not request.skip_special_tokens


def test_every_declared_option_is_accepted() -> None:
    values = {"stop": "s", "stop_token_ids": [1], "request_id": "r", "model": "m", "logit_bias": {1: 1.0},
              "json_schema": {"type": "object"}, "json_object": True, "regex": "[a-z]+", "choice": ["a"],
              "grammar": 'start: "a"', "allowed_token_ids": [1], "bad_words": ["w"], "parse_tool_calls": True,
              "parallel_tool_calls": False, "prediction": "p"}
    chat_only = {"tools": [{"type": "function"}], "add_generation_prompt": False, "continue_final_message": True,
                 "chat_template_kwargs": {"enable_thinking": False}, "documents": [{"text": "t"}],
                 "chat_template": "{{ messages }}"}
    for name in GenerateOptions.__annotations__:
        if name in chat_only:  # a chat prompt's only
            build_generate_request(messages=[{"role": "user", "content": "x"}], **{name: chat_only[name]})
        else:
            build_generate_request("x", **{name: values.get(name, 1)})


def test_token_restrictions_and_prompt_truncation_reach_their_fields() -> None:
    request = build_generate_request("x", allowed_token_ids=(5, 9), bad_words=["darn", " heck it"],
                                     truncate_prompt_tokens=-1)
    assert list(request.sampling.allowed_token_ids) == [5, 9]
    assert list(request.sampling.bad_words) == ["darn", " heck it"]
    assert request.HasField("truncate_prompt_tokens") and request.truncate_prompt_tokens == -1
    chat = build_generate_request(messages=[{"role": "user", "content": "x"}], allowed_token_ids=range(3),
                                  truncate_prompt_tokens=0)  # the server refuses 0, naming it
    assert list(chat.sampling.allowed_token_ids) == [0, 1, 2] and chat.HasField("truncate_prompt_tokens")
    for unset in (build_generate_request("x"), build_generate_request("x", allowed_token_ids=None, bad_words=None,
                                                                      truncate_prompt_tokens=None),
                  build_generate_request("x", allowed_token_ids=[], bad_words=[])):
        assert not unset.sampling.allowed_token_ids and not unset.sampling.bad_words
        assert not unset.HasField("truncate_prompt_tokens")


def test_a_thinking_budget_reaches_its_field_and_zero_is_a_budget() -> None:
    request = build_generate_request(messages=[{"role": "user", "content": "x"}], thinking_token_budget=0)
    assert request.sampling.HasField("thinking_token_budget") and request.sampling.thinking_token_budget == 0
    assert not build_generate_request("x").sampling.HasField("thinking_token_budget")
    with pytest.raises(ValueError, match="thinking_token_budget: 1.5 is not a valid value"):
        build_generate_request("x", thinking_token_budget=1.5)


def test_a_prediction_reaches_its_field_as_written_and_must_be_text() -> None:
    text = "def f():\r\n    return 1\n"
    assert build_generate_request("x", prediction=text).prediction == text
    chat = build_generate_request(messages=[{"role": "user", "content": "x"}], prediction="")
    assert chat.HasField("prediction") and chat.prediction == ""  # sent: the server judges an empty prediction
    for unset in (build_generate_request("x"), build_generate_request("x", prediction=None)):
        assert not unset.HasField("prediction")
    with pytest.raises(ValueError, match="^prediction: must be a string, got bytes"):
        build_generate_request("x", prediction=b"def f(): pass")
    assert "prediction" in GenerateOptions.__doc__


def test_single_stop_string_is_one_stop() -> None:
    assert list(build_generate_request("x", stop="END").stopping.stop) == ["END"]


def test_messages_from_mappings_and_objects() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        SimpleNamespace(role="user", content="hi"),
    ]
    request = build_generate_request(messages=messages)
    assert request.WhichOneof("prompt") == "chat"
    assert [(m.role, m.content) for m in request.chat.messages] == [
        ("system", "be brief"),
        ("user", "hi"),
    ]


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOL_CHAT = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
]


def test_a_messages_name_reaches_the_chat_prompt() -> None:
    request = build_generate_request(messages=[{"role": "user", "content": "hi", "name": "ada"}])
    assert request.chat.messages[0].name == "ada"
    with pytest.raises(ValueError, match=r"messages\[0\].name: must be a string"):
        build_generate_request(messages=[{"role": "user", "content": "hi", "name": 3}])


def test_an_assistants_reasoning_content_reaches_the_chat_prompt() -> None:
    turns = [{"role": "user", "content": "Is 91 prime?"},
             {"role": "assistant", "content": "No.", "reasoning_content": "7 x 13"}]
    request = build_generate_request(messages=turns)
    assert [m.reasoning_content for m in request.chat.messages] == ["", "7 x 13"]
    assert build_generate_request(messages=list(request.chat.messages)).chat == request.chat
    with pytest.raises(ValueError, match=r"messages\[0\].reasoning_content: must be a string"):
        build_generate_request(messages=[{"role": "assistant", "content": "x", "reasoning_content": 1}])


def test_tools_and_tool_messages_reach_the_chat_prompt() -> None:
    request = build_generate_request(messages=TOOL_CHAT, tools=TOOLS)
    assert json.loads(request.chat.tools_json) == TOOLS
    user, assistant, tool = request.chat.messages
    assert (user.tool_calls_json, user.tool_call_id) == ("", "")
    assert assistant.content == "" and json.loads(assistant.tool_calls_json) == [CALL]
    assert (tool.content, tool.tool_call_id, tool.tool_calls_json) == ("sunny", "call_1", "")
    assert build_generate_request(messages=TOOL_CHAT, tools='[{"x": 1}]').chat.tools_json == '[{"x": 1}]'
    again = build_generate_request(messages=list(request.chat.messages))  # proto messages keep their tool fields
    assert list(again.chat.messages) == list(request.chat.messages)
    assert build_tokenize_request(messages=TOOL_CHAT, tools=TOOLS).chat == request.chat
    assert build_generate_request(messages=TOOL_CHAT).chat.tools_json == ""


@pytest.mark.parametrize("build, kwargs, message", [
    (build_generate_request, {"prompt": "x", "tools": TOOLS}, "tools: only a chat prompt"),
    (build_tokenize_request, {"prompt": "x", "tools": TOOLS}, "tools: only a chat prompt"),
    (build_generate_request, {"messages": TOOL_CHAT, "tools": TOOLS[0]}, "tools: must be a list of dicts"),
    (build_generate_request, {"messages": TOOL_CHAT, "tools": [1]}, "tools: must be a list of dicts"),
    (build_generate_request, {"messages": TOOL_CHAT, "tools": [{"x": float("nan")}]}, "tools: cannot be written"),
    (build_generate_request, {"messages": [{"role": "assistant", "content": None, "tool_calls": 5}]},
     r"messages\[0\].tool_calls: must be a list of dicts"),
    (build_generate_request, {"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]},
     r"messages\[0\].tool_call_id: must be a string"),
    (build_generate_request, {"messages": [{"role": "assistant", "content": None}]},
     r"messages\[0\] needs string 'role' and 'content'"),
])
def test_bad_tools_and_tool_messages_are_value_errors(build, kwargs, message) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        build(**kwargs)


def test_tool_call_parsing_options_reach_their_fields_and_non_booleans_are_refused() -> None:
    request = build_generate_request(messages=TOOL_CHAT, tools=TOOLS, parse_tool_calls=False, parallel_tool_calls=True)
    assert request.HasField("parse_tool_calls") and not request.parse_tool_calls and request.parallel_tool_calls
    unset = build_generate_request(messages=TOOL_CHAT, tools=TOOLS)
    assert not unset.HasField("parse_tool_calls") and not unset.HasField("parallel_tool_calls")
    for name in ("parse_tool_calls", "parallel_tool_calls"):
        with pytest.raises(ValueError, match=f"^{name}: must be True or False, got 'yes'"):
            build_generate_request(messages=TOOL_CHAT, tools=TOOLS, **{name: "yes"})


CONTINUED = [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "The capital is"}]


def test_the_chat_template_controls_reach_the_chat_prompt() -> None:
    plain = build_generate_request(messages=CONTINUED).chat
    assert not plain.HasField("add_generation_prompt") and not plain.continue_final_message
    assert plain.template_kwargs_json == ""
    request = build_generate_request(messages=CONTINUED, add_generation_prompt=False, continue_final_message=True,
                                     chat_template_kwargs={"enable_thinking": False, "persona": "Zürich"})
    chat = request.chat
    assert chat.HasField("add_generation_prompt") and not chat.add_generation_prompt and chat.continue_final_message
    assert json.loads(chat.template_kwargs_json) == {"enable_thinking": False, "persona": "Zürich"}
    assert "Zürich" in chat.template_kwargs_json  # written as it is, not escaped
    assert build_tokenize_request(messages=CONTINUED, add_generation_prompt=False, continue_final_message=True,
                                  chat_template_kwargs={"enable_thinking": False, "persona": "Zürich"}).chat == chat
    text = '{"enable_thinking": true}'
    assert build_generate_request(messages=CONTINUED, chat_template_kwargs=text).chat.template_kwargs_json == text
    assert build_generate_request(messages=CONTINUED, add_generation_prompt=True).chat.add_generation_prompt


@pytest.mark.parametrize("build, kwargs, message", [
    (build_generate_request, {"prompt": "x", "add_generation_prompt": False},
     "add_generation_prompt: only a chat prompt"),
    (build_tokenize_request, {"prompt": "x", "continue_final_message": True},
     "continue_final_message: only a chat prompt"),
    (build_generate_request, {"token_ids": [1], "chat_template_kwargs": {}},
     "chat_template_kwargs: only a chat prompt"),
    (build_generate_request, {"messages": CONTINUED, "continue_final_message": "yes"},
     "continue_final_message: must be True or False"),
    (build_tokenize_request, {"messages": CONTINUED, "add_generation_prompt": 0},
     "add_generation_prompt: must be True or False"),
    (build_generate_request, {"messages": CONTINUED, "chat_template_kwargs": [("a", 1)]},
     "chat_template_kwargs: must be a dict"),
    (build_generate_request, {"messages": CONTINUED, "chat_template_kwargs": {"x": float("inf")}},
     "chat_template_kwargs: cannot be written as JSON"),
    (build_tokenize_request, {"messages": CONTINUED, "chat_template_kwargs": {"x": object()}},
     "chat_template_kwargs: cannot be written as JSON"),
])
def test_bad_chat_template_controls_are_value_errors(build, kwargs, message) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        build(**kwargs)


def test_token_ids_prompt() -> None:
    request = build_generate_request(token_ids=[1, 2, 3])
    assert request.WhichOneof("prompt") == "token_ids"
    assert list(request.token_ids.ids) == [1, 2, 3]


def test_empty_text_prompt_is_a_prompt() -> None:
    assert build_generate_request("").WhichOneof("prompt") == "text"


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"prompt": "a", "messages": [{"role": "user", "content": "b"}]},
        {"prompt": "a", "token_ids": [1]},
        {"messages": [{"role": "user", "content": "b"}], "token_ids": [1]},
    ],
)
def test_exactly_one_prompt_form(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="exactly one of prompt, messages, token_ids"):
        build_generate_request(**kwargs)


def test_empty_messages_and_token_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="messages"):
        build_generate_request(messages=[])
    with pytest.raises(ValueError, match="token_ids"):
        build_generate_request(token_ids=[])


def test_malformed_message_names_its_index() -> None:
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        build_generate_request(messages=[{"role": "user", "content": "a"}, {"role": "user"}])


def test_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="temprature"):
        build_generate_request("x", temprature=0.1)


def test_call_metadata_is_a_tuple_of_pairs() -> None:
    metadata = call_metadata()
    assert isinstance(metadata, tuple)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in metadata)


def test_timeouts() -> None:
    assert resolve_timeout(None, None) is None
    assert resolve_timeout(None, 5.0) == 5.0
    assert resolve_timeout(2.0, 5.0) == 2.0
    assert check_timeout(None) is None
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="timeout"):
            check_timeout(bad)
    with pytest.raises(ValueError, match="timeout"):
        resolve_timeout(0, 5.0)


@pytest.mark.parametrize("options, field", [
    ({"seed": -5}, "seed"),
    ({"seed": 2**64}, "seed"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": float("inf")}, "top_p"),
    ({"logprobs": 2**40}, "logprobs"),
    ({"prompt_logprobs": 2**40}, "prompt_logprobs"),
    ({"prompt_logprobs": 1.5}, "prompt_logprobs"),
    ({"top_k": 1.5}, "top_k"),
    ({"max_tokens": -1 << 40}, "max_tokens"),
    ({"stop": ["ok", 3]}, "stop"),
    ({"stop_token_ids": [1, "x"]}, "stop_token_ids"),
    ({"logit_bias": [(1, 2.0)]}, "logit_bias"),
    ({"logit_bias": {"1": 2.0}}, "logit_bias"),
    ({"logit_bias": {1: float("nan")}}, r"logit_bias\[1\]"),
    ({"logit_bias": {1: "x"}}, r"logit_bias\[1\]"),
    ({"logit_bias": {2**40: 1.0}}, "logit_bias"),
    ({"allowed_token_ids": [1, "x"]}, "allowed_token_ids"),
    ({"allowed_token_ids": [2**40]}, "allowed_token_ids"),
    ({"allowed_token_ids": [1.0]}, "allowed_token_ids"),
    ({"allowed_token_ids": 5}, "allowed_token_ids"),
    ({"bad_words": "darn"}, "bad_words"),
    ({"bad_words": ["ok", 3]}, "bad_words"),
    ({"bad_words": 3}, "bad_words"),
    ({"truncate_prompt_tokens": 1.5}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": 2**31}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": "5"}, "truncate_prompt_tokens"),
])
def test_a_value_the_message_cannot_carry_is_refused_before_sending_naming_the_option(options, field) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        build_generate_request(prompt="hi", **options)


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": 5}, "prompt: must be a string, got int 5"),
    ({"prompt": b"hi"}, "prompt: must be a string, got bytes b'hi'"),
    ({"token_ids": ["a", "b"]}, "token_ids: ['a', 'b'] is not a valid value"),
    ({"token_ids": [1, 2**40]}, "token_ids: [1, 1099511627776] is not a valid value"),
])
def test_a_prompt_of_the_wrong_type_names_its_argument(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        build_generate_request(**kwargs)


@pytest.mark.parametrize("options, kind, value", [
    ({"json_schema": {"type": "object", "required": ["a"]}}, "json_schema", '{"type": "object", "required": ["a"]}'),
    ({"json_schema": '{"type":"integer"}'}, "json_schema", '{"type":"integer"}'),
    ({"json_object": True}, "json_object", True),
    ({"regex": r"\d{3}"}, "regex", r"\d{3}"),
    ({"choice": ["yes", "no"]}, "choice", ["yes", "no"]),
    ({"choice": ("yes",)}, "choice", ["yes"]),
    ({"grammar": 'start: "a" | "b"'}, "grammar", 'start: "a" | "b"'),
])
def test_a_structured_output_option_sets_its_kind(options, kind, value) -> None:
    structured = build_generate_request("x", **options).sampling.structured_output
    assert structured.WhichOneof("kind") == kind
    got = list(structured.choice.choices) if kind == "choice" else getattr(structured, kind)
    assert got == value


def test_no_structured_output_option_leaves_the_format_unset() -> None:
    for options in ({}, {"json_schema": None, "regex": None, "choice": None}, {"json_object": False}):
        assert not build_generate_request("x", **options).sampling.HasField("structured_output"), options
    # json_object=False is no format, so it does not clash with another
    assert build_generate_request("x", json_object=False, regex="a").sampling.structured_output.regex == "a"


def test_an_empty_choice_list_is_sent_for_the_server_to_refuse() -> None:
    structured = build_generate_request("x", choice=[]).sampling.structured_output
    assert structured.WhichOneof("kind") == "choice" and list(structured.choice.choices) == []


@pytest.mark.parametrize("options, message", [
    ({"json_schema": {"type": "object"}, "regex": "a"}, "regex: only one structured output format may be given, "
                                                        "got json_schema and regex"),
    ({"choice": ["a"], "json_object": True}, "choice: only one structured output format may be given, "
                                             "got json_object and choice"),
    ({"regex": "a", "grammar": "start: 'a'"}, "grammar: only one structured output format may be given, "
                                              "got regex and grammar"),
])
def test_two_structured_output_options_are_refused_naming_both(options, message) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build_generate_request("x", **options)


@pytest.mark.parametrize("options, field", [
    ({"json_schema": 5}, "json_schema"),
    ({"json_schema": ["type", "object"]}, "json_schema"),
    ({"json_schema": {"default": float("nan")}}, "json_schema"),
    ({"json_schema": {"default": object()}}, "json_schema"),
    ({"json_object": 1}, "json_object"),
    ({"json_object": "yes"}, "json_object"),
    ({"regex": 5}, "regex"),
    ({"grammar": b"start: 'a'"}, "grammar"),
    ({"choice": "yes"}, "choice"),
    ({"choice": ["a", 2]}, "choice"),
    ({"choice": 3}, "choice"),
])
def test_a_structured_output_value_the_message_cannot_carry_names_the_option(options, field) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        build_generate_request("x", **options)


def test_documents_reach_the_chat_prompt_as_json_and_need_messages() -> None:
    documents = [{"title": "Paris", "text": "Capitale de la France, à la Seine."}]
    chat = build_generate_request(messages=CONTINUED, documents=documents).chat
    assert json.loads(chat.documents_json) == documents and "à" in chat.documents_json
    assert build_tokenize_request(messages=CONTINUED, documents=documents).chat.documents_json == chat.documents_json
    assert build_generate_request(messages=CONTINUED, documents="[]").chat.documents_json == "[]"
    with pytest.raises(ValueError, match="^documents: only a chat prompt"):
        build_generate_request(prompt="x", documents=documents)
    with pytest.raises(ValueError, match="^documents: must be a list of dicts"):
        build_tokenize_request(messages=CONTINUED, documents=["Paris"])


def test_a_chat_template_reaches_the_chat_prompt_as_written_and_needs_messages() -> None:
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert build_generate_request(messages=CONTINUED, chat_template=template).chat.chat_template == template
    assert build_tokenize_request(messages=CONTINUED, chat_template=template).chat.chat_template == template
    with pytest.raises(ValueError, match="^chat_template: only a chat prompt"):
        build_tokenize_request(prompt="x", chat_template=template)
    with pytest.raises(ValueError, match="^chat_template: must be a string"):
        build_generate_request(messages=CONTINUED, chat_template=b"{{ messages }}")
