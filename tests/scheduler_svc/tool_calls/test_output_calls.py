"""Tool calls parsed out of a request's output as the engine streams it (Request.tool_call_parsing): the messages'
text is the parser's content and their tool_calls its calls, each once complete with its own id, whatever tokens
each step brings and however the stream interval merges messages; an abort sends what the parser held."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_tokenizers import build_byte_level
from tool_call_streams import NAMES

from scheduler_svc.output_processor import RequestOutputState
from scheduler_svc.reasoning.splitters import split_reasoning
from scheduler_svc.request import Request, StopParams
from scheduler_svc.request_timing import RequestTiming
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.tool_calls.parsers import tool_call_parser
from scheduler_svc.tool_calls.request_parsing import ToolCallParsing
from stepahead_proto import generation_pb2, sampling_pb2

EOS = 2
PARIS = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
NOON = '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>'
OUTPUTS = [
    "Let me look that up.\n" + PARIS,
    PARIS + "\n" + NOON,
    "No call here, only <tool_ text.",
    'Broken: <tool_call>{"name": "get_weather", "arguments": 3}</tool_call>',
    '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>',
    "Cut short <tool_call>{\"name\": \"get_wea",
]
CALL_ID = re.compile(r"call_[0-9a-f]{24}")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def make_state(tokenizer: Tokenizer, parallel: bool = True, stream_interval: int = 1, parser: str = "hermes",
               reasoning_parser: str | None = None) -> RequestOutputState:
    params = StopParams(max_tokens=500, eos_token_ids=frozenset({EOS}), skip_special_tokens=False)
    request = Request("r", [5, 6, 7], sampling_pb2.SamplingParams(), params, reasoning_parser=reasoning_parser,
                      tool_call_parsing=ToolCallParsing(parser, NAMES, parallel))
    return RequestOutputState(request, tokenizer, 10_000, RequestTiming(arrival=0.0), stream_interval)


def run(state: RequestOutputState, steps: list[list[int]]) -> list[generation_pb2.GenerateResponse]:
    messages = [state.append_tokens(step, [], now=1.0) for step in steps]
    return [message for message in messages if message is not None]


def gathered(messages: list[generation_pb2.GenerateResponse]) -> tuple[str, list[tuple[str, str]]]:
    calls = [call for message in messages for call in message.tool_calls]
    assert all(CALL_ID.fullmatch(call.id) for call in calls) and len({call.id for call in calls}) == len(calls)
    return "".join(message.text for message in messages), [(call.name, call.arguments_json) for call in calls]


def expected(text: str, parallel: bool = True) -> tuple[str, list[tuple[str, str]]]:
    parsed = tool_call_parser("hermes").parse_output(text, NAMES, parallel)
    return parsed.content or "", [(call.name, call.arguments) for call in parsed.calls]


def steps_of(ids: list[int], sizes: list[int]) -> list[list[int]]:
    """``ids`` then EOS, cut into steps of the given sizes (cycled)."""
    ids, steps, at = [*ids, EOS], [], 0
    for index in range(len(ids)):
        if at >= len(ids):
            break
        size = sizes[index % len(sizes)] if sizes else 1
        steps.append(ids[at:at + size])
        at += size
    return steps


@pytest.mark.parametrize("text", OUTPUTS)
def test_one_token_per_step_gives_the_whole_output_s_content_and_calls(text, tokenizer):
    messages = run(make_state(tokenizer), steps_of(tokenizer.encode(text), [1]))
    assert gathered(messages) == expected(text)
    assert messages[-1].finish_reason == generation_pb2.FINISH_REASON_STOP


def test_a_call_goes_out_once_complete_not_at_the_finish(tokenizer):
    ids = tokenizer.encode(PARIS + " and then more words to come")
    messages = run(make_state(tokenizer), steps_of(ids, [1]))
    first_call = next(index for index, message in enumerate(messages) if message.tool_calls)
    assert first_call < len(messages) - 5
    assert "<tool_call>" not in "".join(message.text for message in messages)


def test_parallel_false_sends_the_first_call_only(tokenizer):
    text = PARIS + "\n" + NOON
    messages = run(make_state(tokenizer, parallel=False), steps_of(tokenizer.encode(text), [3]))
    assert gathered(messages) == expected(text, parallel=False)
    assert [name for name, _ in gathered(messages)[1]] == ["get_weather"]


def test_an_abort_sends_what_the_parser_held(tokenizer):
    state = make_state(tokenizer)
    messages = run(state, [tokenizer.encode("Checking <tool_")])
    messages.append(state.abort_message(now=2.0))
    assert gathered(messages) == ("Checking <tool_", [])
    assert messages[-1].finish_reason == generation_pb2.FINISH_REASON_ABORT


@settings(max_examples=150, deadline=None, database=None)
@given(text=st.sampled_from(OUTPUTS), sizes=st.lists(st.integers(1, 9), max_size=6), interval=st.integers(1, 5))
def test_any_steps_and_stream_interval_give_the_same_content_and_calls(text, sizes, interval, tokenizer):
    messages = run(make_state(tokenizer, stream_interval=interval), steps_of(tokenizer.encode(text), sizes))
    assert gathered(messages) == expected(text)


def test_gpt_oss_calls_are_read_from_the_split_answer(tokenizer):
    """The openai parser reads the function messages the openai_gptoss split hands on: the thinking streams apart,
    the preamble is the text and the call comes parsed."""
    text = ("<|channel|>analysis<|message|>The user wants weather.<|end|><|start|>assistant<|channel|>commentary"
            "<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
            '<|constrain|>json<|message|>{"city": "Paris"}')
    reasoning, answer = split_reasoning("openai_gptoss", text)
    parsed = tool_call_parser("openai").parse_output(answer, NAMES)
    state = make_state(tokenizer, parser="openai", reasoning_parser="openai_gptoss")
    messages = run(state, steps_of(tokenizer.encode(text), [2, 5]))
    assert "".join(message.reasoning_text for message in messages) == reasoning == "The user wants weather."
    assert gathered(messages) == (parsed.content, [("get_weather", '{"city": "Paris"}')]) == ("Checking.", [
        ("get_weather", '{"city": "Paris"}')])
