"""tool_choice "auto" over HTTP with each --tool-call-parser: the flag's names are the parsers', the request's plan
carries the server's parser, and each model syntax comes back as tool calls, whole and streamed (a stream gathered
by the openai package gives the whole response's message), text and malformed calls as content."""

from __future__ import annotations

import pytest
from http_helpers import FakeExecutor, events, serve
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tiny_tokenizers import build_byte_level

from scheduler_svc.config import TOOL_CALL_PARSERS
from scheduler_svc.http.conversion import chat_plan
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.tool_calls import hermes as hermes_tool_calls
from scheduler_svc.tool_calls.parsers import PARSERS, tool_call_parser

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "weather in Paris?"}]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time"}},
]
PARIS = ("get_weather", '{"city": "Paris"}')
TIME = ("get_time", "{}")

OUTPUTS = {
    # parser: [(output, expected content, expected calls, expected finish_reason)]
    "llama3_json": [
        ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', None, [PARIS], "tool_calls"),
        ('Checking. {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {}}',
         "Checking.", [PARIS, TIME], "tool_calls"),
        ("Sunny, {maybe}.", "Sunny, {maybe}.", [], "stop"),
        ('{"name": "send", "parameters": {}}', '{"name": "send", "parameters": {}}', [], "stop"),
    ],
    "pythonic": [
        ("[get_weather(city='Paris'), get_time()]", None, [PARIS, TIME], "tool_calls"),
        ("[get_weather(city=Paris)]", "[get_weather(city=Paris)]", [], "stop"),
        ("It is [mostly] sunny.", "It is [mostly] sunny.", [], "stop"),
    ],
    "mistral": [
        ('Let me see. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
         '{"name": "get_time", "arguments": {}}]', "Let me see.", [PARIS, TIME], "tool_calls"),
        ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Pa"',
         '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Pa"', [], "stop"),
        ("No [TOOL] here", "No [TOOL] here", [], "stop"),
    ],
    "openai": [  # gpt-oss's raw harmony (with --reasoning-parser openai_gptoss: test_harmony_thinking_and_calls...)
        ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}', None, [PARIS],
         "tool_calls"),
        ("<|channel|>final<|message|>Sunny.", "<|channel|>final<|message|>Sunny.", [], "stop"),
        ("<|channel|>commentary to=functions.get_weather<|message|>{Paris}",
         "<|channel|>commentary to=functions.get_weather<|message|>{Paris}", [], "stop"),
    ],
}
CASES = [(parser, *case) for parser, cases in OUTPUTS.items() for case in cases]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def gathered(chunks: list) -> ChatCompletion:
    """A stream's chunks (before [DONE]) gathered by the openai package."""
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    return state.get_final_completion()


def message_of(choice) -> tuple[str | None, list[tuple[str, str]]]:
    calls = choice.message.tool_calls or []
    return choice.message.content, [(call.function.name, call.function.arguments) for call in calls]


def test_the_flag_names_every_parser_and_each_is_one():
    assert tuple(PARSERS) == TOOL_CALL_PARSERS == ("hermes", "llama3_json", "pythonic", "mistral", "openai")
    assert tool_call_parser("hermes") is hermes_tool_calls
    for name in TOOL_CALL_PARSERS:
        parser = tool_call_parser(name)
        assert parser.parse_output("plain text", {"f"}).content == "plain text"
        stream = parser.stream_parser({"f"}, False)
        assert stream.feed("plain text").content + stream.finish().content == "plain text" and not stream.calls_sent


@pytest.mark.parametrize("parser", TOOL_CALL_PARSERS)
def test_the_plan_of_auto_carries_the_servers_parser(parser):
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES, "tools": TOOLS})
    built = chat_plan(body, "m", tool_call_parser=parser)
    assert built.tool_calling.mode == "auto" and built.tool_calling.parser == parser
    assert not built.requests[0].skip_special_tokens  # <|python_tag|> and [TOOL_CALLS] are special tokens


def test_auto_without_a_parser_names_every_parser():
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES, "tools": TOOLS})
    with pytest.raises(ApiError) as caught:
        chat_plan(body, "m")
    assert caught.value.param == "tool_choice"
    assert "--tool-call-parser hermes (or llama3_json, pythonic, mistral, openai)" in caught.value.message


@pytest.mark.parametrize("parser, output, content, calls, finish_reason", CASES)
def test_auto_whole_and_streamed_give_the_same_message(tokenizer, parser, output, content, calls, finish_reason):
    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 180, "n": 2}
        response = await client.post(CHAT, json=body)
        assert response.status_code == 200, response.text
        for choice in ChatCompletion.model_validate(response.json()).choices:
            assert message_of(choice) == (content or None, calls) and choice.finish_reason == finish_reason
            assert all(call.id.startswith("call_") for call in choice.message.tool_calls or [])
        chunks = events(await client.post(CHAT, json={**body, "stream": True}))
        assert chunks[-1] == "[DONE]"
        for choice in gathered(chunks[:-1]).choices:
            assert message_of(choice) == (content or None, calls) and choice.finish_reason == finish_reason
        single = await client.post(CHAT, json={**body, "n": 1, "parallel_tool_calls": False})
        (choice,) = ChatCompletion.model_validate(single.json()).choices
        assert message_of(choice) == (content or None, calls[:1])

    executor = FakeExecutor(script=tokenizer.encode(output, add_special_tokens=False))
    serve(tokenizer, test, executor=executor, tool_call_parser=parser)


def test_streamed_content_comes_first_and_each_call_in_a_chunk_of_its_own(tokenizer):
    output = OUTPUTS["mistral"][0][0]

    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 180, "stream": True}
        chunks = events(await client.post(CHAT, json=body))[:-1]
        deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
        call_chunks = [position for position, delta in enumerate(deltas) if "tool_calls" in delta]
        content_chunks = [position for position, delta in enumerate(deltas) if delta.get("content")]
        assert len(content_chunks) > 1 and max(content_chunks) < min(call_chunks)  # streamed as generated
        assert [(call["index"], call["function"]["name"]) for position in call_chunks
                for call in deltas[position]["tool_calls"]] == [(0, "get_weather"), (1, "get_time")]
        assert len(call_chunks) == 2 and chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    serve(tokenizer, test, executor=FakeExecutor(script=tokenizer.encode(output, add_special_tokens=False)),
          tool_call_parser="mistral")


def test_harmony_thinking_and_calls_come_apart_with_both_gpt_oss_parsers(tokenizer):
    """--reasoning-parser openai_gptoss and --tool-call-parser openai: the analysis channel is the reasoning, the
    preamble the content, the message addressed to a function a tool call, whole and streamed."""
    output = ("<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>commentary<|message|>Checking."
              '<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary<|message|>{"city": "Paris"}')

    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 180}
        (choice,) = ChatCompletion.model_validate((await client.post(CHAT, json=body)).json()).choices
        assert message_of(choice) == ("Checking.", [PARIS]) and choice.finish_reason == "tool_calls"
        assert choice.message.model_extra["reasoning"] == "Hm."
        chunks = events(await client.post(CHAT, json={**body, "stream": True}))[:-1]
        (streamed,) = gathered(chunks).choices
        assert message_of(streamed) == ("Checking.", [PARIS]) and streamed.finish_reason == "tool_calls"
        assert "".join(chunk["choices"][0]["delta"].get("reasoning") or "" for chunk in chunks) == "Hm."

    serve(tokenizer, test, executor=FakeExecutor(script=tokenizer.encode(output, add_special_tokens=False)),
          tool_call_parser="openai", reasoning_parser="openai_gptoss")
