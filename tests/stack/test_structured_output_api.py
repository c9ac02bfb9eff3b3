"""Structured output through real processes: the SDK's formats and OpenAI's response_format give outputs that
match the format, bad formats are INVALID_ARGUMENT / 400 naming the field, and the server serves on.

(Identity of constrained outputs across sync / async, speculation, chunking and preemption: the structured
requests in test_async_equivalence's workload. The default model writing JSON: test_default_model_vs_hf.)"""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest

from client import Client
from client.errors import InvalidArgumentError

pytestmark = pytest.mark.stack

REGEX = r"[0-9]{2,4}-[a-z]{3,6}!"
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"enum": ["yes", "no"]}, "score": {"type": "integer", "minimum": 0, "maximum": 99},
                   "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2}},
    "required": ["answer", "score", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack):
    return launch_module_stack.with_scheduler(tiny_model_dir, [], ["--http-port", "0", "--tool-call-parser", "hermes"])


def test_outputs_match_their_format_greedy_and_sampled(stack):
    with Client(stack.address) as client:
        for seed in (None, 1, 2, 3):
            sampling = dict(temperature=0.0) if seed is None else dict(temperature=1.0, seed=seed)
            result = client.generate(prompt="Hello world", max_tokens=40, regex=REGEX, **sampling)
            assert result.finish_reason == "stop" and re.fullmatch(REGEX, result.text), result.text
            result = client.generate(prompt="Hello world", max_tokens=60, json_schema=SCHEMA, **sampling)
            assert result.finish_reason == "stop", result.text
            jsonschema.validate(json.loads(result.text), SCHEMA)
            result = client.generate(prompt="Hello world", max_tokens=20, choice=["yes", "no", "maybe so"],
                                     **sampling)
            assert result.text in ("yes", "no", "maybe so")


def test_free_text_is_not_constrained_by_an_earlier_request(stack):
    with Client(stack.address) as client:
        constrained = client.generate(prompt="Hello world", max_tokens=16, temperature=0.0, regex=REGEX)
        free = client.generate(prompt="Hello world", max_tokens=16, temperature=0.0, ignore_eos=True)
    assert re.fullmatch(REGEX, constrained.text) and not re.fullmatch(REGEX, free.text)


@pytest.mark.parametrize("kwargs, field", [
    (dict(regex="[a-"), "sampling.structured_output.regex"),
    (dict(json_schema='{"type": "objec"}'), "sampling.structured_output.json_schema"),
    (dict(grammar="start: nowhere"), "sampling.structured_output.grammar"),
    (dict(choice=[]), "sampling.structured_output.choice.choices"),
])
def test_a_bad_format_is_invalid_argument_naming_the_field_and_the_server_serves_on(stack, kwargs, field):
    with Client(stack.address) as client:
        with pytest.raises(InvalidArgumentError, match=re.escape(field)):
            client.generate(prompt="Hello world", max_tokens=8, **kwargs)
        assert client.generate(prompt="Hello world", max_tokens=4).usage.completion_tokens >= 1


def test_openai_response_format_and_vllm_guided_parameters(stack):
    with Client(stack.address) as grpc_client:
        model = grpc_client.model_info().model
    client = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused")
    messages = [{"role": "user", "content": "Answer in JSON."}]
    reply = client.chat.completions.create(
        model=model, messages=messages, max_tokens=100, temperature=0.0,
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": True}})
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), SCHEMA)
    assert reply.choices[0].finish_reason == "stop"
    reply = client.chat.completions.create(model=model, messages=messages, max_tokens=100, temperature=0.0,
                                           response_format={"type": "json_object"})
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)
    completion = client.completions.create(model=model, prompt="Hello", max_tokens=40, temperature=0.0,
                                           extra_body={"guided_regex": REGEX})
    assert re.fullmatch(REGEX, completion.choices[0].text)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=model, prompt="Hello", max_tokens=4, extra_body={"guided_regex": "[a-"})
    assert caught.value.status_code == 400 and "guided_regex" in str(caught.value)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                    "unit": {"enum": ["C", "F"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                                       "required": ["zone"], "additionalProperties": False}}}


def test_openai_tool_calls_named_required_streamed_and_answered(stack):
    with Client(stack.address) as grpc_client:
        model = grpc_client.model_info().model
    client = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused")
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    reply = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER, TIME], tool_choice=named,
                                           max_tokens=60, temperature=0.0)
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    streamed = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER, TIME],
                                              tool_choice=named, max_tokens=60, temperature=0.0, stream=True)
    arguments = "".join(tc.function.arguments or "" for chunk in streamed for choice in chunk.choices
                        for tc in choice.delta.tool_calls or [])
    assert arguments == call.function.arguments
    required = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER, TIME],
                                              tool_choice="required", max_tokens=100, temperature=0.0)
    calls = required.choices[0].message.tool_calls or []
    assert calls and required.choices[0].finish_reason == "tool_calls"
    for tool_call in calls:
        tool = {"get_weather": WEATHER, "get_time": TIME}[tool_call.function.name]
        jsonschema.validate(json.loads(tool_call.function.arguments), tool["function"]["parameters"])
    follow_up = [*messages, reply.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C."}]
    answer = client.chat.completions.create(model=model, messages=follow_up, max_tokens=8, temperature=0.0)
    assert answer.choices[0].message.content


def test_openai_auto_tool_choice_parses_hermes_calls_from_the_text_whole_and_streamed(stack):
    """tool_choice "auto" (the default with tools) under --tool-call-parser hermes: the random model's free text is
    content; steered by a regex into the Hermes syntax, the same text is a call, whole and streamed alike."""
    with Client(stack.address) as grpc_client:
        model = grpc_client.model_info().model
    client = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused")
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    free = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER, TIME], max_tokens=8,
                                          temperature=0.0)
    assert free.choices[0].message.content and not free.choices[0].message.tool_calls
    hermes = r'<tool_call>\{"name": "get_weather", "arguments": \{"city": "Paris"\}\}</tool_call>'
    steered = {"model": model, "messages": messages, "tools": [WEATHER, TIME], "tool_choice": "auto",
               "max_tokens": 200, "temperature": 0.0, "extra_body": {"guided_regex": hermes}}
    reply = client.chat.completions.create(**steered)
    (call,) = reply.choices[0].message.tool_calls or []
    assert reply.choices[0].finish_reason == "tool_calls" and reply.choices[0].message.content is None
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    chunks = list(client.chat.completions.create(**steered, stream=True))
    streamed = [tc for chunk in chunks for choice in chunk.choices for tc in choice.delta.tool_calls or []]
    assert [(tc.function.name, tc.function.arguments) for tc in streamed] == [("get_weather", call.function.arguments)]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
