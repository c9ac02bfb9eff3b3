"""tool_choice "auto" (OpenAI's default with tools) over HTTP with --tool-call-parser hermes: the template gets the
tools, the output is free text, and Hermes-style <tool_call> blocks in it come back as tool calls, whole and streamed
(a stream gathered by the openai package gives the whole response's message); refused without the parser."""

from __future__ import annotations

import json

import pytest
from http_helpers import events, scripted, serve
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tiny_tokenizers import build_byte_level, build_tool_calling

from scheduler_svc.http.conversion import chat_plan
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.tokenizer import Tokenizer

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "weather in Paris?"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time"}},
]
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "parameters": {}}\n</tool_call>'
BAD_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n</tool_call>'

OUTPUTS = {
    # name: (output, expected content, expected calls (name, arguments), expected finish_reason)
    "one call": (WEATHER_CALL, None, [("get_weather", '{"city": "Paris"}')], "tool_calls"),
    "text then two calls": (f"Let me check.\n\n{WEATHER_CALL}\n{TIME_CALL}\n", "Let me check.",
                            [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")], "tool_calls"),
    "plain text": ("It is sunny in Paris <3", "It is sunny in Paris <3", [], "stop"),
    "a bad block": (f"Checking: {BAD_CALL}", f"Checking: {BAD_CALL}", [], "stop"),
    "an unknown function": ('<tool_call>{"name": "send", "arguments": {}}</tool_call>',
                            '<tool_call>{"name": "send", "arguments": {}}</tool_call>', [], "stop"),
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


@pytest.fixture(scope="module")
def tools_tokenizer(tmp_path_factory) -> Tokenizer:
    """Its chat template renders the tools (<tools>[...]</tools>)."""
    return Tokenizer.from_dir(build_tool_calling(tmp_path_factory.mktemp("tools")))


def gathered(chunks: list) -> ChatCompletion:
    """A stream's chunks (before [DONE]) gathered by the openai package."""
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    return state.get_final_completion()


def message_of(choice) -> tuple[str | None, list[tuple[str, str]]]:
    calls = choice.message.tool_calls or []
    return choice.message.content, [(call.function.name, call.function.arguments) for call in calls]


# ---- requests ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields", [{}, {"tool_choice": "auto"}])
def test_auto_with_the_parser_is_free_text_with_the_tools_shown(fields):
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES, "tools": TOOLS, "n": 2, **fields})
    built = chat_plan(body, "m", tool_call_parser="hermes")
    assert built.tool_calling is not None and built.tool_calling.mode == "auto"
    assert built.tool_calling.names == {"get_weather", "get_time"} and built.tool_calling.parallel
    assert built.structured_output_param is None
    for pb in built.requests:
        assert not pb.sampling.HasField("structured_output")
        assert pb.HasField("skip_special_tokens") and not pb.skip_special_tokens  # a <tool_call> token is kept
        assert [tool["function"]["name"] for tool in json.loads(pb.chat.tools_json)] == ["get_weather", "get_time"]
    single = ChatCompletionRequest.model_validate({"messages": MESSAGES, "tools": TOOLS, "parallel_tool_calls": False,
                                                   "skip_special_tokens": True})
    built = chat_plan(single, "m", tool_call_parser="hermes")
    assert built.tool_calling.parallel is False and built.requests[0].skip_special_tokens  # the request's own


def test_auto_without_tools_is_plain_text_and_other_choices_are_unchanged_by_the_parser():
    for fields in ({"tool_choice": "auto"}, {}, {"tools": TOOLS, "tool_choice": "none"}):
        body = ChatCompletionRequest.model_validate({"messages": MESSAGES, **fields})
        assert chat_plan(body, "m", tool_call_parser="hermes").tool_calling is None
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required"})
    assert chat_plan(body, "m", tool_call_parser="hermes").tool_calling.mode == "required"


def test_auto_leaves_another_output_format_in_place():
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES, "tools": TOOLS,
                                                 "response_format": {"type": "json_object"}})
    built = chat_plan(body, "m", tool_call_parser="hermes")
    assert built.requests[0].sampling.structured_output.json_object
    assert built.structured_output_param == "response_format"


# ---- the app over the fake engine -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_auto_whole_and_streamed_give_the_same_message(tokenizer, name):
    output, content, calls, finish_reason = OUTPUTS[name]

    async def test(client, served):
        for fields in ({"tool_choice": "auto"}, {}):  # absent with tools: "auto"
            body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 180, "n": 2, **fields}
            response = await client.post(CHAT, json=body)
            assert response.status_code == 200, response.text
            whole = ChatCompletion.model_validate(response.json())
            for choice in whole.choices:
                assert message_of(choice) == (content, calls) and choice.finish_reason == finish_reason
                assert all(call.id.startswith("call_") and call.type == "function"
                           for call in choice.message.tool_calls or [])
            chunks = events(await client.post(CHAT, json={**body, "stream": True}))
            assert chunks[-1] == "[DONE]"
            streamed = gathered(chunks[:-1])
            for choice in streamed.choices:
                assert message_of(choice) == (content, calls) and choice.finish_reason == finish_reason
        assert all(not format_.ListFields() for format_ in served.executor.formats.values())  # free text

    serve(tokenizer, test, executor=scripted(tokenizer, output), tool_call_parser="hermes")


def test_streamed_content_comes_first_and_each_call_in_a_chunk_of_its_own(tokenizer):
    output = OUTPUTS["text then two calls"][0]

    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 180, "stream": True,
                "stream_options": {"include_usage": True}}
        chunks = events(await client.post(CHAT, json=body))
        assert chunks[-1] == "[DONE]" and chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"]
        deltas = [chunk["choices"][0]["delta"] for chunk in chunks[:-2]]
        assert deltas[0] == {"role": "assistant", "content": None}
        call_chunks = [position for position, delta in enumerate(deltas) if "tool_calls" in delta]
        content_chunks = [position for position, delta in enumerate(deltas) if delta.get("content")]
        assert len(content_chunks) > 1 and max(content_chunks) < min(call_chunks)  # streamed as generated
        assert "".join(deltas[position]["content"] for position in content_chunks) == "Let me check."
        calls = [deltas[position]["tool_calls"] for position in call_chunks]
        assert [[(c["index"], c["type"], c["function"]["name"], c["function"]["arguments"]) for c in call]
                for call in calls] == [[(0, "function", "get_weather", '{"city": "Paris"}')],
                                       [(1, "function", "get_time", "{}")]]
        assert all(call[0]["id"].startswith("call_") for call in calls)
        finishes = [chunk["choices"][0]["finish_reason"] for chunk in chunks[:-2]]
        assert finishes[-1] == "tool_calls" and not any(finishes[:-1]) and deltas[-1] == {}

    serve(tokenizer, test, executor=scripted(tokenizer, output), tool_call_parser="hermes")


def test_streamed_logprobs_cover_every_token_held_back_or_not(tokenizer):
    output = OUTPUTS["text then two calls"][0]

    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 180, "logprobs": True, "top_logprobs": 1}
        (choice,) = (await client.post(CHAT, json=body)).json()["choices"]
        chunks = events(await client.post(CHAT, json={**body, "stream": True}))[:-1]
        streamed = [entry for chunk in chunks for entry in (chunk["choices"][0]["logprobs"] or {}).get("content", [])]
        assert streamed == choice["logprobs"]["content"]
        assert len(streamed) == len(tokenizer.encode(output, add_special_tokens=False)) + 1  # and the EOS

    serve(tokenizer, test, executor=scripted(tokenizer, output), tool_call_parser="hermes")


def test_parallel_tool_calls_false_keeps_the_first_call(tokenizer):
    output = OUTPUTS["text then two calls"][0]

    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 180, "parallel_tool_calls": False}
        (choice,) = ChatCompletion.model_validate((await client.post(CHAT, json=body)).json()).choices
        assert message_of(choice) == ("Let me check.", [("get_weather", '{"city": "Paris"}')])
        chunks = events(await client.post(CHAT, json={**body, "stream": True}))
        (streamed,) = gathered(chunks[:-1]).choices
        assert message_of(streamed) == message_of(choice) and streamed.finish_reason == "tool_calls"

    serve(tokenizer, test, executor=scripted(tokenizer, output), tool_call_parser="hermes")


def test_output_cut_short_in_a_block_comes_back_as_content_with_the_length_finish(tokenizer):
    output = OUTPUTS["text then two calls"][0]

    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 25}
        (choice,) = (await client.post(CHAT, json=body)).json()["choices"]
        assert choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]
        content = choice["message"]["content"]
        assert output.startswith(content) and "<tool_call>" in content
        chunks = events(await client.post(CHAT, json={**body, "stream": True}))[:-1]
        deltas = [chunk["choices"][0]["delta"] for chunk in chunks]  # (the openai package refuses a "length" end)
        assert "".join(delta.get("content") or "" for delta in deltas) == content
        assert not any("tool_calls" in delta for delta in deltas)
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"

    serve(tokenizer, test, executor=scripted(tokenizer, output), tool_call_parser="hermes")


def test_the_chat_template_receives_the_tools(tools_tokenizer):
    tools = [{"type": "function", "function": {"name": "f"}}]

    async def test(client, served):
        body = {"messages": MESSAGES, "tools": tools, "max_tokens": 50}
        response = await client.post(CHAT, json=body)
        assert response.status_code == 200, response.text
        (choice,) = response.json()["choices"]
        assert choice["message"]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
        (prompt,) = served.executor.prompts.values()
        rendered = tools_tokenizer.decode(prompt)
        assert rendered.startswith("<tools>[") and '"name": "f"' in rendered

    output = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    serve(tools_tokenizer, test, executor=scripted(tools_tokenizer, output), tool_call_parser="hermes")


@pytest.mark.parametrize("fields", [{"tools": TOOLS}, {"tools": TOOLS, "tool_choice": "auto"}])
def test_auto_without_the_parser_is_400_naming_tool_choice_and_the_flag(tokenizer, fields):
    async def test(client, served):
        response = await client.post(CHAT, json={"messages": MESSAGES, "max_tokens": 2, **fields})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "tool_choice" and error["message"].startswith("tool_choice: ")
        assert "--tool-call-parser hermes" in error["message"] and '"required"' in error["message"]

    serve(tokenizer, test)


def test_chat_plan_refuses_auto_without_the_parser():
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES, "tools": TOOLS})
    with pytest.raises(ApiError) as caught:
        chat_plan(body, "m")
    assert caught.value.param == "tool_choice" and "--tool-call-parser hermes" in caught.value.message
