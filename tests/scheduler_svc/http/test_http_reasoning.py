"""--reasoning-parser over HTTP: a reasoning model's thinking comes back as the message's reasoning (both names), the
answer as its content, whole and streamed alike; tool calls are parsed from the answer only; a format (or a
tool_choice forcing calls) constrains the answer after the thinking where it can wait for it, else the whole output;
completions are left whole; include_reasoning false leaves the thinking out; earlier turns' thinking reaches the
chat template."""

from __future__ import annotations

from dataclasses import replace

import pytest
from http_helpers import events, scripted, serve
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tiny_tokenizers import build_thinking, build_tool_calling

from scheduler_svc.http.conversion import chat_plan
from scheduler_svc.http.protocol import ChatCompletionRequest
from scheduler_svc.reasoning.thinking_bounds import thinking_bounds
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits, build_request

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Is 91 prime?"}]
THOUGHT = "<think>\n91 = 7 x 13, so no.\n</think>\n\nNo: 91 = 7 x 13."
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
SHORT_CALL = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("thinking")))


@pytest.fixture(scope="module")
def marked_tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("marked"), markers=True))


@pytest.fixture(scope="module")
def tools_tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_tool_calling(tmp_path_factory.mktemp("tools")))


async def whole_and_streamed(client, body: dict) -> tuple[list[dict], list[list[dict]]]:
    """Each choice's message, and each choice's stream deltas (every chunk checked by the openai package)."""
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    messages = [choice["message"] for choice in ChatCompletion.model_validate(response.json()).model_dump()["choices"]]
    chunks = events(await client.post(CHAT, json={**body, "stream": True}))
    assert chunks[-1] == "[DONE]"
    deltas: list[list[dict]] = [[] for _ in messages]
    for chunk in chunks[:-1]:
        for choice in ChatCompletionChunk.model_validate(chunk).model_dump()["choices"]:
            deltas[choice["index"]].append(choice["delta"])
    return messages, deltas


def joined(deltas: list[dict], key: str) -> str:
    return "".join(delta.get(key) or "" for delta in deltas)


@pytest.mark.parametrize(("parser", "output", "reasoning", "content"), [
    ("qwen3", THOUGHT, "\n91 = 7 x 13, so no.\n", "\n\nNo: 91 = 7 x 13."),
    ("qwen3", "No: 91 = 7 x 13.", None, "No: 91 = 7 x 13."),
    ("deepseek_r1", "91 = 7 x 13.</think>No.", "91 = 7 x 13.", "No."),
    ("openai_gptoss", "<|channel|>analysis<|message|>91 = 7 x 13.<|end|><|start|>assistant<|channel|>final"
                      "<|message|>No.", "91 = 7 x 13.", "No."),
])
def test_thinking_is_split_from_the_answer_whole_and_streamed(tokenizer, parser, output, reasoning, content):
    async def test(client, served):
        messages, deltas = await whole_and_streamed(client, {"messages": MESSAGES, "max_tokens": 120, "n": 2})
        for message, choice_deltas in zip(messages, deltas, strict=True):
            assert (message["reasoning"], message["reasoning_content"], message["content"]) == (
                reasoning, reasoning, content)
            assert joined(choice_deltas, "reasoning") == joined(choice_deltas, "reasoning_content") == (reasoning or "")
            assert joined(choice_deltas, "content") == content
            assert not any("<think>" in str(delta) or "</think>" in str(delta) for delta in choice_deltas)
        if reasoning:  # thinking streams as it is generated, before the answer
            first_content = min(i for i, delta in enumerate(deltas[0]) if delta.get("content"))
            assert sum(bool(delta.get("reasoning")) for delta in deltas[0][:first_content]) > 1

    serve(tokenizer, test, executor=scripted(tokenizer, output), reasoning_parser=parser)


def test_output_cut_off_while_thinking_is_all_reasoning_with_no_content(tokenizer):
    async def test(client, served):
        messages, deltas = await whole_and_streamed(client, {"messages": MESSAGES, "max_tokens": 8})
        (message,), (choice_deltas,) = messages, deltas
        assert message["content"] is None and message["reasoning"] and "\n91 = 7 x 13".startswith(message["reasoning"])
        assert joined(choice_deltas, "reasoning") == message["reasoning"] and joined(choice_deltas, "content") == ""
        assert (await client.post(CHAT, json={"messages": MESSAGES, "max_tokens": 8})).json()["choices"][0][
            "finish_reason"] == "length"

    serve(tokenizer, test, executor=scripted(tokenizer, THOUGHT), reasoning_parser="qwen3")


def test_include_reasoning_false_leaves_the_thinking_out(tokenizer):
    async def test(client, served):
        messages, deltas = await whole_and_streamed(
            client, {"messages": MESSAGES, "max_tokens": 60, "include_reasoning": False})
        assert "reasoning" not in messages[0] and "reasoning_content" not in messages[0]
        assert messages[0]["content"] == "\n\nNo: 91 = 7 x 13."
        assert joined(deltas[0], "reasoning") == "" and joined(deltas[0], "content") == messages[0]["content"]

    serve(tokenizer, test, executor=scripted(tokenizer, THOUGHT), reasoning_parser="qwen3")


def test_without_a_parser_the_thinking_stays_in_the_content(tokenizer):
    async def test(client, served):
        messages, deltas = await whole_and_streamed(client, {"messages": MESSAGES, "max_tokens": 60})
        assert messages[0]["content"] == THOUGHT
        assert "reasoning" not in messages[0] and "reasoning_content" not in messages[0]
        assert joined(deltas[0], "content") == THOUGHT and joined(deltas[0], "reasoning") == ""

    serve(tokenizer, test, executor=scripted(tokenizer, THOUGHT))


def test_tool_calls_are_parsed_from_the_answer_not_from_the_thinking(tools_tokenizer):
    output = f"<think>Maybe {SHORT_CALL}?</think>\n{CALL}"

    async def test(client, served):
        body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 138}  # the output and EOS: 136 tokens
        messages, deltas = await whole_and_streamed(client, body)
        assert messages[0]["reasoning"] == f"Maybe {SHORT_CALL}?"
        assert [(call["function"]["name"], call["function"]["arguments"]) for call in messages[0]["tool_calls"]] == [
            ("get_weather", '{"city": "Paris"}')]
        assert joined(deltas[0], "reasoning") == messages[0]["reasoning"]
        streamed_calls = [call for delta in deltas[0] for call in delta.get("tool_calls") or []]
        assert [call["function"]["name"] for call in streamed_calls] == ["get_weather"]

    serve(tools_tokenizer, test, executor=scripted(tools_tokenizer, output), tool_call_parser="hermes",
          reasoning_parser="qwen3")


@pytest.mark.parametrize("fields", [
    {"response_format": {"type": "json_object"}},
    {"tools": TOOLS, "tool_choice": "required"},
    {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
])
def test_a_constrained_output_is_not_split_where_the_format_cannot_wait_for_the_thinking(fields):
    body = ChatCompletionRequest.model_validate({"messages": MESSAGES, **fields})
    assert chat_plan(body, "m", reasoning_parser="deepseek_r1").reasoning_parser is None
    free = ChatCompletionRequest.model_validate({"messages": MESSAGES})
    assert chat_plan(free, "m", reasoning_parser="deepseek_r1").reasoning_parser == "deepseek_r1"


@pytest.mark.parametrize(("fields", "answer"), [
    ({"response_format": {"type": "json_object"}}, '{"city": "Paris"}'),
    ({"tools": TOOLS, "tool_choice": "required"}, '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
     '{"city": "Paris"}'),
], ids=["response_format", "required", "named"])
def test_a_format_that_waits_for_the_thinking_is_read_from_the_answer(marked_tokenizer, fields, answer):
    """The engine's executor applies the format after ``</think>`` (tests/executor_svc/test_thinking_phases.py);
    here the front's part: the thinking split off, the answer read as the format's content or calls."""
    async def test(client, served):
        messages, deltas = await whole_and_streamed(client, {"messages": MESSAGES, "max_tokens": 120, **fields})
        assert messages[0]["reasoning"] == joined(deltas[0], "reasoning") == "Paris, surely."
        sent = list(served.executor.formats_after_thinking.values())
        assert len(sent) == 2 and all(tuple(after.end_token_ids) == bounds.end_token_ids for after in sent)
        if "tool_choice" not in fields:
            assert messages[0]["content"] == joined(deltas[0], "content") == answer
            return
        calls = messages[0]["tool_calls"]
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
            ("get_weather", '{"city": "Paris"}')]
        streamed = [call for delta in deltas[0] for call in delta.get("tool_calls") or []]
        assert [c["function"]["name"] for c in streamed if c["function"].get("name")] == ["get_weather"]
        assert "".join(c["function"].get("arguments") or "" for c in streamed) == '{"city": "Paris"}'

    bounds = thinking_bounds("qwen3", marked_tokenizer)
    assert bounds is not None
    serve(marked_tokenizer, test, executor=scripted(marked_tokenizer, f"<think>Paris, surely.</think>{answer}"),
          reasoning_parser="qwen3", thinking_bounds=bounds)


def test_special_tokens_are_kept_while_a_parser_reads_unless_the_request_says_otherwise(tokenizer):
    """As the engine builds the plan's requests (it keeps them while it splits: validation.build_request)."""
    splitting = ModelLimits("m", 512, tokenizer.vocab_size, frozenset({0}), 16, reasoning_parser="qwen3")
    for fields, kept in (({}, True), ({"skip_special_tokens": True}, False), ({"skip_special_tokens": False}, True)):
        body = ChatCompletionRequest.model_validate({"messages": MESSAGES, "n": 2, **fields})
        requests = chat_plan(body, "m", reasoning_parser="qwen3").requests
        assert all(not build_request(r, tokenizer, splitting).stop_params.skip_special_tokens == kept for r in requests)
    plain = chat_plan(ChatCompletionRequest.model_validate({"messages": MESSAGES}), "m")
    assert not plain.requests[0].HasField("skip_special_tokens")  # the server's default (skip) without a parser
    unsplit = replace(splitting, reasoning_parser=None)
    assert build_request(plain.requests[0], tokenizer, unsplit).stop_params.skip_special_tokens


def test_completions_are_left_whole(tokenizer):
    async def test(client, served):
        response = await client.post("/v1/completions", json={"prompt": "Is 91 prime?", "max_tokens": 60})
        assert response.json()["choices"][0]["text"] == THOUGHT

    serve(tokenizer, test, executor=scripted(tokenizer, THOUGHT), reasoning_parser="qwen3")


def test_an_earlier_turns_thinking_reaches_the_chat_template_under_either_name(tokenizer):
    expected = tokenizer.encode("<|im_start|>user\nIs 91 prime?<|im_end|>\n<|im_start|>assistant\n<think>\n7 x 13"
                                "\n</think>\n\nNo.<|im_end|>\n<|im_start|>user\nAnd 97?<|im_end|>\n"
                                "<|im_start|>assistant\n", add_special_tokens=False)

    async def test(client, served):
        for name in ("reasoning", "reasoning_content"):
            turns = [*MESSAGES, {"role": "assistant", "content": "No.", name: "7 x 13"},
                     {"role": "user", "content": "And 97?"}]
            response = await client.post("/tokenize", json={"messages": turns})
            assert response.status_code == 200, response.text
            assert response.json()["tokens"] == expected
            chat = await client.post(CHAT, json={"messages": turns, "max_tokens": 4})
            assert chat.status_code == 200 and chat.json()["usage"]["prompt_tokens"] == len(expected)

    serve(tokenizer, test, executor=scripted(tokenizer, THOUGHT))


@pytest.mark.parametrize(("message", "param"), [
    ({"role": "assistant", "content": "No.", "reasoning": "a", "reasoning_content": "b"},
     "messages[0].reasoning_content"),
    ({"role": "user", "content": "Hi", "reasoning_content": "a"}, "messages[0].reasoning_content"),
])
def test_bad_thinking_in_messages_is_a_400_naming_it(tokenizer, message, param):
    async def test(client, served):
        response = await client.post(CHAT, json={"messages": [message, *MESSAGES], "max_tokens": 4})
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text

    serve(tokenizer, test, executor=scripted(tokenizer, THOUGHT))
