"""Llama 3.x JSON tool calls (tool_choice "auto" with --tool-call-parser llama3_json): a finished output parsed into
content and calls, the same output streamed in any pieces ending with the same content and calls, and the JSON
scanner the streams use agreeing with Python's json decoder."""

from __future__ import annotations

import json
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tool_call_streams import NAMES, split, streamed_by

from scheduler_svc.tool_calls import llama3_json as llama3_json_tool_calls
from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput, StreamDelta
from scheduler_svc.tool_calls.json_scan import JsonScan
from scheduler_svc.tool_calls.llama3_json import TAG, StreamParser, parse_output

WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')
TIME = ParsedCall("get_time", "{}")
WEATHER_JSON = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
TIME_JSON = '{"name": "get_time", "arguments": {}}'


streamed = partial(streamed_by, llama3_json_tool_calls)


# ---- whole outputs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("It is sunny.", ParsedOutput("It is sunny.")),
    ("", ParsedOutput(None)),
    (WEATHER_JSON, ParsedOutput(None, (WEATHER,))),
    (f"{TAG}{WEATHER_JSON}", ParsedOutput(None, (WEATHER,))),
    (f"{TAG} \n{WEATHER_JSON}\n", ParsedOutput(None, (WEATHER,))),
    (f"\n{WEATHER_JSON}; {TIME_JSON}", ParsedOutput(None, (WEATHER, TIME))),
    (f"{WEATHER_JSON};{TIME_JSON}", ParsedOutput(None, (WEATHER, TIME))),
    (f"{WEATHER_JSON} ;\n{TIME_JSON}", ParsedOutput(None, (WEATHER, TIME))),
    (f"{WEATHER_JSON}\n{TIME_JSON}", ParsedOutput(None, (WEATHER, TIME))),
    (f"{WEATHER_JSON}{TIME_JSON}", ParsedOutput(None, (WEATHER, TIME))),  # concatenated, as vLLM takes them
    (f"Let me check.\n\n{WEATHER_JSON}", ParsedOutput("Let me check.", (WEATHER,))),
    (f"Let me check. {TAG}{WEATHER_JSON}", ParsedOutput("Let me check.", (WEATHER,))),
    (f"{WEATHER_JSON} Would you like more? I used {{get_weather}}.", ParsedOutput(None, (WEATHER,))),
    (f"{WEATHER_JSON}; The arguments were {{\"city\": \"Paris\"}}", ParsedOutput(None, (WEATHER,))),
    ('{"name": "get_weather", "parameters": {"city": "Zürich", "days": [1, 2], "at": {"h": 9}}}',
     ParsedOutput(None, (ParsedCall("get_weather", '{"city": "Zürich", "days": [1, 2], "at": {"h": 9}}'),))),
    ('{"name": "get_weather", "parameters": {"q": "a } and { b", "s": "\\"{x}\\""}}',
     ParsedOutput(None, (ParsedCall("get_weather", '{"q": "a } and { b", "s": "\\"{x}\\""}'),))),
])
def test_an_output_is_parsed_into_content_and_calls(text, expected):
    assert parse_output(text, NAMES) == expected
    assert streamed([text]) == streamed(list(text)) == expected


@pytest.mark.parametrize("text", [
    "{not json}",
    "Use the {placeholder} syntax.",
    "int main() {\n  return 0;\n}",
    '{"a": 1} is an object',  # JSON, but no call
    '{"name": "send_email", "parameters": {}}',  # a function that is not among the tools
    '{"parameters": {}}',  # no name
    '{"name": "get_time"}',  # no arguments
    '{"name": "get_time", "parameters": "{}"}',  # arguments that are not an object
    '{"name": ["get_time"], "parameters": {}}',
    'Sure: {"name": "get_weather", "parameters": {"city": "Pa',  # cut short
    f"{TAG}get_weather.call(city='Paris')",  # Llama's built-in tool syntax: not JSON
    f"{TAG}",
    f"{TAG} ; {WEATHER_JSON}",
    "{" * 100_000 + "}" * 100_000,  # too deep for the decoder
])
def test_a_bad_call_makes_the_whole_output_content(text):
    assert parse_output(text, NAMES) == ParsedOutput(text)
    assert streamed(split(text, [1, 7, 30])) == ParsedOutput(text)


def test_parallel_tool_calls_false_keeps_the_first_call():
    text = f"Two calls: {WEATHER_JSON}; {TIME_JSON}"
    assert parse_output(text, NAMES, parallel=False) == ParsedOutput("Two calls:", (WEATHER,))
    assert streamed(list(text), parallel=False) == ParsedOutput("Two calls:", (WEATHER,))


# ---- streaming --------------------------------------------------------------------------------------------------
def test_content_streams_as_it_comes_and_each_call_once_its_object_closes():
    parser = StreamParser(NAMES)
    assert parser.feed("Let me") == StreamDelta("Let me")
    assert parser.feed(" check.\n") == StreamDelta(" check.")
    assert parser.feed("<|python") == StreamDelta()  # may be the tag
    assert parser.feed('_tag|>{"name": "get_weather", ') == StreamDelta()
    assert parser.feed('"parameters": {"city": "Paris"}}; {"name"') == StreamDelta(calls=(WEATHER,))
    assert parser.feed(': "get_time", "arguments": {}}') == StreamDelta(calls=(TIME,))
    assert parser.feed(" Anything else?") == StreamDelta()
    assert parser.finish() == StreamDelta()
    assert parser.calls_sent == 2


def test_a_brace_that_cannot_begin_json_lets_the_text_go_at_once():
    parser = StreamParser(NAMES)
    assert parser.feed("int main() ") == StreamDelta("int main()")
    assert parser.feed("{") == StreamDelta()
    assert parser.feed("\n  r") == StreamDelta(" {\n  r")  # no JSON object has a key starting r
    assert parser.feed("eturn 0; {") == StreamDelta("eturn 0; {")
    assert parser.finish() == StreamDelta() and parser.calls_sent == 0


def test_a_beginning_of_the_tag_that_does_not_go_on_is_content():
    assert streamed(["Hi <|pyth", "on is great"]) == ParsedOutput("Hi <|python is great")
    assert streamed(["Hi <|python_t"]) == ParsedOutput("Hi <|python_t")


@pytest.mark.parametrize("bad", ['{"name": "send_email", "parameters": {}}', "{oops}", '{"name": "get_time", "p'])
def test_a_bad_object_after_a_sent_call_streams_as_content_after_the_call(bad):
    """What a stream cannot take back (after a separator a { must be a call): the whole output returns it all as
    content."""
    text = f"{WEATHER_JSON}; {bad}"
    assert parse_output(text, NAMES) == ParsedOutput(text)
    assert streamed([text]) == streamed(list(text)) == ParsedOutput(bad, (WEATHER,))


TEXT = st.lists(st.sampled_from([*"ab {}\";:\n", "<|python_tag|>", "<|py", "name", "{}", "[1]"]),
                max_size=10).map("".join)
ARGUMENTS = st.dictionaries(st.sampled_from(["city", "n", "ü"]),
                            st.one_of(st.integers(), st.text(max_size=5), st.lists(st.booleans(), max_size=2)),
                            max_size=3)
CALL = st.builds(lambda name, arguments, key, pad: pad + json.dumps({"name": name, key: arguments}) + pad,
                 st.sampled_from(sorted(NAMES)), ARGUMENTS, st.sampled_from(["arguments", "parameters"]),
                 st.sampled_from(["", "\n", " "]))
SEPARATOR = st.sampled_from(["", ";", "; ", "\n", " ; ", ";;"])
BAD = st.sampled_from(["{bad}", '{"name": "nope", "parameters": {}}', '{"name": "get_time", ', '{"x": [1, 2]}',
                       '{"name": "get_time", "parameters": {"n": 01}}', "{\"name\": \"get_time\", \"a\": \"\t\"}"])
OUTPUT = st.lists(st.one_of(TEXT, CALL, SEPARATOR, BAD, st.just(TAG)), max_size=8).map("".join)
CUTS = st.lists(st.integers(min_value=0, max_value=10_000), max_size=12)


@settings(max_examples=500, deadline=None, database=None)
@given(OUTPUT, CUTS, st.booleans())
def test_any_split_of_an_output_streams_the_content_and_calls_of_the_whole(text, cuts, parallel):
    whole = parse_output(text, NAMES, parallel)
    pieces = streamed(split(text, cuts), parallel=parallel)
    assert pieces == streamed([text], parallel=parallel) == streamed(list(text), parallel=parallel)
    if whole.calls or not pieces.calls:
        assert pieces == whole
    else:  # a bad object after a sent call: the stream sent the call, the whole output is content
        assert whole == ParsedOutput(text)


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(max_size=20), st.booleans(), st.lists(st.tuples(CALL, SEPARATOR), min_size=1, max_size=4),
       st.text(alphabet="ab .?\n", max_size=10), CUTS, st.booleans())
def test_text_then_calls_streams_as_the_whole_parse(before, tag, calls, after, cuts, parallel):
    before = before.replace("{", "").replace("<", "")
    text = before + (TAG if tag else "") + "".join(call + separator for call, separator in calls) + after
    whole = parse_output(text, NAMES, parallel)
    assert len(whole.calls) == (len(calls) if parallel else 1)
    assert whole.content == (before.rstrip() or None)
    assert streamed(split(text, cuts), parallel=parallel) == whole


# ---- the JSON scanner -------------------------------------------------------------------------------------------
JSON_TEXT = st.lists(st.sampled_from([*'{}[]",: \n\t\\u0aE.-+', "true", "fals", "null", "NaN", "-Infinity", "1.5e3",
                                      "01", '"k"', "\x01", "é"]), min_size=1, max_size=14).map("".join)


@settings(max_examples=1000, deadline=None, database=None)
@given(st.sampled_from(["{", "["]), JSON_TEXT, CUTS)
def test_the_scanner_agrees_with_the_json_decoder(opener, rest, cuts):
    text = opener + rest
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        value, end = None, -1
    scan = JsonScan(0)
    for piece_end in sorted({cut % (len(text) + 1) for cut in cuts}) + [len(text)]:
        scan.advance(text[:piece_end])
        if scan.bad or scan.done:
            break
    if end >= 0:
        assert scan.done and scan.end == end
        if isinstance(value, list):
            assert json.dumps([json.loads(text[start:stop]) for start, stop in scan.items]) == json.dumps(value)
    else:
        assert not scan.done  # bad, or (cut short) still open
