"""Tool calls over gRPC through real processes: a server with --tool-call-parser hermes parses the calls a chat with
tools writes (steered into the Hermes syntax by a regex), whole, streamed and with the asyncio client, as the HTTP
front's tool_choice "auto" does; parse_tool_calls=False leaves them in the text; impossible parsing is
INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import asyncio
import json
import re

import openai
import pytest

from client import AsyncClient, Client, ToolCall
from client.errors import InvalidArgumentError

pytestmark = pytest.mark.stack

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
STEERED = re.escape("Let me check. " + CALL)
"""A regex for the whole output: some content, then one call in the Hermes syntax."""


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack):
    return launch_module_stack.with_scheduler(tiny_model_dir, [], ["--http-port", "0", "--tool-call-parser", "hermes"])


def test_a_chat_with_tools_gets_its_calls_parsed_whole_and_streamed(stack):
    with Client(stack.address) as client:
        assert client.model_info().tool_call_parser == "hermes"
        options = dict(messages=MESSAGES, tools=[WEATHER, TIME], regex=STEERED, max_tokens=200, temperature=0.0)
        result = client.generate(**options)
        chunks = list(client.generate_stream(**options))
    assert result.finish_reason == "stop" and result.text == "Let me check."
    (call,) = result.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert re.fullmatch(r"call_[0-9a-f]{24}", call.id)
    streamed = [streamed for chunk in chunks for streamed in chunk.tool_calls]
    assert [(c.name, c.arguments) for c in streamed] == [(call.name, call.arguments)]
    assert "".join(chunk.text for chunk in chunks) == result.text


def test_parse_tool_calls_false_keeps_the_call_in_the_text_and_async_parses_too(stack):
    options = dict(messages=MESSAGES, tools=[WEATHER], regex=STEERED, max_tokens=200, temperature=0.0)

    async def both():
        async with AsyncClient(stack.address) as client:
            return await client.generate(**options), await client.generate(**options, parse_tool_calls=False)

    parsed, raw = asyncio.run(both())
    assert raw.text == "Let me check. " + CALL and raw.tool_calls == ()
    assert parsed.text == "Let me check." and [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("get_weather", '{"city": "Paris"}')]
    assert parsed.token_ids == raw.token_ids and isinstance(parsed.tool_calls[0], ToolCall)


@pytest.mark.parametrize("options, field", [
    (dict(messages=MESSAGES, parse_tool_calls=True), "parse_tool_calls"),  # no tools
    (dict(prompt="Hello", parse_tool_calls=True), "parse_tool_calls"),  # not a chat
    (dict(messages=MESSAGES, tools=[WEATHER], parse_tool_calls=False, parallel_tool_calls=False),
     "parallel_tool_calls"),
])
def test_impossible_parsing_is_invalid_argument_and_the_server_serves_on(stack, options, field):
    with Client(stack.address) as client:
        with pytest.raises(InvalidArgumentError, match=field):
            client.generate(max_tokens=4, **options)
        assert client.generate(messages=MESSAGES, tools=[WEATHER], max_tokens=4).usage.completion_tokens >= 1


def test_the_http_front_still_parses_its_own_auto_calls_once(stack):
    """The HTTP front asks the engine not to parse (its tool_choice decides): an "auto" call is parsed once."""
    with Client(stack.address) as grpc_client:
        model = grpc_client.model_info().model
    client = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused")
    reply = client.chat.completions.create(model=model, messages=MESSAGES, tools=[WEATHER, TIME], max_tokens=200,
                                           temperature=0.0, extra_body={"guided_regex": STEERED})
    (call,) = reply.choices[0].message.tool_calls or []
    assert reply.choices[0].message.content == "Let me check."
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Paris"}')
