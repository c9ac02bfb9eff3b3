"""Fuzzing the HTTP front with hypothesis: chat and completion bodies with plausible values in up to six parameters
(messages of every role with tool calls and thinking, tools, structured output, logprobs, template controls, ...)
and up to two parameters, or an unknown one, set to anything (wrong type, out of range, huge, nested), plus bodies
that are not JSON objects at all; streamed or not, over the in-process engine with the tool call and reasoning
parsers on (formats waiting for the thinking).

Every answer is a 200 or an OpenAI error (4xx with ``error.message`` and ``error.type``), never a 500 or a dropped
connection; a 200 stream is well-formed server-sent events ending in [DONE]; afterwards no request and no KV block
is held. Derandomized: the same cases every run."""

from __future__ import annotations

import json
from typing import Any

import pytest
from http_helpers import FakeExecutor, serve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_tokenizers import build_tool_calling

from scheduler_svc.reasoning.thinking_bounds import thinking_bounds
from scheduler_svc.tokenizer import Tokenizer

NUM_CASES = 300
"""Bodies sent (each to a fresh in-process engine); raise it locally for a longer run."""
OUTPUT = '<think>hm</think>ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
ERROR_STATUSES = {400, 404, 413, 422}

SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([-1, 0, 1, 2, 5, 300]),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                   st.sampled_from(["", "a" * 5000, "\x00", "<think>", "</tool_call>", "{{ x }}"]))
ANY = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                   max_leaves=6)
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["", "<think>", "</think>", "</tool_call>", "{{ x }}", "é"]))
TOKEN = st.integers(0, 299)
SCHEMA = st.sampled_from([{"type": "object"}, {"type": "string", "maxLength": 3}, {}, {"enum": [1, "a"]},
                          {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}])
FUNCTION = st.fixed_dictionaries({"name": st.sampled_from(["f", "g"])}, optional={"parameters": SCHEMA,
                                                                                  "description": TEXT})
TOOL = st.fixed_dictionaries({"type": st.just("function"), "function": FUNCTION})
CALL = st.fixed_dictionaries({"id": st.just("call_1"), "type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.just("f"), "arguments": st.sampled_from(['{"x": 1}', "", "{", "[]"])})})
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]), "content": TEXT},
                          optional={"name": TEXT}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(TEXT, st.none())},
                          optional={"tool_calls": st.lists(CALL, max_size=2), "reasoning": TEXT,
                                    "reasoning_content": TEXT}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": TEXT, "tool_call_id": st.just("call_1")}),
    st.fixed_dictionaries({"role": st.just("user"), "content": st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url"]), "text": TEXT}), min_size=1, max_size=2)}))
PREDICTION_PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": TEXT})
SHARED = {
    "model": st.just("tiny"), "max_tokens": st.integers(0, 6), "temperature": st.floats(0, 2),
    "top_p": st.floats(0, 1), "n": st.integers(1, 3), "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans(),
                                                          "continuous_usage_stats": st.booleans()}),
    "stop": st.one_of(TEXT, st.lists(TEXT, max_size=3)), "seed": st.integers(-(2**63), 2**64 - 1),
    "logit_bias": st.dictionaries(st.sampled_from(["5", "7", "-1", "99999", "x"]), st.floats(-100, 100), max_size=3),
    "top_k": st.integers(-1, 50), "min_p": st.floats(0, 1), "repetition_penalty": st.floats(0.5, 2),
    "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2), "min_tokens": st.integers(0, 4),
    "ignore_eos": st.booleans(), "stop_token_ids": st.lists(TOKEN, max_size=3), "skip_special_tokens": st.booleans(),
    "include_stop_str_in_output": st.booleans(), "allowed_token_ids": st.lists(TOKEN, max_size=4),
    "bad_words": st.lists(TEXT, max_size=2), "truncate_prompt_tokens": st.integers(-1, 20),
    "prompt_logprobs": st.integers(0, 3), "priority": st.integers(-2, 2), "user": TEXT,
    "prediction": st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["content", "content", "other"]),
                                                   "content": st.one_of(TEXT, st.lists(PREDICTION_PART, max_size=2))}),
                            ANY),
    "metadata": st.dictionaries(TEXT, TEXT, max_size=2), "store": st.booleans(),
    "return_tokens_as_token_ids": st.booleans(),
    "response_format": st.one_of(st.just({"type": "text"}), st.just({"type": "json_object"}),
                                 st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema":
                                                        st.fixed_dictionaries({"name": st.just("s"),
                                                                               "schema": SCHEMA})})),
    "guided_json": SCHEMA, "guided_regex": st.sampled_from(["a+", "[0-9]{2}", "("]),
    "guided_choice": st.lists(TEXT, max_size=3), "guided_grammar": st.sampled_from(['start: "a"', "root ::= [0-9]+"]),
    "structured_outputs": st.fixed_dictionaries({}, optional={"regex": st.just("b+"), "choice": st.just(["x", "y"])}),
    "echo": st.booleans(),
}
CHAT = {
    **SHARED, "messages": st.lists(MESSAGE, min_size=1, max_size=3), "max_completion_tokens": st.integers(0, 6),
    "logprobs": st.booleans(), "top_logprobs": st.integers(0, 5), "tools": st.lists(TOOL, max_size=2),
    "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]),
                             st.fixed_dictionaries({"type": st.just("function"), "function": FUNCTION})),
    "parallel_tool_calls": st.booleans(), "include_reasoning": st.booleans(),
    "thinking_token_budget": st.integers(-1, 4),
    "add_generation_prompt": st.booleans(), "continue_final_message": st.booleans(),
    "chat_template_kwargs": st.dictionaries(st.sampled_from(["enable_thinking", "x", "messages"]), st.booleans(),
                                            max_size=2),
    "documents": st.lists(st.fixed_dictionaries({"title": TEXT, "text": TEXT}), max_size=2),
    "chat_template": st.sampled_from(["", "{{ messages[0]['content'] }}", "{% for %}"]),
}
COMPLETION = {
    **SHARED, "prompt": st.one_of(TEXT, st.lists(st.integers(-5, 400), max_size=8),
                                  st.lists(TEXT, min_size=1, max_size=2),
                                  st.lists(st.lists(TOKEN, max_size=4), min_size=1, max_size=2)),
    "logprobs": st.integers(0, 5), "suffix": st.sampled_from(["", "", "", "end"]), "best_of": st.integers(1, 3),
}

PART = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text", "input_image"]), "text": TEXT})
INPUT_ITEM = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer", "assistant", "tool"]),
                           "content": st.one_of(TEXT, st.lists(PART, max_size=2))},
                          optional={"type": st.just("message")}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": st.just("call_1"), "name": st.sampled_from(
        ["f", "g"]), "arguments": st.sampled_from(['{"x": 1}', "", "{"])}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": st.just("call_1"), "output": TEXT}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "content": st.lists(st.fixed_dictionaries(
        {"type": st.just("reasoning_text"), "text": TEXT}), max_size=2)}),
    st.fixed_dictionaries({"type": st.just("item_reference"), "id": st.just("x")}))
RESPONSES = {
    "model": st.just("tiny"), "input": st.one_of(TEXT, st.lists(INPUT_ITEM, max_size=4)), "instructions": TEXT,
    "max_output_tokens": st.integers(0, 6), "temperature": st.floats(0, 2), "top_p": st.floats(0, 1),
    "stream": st.booleans(), "tools": st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["function", "function", "web_search"]), "name": st.sampled_from(["f", "g"])},
        optional={"parameters": SCHEMA}), max_size=2),
    "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]), st.fixed_dictionaries(
        {"type": st.just("function"), "name": st.sampled_from(["f", "g"])})),
    "parallel_tool_calls": st.booleans(), "store": st.booleans(), "user": TEXT,
    "text": st.fixed_dictionaries({"format": st.one_of(
        st.just({"type": "text"}), st.just({"type": "json_object"}),
        st.fixed_dictionaries({"type": st.just("json_schema"), "name": st.just("s"), "schema": SCHEMA}))}),
    "reasoning": st.fixed_dictionaries({}, optional={"effort": st.sampled_from(["low", "high", "max"])}),
    "metadata": st.dictionaries(TEXT, TEXT, max_size=2), "truncation": st.sampled_from(["disabled", "auto"]),
    "previous_response_id": st.sampled_from(["", "resp_1"]),
    "include": st.lists(st.sampled_from(["message.output_text.logprobs", "reasoning.encrypted_content"]), max_size=2),
    "top_logprobs": st.integers(-1, 21), "background": st.booleans(),
}

CACHE_CONTROL = st.sampled_from([{"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}, {"type": "x"}, "yes"])
BLOCK = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}, optional={"cache_control": CACHE_CONTROL}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.just("call_1"), "name": st.sampled_from(["f", "g"]),
                           "input": st.sampled_from([{"x": 1}, {}, 3])}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": st.just("call_1"),
                           "content": st.one_of(TEXT, st.lists(st.fixed_dictionaries(
                               {"type": st.just("text"), "text": TEXT}), max_size=2))}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": TEXT, "signature": st.just("")}),
    st.fixed_dictionaries({"type": st.just("image"), "source": st.just({})}))
ANTHROPIC_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "user", "system"]),
                                           "content": st.one_of(TEXT, st.lists(BLOCK, max_size=3))})
MESSAGES_API = {
    "model": st.just("tiny"), "messages": st.lists(ANTHROPIC_MESSAGE, min_size=1, max_size=3),
    "max_tokens": st.integers(0, 6), "system": st.one_of(TEXT, st.lists(st.fixed_dictionaries(
        {"type": st.just("text"), "text": TEXT}), max_size=2)),
    "temperature": st.floats(0, 2), "top_p": st.floats(0, 1), "top_k": st.integers(-1, 50),
    "stop_sequences": st.lists(TEXT, max_size=2), "stream": st.booleans(),
    "tools": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["f", "g"])},
                                            optional={"input_schema": SCHEMA, "type": st.just("custom")}),
                      max_size=2),
    "tool_choice": st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "tool", "none", "x"])},
                                         optional={"name": st.sampled_from(["f", "g"]),
                                                   "disable_parallel_tool_use": st.booleans()}),
    "thinking": st.sampled_from([{"type": "disabled"}, {"type": "enabled", "budget_tokens": 1024},
                                 {"type": "enabled", "budget_tokens": 2}, {"type": "adaptive"}]),
    "metadata": st.fixed_dictionaries({}, optional={"user_id": TEXT}),
    "cache_control": CACHE_CONTROL,
}


def body(fields: dict[str, st.SearchStrategy[Any]], required: str) -> st.SearchStrategy[dict[str, Any]]:
    """A body with its required field, ``stream`` and up to six of the others, all of plausible values, then up to
    two fields (the required one, an unknown one, or any other) set to anything at all."""
    others = sorted(name for name in fields if name not in (required, "stream"))
    chosen = st.lists(st.sampled_from(others), max_size=6, unique=True)
    plausible = chosen.flatmap(lambda names: st.fixed_dictionaries(
        {required: fields[required], "stream": fields["stream"], **{name: fields[name] for name in names}}))
    hostile = st.dictionaries(st.sampled_from([*fields, "unknown_knob", "functions"]), ANY, max_size=2)
    return st.tuples(plausible, st.one_of(st.just({}), hostile)).map(lambda parts: {**parts[0], **parts[1]})


CASES = st.one_of(body(CHAT, "messages").map(lambda b: ("/v1/chat/completions", b)),
                  body(COMPLETION, "prompt").map(lambda b: ("/v1/completions", b)),
                  body(RESPONSES, "input").map(lambda b: ("/v1/responses", b)),
                  body(MESSAGES_API, "messages").map(lambda b: ("/v1/messages", {"max_tokens": 4, **b})))


@pytest.fixture(scope="module")
def tools_tokenizer(tmp_path_factory) -> Tokenizer:
    """With the thinking markers as single tokens: formats wait for the thinking (thinking_bounds)."""
    return Tokenizer.from_dir(build_tool_calling(tmp_path_factory.mktemp("fuzz-tools"), markers=True))


RAW_BODIES = [b"", b"{", b"[1]", b"null", b'"x"', b"NaN", b'{"messages": NaN}', b"\xff\xfe", b"[" * 10_000,
              b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e400}',
              b'{"prompt": "hi", "max_tokens": 2, "max_tokens": "x"}']


def check_answer(response, raw_body: bytes) -> None:
    assert response.status_code == 200 or response.status_code in ERROR_STATUSES, (
        response.status_code, response.text[:500], raw_body[:500])
    if response.status_code != 200:
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str)
        return
    if response.headers["content-type"].startswith("text/event-stream") and response.text.startswith(
            "event: message_start"):
        events = [json.loads(block.split("\ndata: ", 1)[1]) for block in response.text.split("\n\n") if block]
        assert events[-1]["type"] in ("message_stop", "error"), events[-1]
        return
    if response.headers["content-type"].startswith("text/event-stream") and response.text.startswith("event: "):
        events = [json.loads(block.split("\ndata: ", 1)[1]) for block in response.text.split("\n\n") if block]
        assert events[0]["type"] == "response.created", events[0]
        assert events[-1]["type"] in ("response.completed", "response.incomplete", "error"), events[-1]
    elif response.headers["content-type"].startswith("text/event-stream"):
        blocks = [block for block in response.text.split("\n\n") if block]
        assert blocks and blocks[-1] == "data: [DONE]", response.text[-300:]
        for block in blocks[:-1]:
            payload = json.loads(block.removeprefix("data: "))
            assert "choices" in payload or "error" in payload, payload
    else:
        assert "choices" in response.json() or response.json().get("object") == "response" or (
            response.json()["type"] == "message")


@settings(max_examples=NUM_CASES, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=CASES)
def test_every_body_gets_a_200_or_an_openai_error_and_nothing_is_held(tools_tokenizer, case):
    route, fields = case
    raw = json.dumps(fields).encode()

    async def test(client, served):
        check_answer(await client.post(route, content=raw, headers={"content-type": "application/json"}), raw)

    serve(tools_tokenizer, test, executor=FakeExecutor(script=tools_tokenizer.encode(OUTPUT, add_special_tokens=False)),
          tool_call_parser="hermes", reasoning_parser="qwen3",
          thinking_bounds=thinking_bounds("qwen3", tools_tokenizer))


def test_bodies_that_are_not_json_objects_get_400s(tools_tokenizer):
    async def test(client, served):
        for route in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"):
            for raw in RAW_BODIES:
                response = await client.post(route, content=raw, headers={"content-type": "application/json"})
                check_answer(response, raw)
                assert response.status_code != 200 or b"max_tokens" in raw

    serve(tools_tokenizer, test, executor=FakeExecutor(eos_after=2))
