"""Tests for scheduler_svc.stop_checker."""

import random

import pytest

from scheduler_svc.stop_checker import StopStringChecker, StopStringMatch


def run(checker: StopStringChecker, deltas: list[str]) -> tuple[list[str], str | None]:
    """Feed deltas until a match; return the emitted pieces (flush included when unmatched) and the match."""
    pieces = []
    for delta in deltas:
        emitted, matched = checker.feed(delta)
        pieces.append(emitted)
        if matched is not None:
            return pieces, matched
    pieces.append(checker.flush())
    return pieces, None


def reference(text: str, stops: list[str], include: bool) -> tuple[str, str | None]:
    """Scan the whole text one character at a time; stop at the first completed stop string."""
    for end in range(1, len(text) + 1):
        completed = [(end - len(s), s) for s in stops if text[:end].endswith(s)]
        if completed:
            start, stop = min(completed)
            return text[: end if include else start], stop
    return text, None


def test_no_stop_strings_pass_everything_through():
    checker = StopStringChecker([], include_stop_str_in_output=False)
    assert checker.feed("hello") == ("hello", None)
    assert checker.feed(" world") == (" world", None)
    assert checker.flush() == ""


@pytest.mark.parametrize("stop", [[""], ["ok", ""]])
def test_empty_stop_string_is_rejected(stop):
    with pytest.raises(ValueError, match="stop"):
        StopStringChecker(stop, include_stop_str_in_output=False)


@pytest.mark.parametrize("include, expected", [(False, "Hello "), (True, "Hello STOP")])
def test_match_inside_one_delta_drops_everything_after(include, expected):
    checker = StopStringChecker(["STOP"], include_stop_str_in_output=include)
    assert checker.feed("Hello STOP and more") == (expected, "STOP")
    assert checker.match == StopStringMatch(stop="STOP", start=6)
    assert checker.flush() == ""


@pytest.mark.parametrize("include, expected", [(False, ["ab", "", ""]), (True, ["ab", "", "STOP"])])
def test_stop_string_split_across_deltas_is_found(include, expected):
    checker = StopStringChecker(["STOP"], include_stop_str_in_output=include)
    pieces, matched = run(checker, ["abS", "TO", "P tail", "never fed"])
    assert matched == "STOP"
    assert pieces == expected
    assert checker.match.start == 2


def test_possible_prefix_is_held_back_until_disambiguated():
    checker = StopStringChecker(["</end>"], include_stop_str_in_output=False)
    assert checker.feed("x <") == ("x ", None)
    assert checker.held_back == "<"
    assert checker.feed("/e") == ("", None)
    assert checker.feed("x") == ("</ex", None)
    assert checker.held_back == ""


def test_only_the_longest_possible_prefix_is_held():
    checker = StopStringChecker(["aab"], include_stop_str_in_output=False)
    assert checker.feed("aaa") == ("a", None)
    assert checker.held_back == "aa"
    assert checker.feed("b") == ("", "aab")
    assert checker.match.start == 1


def test_flush_returns_the_held_tail_without_a_match():
    checker = StopStringChecker(["STOP"], include_stop_str_in_output=False)
    assert checker.feed("the end ST") == ("the end ", None)
    assert checker.flush() == "ST"
    assert checker.flush() == ""


def test_feed_after_match_raises():
    checker = StopStringChecker(["x"], include_stop_str_in_output=False)
    checker.feed("ax")
    with pytest.raises(RuntimeError):
        checker.feed("more")


def test_earliest_match_wins_in_one_delta():
    checker = StopStringChecker(["two", "one"], include_stop_str_in_output=False)
    assert checker.feed("zero one two") == ("zero ", "one")


@pytest.mark.parametrize("deltas", [["abcd"], ["a", "b", "c", "d"], ["ab", "cd"]])
def test_first_completed_match_wins_whatever_the_chunking(deltas):
    checker = StopStringChecker(["abcd", "bc"], include_stop_str_in_output=False)
    pieces, matched = run(checker, deltas)
    assert (matched, "".join(pieces)) == ("bc", "a")


def test_same_end_prefers_the_earlier_start():
    checker = StopStringChecker(["c", "abc"], include_stop_str_in_output=True)
    assert checker.feed("xxabc") == ("xxabc", "abc")
    assert checker.match == StopStringMatch(stop="abc", start=2)


def test_unicode_stop_strings():
    checker = StopStringChecker(["世界", "🎉"], include_stop_str_in_output=False)
    pieces, matched = run(checker, ["你好", "世", "界!"])
    assert (pieces, matched) == (["你好", "", ""], "世界")


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("include", [False, True])
def test_random_streams_match_the_whole_text_reference(seed, include):
    rng = random.Random(seed)
    text = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 40)))
    stops = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(0, 8)))) if len(text) > 1 else []
    deltas = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
    checker = StopStringChecker(stops, include_stop_str_in_output=include)
    fed = ""
    emitted = ""
    for delta in deltas:
        fed += delta
        piece, matched = checker.feed(delta)
        emitted += piece
        if matched is not None:
            break
        assert emitted + checker.held_back == fed
        assert not any(stop in emitted for stop in stops)
    else:
        emitted += checker.flush()
    assert (emitted, checker.match.stop if checker.match else None) == reference(text, stops, include)
