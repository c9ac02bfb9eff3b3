"""Mistral tool calls (tool_choice "auto" with --tool-call-parser mistral): a finished output parsed into content and
calls, and the same output streamed in any pieces ending with the same content and calls."""

from __future__ import annotations

import json
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tool_call_streams import NAMES, split, streamed_by

from scheduler_svc.tool_calls import mistral as mistral_tool_calls
from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput, StreamDelta
from scheduler_svc.tool_calls.mistral import MARK, StreamParser, parse_output

WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')
TIME = ParsedCall("get_time", "{}")
WEATHER_JSON = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
TIME_JSON = '{"name": "get_time", "arguments": {}}'


streamed = partial(streamed_by, mistral_tool_calls)


# ---- whole outputs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("It is sunny.", ParsedOutput("It is sunny.")),
    ("", ParsedOutput(None)),
    ("[1, 2] and [TOOL_CALLS are text", ParsedOutput("[1, 2] and [TOOL_CALLS are text")),
    (f"{MARK}[{WEATHER_JSON}]", ParsedOutput(None, (WEATHER,))),
    (f"{MARK} [{WEATHER_JSON}, {TIME_JSON}]", ParsedOutput(None, (WEATHER, TIME))),
    (f"\n{MARK}\n[\n{WEATHER_JSON},\n{TIME_JSON}\n]\n", ParsedOutput(None, (WEATHER, TIME))),
    (f"Let me check. {MARK}[{WEATHER_JSON}]", ParsedOutput("Let me check.", (WEATHER,))),
    (f"{MARK}[{WEATHER_JSON}] then text", ParsedOutput(None, (WEATHER,))),  # text after the array: dropped
    (f"{MARK}[{WEATHER_JSON}]\n{MARK}[{TIME_JSON}]", ParsedOutput(None, (WEATHER, TIME))),
    (f'{MARK}[{{"name": "get_weather", "parameters": {{"city": "Paris"}}}}]', ParsedOutput(None, (WEATHER,))),
    (f'{MARK}[{{"name": "get_time", "arguments": {{"q": "[TOOL_CALLS] ]}} ü"}}}}]',
     ParsedOutput(None, (ParsedCall("get_time", '{"q": "[TOOL_CALLS] ]} ü"}'),))),
])
def test_an_output_is_parsed_into_content_and_calls(text, expected):
    assert parse_output(text, NAMES) == expected
    assert streamed([text]) == streamed(list(text)) == expected


@pytest.mark.parametrize("text", [
    f"{MARK}",
    f"{MARK}[]",  # no call
    f"{MARK} {WEATHER_JSON}",  # not an array
    f"{MARK}[{{bad}}]",
    f"Sure. {MARK}[{WEATHER_JSON}",  # cut short
    f'{MARK}[{{"name": "send_email", "arguments": {{}}}}]',  # a function that is not among the tools
    f"{MARK}[{WEATHER_JSON}, 3]",
    f"{MARK}[{WEATHER_JSON}, {{\"name\": \"get_time\"}}]",  # no arguments
    f'{MARK}[{{"name": "get_time", "arguments": "{{}}"}}]',  # arguments that are not an object
    f"{MARK}get_weather{{\"city\": \"Paris\"}}",  # the later format, not read
    f"{MARK}[" + "[" * 100_000 + "]" * 100_001,  # too deep for the decoder
])
def test_a_bad_array_makes_the_whole_output_content(text):
    assert parse_output(text, NAMES) == ParsedOutput(text)


@pytest.mark.parametrize("text", [
    f"{MARK}", f"{MARK}[]", f"{MARK} {WEATHER_JSON}", f"{MARK}[{{bad}}]", f"Sure. {MARK}[{WEATHER_JSON[:-5]}",
    f'{MARK}[{{"name": "send_email", "arguments": {{}}}}, {WEATHER_JSON}]',
])
def test_a_bad_array_before_any_call_streams_as_content(text):
    assert streamed(split(text, [1, 5, 13, 40])) == ParsedOutput(text)


def test_parallel_tool_calls_false_keeps_the_first_call():
    text = f"Two calls: {MARK}[{WEATHER_JSON}, {TIME_JSON}]"
    assert parse_output(text, NAMES, parallel=False) == ParsedOutput("Two calls:", (WEATHER,))
    assert streamed(list(text), parallel=False) == ParsedOutput("Two calls:", (WEATHER,))


# ---- streaming --------------------------------------------------------------------------------------------------
def test_content_streams_as_it_comes_and_each_call_once_its_item_closes():
    parser = StreamParser(NAMES)
    assert parser.feed("Let me") == StreamDelta("Let me")
    assert parser.feed(" check. [TOOL") == StreamDelta(" check.")
    assert parser.feed('_CALLS] [{"name": "get_weather", ') == StreamDelta()
    assert parser.feed('"arguments": {"city": "Paris"}}, {"name"') == StreamDelta(calls=(WEATHER,))
    assert parser.feed(': "get_time", "arguments": {}}') == StreamDelta(calls=(TIME,))
    assert parser.feed("]") == StreamDelta()
    assert parser.feed(" Done.") == StreamDelta()
    assert parser.finish() == StreamDelta()
    assert parser.calls_sent == 2


def test_a_beginning_of_the_mark_that_does_not_go_on_is_content():
    assert streamed(["Hi [TOOL", "S] are here"]) == ParsedOutput("Hi [TOOLS] are here")
    assert streamed(["Hi [TOOL_CALL"]) == ParsedOutput("Hi [TOOL_CALL")


@pytest.mark.parametrize("rest, content", [
    (', {"name": "nope", "arguments": {}}]', '{"name": "nope", "arguments": {}}]'),
    (', {"name": "get_time", "argu', ', {"name": "get_time", "argu'),  # cut short
])
def test_a_bad_item_after_a_sent_call_streams_as_content_after_the_call(rest, content):
    """What a stream cannot take back: the whole output returns it all as content."""
    text = f"{MARK}[{WEATHER_JSON}{rest}"
    assert parse_output(text, NAMES) == ParsedOutput(text)
    assert streamed(list(text)) == ParsedOutput(content, (WEATHER,))


TEXT = st.lists(st.sampled_from([*"ab []{}\",:\n", "[TOOL_CALLS]", "[TOOL_", "CALLS]", "[]", "[1]"]),
                max_size=10).map("".join)
ARGUMENTS = st.dictionaries(st.sampled_from(["city", "n", "ü"]),
                            st.one_of(st.integers(), st.text(max_size=5), st.lists(st.booleans(), max_size=2)),
                            max_size=3)
CALL = st.builds(lambda name, arguments, key: json.dumps({"name": name, key: arguments}),
                 st.sampled_from(sorted(NAMES)), ARGUMENTS, st.sampled_from(["arguments", "parameters"]))
ITEM = st.one_of(CALL, CALL, st.sampled_from(['{"name": "nope", "arguments": {}}', "3", "{bad}", '{"name": "get_t']))
ARRAY = st.builds(lambda pad, items, close: f"{MARK}{pad}[{', '.join(items)}{close}",
                  st.sampled_from(["", " ", "\n"]), st.lists(ITEM, max_size=3), st.sampled_from(["]", "]", ""]))
OUTPUT = st.lists(st.one_of(TEXT, ARRAY), max_size=6).map("".join)
CUTS = st.lists(st.integers(min_value=0, max_value=10_000), max_size=12)


@settings(max_examples=500, deadline=None, database=None)
@given(OUTPUT, CUTS, st.booleans())
def test_any_split_of_an_output_streams_the_content_and_calls_of_the_whole(text, cuts, parallel):
    whole = parse_output(text, NAMES, parallel)
    pieces = streamed(split(text, cuts), parallel=parallel)
    assert pieces == streamed([text], parallel=parallel) == streamed(list(text), parallel=parallel)
    if whole.calls or not pieces.calls:
        assert pieces == whole
    else:  # a bad item or array after a sent call: the stream sent the call, the whole output is content
        assert whole == ParsedOutput(text)


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(max_size=20), st.lists(st.lists(CALL, min_size=1, max_size=3), min_size=1, max_size=3),
       st.text(alphabet="ab .?\n", max_size=10), CUTS, st.booleans())
def test_text_then_calls_streams_as_the_whole_parse(before, arrays, after, cuts, parallel):
    before = before.replace("[", "")
    text = before + "".join(f"{MARK}[{', '.join(calls)}]{after}" for calls in arrays)
    whole = parse_output(text, NAMES, parallel)
    assert len(whole.calls) == (sum(map(len, arrays)) if parallel else 1)
    assert whole.content == (before.rstrip() or None)
    assert streamed(split(text, cuts), parallel=parallel) == whole
