"""The reasoning parsers: which part of an output is thinking and which the answer, whole and streamed in any pieces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_svc.config import REASONING_PARSERS
from scheduler_svc.reasoning.splitters import reasoning_splitter, split_reasoning

CASES = {
    # output: (deepseek_r1's (reasoning, content), qwen3's)
    "<think>\nplan\n</think>\n\nAnswer.": (("\nplan\n", "\n\nAnswer."), ("\nplan\n", "\n\nAnswer.")),
    "plan</think>Answer.": (("plan", "Answer."), (None, "plan</think>Answer.")),
    "Answer.": (("Answer.", ""), (None, "Answer.")),
    "": (("", ""), (None, "")),
    "  \n<think>a < b</think>": (("a < b", ""), ("a < b", "")),
    "<think>cut off while thin": (("cut off while thin", ""), ("cut off while thin", "")),
    "<think></think>": (("", ""), ("", "")),
    "<thi": (("<thi", ""), (None, "<thi")),
    "x<think>y</think>z": (("x<think>y", "z"), (None, "x<think>y</think>z")),
    "<think>a</think>b</think>c": (("a", "b</think>c"), ("a", "b</think>c")),
    "<think>a</thin": (("a</thin", ""), ("a</thin", "")),
}


THINK_PARSERS = ("deepseek_r1", "qwen3")
ANALYSIS = "<|channel|>analysis<|message|>7 x 13<|end|>"
HARMONY_CASES = {
    # gpt-oss output (the template ended the prompt with <|start|>assistant): (reasoning, content)
    f"{ANALYSIS}<|start|>assistant<|channel|>final<|message|>No.": ("7 x 13", "No."),
    "<|channel|>final<|message|>Hi!": (None, "Hi!"),
    "<|channel|>analysis<|message|>cut off while thin": ("cut off while thin", ""),
    f"{ANALYSIS}<|start|>assistant<|channel|>analysis<|message|> more<|end|><|start|>assistant<|channel|>final"
    "<|message|>No.": ("7 x 13 more", "No."),
    # a tool call goes to the content in one form (the openai tool call parser's), closed where a marker ended it
    f"{ANALYSIS}<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{{}}<|call|>": (
        "7 x 13", "<|channel|>commentary to=functions.f<|message|>{}<|call|>"),
    f"{ANALYSIS}<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{{}}": (
        "7 x 13", "<|channel|>commentary to=functions.get_time<|message|>{}"),
    "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.f"
    '<|message|>{"a": 1}<|end|><|start|>assistant<|channel|>commentary to=functions.g<|message|>{}': (
        None, 'Checking.<|channel|>commentary to=functions.f<|message|>{"a": 1}<|call|>'
              "<|channel|>commentary to=functions.g<|message|>{}"),
    "<|channel|>commentary to=browser.search<|message|>{}<|end|>": (None, "{}"),  # not a function: its body
    "Plain text, no channels.": (None, "Plain text, no channels."),
    "<|channel|>analysis": (None, "<|channel|>analysis"),
    f"{ANALYSIS}<|start|>assistant<|chan": ("7 x 13", "assistant<|chan"),
    "": (None, ""),
}


@pytest.mark.parametrize("output", list(CASES))
@pytest.mark.parametrize("parser", THINK_PARSERS)
def test_whole_outputs_split_as_each_think_parser_defines(parser, output):
    assert split_reasoning(parser, output) == CASES[output][THINK_PARSERS.index(parser)]


@pytest.mark.parametrize("output", list(HARMONY_CASES))
def test_whole_gpt_oss_outputs_split_by_channel(output):
    assert split_reasoning("openai_gptoss", output) == HARMONY_CASES[output]


def streamed(parser: str, pieces: list[str]) -> tuple[str | None, str, int]:
    """The pieces fed one by one: the thinking (None if it did not think), the content, and how many pieces were
    let go with a tag's beginning still held back."""
    splitter = reasoning_splitter(parser)
    reasoning, content, holding = "", "", 0
    for piece in pieces:
        delta = splitter.feed(piece)
        reasoning, content = reasoning + delta.reasoning, content + delta.content
        holding += bool(splitter._held)
    delta = splitter.finish()
    return (reasoning + delta.reasoning if splitter.thought else None), content + delta.content, holding


TEXT = st.lists(st.sampled_from(["<think>", "</think>", "<", "</", "think", ">", "/", " ", "\n", "a", "<th", "k>",
                                 "<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>", "<|", "|>",
                                 "analysis", "final", "assistant", "<|chan"]),
                max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=TEXT, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
       parser=st.sampled_from(REASONING_PARSERS))
def test_any_streamed_pieces_join_to_the_whole_split(text, cuts, parser):
    bounds = sorted({0, len(text), *(cut % (len(text) + 1) for cut in cuts)})
    pieces = [text[start:end] for start, end in zip(bounds, bounds[1:])]
    reasoning, content, _ = streamed(parser, pieces)
    assert (reasoning, content) == split_reasoning(parser, text)


def test_a_tag_split_over_pieces_is_held_back_not_sent_as_text():
    pieces = ["<th", "ink>pl", "an</th", "ink>Ans", "wer"]
    splitter = reasoning_splitter("qwen3")
    deltas = [splitter.feed(piece) for piece in pieces]
    assert [(d.reasoning, d.content) for d in deltas] == [("", ""), ("pl", ""), ("an", ""), ("", "Ans"), ("", "wer")]
    assert streamed("qwen3", pieces)[:2] == ("plan", "Answer")


def test_a_harmony_marker_split_over_pieces_is_held_back():
    pieces = ["<|chan", "nel|>analysis<|mess", "age|>hm<|e", "nd|><|start|>assistant<|channel|>final<|message|>",
              "Yes<", "|return|>"]
    assert streamed("openai_gptoss", pieces)[:2] == ("hm", "Yes")


def test_an_unknown_parser_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="reasoning_parser: must be one of deepseek_r1, qwen3, openai_gptoss"):
        reasoning_splitter("granite")
