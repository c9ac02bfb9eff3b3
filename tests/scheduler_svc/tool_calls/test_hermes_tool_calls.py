"""Hermes-style tool calls (tool_choice "auto" with --tool-call-parser hermes): a finished output parsed into content
and calls, and the same output streamed in any pieces ending with the same content and calls."""

from __future__ import annotations

import json
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tool_call_streams import NAMES, split, streamed_by

from scheduler_svc.tool_calls import hermes as hermes_tool_calls
from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput, StreamDelta
from scheduler_svc.tool_calls.hermes import END, START, held_suffix, parse_output, stream_parser

WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')
TIME = ParsedCall("get_time", "{}")


def block(name: str, arguments: object, key: str = "arguments") -> str:
    return f"{START}\n{json.dumps({'name': name, key: arguments})}\n{END}"


WEATHER_BLOCK = block("get_weather", {"city": "Paris"})
TIME_BLOCK = block("get_time", {})


streamed = partial(streamed_by, hermes_tool_calls)


# ---- whole outputs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("It is sunny.", ParsedOutput("It is sunny.")),
    ("", ParsedOutput(None)),
    ("a <tool_ call> and </tool_call> are text", ParsedOutput("a <tool_ call> and </tool_call> are text")),
    (WEATHER_BLOCK, ParsedOutput(None, (WEATHER,))),
    (f"\n\n{WEATHER_BLOCK}\n", ParsedOutput(None, (WEATHER,))),
    (f"{WEATHER_BLOCK}\n{TIME_BLOCK}", ParsedOutput(None, (WEATHER, TIME))),
    (f"{WEATHER_BLOCK}{TIME_BLOCK}", ParsedOutput(None, (WEATHER, TIME))),
    (f"Let me check.\n\n{WEATHER_BLOCK}", ParsedOutput("Let me check.", (WEATHER,))),
    (f"Checking. {WEATHER_BLOCK} in between {TIME_BLOCK} after", ParsedOutput("Checking.", (WEATHER, TIME))),
    (block("get_weather", {"city": "Paris"}, key="parameters"), ParsedOutput(None, (WEATHER,))),
    (block("get_weather", {"city": "Zürich"}), ParsedOutput(None, (ParsedCall("get_weather", '{"city": "Zürich"}'),))),
    (f'{START}{{"name":"get_time","arguments":{{"n":[1, 2]}}}}{END}',
     ParsedOutput(None, (ParsedCall("get_time", '{"n": [1, 2]}'),))),
])
def test_an_output_is_parsed_into_content_and_calls(text, expected):
    assert parse_output(text, NAMES) == expected


@pytest.mark.parametrize("text", [
    f"{START}{{not json}}{END}",  # bad JSON
    f"Sure. {START}{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Pa",  # not closed (cut short)
    f"{WEATHER_BLOCK}\n{START}{{\"name\": \"get_time\"",  # a good block, then one not closed
    block("send_email", {"to": "x"}),  # a function that is not among the tools
    f"{WEATHER_BLOCK}{block('send_email', {})}",
    f"{START}[1, 2]{END}",  # not an object
    f'{START}{{"arguments": {{}}}}{END}',  # no name
    f'{START}{{"name": ["get_time"], "arguments": {{}}}}{END}',  # a name that is not a string
    f'{START}{{"name": "get_time"}}{END}',  # no arguments
    block("get_time", "{}"),  # arguments that are not an object
    f"{START}{'[' * 100_000}{END}",  # too deep for the JSON parser
])
def test_a_bad_block_makes_the_whole_output_content(text):
    assert parse_output(text, NAMES) == ParsedOutput(text)


def test_parallel_tool_calls_false_keeps_the_first_call():
    text = f"Two calls: {WEATHER_BLOCK}{TIME_BLOCK}"
    assert parse_output(text, NAMES, parallel=False) == ParsedOutput("Two calls:", (WEATHER,))
    assert streamed([text], parallel=False) == ParsedOutput("Two calls:", (WEATHER,))


@pytest.mark.parametrize("text, held", [
    ("Hello", 0), ("Hello ", 1), ("Hello \n", 2), ("Hello <", 2), ("Hello<", 1), ("Hello <tool_call", 11),
    ("Hello <tool_cal", 10), ("Hello <toolx", 0), ("Hello <tool_call> ", 1), ("", 0), ("  ", 2),
])
def test_a_stream_holds_trailing_whitespace_and_the_beginning_of_a_block(text, held):
    assert held_suffix(text) == held


# ---- streaming --------------------------------------------------------------------------------------------------
def test_content_streams_as_it_comes_and_each_call_once_its_block_is_closed():
    parser = stream_parser(NAMES)
    assert parser.feed("Let me") == StreamDelta("Let me")
    assert parser.feed(" check.\n") == StreamDelta(" check.")
    assert parser.feed("\n<tool") == StreamDelta()
    assert parser.feed('_call>\n{"name": "get_weather", ') == StreamDelta()
    assert parser.feed('"arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>{"name"') == StreamDelta(
        calls=(WEATHER,))
    assert parser.feed(': "get_time", "parameters": {}}</tool_call>') == StreamDelta(calls=(TIME,))
    assert parser.feed("\n") == StreamDelta()
    assert parser.finish() == StreamDelta()
    assert parser.calls_sent == 2


def test_a_bad_block_streams_as_content():
    parser = stream_parser(NAMES)
    assert parser.feed("Hi\n<tool_call>{oops") == StreamDelta("Hi")
    assert parser.feed("}</tool_call> more") == StreamDelta("\n<tool_call>{oops}</tool_call> more")
    assert parser.feed(f" {WEATHER_BLOCK}") == StreamDelta(f" {WEATHER_BLOCK}")
    assert parser.finish() == StreamDelta() and parser.calls_sent == 0


def test_an_unclosed_block_is_sent_as_content_at_the_end():
    text = f"\n{START}{{\"name\": \"get_weather\""
    assert streamed(split(text, [1, 3, 9])) == parse_output(text, NAMES) == ParsedOutput(text)
    assert streamed(["Hi <tool_c"]) == ParsedOutput("Hi <tool_c")  # the beginning of a block that never came


def test_a_bad_block_after_a_sent_call_streams_as_content_after_the_call():
    """What a stream cannot take back: the whole output returns it all as content."""
    text = f"{WEATHER_BLOCK}\n{START}{{\"name\": \"nope\", \"arguments\": {{}}}}{END}"
    assert parse_output(text, NAMES) == ParsedOutput(text)
    assert streamed([text]) == ParsedOutput(f"{START}{{\"name\": \"nope\", \"arguments\": {{}}}}{END}", (WEATHER,))


TEXT = st.lists(st.sampled_from([*"ab <>/_{}\"\n\t:", "tool", "call", "<tool_", "</tool_call>", "<tool_call>"]),
                max_size=12).map("".join)
PIECES = st.lists(st.sampled_from([*"ab <>/_\n", "<tool_call", "tool_call>", "</tool_call"]), max_size=8).map("".join)
CALL = st.builds(
    lambda name, arguments, key, pad: f"{START}{pad}{json.dumps({'name': name, key: arguments})}{pad}{END}",
    st.sampled_from(sorted(NAMES)),
    st.dictionaries(st.sampled_from(["city", "n", "ü"]), st.one_of(st.integers(), st.text(max_size=5)), max_size=3),
    st.sampled_from(["arguments", "parameters"]),
    st.sampled_from(["", "\n", " "]),
)
BAD_BLOCK = st.sampled_from([f"{START}{{bad}}{END}", f"{START}{{\"name\": \"nope\", \"arguments\": {{}}}}{END}",
                             f"{START}{{\"name\": \"get_time\", "])
OUTPUT = st.lists(st.one_of(TEXT, PIECES, CALL, BAD_BLOCK), max_size=8).map("".join)
CUTS = st.lists(st.integers(min_value=0, max_value=10_000), max_size=12)


@settings(max_examples=400, deadline=None, database=None)
@given(OUTPUT, CUTS, st.booleans())
def test_any_split_of_an_output_streams_the_content_and_calls_of_the_whole(text, cuts, parallel):
    whole = parse_output(text, NAMES, parallel)
    pieces = streamed(split(text, cuts), parallel=parallel)
    assert pieces == streamed([text], parallel=parallel) == streamed(list(text), parallel=parallel)
    if whole.calls or not pieces.calls:
        assert pieces == whole
    else:  # a bad block after a sent call: the stream sent the call, the whole output is content
        assert whole == ParsedOutput(text)


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(max_size=20), st.lists(st.tuples(CALL, st.sampled_from(["", "\n", " x "])), min_size=1, max_size=4),
       CUTS, st.booleans())
def test_text_then_calls_streams_as_the_whole_parse(before, calls, cuts, parallel):
    text = before.replace("<", "") + "".join(call + after for call, after in calls)
    whole = parse_output(text, NAMES, parallel)
    assert len(whole.calls) == (len(calls) if parallel else 1)
    assert whole.content == (before.replace("<", "").rstrip() or None)
    assert streamed(split(text, cuts), parallel=parallel) == whole
