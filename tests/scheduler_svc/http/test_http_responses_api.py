"""OpenAI's Responses API (POST /v1/responses) over a scripted engine: the body becomes the chat request it asks
for, the answer is a Response object the openai package reads (text, thinking, tool calls, usage, incomplete), the
stream's events gather (with the openai package's own state) into the same response, and what cannot be served is
a 400 naming the Responses parameter."""

from __future__ import annotations

import pytest
from http_helpers import FakeExecutor, scripted, serve, typed_events
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from tiny_tokenizers import build_byte_level

from scheduler_svc.http.errors import ApiError, invalid
from scheduler_svc.http.param_names import ParamNames
from scheduler_svc.http.response_store import ResponseStore
from scheduler_svc.http.responses_api_input import RENAMES, chat_of_response
from scheduler_svc.http.responses_api_protocol import ResponsesRequest
from scheduler_svc.tokenizer import Tokenizer

ROUTE = "/v1/responses"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER}, {"type": "function", "name": "get_time"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
EVENTS = TypeAdapter(list[ResponseStreamEvent])
"""The openai package's own event types: an event it does not know, or malformed, fails validation."""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def gathered(events: list[dict]) -> Response:
    """The final response as the openai package's stream state builds it from the events (and the same as the
    response.completed event's)."""
    state = ResponseStreamState(input_tools=[], text_format=omit)
    final = None
    for event in EVENTS.validate_python(events):
        for handled in state.handle_event(event):
            if handled.type in ("response.completed", "response.incomplete"):
                final = handled.response
    assert final is not None
    return final


def items_of(response: Response) -> list[tuple]:
    """Each output item without its id: (type, text or (name, arguments))."""
    found = []
    for item in response.output:
        if item.type == "message":
            found.append(("message", "".join(part.text for part in item.content)))
        elif item.type == "reasoning":
            found.append(("reasoning", "".join(part.text for part in item.content or [])))
        else:
            found.append(("function_call", item.name, item.arguments, item.call_id.startswith("call_")))
    return found


async def whole_and_streamed(client, body: dict) -> tuple[Response, Response, list[dict]]:
    response = await client.post(ROUTE, json=body)
    assert response.status_code == 200, response.text
    whole = Response.model_validate(response.json())
    streamed = await client.post(ROUTE, json={**body, "stream": True})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = typed_events(streamed.text)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    return whole, gathered(events), events


def test_text_whole_and_streamed(tokenizer):
    async def test(client, served):
        whole, streamed, events = await whole_and_streamed(client, {"input": "Hi", "max_output_tokens": 50,
                                                                   "instructions": "Be brief.", "temperature": 0})
        assert whole.status == "completed" and whole.output_text == "Hello there" and whole.object == "response"
        assert items_of(whole) == items_of(streamed) == [("message", "Hello there")]
        assert whole.instructions == "Be brief." and whole.max_output_tokens == 50 and whole.store is True
        assert whole.usage.output_tokens == len(tokenizer.encode("Hello there", add_special_tokens=False)) + 1
        assert whole.usage.input_tokens > 0 and whole.usage.output_tokens_details.reasoning_tokens == 0
        assert streamed.usage == whole.usage and streamed.status == "completed"
        kinds = [event["type"] for event in events]
        assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                             "response.content_part.added"]
        assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                              "response.completed"]
        deltas = [event["delta"] for event in events if event["type"] == "response.output_text.delta"]
        assert len(deltas) > 1 and "".join(deltas) == "Hello there"

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there"))


def test_the_output_limit_makes_an_incomplete_response(tokenizer):
    async def test(client, served):
        whole, streamed, events = await whole_and_streamed(client, {"input": "Hi", "max_output_tokens": 4})
        assert whole.status == streamed.status == "incomplete"
        assert whole.incomplete_details.reason == "max_output_tokens"
        assert whole.output_text == tokenizer.decode(tokenizer.encode("Hello there", add_special_tokens=False)[:4])
        assert events[-1]["type"] == "response.incomplete" and items_of(streamed) == items_of(whole)

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there"))


def test_thinking_is_a_reasoning_item_counted_in_the_usage(tokenizer):
    async def test(client, served):
        whole, streamed, events = await whole_and_streamed(client, {"input": "Capital of France?",
                                                                   "reasoning": {"effort": "low"},
                                                                   "max_output_tokens": 100})
        assert items_of(whole) == items_of(streamed) == [("reasoning", "Paris, surely."), ("message", "Paris.")]
        reasoning_tokens = len(tokenizer.encode("Paris, surely.", add_special_tokens=False))
        assert whole.usage.output_tokens_details.reasoning_tokens == reasoning_tokens
        assert whole.reasoning.effort == "low"
        deltas = [event["delta"] for event in events if event["type"] == "response.reasoning_text.delta"]
        assert "".join(deltas) == "Paris, surely."

    serve(tokenizer, test, executor=scripted(tokenizer, "<think>Paris, surely.</think>Paris."),
          reasoning_parser="qwen3")


def test_tool_calls_are_function_call_items(tokenizer):
    async def test(client, served):
        body = {"input": "Weather in Paris?", "tools": TOOLS, "max_output_tokens": 180}
        whole, streamed, events = await whole_and_streamed(client, body)
        expected = [("message", "Let me check."), ("function_call", "get_weather", '{"city": "Paris"}', True)]
        assert items_of(whole) == items_of(streamed) == expected
        kinds = [event["type"] for event in events]
        assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
        named = {**body, "tool_choice": {"type": "function", "name": "get_time"}}
        whole, streamed, events = await whole_and_streamed(client, named)  # the arguments stream as generated
        assert items_of(whole) == items_of(streamed) == [("function_call", "get_time", "Let me check.\n\n" + CALL,
                                                          True)]
        deltas = [event["delta"] for event in events if event["type"] == "response.function_call_arguments.delta"]
        assert len(deltas) > 1 and whole.tool_choice.name == "get_time"

    serve(tokenizer, test, executor=scripted(tokenizer, "Let me check.\n\n" + CALL), tool_call_parser="hermes")


def test_input_items_become_the_chat_messages():
    body = ResponsesRequest.model_validate({
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Use tools."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                            {"type": "input_text", "text": "in Paris?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text",
                                                                            "text": "Call it."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]},
        ],
        "tools": TOOLS, "max_output_tokens": 7, "text": {"format": {"type": "json_object"}},
    })
    chat, names = chat_of_response(body, ResponseStore(0))
    messages = [message.model_dump(exclude_none=True) for message in chat.messages]
    assert messages == [
        {"role": "system", "content": "Be brief."}, {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "reasoning_content": "Call it.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "content": "Sunny", "tool_call_id": "call_1"},
        {"role": "assistant", "content": "Sunny."},
    ]
    assert names.message_params == ("instructions", "input[0]", "input[1]", "input[3]", "input[4]", "input[5]")
    assert chat.max_completion_tokens == 7 and chat.response_format.type == "json_object"
    assert [tool.function.name for tool in chat.tools] == ["get_weather", "get_time"]


def test_errors_of_the_chat_checks_name_the_responses_parameters():
    names = ParamNames(("instructions", "input[2]"), RENAMES)
    cases = {"max_completion_tokens": "max_output_tokens", "response_format.json_schema.schema": "text.format.schema",
             "reasoning_effort": "reasoning.effort", "tools[1].function.parameters": "tools[1].parameters",
             "messages[1].content": "input[2]", "tool_choice": "tool_choice"}
    for chat_param, param in cases.items():
        error = names.renamed(invalid(chat_param, "is wrong"))
        assert (error.param, error.message) == (param, f"{param}: is wrong")
    assert isinstance(names.renamed(ApiError(invalid("x", "y").code, "no param")), ApiError)


@pytest.mark.parametrize("body, param", [
    ({"input": "Hi", "truncation": "auto"}, "truncation"),
    ({"input": "Hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "x"}]}]}, "input[0]"),
    ({"input": []}, "input"),
    ({"input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "Hi", "reasoning": {"summary": "auto"}}, "reasoning.summary"),
    ({"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "objec"}}}},
     "text.format"),
    ({"input": "Hi", "top_logprobs": 21}, "top_logprobs"),
    ({"input": "Hi", "include": ["reasoning.encrypted_content"]}, "include[0]"),
    ({"input": "Hi", "include": ["message.output_text.logprobs"], "tools": TOOLS}, "include"),
    ({"input": "Hi", "tool_choice": {"type": "file_search"}}, "tool_choice"),
    ({"input": "Hi", "temperature": "hot"}, "temperature"),
    ({"input": "x" * 900}, "input"),  # longer than the context
])
def test_what_cannot_be_served_is_a_400_naming_the_parameter(tokenizer, body, param):
    async def test(client, served):
        response = await client.post(ROUTE, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"].startswith(param) and error["message"].startswith(param), error

    serve(tokenizer, test)


def test_input_tokens_counts_the_prompt_a_response_would_read(tokenizer):
    async def test(client, served):
        prompt = {"instructions": "Be brief.", "input": [{"role": "user", "content": "Hi"}],
                  "reasoning": {"effort": "low"}}
        counted = await client.post(f"{ROUTE}/input_tokens", json=prompt)
        assert counted.status_code == 200, counted.text
        assert counted.json()["object"] == "response.input_tokens"
        sent = Response.model_validate((await client.post(ROUTE, json={**prompt, "max_output_tokens": 3})).json())
        assert counted.json()["input_tokens"] == sent.usage.input_tokens
        alone = await client.post(f"{ROUTE}/input_tokens", json={"instructions": "Be brief."})
        assert 0 < alone.json()["input_tokens"] < counted.json()["input_tokens"]
        refused = await client.post(f"{ROUTE}/input_tokens", json={**prompt, "previous_response_id": "resp_1"})
        assert refused.status_code == 404 and refused.json()["error"]["param"] == "previous_response_id"
        unknown = await client.post(f"{ROUTE}/input_tokens", json={**prompt, "max_output_tokens": 5})
        assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "max_output_tokens"

    serve(tokenizer, test, executor=FakeExecutor(eos_after=2))


def test_required_tool_calls_are_function_call_items_whole_and_streamed(tokenizer):
    output = '[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "get_time", "parameters": {}}]'

    async def test(client, served):
        body = {"input": "Weather and time?", "tools": TOOLS, "tool_choice": "required", "max_output_tokens": 180}
        whole, streamed, _ = await whole_and_streamed(client, body)
        assert items_of(whole) == items_of(streamed) == [("function_call", "get_weather", '{"city": "Paris"}', True),
                                                         ("function_call", "get_time", "{}", True)]

    serve(tokenizer, test, executor=scripted(tokenizer, output))


def test_thinking_then_text_then_a_call_keep_their_order(tokenizer):
    async def test(client, served):
        body = {"input": "Weather in Paris?", "tools": TOOLS, "max_output_tokens": 180}
        whole, streamed, _ = await whole_and_streamed(client, body)
        assert items_of(whole) == items_of(streamed) == [
            ("reasoning", "Need the tool."), ("message", "Let me check."),
            ("function_call", "get_weather", '{"city": "Paris"}', True)]

    serve(tokenizer, test, executor=scripted(tokenizer, "<think>Need the tool.</think>Let me check.\n\n" + CALL),
          tool_call_parser="hermes", reasoning_parser="qwen3")


def test_output_text_logprobs_are_the_chat_endpoints_whole_and_streamed(tokenizer):
    """``include: ["message.output_text.logprobs"]`` (or ``top_logprobs`` alone): the answer's tokens' logprobs, as
    the chat endpoint gives them for the same request, on the output text, its deltas and its done event."""
    async def test(client, served):
        chat = await client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20, "logprobs": True, "top_logprobs": 2})
        expected = chat.json()["choices"][0]["logprobs"]["content"]
        assert len(expected) >= 2 and len(expected[0]["top_logprobs"]) == 2
        for asked in ({"include": ["message.output_text.logprobs"], "top_logprobs": 2}, {"top_logprobs": 2}):
            whole, streamed, events = await whole_and_streamed(client, {"input": "Hi", "max_output_tokens": 20,
                                                                       **asked})
            for response in (whole, streamed):
                (part,) = response.output[0].content
                assert [entry.model_dump() for entry in part.logprobs] == expected
            deltas = [entry for event in events if event["type"] == "response.output_text.delta"
                      for entry in event["logprobs"]]
            done = next(event for event in events if event["type"] == "response.output_text.done")
            assert deltas == expected[:len(deltas)] and done["logprobs"] == expected
        plain = await client.post(ROUTE, json={"input": "Hi", "max_output_tokens": 20})
        assert plain.json()["output"][0]["content"][0]["logprobs"] == []

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello there"))


def test_output_text_logprobs_are_refused_where_the_output_is_split(tokenizer):
    async def test(client, served):
        response = await client.post(ROUTE, json={"input": "Hi", "top_logprobs": 1})
        assert response.status_code == 400 and response.json()["error"]["param"] == "top_logprobs"
        assert "--reasoning-parser qwen3" in response.json()["error"]["message"]

    serve(tokenizer, test, executor=scripted(tokenizer, "Hello"), reasoning_parser="qwen3")
