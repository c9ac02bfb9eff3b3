"""Anthropic's Messages API (POST /v1/messages) over a scripted engine: the body becomes the chat request it asks
for, the answer is a Message the anthropic package reads (text, thinking, tool_use, stop reasons, usage), the stream's
events gather (with the anthropic package's own accumulator) into the same message, and what cannot be served is an
Anthropic-shaped error naming the Messages parameter."""

from __future__ import annotations

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from http_helpers import FakeExecutor, scripted, serve, typed_events
from pydantic import TypeAdapter
from tiny_tokenizers import build_byte_level, build_tool_calling

from scheduler_svc.http.errors import invalid
from scheduler_svc.http.messages_api_input import RENAMES, chat_of_messages
from scheduler_svc.http.messages_api_protocol import MessagesRequest
from scheduler_svc.http.param_names import ParamNames
from scheduler_svc.tokenizer import Tokenizer

ROUTE = "/v1/messages"
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
         {"name": "get_time", "description": "The time."}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
EVENTS = TypeAdapter(list[RawMessageStreamEvent])
"""The anthropic package's own event types: an event it does not know, or malformed, fails validation."""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def gathered(events: list[dict]) -> Message:
    """The message the anthropic package's accumulator builds from the events."""
    snapshot, buffers = None, {}
    for event in EVENTS.validate_python(events):
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)
    assert snapshot is not None
    return snapshot


def blocks_of(message: Message) -> list[tuple]:
    found = []
    for block in message.content:
        if block.type == "text":
            found.append(("text", block.text))
        elif block.type == "thinking":
            found.append(("thinking", block.thinking))
        else:
            found.append(("tool_use", block.name, block.input, block.id.startswith("call_")))
    return found


async def whole_and_streamed(client, body: dict) -> tuple[Message, Message, list[dict]]:
    response = await client.post(ROUTE, json=body)
    assert response.status_code == 200, response.text
    whole = Message.model_validate(response.json())
    streamed = await client.post(ROUTE, json={**body, "stream": True})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = typed_events(streamed.text)
    return whole, gathered(events), events


def test_text_whole_and_streamed(tokenizer):
    async def test(client, served):
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 50, "system": "Be brief."}
        whole, streamed, events = await whole_and_streamed(client, body)
        assert blocks_of(whole) == blocks_of(streamed) == [("text", "Hello there")]
        assert whole.stop_reason == streamed.stop_reason == "end_turn" and whole.id.startswith("msg_")
        assert whole.usage.output_tokens == streamed.usage.output_tokens == len(
            tokenizer.encode("Hello there", add_special_tokens=False)) + 1
        assert whole.usage.input_tokens == streamed.usage.input_tokens > 0
        kinds = [event["type"] for event in events]
        assert kinds[:2] == ["message_start", "content_block_start"]
        assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        assert len([kind for kind in kinds if kind == "content_block_delta"]) > 1

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there"))


def test_stop_reasons(tokenizer):
    async def test(client, served):
        base = {"messages": [{"role": "user", "content": "Hi"}]}
        for fields, stop in (({"max_tokens": 4}, ("max_tokens", None)),
                             ({"max_tokens": 50, "stop_sequences": ["there"]}, ("stop_sequence", "there"))):
            whole, streamed, _ = await whole_and_streamed(client, {**base, **fields})
            assert (whole.stop_reason, whole.stop_sequence) == (streamed.stop_reason, streamed.stop_sequence) == stop

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there, friend"))


def test_thinking_is_a_thinking_block(tokenizer):
    async def test(client, served):
        body = {"messages": [{"role": "user", "content": "Capital of France?"}], "max_tokens": 100}
        whole, streamed, _ = await whole_and_streamed(client, body)
        assert blocks_of(whole) == blocks_of(streamed) == [("thinking", "Paris, surely."), ("text", "Paris.")]

    serve(tokenizer, test, executor=scripted(tokenizer, "<think>Paris, surely.</think>Paris."),
          reasoning_parser="qwen3")


def test_tool_calls_are_tool_use_blocks(tokenizer):
    async def test(client, served):
        body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS, "max_tokens": 180}
        whole, streamed, _ = await whole_and_streamed(client, body)
        expected = [("text", "Let me check."), ("tool_use", "get_weather", {"city": "Paris"}, True)]
        assert blocks_of(whole) == blocks_of(streamed) == expected
        assert whole.stop_reason == streamed.stop_reason == "tool_use"
        cut = await client.post(ROUTE, json={**body, "tool_choice": {"type": "tool", "name": "get_time"},
                                             "max_tokens": 5})
        assert [block["type"] for block in cut.json()["content"]] == ["text"]  # no object: kept as text

    serve(tokenizer, test, executor=scripted(tokenizer, "Let me check.\n\n" + CALL), tool_call_parser="hermes")


def test_output_config_and_thinking_reach_the_chat_request():
    base = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
    chat, _ = chat_of_messages(MessagesRequest.model_validate({
        **base, "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}},
        "thinking": {"type": "disabled"}}))
    assert chat.reasoning_effort == "low" and chat.response_format.json_schema.schema_ == {"type": "object"}
    assert chat.chat_template_kwargs == {"enable_thinking": False} and chat.include_reasoning is None
    chat, _ = chat_of_messages(MessagesRequest.model_validate({**base, "thinking": {"type": "adaptive",
                                                                                    "display": "omitted"}}))
    assert chat.include_reasoning is False and chat.chat_template_kwargs is None


def test_messages_become_the_chat_messages():
    body = MessagesRequest.model_validate({
        "system": [{"type": "text", "text": "Be brief."}], "max_tokens": 7, "stop_sequences": ["###"],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather "}, {"type": "text", "text": "in Paris?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Call it.", "signature": "x"}, {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny"},
                                         {"type": "text", "text": "And tomorrow?"}]},
        ],
        "tools": TOOLS, "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    })
    chat, names = chat_of_messages(body)
    assert [message.model_dump(exclude_none=True) for message in chat.messages] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "Call it.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "content": "Sunny", "tool_call_id": "call_1"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert names.message_params == ("system", "messages[0]", "messages[1]", "messages[2]", "messages[2]")
    assert chat.tool_choice == "required" and chat.parallel_tool_calls is False and chat.stop == ["###"]
    assert chat.tools[0].function.parameters == TOOLS[0]["input_schema"] and chat.max_completion_tokens == 7


def test_errors_of_the_chat_checks_name_the_messages_parameters():
    names = ParamNames(("system", "messages[0]"), RENAMES)
    cases = {"max_completion_tokens": "max_tokens", "stop": "stop_sequences", "messages[1].content": "messages[0]",
             "tools[2].function.parameters": "tools[2].input_schema", "tools[0].function.name": "tools[0].name",
             "parallel_tool_calls": "tool_choice.disable_parallel_tool_use"}
    for chat_param, param in cases.items():
        assert names.renamed(invalid(chat_param, "is wrong")).param == param


@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": "Hi"}]}, "max_tokens"),
    ({"messages": [], "max_tokens": 5}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}], "max_tokens": 5}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}], "max_tokens": 5},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "thinking": {"type": "enabled",
                                                                                     "budget_tokens": 1024}},
     "thinking.budget_tokens"),
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "thinking": {"type": "enabled",
                                                                                     "budget_tokens": 2}},
     "thinking.budget_tokens"),  # this server has no reasoning parser
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "output_config": {"effort": "max"}},
     "output_config.effort"),
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
      "output_config": {"format": {"type": "json_schema", "schema": {"type": "objec"}}}}, "output_config.format"),
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
      "tools": [{"name": "web", "type": "web_search_20250305"}]}, "tools[0].type"),
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "tool_choice": {"type": "maybe"}},
     "tool_choice.type"),
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "top_k": "x"}, "top_k"),
    ({"messages": [{"role": "user", "content": "x" * 900}], "max_tokens": 5}, "messages"),
    ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "container": "c1"}, "container"),
])
def test_what_cannot_be_served_is_an_anthropic_error_naming_the_parameter(tokenizer, body, param):
    async def test(client, served):
        response = await client.post(ROUTE, json=body)
        assert response.status_code == 400, response.text
        payload = response.json()
        assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
        assert payload["error"]["message"].startswith(param), payload

    serve(tokenizer, test)


def test_api_keys_come_as_x_api_key_too(tokenizer):
    async def test(client, served):
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
        assert (await client.post(ROUTE, json=body, headers={"x-api-key": "k1"})).status_code == 200
        refused = await client.post(ROUTE, json=body, headers={"x-api-key": "nope"})
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"

    serve(tokenizer, test, executor=FakeExecutor(eos_after=2), api_keys=("k1",))


def test_count_tokens_counts_the_prompt_messages_would_send(tokenizer):
    async def test(client, served):
        prompt = {"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]}
        counted = await client.post(f"{ROUTE}/count_tokens", json=prompt)
        assert counted.status_code == 200, counted.text
        sent = Message.model_validate((await client.post(ROUTE, json={**prompt, "max_tokens": 3})).json())
        assert counted.json() == {"input_tokens": sent.usage.input_tokens}
        long = await client.post(f"{ROUTE}/count_tokens", json={"messages": [{"role": "user", "content": "x" * 400}]})
        assert long.json()["input_tokens"] > 256  # longer than the context: counted, not refused
        refused = await client.post(f"{ROUTE}/count_tokens", json={**prompt, "thinking": {"type": "enabled"}})
        assert refused.status_code == 400 and refused.json()["error"]["message"].startswith("thinking.budget_tokens")
        missing = await client.post(f"{ROUTE}/count_tokens", json={"system": "x"})
        assert missing.status_code == 400 and missing.json()["error"]["message"].startswith("messages")

    serve(tokenizer, test, executor=FakeExecutor(eos_after=2))


def test_count_tokens_counts_the_tools_the_template_shows(tmp_path):
    tools_tokenizer = Tokenizer.from_dir(build_tool_calling(tmp_path))

    async def test(client, served):
        prompt = {"messages": [{"role": "user", "content": "Weather?"}]}
        bare = (await client.post(f"{ROUTE}/count_tokens", json=prompt)).json()["input_tokens"]
        with_tools = (await client.post(f"{ROUTE}/count_tokens", json={**prompt, "tools": TOOLS})).json()
        hidden = (await client.post(f"{ROUTE}/count_tokens", json={**prompt, "tools": TOOLS,
                                                                    "tool_choice": {"type": "none"}})).json()
        assert with_tools["input_tokens"] > bare == hidden["input_tokens"]

    serve(tools_tokenizer, test)


def test_any_tool_calls_are_tool_use_blocks_whole_and_streamed(tokenizer):
    output = '[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "get_time", "parameters": {}}]'

    async def test(client, served):
        body = {"messages": [{"role": "user", "content": "Weather and time?"}], "tools": TOOLS, "max_tokens": 180,
                "tool_choice": {"type": "any"}}
        whole, streamed, _ = await whole_and_streamed(client, body)
        assert blocks_of(whole) == blocks_of(streamed) == [("tool_use", "get_weather", {"city": "Paris"}, True),
                                                           ("tool_use", "get_time", {}, True)]
        assert whole.stop_reason == streamed.stop_reason == "tool_use"

    serve(tokenizer, test, executor=scripted(tokenizer, output))


def test_thinking_then_text_then_a_call_keep_their_order(tokenizer):
    async def test(client, served):
        body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS, "max_tokens": 180}
        whole, streamed, _ = await whole_and_streamed(client, body)
        assert blocks_of(whole) == blocks_of(streamed) == [
            ("thinking", "Need the tool."), ("text", "Let me check."),
            ("tool_use", "get_weather", {"city": "Paris"}, True)]

    serve(tokenizer, test, executor=scripted(tokenizer, "<think>Need the tool.</think>Let me check.\n\n" + CALL),
          tool_call_parser="hermes", reasoning_parser="qwen3")


CACHED = {"type": "ephemeral"}


def test_cache_control_breakpoints_are_accepted_and_change_nothing(tokenizer):
    """Anthropic's prompt caching hints (as Claude Code sends them): the prompt is the one without them; the prefix
    cache keeps prompts by itself."""
    plain = {"system": [{"type": "text", "text": "Be brief."}], "max_tokens": 3,
             "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
                          {"role": "user", "content": [{"type": "text", "text": "Weather?"}]}],
             "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    hinted = {**plain, "cache_control": {"type": "ephemeral", "ttl": "1h"},
              "system": [{"type": "text", "text": "Be brief.", "cache_control": CACHED}],
              "messages": [*plain["messages"][:2], {"role": "user", "content": [
                  {"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}],
              "tools": [{**plain["tools"][0], "cache_control": CACHED}]}

    async def test(client, served):
        for body in (plain, hinted):
            response = await client.post(ROUTE, json=body)
            assert response.status_code == 200, response.text
        first, second = served.executor.prompts.values()
        assert first == second
        prompt = {key: value for key, value in hinted.items() if key != "max_tokens"}
        counted = await client.post(f"{ROUTE}/count_tokens", json=prompt)
        assert counted.json()["input_tokens"] == len(first)

    serve(tokenizer, test, executor=FakeExecutor(eos_after=2), tool_call_parser="hermes")


@pytest.mark.parametrize(("change", "param"), [
    ({"cache_control": {"type": "persistent"}}, "cache_control.type"),
    ({"tools": [{"name": "f", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]}, "tools[0].cache_control.ttl"),
    ({"system": [{"type": "text", "text": "x", "cache_control": {}}]}, "system[0].cache_control.type"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": "yes"}]}]},
     "messages[0].content[0].cache_control"),
])
def test_a_cache_control_anthropic_does_not_define_is_refused_by_name(tokenizer, change, param):
    async def test(client, served):
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, **change}
        response = await client.post(ROUTE, json=body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"].startswith(param + ":"), response.json()

    serve(tokenizer, test)
