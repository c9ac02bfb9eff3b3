"""Anthropic's Messages API through real processes, driven by the official `anthropic` package: create, the stream
helper's final message and async events agree with the gRPC API's greedy output; a named tool's call is a tool_use
block; API keys as x-api-key; errors in Anthropic's shape."""

from __future__ import annotations

import asyncio

import anthropic
import pytest

from client import Client

pytestmark = pytest.mark.stack

MESSAGES = [{"role": "user", "content": "Tell me about the sea."}]


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack):
    return launch_module_stack.with_scheduler(tiny_model_dir, [], ["--http-port", "0", "--api-key", "k1"])


def test_messages_agree_with_grpc_whole_streamed_and_async(stack):
    with Client(stack.address, api_key="k1") as grpc_client:
        model = grpc_client.model_info().model
        expected = grpc_client.generate(messages=[{"role": "system", "content": "Be brief."}, *MESSAGES],
                                        temperature=0.0, max_tokens=12)
    stop_reason = "max_tokens" if expected.finish_reason == "length" else "end_turn"
    request = dict(model=model, messages=MESSAGES, system="Be brief.", max_tokens=12,
                   extra_body={"temperature": 0.0})  # (this SDK no longer offers temperature; the API takes it)
    client = anthropic.Anthropic(base_url=stack.http_url, api_key="k1")
    whole = client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        streamed = stream.get_final_message()

    async def run_async():
        async with anthropic.AsyncAnthropic(base_url=stack.http_url, api_key="k1") as async_client:
            return [event async for event in await async_client.messages.create(**request, stream=True)]

    events = asyncio.run(run_async())
    for message in (whole, streamed):
        assert [block.text for block in message.content] == [expected.text] and message.stop_reason == stop_reason
        assert message.usage.input_tokens == expected.usage.prompt_tokens
        assert message.usage.output_tokens == expected.usage.completion_tokens
    deltas = [event.delta.text for event in events if event.type == "content_block_delta"]
    assert "".join(deltas) == expected.text and events[-1].type == "message_stop"
    counted = client.messages.count_tokens(model=model, messages=MESSAGES, system="Be brief.")
    assert counted.input_tokens == expected.usage.prompt_tokens


def test_tool_use_blocks_and_anthropic_errors(stack):
    """A named tool (tool_choice "tool"): the output is constrained to its input schema and comes as a tool_use
    block."""
    with Client(stack.address, api_key="k1") as grpc_client:
        model = grpc_client.model_info().model
    client = anthropic.Anthropic(base_url=stack.http_url, api_key="k1")
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris"]}}, "required": ["city"],
              "additionalProperties": False}
    message = client.messages.create(model=model, messages=[{"role": "user", "content": "Weather?"}], max_tokens=200,
                                     tools=[{"name": "get_weather", "input_schema": schema}],
                                     tool_choice={"type": "tool", "name": "get_weather"})
    (block,) = message.content
    assert (block.type, block.name, block.input) == ("tool_use", "get_weather", {"city": "Paris"})
    assert message.stop_reason == "tool_use" and block.id.startswith("call_")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=model, messages=MESSAGES, max_tokens=5, thinking={"type": "enabled",
                                                                                         "budget_tokens": 2})
    assert caught.value.body["error"]["message"].startswith("thinking.budget_tokens")  # no reasoning parser here
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=stack.http_url, api_key="nope").messages.create(
            model=model, messages=MESSAGES, max_tokens=5)


def test_cache_control_hints_are_served_by_the_prefix_cache(stack):
    """Claude Code's shape: cache_control on the system block, the last user block and the tools; the second request
    reads its prompt's shared blocks from the prefix cache (usage.cache_read_input_tokens)."""
    client = anthropic.Anthropic(base_url=stack.http_url, api_key="k1")
    system = [{"type": "text", "text": "You are a patient guide to the sea. " * 8,
               "cache_control": {"type": "ephemeral"}}]
    turn = [{"role": "user", "content": [{"type": "text", "text": "Tell me about tides.",
                                          "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}]
    tools = [{"name": "get_tide", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}]
    request = dict(model="", system=system, messages=turn, tools=tools, tool_choice={"type": "none"}, max_tokens=4,
                   extra_body={"temperature": 0.0})
    first = client.messages.create(**request)
    second = client.messages.create(**request)
    assert second.usage.cache_read_input_tokens > 0 and second.usage.cache_creation_input_tokens == 0
    assert second.usage.cache_read_input_tokens <= second.usage.input_tokens == first.usage.input_tokens
    assert [block.text for block in second.content] == [block.text for block in first.content]
