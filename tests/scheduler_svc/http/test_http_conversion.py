"""OpenAI bodies -> GenerateRequests: names, defaults, seeds of n samples, and validation errors renamed."""

from __future__ import annotations

import json

import grpc
import pytest
from pydantic import ValidationError

from scheduler_svc.http.conversion import api_error, chat_plan, completion_plan, renamed_error
from scheduler_svc.http.errors import ApiError, from_validation_error, location_name
from scheduler_svc.http.protocol import ChatCompletionRequest, CompletionRequest
from scheduler_svc.validation import InvalidRequestError

MESSAGES = [{"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}]


def chat(**fields):
    return chat_plan(ChatCompletionRequest.model_validate({"messages": MESSAGES, **fields}), "m")


def test_chat_fields_map_onto_the_proto():
    plan = chat(model="m", max_tokens=5, max_completion_tokens=7, temperature=0.0, top_p=0.5, top_k=0, min_p=0.1,
                presence_penalty=0.5, frequency_penalty=-0.5, repetition_penalty=1.1, stop="END", seed=3,
                logprobs=True, top_logprobs=4, ignore_eos=True, min_tokens=1, skip_special_tokens=False,
                logit_bias={"12": -100, "7": 2.5})
    (pb,) = plan.requests
    assert [(m.role, m.content) for m in pb.chat.messages] == [("system", "be brief"), ("user", "hi there")]
    assert pb.stopping.max_tokens == 7 and plan.max_tokens_param == "max_completion_tokens"
    assert list(pb.stopping.stop) == ["END"] and pb.stopping.ignore_eos and pb.stopping.min_tokens == 1
    s = pb.sampling
    assert (s.temperature, s.top_p, s.top_k, s.seed, s.logprobs) == (0.0, 0.5, -1, 3, 4)
    assert s.repetition_penalty == pytest.approx(1.1) and s.min_p == pytest.approx(0.1)
    assert dict(s.logit_bias) == {12: -100.0, 7: 2.5}
    assert pb.HasField("skip_special_tokens") and not pb.skip_special_tokens
    assert plan.logprobs == 4 and plan.endpoint == "chat" and plan.model == "m"


def test_a_messages_name_is_kept_for_the_template():
    plan = chat_plan(ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi", "name": "ada"}, {"role": "user", "content": "yo"}]}), "m")
    assert [m.name for m in plan.requests[0].chat.messages] == ["ada", ""]


def test_unset_fields_stay_unset():
    (pb,) = chat().requests
    for name in ("temperature", "top_p", "top_k", "seed", "logprobs", "repetition_penalty"):
        assert not pb.sampling.HasField(name), name
    assert not pb.stopping.HasField("max_tokens") and not pb.HasField("skip_special_tokens")
    assert chat(logprobs=True).requests[0].sampling.logprobs == 0


def test_n_samples_of_each_prompt_get_consecutive_seeds_wrapping_at_64_bits():
    plan = completion_plan(CompletionRequest(prompt=["a", "b"], n=3, seed=2**64 - 2), "m")
    assert [pb.sampling.seed for pb in plan.requests] == [2**64 - 2, 2**64 - 1, 0] * 2
    assert plan.prompt_index == [0, 0, 0, 1, 1, 1] and [pb.text for pb in plan.requests] == ["a"] * 3 + ["b"] * 3
    negative = completion_plan(CompletionRequest(prompt="a", n=2, seed=-1), "m")
    assert [pb.sampling.seed for pb in negative.requests] == [2**64 - 1, 0]


def test_token_prompts():
    plan = completion_plan(CompletionRequest(prompt=[[1, 2], [3]]), "m")
    assert [list(pb.token_ids.ids) for pb in plan.requests] == [[1, 2], [3]]


@pytest.mark.parametrize("field, endpoint, param", [
    ("sampling.temperature", "chat", "temperature"),
    ("sampling.logprobs", "chat", "top_logprobs"),
    ("sampling.logprobs", "completion", "logprobs"),
    ("sampling.logit_bias[7]", "chat", "logit_bias"),
    ("sampling.logit_bias", "completion", "logit_bias"),
    ("stopping.max_tokens", "chat", "max_completion_tokens"),
    ("stopping.stop[2]", "chat", "stop"),
    ("stopping.stop_token_ids[1]", "completion", "stop_token_ids[1]"),
    ("chat.messages[3].role", "chat", "messages[3].role"),
    ("chat", "chat", "messages"),
    ("prompt", "chat", "messages"),
    ("prompt", "completion", "prompt"),
    ("token_ids.ids[0]", "completion", "prompt"),
    ("text", "completion", "prompt"),
    ("model", "completion", "model"),
    ("sampling.prompt_logprobs", "chat", "prompt_logprobs"),
    ("sampling.prompt_logprobs", "completion", "prompt_logprobs"),
    ("sampling.allowed_token_ids", "chat", "allowed_token_ids"),
    ("sampling.allowed_token_ids[3]", "completion", "allowed_token_ids[3]"),
    ("sampling.bad_words", "completion", "bad_words"),
    ("sampling.bad_words[1]", "chat", "bad_words[1]"),
    ("truncate_prompt_tokens", "chat", "truncate_prompt_tokens"),
    ("truncate_prompt_tokens", "completion", "truncate_prompt_tokens"),
])
def test_validation_errors_name_the_openai_parameter(field, endpoint, param):
    plan = chat(max_completion_tokens=3) if endpoint == "chat" else completion_plan(CompletionRequest(prompt="a"), "m")
    error = api_error(InvalidRequestError(field, "is wrong"), plan)
    assert (error.status, error.param, error.message) == (400, param, f"{param}: is wrong")


def test_unknown_model_is_404_model_not_found():
    with pytest.raises(ApiError) as caught:
        chat(model="other")
    assert caught.value.status == 404 and caught.value.error_code == "model_not_found"


def test_pydantic_locations_become_parameter_paths():
    assert location_name(("messages", 0, "content", "list[TextPart]", 1, "type")) == "messages[0].content[1].type"
    assert location_name(("prompt", "list[int]", 3)) == "prompt[3]"
    assert location_name(("stop", "str")) == "stop"
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate({"messages": [{"role": 5}]})
    error = from_validation_error(caught.value)
    assert error.param == "messages[0].role" and error.status == 400


@pytest.mark.parametrize("code, status", [
    (grpc.StatusCode.INVALID_ARGUMENT, 400), (grpc.StatusCode.UNAUTHENTICATED, 401), (grpc.StatusCode.NOT_FOUND, 404),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, 429), (grpc.StatusCode.UNAVAILABLE, 503), (grpc.StatusCode.INTERNAL, 500),
])
def test_grpc_codes_map_to_http_statuses_and_openai_types(code, status):
    error = ApiError(code, "x")
    assert error.status == status
    body = error.body()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    expected = "server_error" if status >= 500 else "rate_limit_error" if status == 429 else "invalid_request_error"
    assert body["type"] == expected


def test_each_prompt_is_tokenized_once_whatever_n(tmp_path):
    from tiny_tokenizers import build_byte_level

    from scheduler_svc.http.conversion import build_engine_requests
    from scheduler_svc.tokenizer import Tokenizer
    from scheduler_svc.validation import ModelLimits

    tokenizer = Tokenizer.from_dir(build_byte_level(tmp_path))
    encoded: list[str] = []
    encode = tokenizer.encode
    tokenizer.encode = lambda text, add_special_tokens=True: encoded.append(text) or encode(text, add_special_tokens)
    limits = ModelLimits("m", 256, tokenizer.vocab_size, frozenset({2}), 16)
    plan = completion_plan(CompletionRequest(prompt=["hello world", "the lazy dog"], n=4, seed=1), "m")
    requests = build_engine_requests(plan, tokenizer, limits)
    assert encoded == ["hello world", "the lazy dog"]
    assert [r.prompt_token_ids for r in requests] == [encode("hello world")] * 4 + [encode("the lazy dog")] * 4
    assert len({id(r.prompt_token_ids) for r in requests}) == 8  # each request owns its list
    assert [r.sampling.seed for r in requests] == [1, 2, 3, 4] * 2


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def completion(**fields):
    return completion_plan(CompletionRequest.model_validate({"prompt": "hi", **fields}), "m")


def structured(plan):
    """The format of every request of the plan (all the same), as (kind, value)."""
    formats = {pb.sampling.structured_output.SerializeToString() for pb in plan.requests}
    assert len(formats) == 1
    format_ = plan.requests[0].sampling.structured_output
    kind = format_.WhichOneof("kind")
    if kind is None:
        return None
    return kind, list(format_.choice.choices) if kind == "choice" else getattr(format_, kind)


FORMATS = [
    ({"response_format": {"type": "json_object"}}, "response_format", ("json_object", True)),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True,
                                                                 "description": "a thing"}}},
     "response_format", ("json_schema", json.dumps(SCHEMA))),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "any", "schema": {}, "strict": False}}},
     "response_format", ("json_schema", "{}")),
    ({"guided_json": SCHEMA}, "guided_json", ("json_schema", json.dumps(SCHEMA))),
    ({"guided_json": '{"type":"integer"}'}, "guided_json", ("json_schema", '{"type":"integer"}')),
    ({"guided_json": {}}, "guided_json", ("json_schema", "{}")),
    ({"guided_regex": "[0-9]{3}"}, "guided_regex", ("regex", "[0-9]{3}")),
    ({"guided_choice": ["yes", "no"]}, "guided_choice", ("choice", ["yes", "no"])),
    ({"guided_grammar": 'start: "a" | "b"'}, "guided_grammar", ("grammar", 'start: "a" | "b"')),
    ({"structured_outputs": {"json": SCHEMA}}, "structured_outputs.json", ("json_schema", json.dumps(SCHEMA))),
    ({"structured_outputs": {"regex": "[0-9]+", "json": ""}}, "structured_outputs.regex", ("regex", "[0-9]+")),
    ({"structured_outputs": {"choice": ["a", "b"]}}, "structured_outputs.choice", ("choice", ["a", "b"])),
    ({"structured_outputs": {"grammar": 'start: "a"'}}, "structured_outputs.grammar", ("grammar", 'start: "a"')),
    ({"structured_outputs": {"json_object": True}}, "structured_outputs.json_object", ("json_object", True)),
]


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
@pytest.mark.parametrize("fields, param, expected", FORMATS, ids=[str(i) for i in range(len(FORMATS))])
def test_each_structured_output_parameter_sets_the_format_of_every_choice(endpoint, fields, param, expected):
    plan = chat(n=2, **fields) if endpoint == "chat" else completion(prompt=["a", "b"], n=2, **fields)
    assert len(plan.requests) == (2 if endpoint == "chat" else 4)
    assert structured(plan) == expected and plan.structured_output_param == param


def test_vllms_structured_outputs_tuning_keys_are_refused_unless_neutral():
    assert structured(chat(structured_outputs={"regex": "a", "disable_fallback": None})) == ("regex", "a")
    with pytest.raises(ApiError) as caught:
        chat(structured_outputs={"regex": "a", "disable_any_whitespace": True})
    assert (caught.value.status, caught.value.param) == (400, "structured_outputs.disable_any_whitespace")


@pytest.mark.parametrize("fields", [
    {}, {"response_format": {"type": "text"}}, {"response_format": None}, {"guided_json": None},
    {"guided_json": ""}, {"guided_regex": ""}, {"guided_choice": []}, {"guided_grammar": ""},
    {"response_format": {"type": "text", "json_schema": None}, "guided_choice": [], "guided_regex": None},
    {"structured_outputs": {}}, {"structured_outputs": {"json": None, "choice": [], "json_object": False}},
])
def test_text_and_neutral_values_leave_free_text(fields):
    for plan in (chat(**fields), completion(**fields)):
        assert structured(plan) is None and plan.structured_output_param is None
        assert not plan.requests[0].sampling.HasField("structured_output")


@pytest.mark.parametrize("fields, param", [
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    ({"guided_json": SCHEMA, "guided_choice": ["a"]}, "guided_choice"),
    ({"guided_grammar": "start: 'a'", "guided_regex": "a"}, "guided_grammar"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}},
      "guided_json": SCHEMA}, "guided_json"),
    ({"guided_regex": "a", "guided_choice": ["a"], "guided_grammar": "start: 'a'"}, "guided_choice"),
    ({"guided_regex": "a", "structured_outputs": {"choice": ["a"]}}, "structured_outputs.choice"),
    ({"structured_outputs": {"regex": "a", "grammar": "start: 'a'"}}, "structured_outputs.grammar"),
])
def test_two_structured_output_parameters_are_refused_naming_the_second(fields, param):
    for build in (chat, completion):
        with pytest.raises(ApiError) as caught:
            build(**fields)
        error = caught.value
        assert (error.status, error.param) == (400, param)
        assert error.message.startswith(f"{param}: only one structured output format may be set (")


@pytest.mark.parametrize("response_format, param", [
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": None}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"name": "n"}}, "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "n", "schema": None}}, "response_format.json_schema.schema"),
    ({"type": "json_object", "json_schema": {"name": "n", "schema": SCHEMA}}, "response_format.json_schema"),
    ({"type": "text", "json_schema": {"name": "n", "schema": SCHEMA}}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA, "strict_mode": "on"}},
     "response_format.json_schema.strict_mode"),
    ({"type": "json_object", "whitespace": "none"}, "response_format.whitespace"),
])
def test_a_bad_response_format_is_refused_naming_its_part(response_format, param):
    for build in (chat, completion):
        with pytest.raises(ApiError) as caught:
            build(response_format=response_format)
        assert (caught.value.status, caught.value.param) == (400, param)


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "structural_tag", "structures": [], "triggers": []}}, "response_format.type"),
    ({"response_format": {"json_schema": {"name": "n", "schema": {}}}}, "response_format.type"),
    ({"response_format": "json_object"}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": [1]}}},
     "response_format.json_schema.schema"),
    ({"guided_json": 5}, "guided_json"),
    ({"guided_json": ["type"]}, "guided_json"),
    ({"guided_regex": 5}, "guided_regex"),
    ({"guided_choice": "yes"}, "guided_choice"),
    ({"guided_choice": ["yes", 1]}, "guided_choice[1]"),
    ({"guided_grammar": {"lark": "start: 'a'"}}, "guided_grammar"),
])
def test_a_structured_output_parameter_of_the_wrong_shape_is_a_400_naming_it(body, param):
    for model in (ChatCompletionRequest, CompletionRequest):
        fields = {"messages": MESSAGES} if model is ChatCompletionRequest else {"prompt": "hi"}
        with pytest.raises(ValidationError) as caught:
            model.model_validate({**fields, **body})
        error = from_validation_error(caught.value)
        assert (error.status, error.param) == (400, param), error.message


@pytest.mark.parametrize("fields, field, param", [
    ({"guided_regex": "("}, "sampling.structured_output.regex", "guided_regex"),
    ({"guided_grammar": "start: x"}, "sampling.structured_output.grammar", "guided_grammar"),
    ({"guided_json": "{"}, "sampling.structured_output.json_schema", "guided_json"),
    ({"guided_choice": ["a", "b", ""]}, "sampling.structured_output.choice.choices[2]", "guided_choice[2]"),
    ({"guided_choice": ["a"] * 2000}, "sampling.structured_output.choice.choices", "guided_choice"),
    ({"guided_regex": "a"}, "sampling.structured_output", "guided_regex"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "nope"}}}},
     "sampling.structured_output.json_schema", "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}},
     "sampling.structured_output", "response_format"),
    ({"response_format": {"type": "json_object"}}, "sampling.structured_output.json_object", "response_format"),
    ({"response_format": {"type": "json_object"}}, "sampling.structured_output", "response_format"),
    ({"structured_outputs": {"regex": "("}}, "sampling.structured_output.regex", "structured_outputs.regex"),
    ({"structured_outputs": {"choice": ["a", ""]}}, "sampling.structured_output.choice.choices[1]",
     "structured_outputs.choice[1]"),
])
def test_structured_output_validation_errors_name_the_parameter_the_request_set(fields, field, param):
    for plan in (chat(**fields), completion(**fields)):
        error = api_error(InvalidRequestError(field, "is wrong"), plan)
        assert (error.status, error.param, error.message) == (400, param, f"{param}: is wrong")


@pytest.mark.parametrize("field, param", [
    ("sampling.structured_output.regex", "guided_regex"),
    ("sampling.structured_output.json_schema", "guided_json"),
    ("sampling.structured_output.choice.choices[1]", "guided_choice[1]"),
    ("sampling.structured_output.grammar", "guided_grammar"),
    ("sampling.structured_output.json_object", "response_format"),
    ("sampling.structured_output", "response_format"),
])
def test_structured_output_errors_without_the_request_name_the_usual_parameter(field, param):
    assert renamed_error(InvalidRequestError(field, "is wrong"), "chat").param == param


def test_prompt_logprobs_map_onto_the_proto_on_both_endpoints():
    plan = chat(prompt_logprobs=3)
    assert plan.requests[0].sampling.prompt_logprobs == 3 and plan.prompt_logprobs == 3 and not plan.echo
    assert not plan.requests[0].sampling.HasField("logprobs")
    plan = completion(prompt_logprobs=0, n=2)
    assert [pb.sampling.prompt_logprobs for pb in plan.requests] == [0, 0] and plan.prompt_logprobs == 0
    for unset in (chat(), completion(), completion(echo=True), completion(echo=False, logprobs=2)):
        assert unset.prompt_logprobs is None
        assert not any(pb.sampling.HasField("prompt_logprobs") for pb in unset.requests)


def test_echo_with_logprobs_asks_for_the_prompt_logprobs_too():
    plan = completion(echo=True, logprobs=2)
    (pb,) = plan.requests
    assert plan.echo and plan.logprobs == 2 and plan.prompt_logprobs is None  # none in the response's own field
    assert pb.sampling.prompt_logprobs == 2 and pb.sampling.logprobs == 2
    assert completion(echo=True, logprobs=1, prompt_logprobs=4).requests[0].sampling.prompt_logprobs == 4
    assert completion(echo=True, logprobs=4, prompt_logprobs=1).requests[0].sampling.prompt_logprobs == 4
    assert completion(echo=True, logprobs=0).requests[0].sampling.prompt_logprobs == 0
    assert completion(echo=True, stream=True, logprobs=1).requests[0].sampling.prompt_logprobs == 1


@pytest.mark.parametrize("fields, message", [
    ({"prompt_logprobs": 21}, "prompt_logprobs: must be in [0, 20], got 21"),
    ({"prompt_logprobs": -1}, "prompt_logprobs: must be in [0, 20], got -1"),
    ({"prompt_logprobs": 2, "stream": True}, "prompt_logprobs: is not available with stream: true"),
    ({"prompt_logprobs": 0, "stream": True}, "prompt_logprobs: is not available with stream: true"),
])
def test_bad_prompt_logprobs_are_refused_naming_them(fields, message):
    for make in (chat, completion):
        with pytest.raises(ApiError) as caught:
            make(**fields)
        assert (caught.value.status, caught.value.param, caught.value.message) == (400, "prompt_logprobs", message)


def test_token_restrictions_and_truncation_map_onto_the_proto_on_both_endpoints():
    fields = {"allowed_token_ids": [5, 9, 5], "bad_words": ["foo", " bar baz"], "truncate_prompt_tokens": -1}
    for plan in (chat(n=2, **fields), completion(prompt=[[3, 4], [5]], **fields)):
        assert len(plan.requests) == 2
        for pb in plan.requests:
            assert list(pb.sampling.allowed_token_ids) == [5, 9, 5]  # as given: the server judges them
            assert list(pb.sampling.bad_words) == ["foo", " bar baz"]
            assert pb.HasField("truncate_prompt_tokens") and pb.truncate_prompt_tokens == -1
    assert completion(truncate_prompt_tokens=7).requests[0].truncate_prompt_tokens == 7
    assert completion(truncate_prompt_tokens=0).requests[0].HasField("truncate_prompt_tokens")  # the server refuses


@pytest.mark.parametrize("fields", [{}, {"allowed_token_ids": None, "bad_words": None, "truncate_prompt_tokens": None},
                                    {"allowed_token_ids": [], "bad_words": []}])
def test_null_or_empty_token_restrictions_and_truncation_leave_them_unset(fields):
    for plan in (chat(**fields), completion(**fields)):
        (pb,) = plan.requests
        assert not pb.sampling.allowed_token_ids and not pb.sampling.bad_words
        assert not pb.HasField("truncate_prompt_tokens")


@pytest.mark.parametrize("body, param", [
    ({"allowed_token_ids": 5}, "allowed_token_ids"),
    ({"allowed_token_ids": ["5"]}, "allowed_token_ids[0]"),
    ({"allowed_token_ids": [1, 2.0]}, "allowed_token_ids[1]"),
    ({"allowed_token_ids": [True]}, "allowed_token_ids[0]"),
    ({"allowed_token_ids": [2**31]}, "allowed_token_ids[0]"),
    ({"bad_words": "foo"}, "bad_words"),
    ({"bad_words": ["foo", 3]}, "bad_words[1]"),
    ({"truncate_prompt_tokens": "5"}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": 5.0}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": True}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": -(2**31) - 1}, "truncate_prompt_tokens"),
])
def test_token_restrictions_and_truncation_of_the_wrong_type_are_400s_naming_them(body, param):
    for model, base in ((ChatCompletionRequest, {"messages": MESSAGES}), (CompletionRequest, {"prompt": "hi"})):
        with pytest.raises(ValidationError) as caught:
            model.model_validate({**base, **body})
        error = from_validation_error(caught.value)
        assert (error.status, error.param) == (400, param)


@pytest.mark.parametrize("fields, param, other", [
    ({"allowed_token_ids": [5], "guided_regex": "[0-9]+"}, "allowed_token_ids", "guided_regex"),
    ({"bad_words": ["no"], "response_format": {"type": "json_object"}}, "bad_words", "response_format"),
    ({"bad_words": ["no"], "allowed_token_ids": [5], "structured_outputs": {"choice": ["a"]}}, "allowed_token_ids",
     "structured_outputs.choice"),
])
def test_token_restrictions_with_a_structured_output_parameter_are_refused_naming_both(fields, param, other):
    for make in (chat, completion):
        with pytest.raises(ApiError) as caught:
            make(**fields)
        assert (caught.value.status, caught.value.param) == (400, param)
        assert caught.value.message.startswith(f"{param}: cannot be combined with {other}, which sets a structured")
    assert structured(chat(allowed_token_ids=[5], bad_words=["x"], response_format={"type": "text"})) is None


def test_token_restrictions_with_a_tool_choice_that_forces_calls_are_refused_naming_tool_choice():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for tool_choice in ("required", {"type": "function", "function": {"name": "f"}}):
        with pytest.raises(ApiError) as caught:
            chat(tools=tools, tool_choice=tool_choice, bad_words=["x"])
        assert caught.value.param == "bad_words"
        assert caught.value.message.startswith("bad_words: cannot be combined with tool_choice, which makes the")
    (pb,) = chat(tools=tools, tool_choice="none", allowed_token_ids=[5]).requests  # free text: restricted as asked
    assert list(pb.sampling.allowed_token_ids) == [5]


@pytest.mark.parametrize("options, include, continuous", [
    (None, False, False),
    ({}, False, False),
    ({"include_usage": True}, True, False),
    ({"include_usage": True, "continuous_usage_stats": True}, True, True),
    ({"continuous_usage_stats": True}, True, True),  # vLLM's include_usage defaults to true
    ({"include_usage": None, "continuous_usage_stats": False}, False, False),
])
def test_stream_options_set_the_plans_usage_on_both_endpoints(options, include, continuous):
    for plan in (chat(stream=True, stream_options=options),
                 completion_plan(CompletionRequest(prompt="a", stream=True, stream_options=options), "m")):
        assert (plan.include_usage, plan.continuous_usage) == (include, continuous)


def test_continuous_usage_without_include_usage_is_refused_naming_it():
    with pytest.raises(ApiError) as caught:
        chat(stream=True, stream_options={"include_usage": False, "continuous_usage_stats": True})
    assert caught.value.param == "stream_options.continuous_usage_stats"


def test_return_tokens_as_token_ids_and_chat_echo_reach_the_plan():
    assert chat(return_tokens_as_token_ids=True).tokens_as_ids and not chat().tokens_as_ids
    assert completion_plan(CompletionRequest(prompt="a", return_tokens_as_token_ids=True), "m").tokens_as_ids
    prefilled = [*MESSAGES, {"role": "assistant", "content": [{"type": "text", "text": "Sure, "},
                                                              {"type": "text", "text": "hi"}]}]
    echoed = chat_plan(ChatCompletionRequest.model_validate({"messages": prefilled, "echo": True}), "m")
    assert echoed.echo_content == "Sure, hi"  # the content as the template reads it
    assert chat_plan(ChatCompletionRequest.model_validate({"messages": prefilled}), "m").echo_content == ""
    assert chat(echo=True).echo_content == ""  # the last message is the user's
