"""gpt-oss tool calls (tool_choice "auto" with --tool-call-parser openai): the content the openai_gptoss reasoning
parser hands on, parsed into content and calls whole, and streamed in any pieces to the same content and calls; raw
harmony output reaches the same splitter-and-parser result."""

from __future__ import annotations

import json
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tool_call_streams import NAMES, split, streamed_by

from scheduler_svc.reasoning.splitters import reasoning_splitter, split_reasoning
from scheduler_svc.tool_calls import harmony as harmony_tool_calls
from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput, StreamDelta
from scheduler_svc.tool_calls.harmony import START, parse_output, stream_parser

WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')
TIME = ParsedCall("get_time", "{}")
WEATHER_CALL = f'{START}get_weather<|message|>{{"city": "Paris"}}'
TIME_CALL = f"{START}get_time<|message|>{{}}"


streamed = partial(streamed_by, harmony_tool_calls)


@pytest.mark.parametrize("text, expected", [
    ("It is sunny.", ParsedOutput("It is sunny.")),
    ("", ParsedOutput(None)),
    (WEATHER_CALL, ParsedOutput(None, (WEATHER,))),  # the output's end ends the call (<|call|> is a stop token)
    (f"{WEATHER_CALL}<|call|>", ParsedOutput(None, (WEATHER,))),
    (f"Checking. \n{WEATHER_CALL}<|call|>{TIME_CALL}", ParsedOutput("Checking.", (WEATHER, TIME))),
    (f"{WEATHER_CALL}<|call|> between {TIME_CALL}<|call|> after", ParsedOutput(None, (WEATHER, TIME))),
    (f"{START}get_weather <|constrain|>json<|message|>{{\"city\": \"Paris\"}}", ParsedOutput(None, (WEATHER,))),
    (f'{START}get_time<|message|>{{"q": "<|call|>"}}',  # the marker inside a string ends the call: cut short
     ParsedOutput(f'{START}get_time<|message|>{{"q": "<|call|>"}}')),
])
def test_an_output_is_parsed_into_content_and_calls(text, expected):
    assert parse_output(text, NAMES) == expected
    assert streamed([text]) == streamed(list(text)) == expected


@pytest.mark.parametrize("text", [
    f"{START}send_email<|message|>{{}}",  # not among the tools
    f"{START}get_time<|message|>[1]",  # arguments that are not an object
    f"{START}get_time<|message|>{{bad",
    f"{START}get_time",  # no <|message|>
    f"Sure. {START}<|message|>{{}}",  # no name
])
def test_a_bad_call_makes_the_whole_output_content(text):
    assert parse_output(text, NAMES) == ParsedOutput(text)
    assert streamed(split(text, [1, 5, 13, 40])) == ParsedOutput(text)


def test_parallel_tool_calls_false_keeps_the_first_call():
    text = f"Two: {WEATHER_CALL}<|call|>{TIME_CALL}"
    assert parse_output(text, NAMES, parallel=False) == ParsedOutput("Two:", (WEATHER,))
    assert streamed(list(text), parallel=False) == ParsedOutput("Two:", (WEATHER,))


def test_content_streams_as_it_comes_and_each_call_once_it_ends():
    parser = stream_parser(NAMES)
    assert parser.feed("Let me check. <|chan") == StreamDelta("Let me check.")
    assert parser.feed("nel|>commentary to=functions.get_weather<|message|>") == StreamDelta()
    assert parser.feed('{"city": "Paris"}<|call|><|channel|>comm') == StreamDelta(calls=(WEATHER,))
    assert parser.feed("entary to=functions.get_time<|message|>{}") == StreamDelta()
    assert parser.finish() == StreamDelta(calls=(TIME,))
    assert parser.calls_sent == 2


def test_raw_gpt_oss_output_becomes_thinking_content_and_calls():
    raw = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary"
           "<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
           '<|constrain|>json<|message|>{"city":"Paris"}')
    reasoning, content = split_reasoning("openai_gptoss", raw)
    assert reasoning == "Need the weather."
    assert parse_output(content, NAMES) == ParsedOutput("Checking.", (WEATHER,))


TEXT = st.lists(st.sampled_from([*"ab {}\":\n", "<|channel|>", "<|call|>", "<|message|>", "to=functions."]),
                max_size=8).map("".join)
ARGUMENTS = st.dictionaries(st.sampled_from(["city", "n", "ü"]),
                            st.one_of(st.integers(), st.text(max_size=5), st.lists(st.booleans(), max_size=2)),
                            max_size=3)
CALL = st.builds(lambda name, arguments, header: f"{START}{name}{header}<|message|>{json.dumps(arguments)}",
                 st.sampled_from(sorted(NAMES)), ARGUMENTS, st.sampled_from(["", " <|constrain|>json", " json"]))
BAD_CALL = st.sampled_from([f"{START}nope<|message|>{{}}", f"{START}get_time<|message|>3", f"{START}get_t"])
OUTPUT = st.lists(st.one_of(TEXT, CALL, CALL, BAD_CALL, st.just("<|call|>")), max_size=6).map("".join)
CUTS = st.lists(st.integers(min_value=0, max_value=10_000), max_size=12)


@settings(max_examples=500, deadline=None, database=None)
@given(OUTPUT, CUTS, st.booleans())
def test_any_split_of_an_output_streams_the_content_and_calls_of_the_whole(text, cuts, parallel):
    whole = parse_output(text, NAMES, parallel)
    pieces = streamed(split(text, cuts), parallel=parallel)
    assert pieces == streamed([text], parallel=parallel) == streamed(list(text), parallel=parallel)
    if whole.calls or not pieces.calls:
        assert pieces == whole
    else:  # a bad call after a sent call: the stream sent the call, the whole output is content
        assert whole == ParsedOutput(text)


MESSAGE_BODY = st.sampled_from(["Hm.", "Checking.", " a<b ", ""])
HARMONY_MESSAGE = st.one_of(
    MESSAGE_BODY.map(lambda body: f"<|channel|>analysis<|message|>{body}<|end|>"),
    MESSAGE_BODY.map(lambda body: f"<|channel|>commentary<|message|>{body}<|end|>"),
    st.builds(lambda name, arguments, header: f"<|channel|>commentary to=functions.{name}{header}<|message|>"
                                               f"{json.dumps(arguments)}<|call|>",
              st.sampled_from(sorted(NAMES)), ARGUMENTS, st.sampled_from(["", " <|constrain|>json", " json"])),
    MESSAGE_BODY.map(lambda body: f"<|channel|>final<|message|>{body}"))


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(HARMONY_MESSAGE, min_size=1, max_size=4), CUTS)
def test_raw_harmony_split_then_parsed_as_it_streams_gives_the_whole_message(messages, cuts):
    """The HTTP front's path for gpt-oss: the reasoning parser's content fed to this parser, both streaming."""
    raw = "<|start|>assistant".join(messages).removesuffix("<|call|>")  # the model's own <|call|> is a stop token
    reasoning, content = split_reasoning("openai_gptoss", raw)
    splitter, parser = reasoning_splitter("openai_gptoss"), stream_parser(NAMES)
    thought, sent = "", StreamDelta()
    for piece in [*split(raw, cuts), None]:
        delta = splitter.finish() if piece is None else splitter.feed(piece)
        thought += delta.reasoning
        sent = sent.then(parser.feed(delta.content))
    sent = sent.then(parser.finish())
    assert thought == (reasoning or "")
    assert ParsedOutput(sent.content or None, sent.calls) == parse_output(content, NAMES)
