"""Tool calling over HTTP: tools and tool_choice -> structured output and the template's tools, the response's tool
calls (whole and streamed, parsed by the openai package), messages' tool calls, and errors naming the parameter."""

from __future__ import annotations

import json

import pytest
from http_helpers import events, scripted, serve
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tiny_tokenizers import build_byte_level

from scheduler_svc.http.conversion import chat_plan, renamed_error
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.http.tools import DEFAULT_PARAMETERS, parse_required
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import InvalidRequestError

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "weather in Paris?"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time"}},
]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
ARGUMENTS = '{"city": "Paris"}'
CALLS = '[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "get_time", "parameters": {}}]'


def plan(**fields):
    return chat_plan(ChatCompletionRequest.model_validate({"messages": MESSAGES, **fields}), "m")


def refused(**fields) -> ApiError:
    with pytest.raises(ApiError) as caught:
        plan(**fields)
    assert caught.value.status == 400
    return caught.value


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


# ---- requests ---------------------------------------------------------------------------------------------------
def test_a_named_function_constrains_the_output_to_its_parameters_and_shows_the_tools():
    built = plan(tools=TOOLS, tool_choice=NAMED, n=2)
    assert len(built.requests) == 2
    for pb in built.requests:
        assert pb.sampling.structured_output.json_schema == json.dumps(WEATHER)
        assert json.loads(pb.chat.tools_json) == [
            TOOLS[0], {"type": "function", "function": {"name": "get_time", "parameters": DEFAULT_PARAMETERS}}]
    assert built.tool_calling is not None and built.tool_calling.mode == "named"
    assert built.tool_calling.function == "get_weather"
    assert built.structured_output_param == "tools[0].function.parameters"
    no_parameters = plan(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert no_parameters.requests[0].sampling.structured_output.json_schema == json.dumps(DEFAULT_PARAMETERS)


def test_required_constrains_the_output_to_an_array_of_calls_of_any_tool():
    built = plan(tools=TOOLS, tool_choice="required")
    schema = json.loads(built.requests[0].sampling.structured_output.json_schema)
    assert schema["type"] == "array" and schema["minItems"] == 1 and "maxItems" not in schema
    assert [item["properties"]["name"] for item in schema["items"]["anyOf"]] == [
        {"const": "get_weather"}, {"const": "get_time"}]
    assert [item["properties"]["parameters"] for item in schema["items"]["anyOf"]] == [WEATHER, DEFAULT_PARAMETERS]
    assert all(item["required"] == ["name", "parameters"] and item["additionalProperties"] is False
               for item in schema["items"]["anyOf"])
    assert built.tool_calling is not None and built.tool_calling.mode == "required"
    assert built.structured_output_param == "tools"
    single = plan(tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    assert json.loads(single.requests[0].sampling.structured_output.json_schema)["maxItems"] == 1


def test_required_gathers_the_tools_defs_at_the_root_where_their_refs_point():
    city = {"type": "string"}
    with_defs = {"type": "object", "properties": {"city": {"$ref": "#/$defs/City"}}, "$defs": {"City": city}}
    tools = [{"type": "function", "function": {"name": name, "parameters": with_defs}} for name in ("a", "b")]
    schema = json.loads(plan(tools=tools, tool_choice="required").requests[0].sampling.structured_output.json_schema)
    assert schema["$defs"] == {"City": city}
    assert all("$defs" not in item["properties"]["parameters"] for item in schema["items"]["anyOf"])
    other = {**with_defs, "$defs": {"City": {"type": "integer"}}}
    tools[1]["function"]["parameters"] = other
    error = refused(tools=tools, tool_choice="required")
    assert error.param == "tools[1].function.parameters" and "'City' differs" in error.message


def test_none_is_free_text_without_the_tools_and_no_tools_is_as_before():
    for fields in ({"tools": TOOLS, "tool_choice": "none"}, {"tool_choice": "none"}, {"tool_choice": "auto"},
                   {"tools": [], "tool_choice": "auto"}, {}):
        (pb,) = plan(**fields).requests
        assert not pb.sampling.HasField("structured_output") and pb.chat.tools_json == "", fields
        assert plan(**fields).tool_calling is None


def test_none_still_allows_another_output_format():
    (pb,) = plan(tools=TOOLS, tool_choice="none", response_format={"type": "json_object"}).requests
    assert pb.sampling.structured_output.json_object


@pytest.mark.parametrize("fields", [{"tools": TOOLS}, {"tools": TOOLS, "tool_choice": "auto"}])
def test_auto_without_a_parser_is_refused_pointing_to_the_parser_flag_required_or_a_named_function(fields):
    error = refused(**fields)
    assert error.param == "tool_choice" and "start the server with --tool-call-parser hermes" in error.message
    assert '"required"' in error.message and "named function" in error.message and '"none"' in error.message


BAD = [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "'nope'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice", "function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "tool", "function": {"name": "get_time"}}}, "tool_choice", "type"),
    ({"tools": TOOLS, "tool_choice": {**NAMED, "extra": 1}}, "tool_choice", "'extra'"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "'sometimes'"),
    ({"tool_choice": "required"}, "tool_choice", "no tools"),
    ({"tool_choice": NAMED}, "tool_choice", "no tools"),
    ({"tools": [TOOLS[0], TOOLS[0]], "tool_choice": "required"}, "tools[1].function.name", "tools[0]"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}], "tool_choice": "required"}, "tools[0].type", "custom"),
    ({"tools": [{"type": "function"}], "tool_choice": "required"}, "tools[0].function", "required"),
    ({"tools": [{"type": "function", "function": {"name": ""}}], "tool_choice": "required"},
     "tools[0].function.name", "empty"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "cache": "x"}}],
      "tool_choice": "required"}, "tools[0].function.cache", "unrecognized"),
    ({"tools": TOOLS, "tool_choice": NAMED, "response_format": {"type": "json_object"}}, "response_format",
     "only one output format"),
    ({"tools": TOOLS, "tool_choice": "required", "guided_regex": "a+"}, "guided_regex", "only one output format"),
    ({"functions": [{"name": "f"}]}, "functions", "use tools"),
]


@pytest.mark.parametrize("fields, param, words", BAD, ids=[f"{p}-{i}" for i, (_, p, _) in enumerate(BAD)])
def test_bad_tools_are_400_naming_the_parameter(fields, param, words):
    error = refused(**fields)
    assert error.param == param and error.message.startswith(f"{param}: ") and words in error.message


def test_message_tool_calls_and_tool_call_ids_reach_the_chat_prompt():
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ARGUMENTS}}
    messages = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}]
    (pb,) = chat_plan(ChatCompletionRequest.model_validate({"messages": messages}), "m").requests
    assistant, tool = pb.chat.messages[1], pb.chat.messages[2]
    assert (assistant.role, assistant.content, json.loads(assistant.tool_calls_json)) == ("assistant", "", [call])
    assert (tool.role, tool.content, tool.tool_call_id, tool.tool_calls_json) == ("tool", "sunny", "call_1", "")
    bad = [*MESSAGES, {"role": "assistant", "tool_calls": [{**call, "type": "custom"}]}]
    with pytest.raises(ApiError) as caught:
        chat_plan(ChatCompletionRequest.model_validate({"messages": bad}), "m")
    assert caught.value.param == "messages[1].tool_calls[0].type"


@pytest.mark.parametrize("field, param", [
    ("chat.tools_json", "tools"),
    ("chat.messages[2].tool_calls_json", "messages[2].tool_calls"),
    ("chat.messages[1].tool_call_id", "messages[1].tool_call_id"),
])
def test_the_new_chat_fields_are_named_as_http_parameters(field, param):
    assert renamed_error(InvalidRequestError(field, "bad"), "chat").param == param


def test_required_output_parses_into_calls_written_compactly():
    assert parse_required(CALLS) == [("get_weather", ARGUMENTS), ("get_time", "{}")]
    assert parse_required('[{"name": "f", "parameters": {"city": "Zürich", "n": [1, 2]}}]') == [
        ("f", '{"city": "Zürich", "n": [1, 2]}')]
    for cut_short in ('[{"name": "get_weather", "parameters": {"ci', "[]", '{"name": "f"}', '[{"name": "f"}]', ""):
        assert parse_required(cut_short) is None, cut_short


# ---- the app over the fake engine -------------------------------------------------------------------------------
def test_a_named_function_call_whole(tokenizer):
    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": NAMED, "max_tokens": 30, "n": 2}
        response = await client.post(CHAT, json=body)
        assert response.status_code == 200, response.text
        parsed = ChatCompletion.model_validate(response.json())
        ids = set()
        for choice in parsed.choices:
            assert choice.finish_reason == "stop" and choice.message.content is None
            (call,) = choice.message.tool_calls
            assert call.type == "function" and call.function.name == "get_weather"
            assert call.function.arguments == ARGUMENTS
            assert call.id.startswith("call_") and len(call.id) == 29
            ids.add(call.id)
        assert len(ids) == 2
        formats = list(served.executor.formats.values())
        assert [f.json_schema for f in formats] == [json.dumps(WEATHER)] * 2

    serve(tokenizer, test, executor=scripted(tokenizer, ARGUMENTS))


def test_a_named_function_call_streamed(tokenizer):
    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": NAMED, "max_tokens": 30, "stream": True,
                "stream_options": {"include_usage": True}}
        chunks = events(await client.post(CHAT, json=body))
        assert chunks[-1] == "[DONE]" and chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"]
        body_chunks = chunks[:-2]
        header = body_chunks[0]["choices"][0]["delta"]
        (call,) = header["tool_calls"]
        assert header["role"] == "assistant" and header["content"] is None
        assert call["index"] == 0 and call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"] == {"name": "get_weather", "arguments": ""}
        pieces = [c["choices"][0]["delta"].get("tool_calls", [{}])[0] for c in body_chunks[1:]]
        assert all(set(piece) <= {"index", "function"} for piece in pieces)
        assert "".join(piece.get("function", {}).get("arguments", "") for piece in pieces) == ARGUMENTS
        assert [c["choices"][0]["finish_reason"] for c in body_chunks][-1] == "stop"
        state = ChatCompletionStreamState(input_tools=TOOLS)
        for chunk in body_chunks + [chunks[-2]]:
            state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
        (final_call,) = state.get_final_completion().choices[0].message.tool_calls
        assert (final_call.id, final_call.function.name) == (call["id"], "get_weather")
        assert final_call.function.arguments == ARGUMENTS

    serve(tokenizer, test, executor=scripted(tokenizer, ARGUMENTS))


def test_required_calls_whole(tokenizer):
    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "max_tokens": 100}
        response = await client.post(CHAT, json=body)
        assert response.status_code == 200, response.text
        (choice,) = ChatCompletion.model_validate(response.json()).choices
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        calls = [(call.function.name, call.function.arguments) for call in choice.message.tool_calls]
        assert calls == [("get_weather", ARGUMENTS), ("get_time", "{}")]
        assert len({call.id for call in choice.message.tool_calls}) == 2
        (format_,) = served.executor.formats.values()
        assert json.loads(format_.json_schema)["type"] == "array"

    serve(tokenizer, test, executor=scripted(tokenizer, CALLS))


def test_required_calls_streamed_in_one_chunk_before_the_finish(tokenizer):
    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "max_tokens": 100, "stream": True}
        chunks = events(await client.post(CHAT, json=body))
        assert chunks[-1] == "[DONE]"
        role, calls_chunk, finish = chunks[:-1]
        assert role["choices"][0]["delta"] == {"role": "assistant", "content": None}
        assert calls_chunk["choices"][0]["finish_reason"] is None
        calls = calls_chunk["choices"][0]["delta"]["tool_calls"]
        assert [(c["index"], c["type"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
            (0, "function", "get_weather", ARGUMENTS), (1, "function", "get_time", "{}")]
        assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["finish_reason"] == "tool_calls"
        state = ChatCompletionStreamState()
        for chunk in chunks[:-1]:
            state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
        assert len(state.get_final_completion().choices[0].message.tool_calls) == 2

    serve(tokenizer, test, executor=scripted(tokenizer, CALLS))


def test_required_output_cut_short_comes_back_as_content(tokenizer):
    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "max_tokens": 5}
        (choice,) = (await client.post(CHAT, json=body)).json()["choices"]
        assert choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]
        assert CALLS.startswith(choice["message"]["content"]) and choice["message"]["content"]
        chunks = events(await client.post(CHAT, json={**body, "stream": True}))
        finish = chunks[-2]["choices"][0]
        assert finish["finish_reason"] == "length" and finish["delta"]["content"] == choice["message"]["content"]

    serve(tokenizer, test, executor=scripted(tokenizer, CALLS))


def test_tool_history_and_none_generate_text(tokenizer):
    async def test(client, served):
        call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ARGUMENTS}}
        messages = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}]
        body = {"messages": messages, "tools": TOOLS, "tool_choice": "none", "max_tokens": 30}
        response = await client.post(CHAT, json=body)
        assert response.status_code == 200, response.text
        (choice,) = response.json()["choices"]
        assert choice["message"] == {"role": "assistant", "content": "sunny"} and choice["finish_reason"] == "stop"

    serve(tokenizer, test, executor=scripted(tokenizer, "sunny"))


@pytest.mark.parametrize("body, param", [
    ({"tools": TOOLS}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": "x"}}}}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}}}, "tools[0].function.parameters"),
    ({"tools": [*TOOLS, {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": "x"}}}}}],
      "tool_choice": "required"}, "tools[2].function.parameters"),
    ({"messages": [{"role": "user", "content": "hi", "tool_call_id": "c1"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": "hi", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}, "messages[0].tool_calls"),
])
def test_bad_tool_requests_are_400_over_http(tokenizer, body, param):
    async def test(client, served):
        response = await client.post(CHAT, json={"messages": MESSAGES, "max_tokens": 2, **body})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and error["message"].startswith(f"{param}: "), error

    serve(tokenizer, test)


def test_tokenize_gives_the_tools_to_the_template(tokenizer):
    async def test(client, served):
        response = await client.post("/tokenize", json={"messages": MESSAGES, "tools": TOOLS})
        assert response.status_code == 200, response.text
        assert response.json()["tokens"] == tokenizer.apply_chat_template(MESSAGES)  # ChatML ignores tools
        response = await client.post("/tokenize", json={"prompt": "hi", "tools": TOOLS})
        assert response.status_code == 400 and response.json()["error"]["param"] == "tools"
        response = await client.post("/tokenize", json={"messages": MESSAGES, "tools": [{"type": "custom"}]})
        assert response.status_code == 400 and response.json()["error"]["param"] == "tools[0].type"

    serve(tokenizer, test)
