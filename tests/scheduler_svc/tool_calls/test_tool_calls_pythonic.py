"""Pythonic tool calls (tool_choice "auto" with --tool-call-parser pythonic): a finished output that is a Python list
of calls parsed into calls (literal arguments as JSON), anything else content, and the same output streamed in any
pieces ending with the same content and calls."""

from __future__ import annotations

import json
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tool_call_streams import NAMES, split, streamed_by

from scheduler_svc.tool_calls import pythonic as pythonic_tool_calls
from scheduler_svc.tool_calls.common import ParsedCall, ParsedOutput, StreamDelta
from scheduler_svc.tool_calls.pythonic import StreamParser, parse_output

WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')
TIME = ParsedCall("get_time", "{}")


streamed = partial(streamed_by, pythonic_tool_calls)


def weather(arguments: str) -> ParsedOutput:
    return ParsedOutput(None, (ParsedCall("get_weather", arguments),))


# ---- whole outputs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("It is sunny.", ParsedOutput("It is sunny.")),
    ("", ParsedOutput(None)),
    ('[get_weather(city="Paris")]', ParsedOutput(None, (WEATHER,))),
    ("[get_weather(city='Paris'), get_time()]", ParsedOutput(None, (WEATHER, TIME))),
    ("\n [get_weather(city='Paris'),\n  get_time(),]\n", ParsedOutput(None, (WEATHER, TIME))),
    ("[get_weather(city='Paris')]  # the weather", ParsedOutput(None, (WEATHER,))),
    ("[get_weather(city=\"Zürich\", days=[1, -2, +3.5], at={'h': 9, 'm': None}, ok=True, no=False)]",
     weather('{"city": "Zürich", "days": [1, -2, 3.5], "at": {"h": 9, "m": null}, "ok": true, "no": false}')),
    ("[get_weather(a=true, b=false, c=null)]", weather('{"a": true, "b": false, "c": null}')),  # JSON's, as vLLM
    ("[get_weather(q='''a ] and, \"b\"''', r=r'\\d', s='it\\'s')]",
     weather('{"q": "a ] and, \\"b\\"", "r": "\\\\d", "s": "it\'s"}')),
    ("[get_weather(q='a' 'b')]", weather('{"q": "ab"}')),
])
def test_an_output_is_parsed_into_content_and_calls(text, expected):
    assert parse_output(text, NAMES) == expected
    assert streamed([text]) == streamed(list(text)) == expected


@pytest.mark.parametrize("text", [
    "[]",
    "[1] Reference",
    "[see the docs](http://x)",
    "get_weather(city='Paris')",  # not a list
    "Sure: [get_weather(city='Paris')]",  # text before the list
    "[get_weather(city='Paris')] done",  # text after it
    "[get_weather(city='Paris')][0]",
    "[send_email(to='x')]",  # a function that is not among the tools
    "[get_weather('Paris')]",  # a positional argument
    "[get_weather(**{'city': 'Paris'})]",
    "[get_weather(city='a', city='b')]",  # an argument given twice
    "[get_weather(city=paris)]",  # a name, not a literal
    "[get_weather(city=f'{x}')]", "[get_weather(city=f'x')]",
    "[get_weather(city=b'Paris')]", "[get_weather(n=1j)]", "[get_weather(n=1e999)]", "[get_weather(n=-True)]",
    "[get_weather(n=(1, 2))]", "[get_weather(n={1, 2})]", "[get_weather(n={1: 2})]", "[get_weather(n=1 + 2)]",
    "[get_weather(n=...)]", "[tools.get_weather()]", "[get_weather()()]", "[[get_weather()]]",
    "[get_weather(city='Paris')",  # cut short
    "[get_weather(city='Par\nis')]",  # a line break in a one-line string
    "[get_weather(city='Paris'}]",
    "[get_weather(city='Paris')\x00]",
    "[get_weather(n=" + "[" * 1000 + "]" * 1000 + ")]",  # too deep
])
def test_anything_but_a_list_of_calls_of_the_tools_is_content(text):
    assert parse_output(text, NAMES) == ParsedOutput(text)
    assert streamed(split(text, [1, 4, 15])) == streamed(list(text)) == ParsedOutput(text)


def test_parallel_tool_calls_false_keeps_the_first_call():
    text = "[get_weather(city='Paris'), get_time()]"
    assert parse_output(text, NAMES, parallel=False) == ParsedOutput(None, (WEATHER,))
    assert streamed(list(text), parallel=False) == ParsedOutput(None, (WEATHER,))


# ---- streaming --------------------------------------------------------------------------------------------------
def test_text_streams_as_it_comes_and_each_call_once_the_next_comma_or_the_end_closes_it():
    parser = StreamParser(NAMES)
    assert parser.feed("\n ") == StreamDelta()
    assert parser.feed("[get_weather(city=") == StreamDelta()
    paris = ParsedCall("get_weather", '{"city": "Paris, France"}')
    assert parser.feed("'Paris, France'),") == StreamDelta(calls=(paris,))
    assert parser.feed(" get_time(") == StreamDelta()
    assert parser.feed(")]") == StreamDelta()  # the list's last call: only whitespace may follow
    assert parser.feed("\n") == StreamDelta()
    assert parser.finish() == StreamDelta(calls=(TIME,))
    assert parser.calls_sent == 2
    other = StreamParser(NAMES)
    assert other.feed(" It") == StreamDelta(" It")
    assert other.feed(" is [sunny]") == StreamDelta(" is [sunny]")


def test_a_list_that_cannot_be_calls_goes_out_as_soon_as_that_is_certain():
    parser = StreamParser(NAMES)
    assert parser.feed("[get_weather(city='Paris'") == StreamDelta()
    assert parser.feed(" days=2)]") == StreamDelta("[get_weather(city='Paris' days=2)]")
    for first, second in [("[", "1]"), ("[Note", ", this"), ("[get_weather('", "x\n")]:
        parser = StreamParser(NAMES)
        assert parser.feed(first) == StreamDelta()
        assert parser.feed(second) == StreamDelta(first + second)


def test_a_bad_item_after_a_sent_call_streams_as_content_after_the_call():
    """What a stream cannot take back: the whole output returns it all as content."""
    text = "[get_weather(city='Paris'), nope()]"
    assert parse_output(text, NAMES) == ParsedOutput(text)
    assert streamed(list(text)) == ParsedOutput(" nope()]", (WEATHER,))


ARGUMENT = st.one_of(st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4),
                     st.booleans(), st.none(), st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.sampled_from(["k", "é"]), st.integers(), max_size=2))
ARGUMENTS = st.dictionaries(st.sampled_from(["city", "n", "ü"]), ARGUMENT, max_size=3)


def written(name: str, arguments: dict, pad: str = "") -> str:
    """A call as a model writes it: the function's name and its keyword arguments as Python literals."""
    return f"{name}({pad}{', '.join(f'{key}={value!r}' for key, value in arguments.items())})"


CALL = st.builds(written, st.sampled_from(sorted(NAMES)), ARGUMENTS, st.sampled_from(["", " ", "\n"]))
ITEM = st.one_of(CALL, CALL, st.sampled_from(["nope()", "get_time(1)", "get_time(x=y)", "3", "get_time(", "'a, b'",
                                              "get_time(s='''x\n]''')", "get_time() # c, ]\n"]))
LIST = st.builds(lambda lead, items, comma, close, tail: f"{lead}[{', '.join(items)}{comma}{close}{tail}",
                 st.sampled_from(["", " ", "\n"]), st.lists(ITEM, max_size=3), st.sampled_from(["", ",", " ,"]),
                 st.sampled_from(["]", "]", ""]), st.sampled_from(["", "\n", " # done", " x", "\\\n", "]"]))
TEXT = st.lists(st.sampled_from([*"ab [](),'\"#\n=\\", "get_time", "get_weather", "'''"]), max_size=10).map("".join)
OUTPUT = st.one_of(LIST, TEXT, st.tuples(LIST, TEXT).map("".join), st.tuples(TEXT, LIST).map("".join))
CUTS = st.lists(st.integers(min_value=0, max_value=10_000), max_size=12)


@settings(max_examples=600, deadline=None, database=None)
@given(OUTPUT, CUTS, st.booleans())
def test_any_split_of_an_output_streams_the_content_and_calls_of_the_whole(text, cuts, parallel):
    whole = parse_output(text, NAMES, parallel)
    pieces = streamed(split(text, cuts), parallel=parallel)
    assert pieces == streamed([text], parallel=parallel) == streamed(list(text), parallel=parallel)
    if whole.calls or not pieces.calls:
        assert pieces == whole
    else:  # a bad item after a call was sent: the whole output is content
        assert whole == ParsedOutput(text)


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(NAMES)), ARGUMENTS), min_size=1, max_size=4), CUTS, st.booleans())
def test_calls_stream_as_the_whole_parse_with_their_arguments_as_json(calls, cuts, parallel):
    text = "[" + ", ".join(written(name, arguments) for name, arguments in calls) + "]"
    whole = parse_output(text, NAMES, parallel)
    expected = [ParsedCall(name, json.dumps(arguments, ensure_ascii=False)) for name, arguments in calls]
    assert whole == ParsedOutput(None, tuple(expected if parallel else expected[:1]))
    assert streamed(split(text, cuts), parallel=parallel) == whole
