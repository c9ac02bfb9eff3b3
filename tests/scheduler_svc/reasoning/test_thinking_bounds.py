"""Each reasoning parser's thinking markers as the model's token ids, for a format that waits for the thinking; none
where the tokenizer spells a marker out of pieces."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_thinking

from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds, thinking_bounds
from scheduler_svc.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def marked(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("marked"), markers=True))


@pytest.fixture(scope="module")
def unmarked(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("unmarked")))


def single(tokenizer: Tokenizer, marker: str) -> int:
    ids = tokenizer.encode(marker, add_special_tokens=False)
    assert len(ids) == 1
    return ids[0]


def test_the_think_parsers_end_at_the_closing_tag_and_qwen3_may_open_one(marked):
    end, start = single(marked, "</think>"), single(marked, "<think>")
    assert thinking_bounds("deepseek_r1", marked) == ThinkingBounds((end,))
    assert thinking_bounds("qwen3", marked) == ThinkingBounds((end,), (start,))


def test_gpt_oss_answers_after_the_final_channels_header(marked):
    header = marked.encode("<|channel|>final", add_special_tokens=False)
    bounds = ThinkingBounds(tuple(header), header_end_token_id=single(marked, "<|message|>"))
    assert len(header) > 1 and header[0] == single(marked, "<|channel|>")
    assert thinking_bounds("openai_gptoss", marked) == bounds


@pytest.mark.parametrize("parser", ["deepseek_r1", "qwen3", "openai_gptoss"])
def test_markers_spelled_out_of_pieces_give_no_bounds(unmarked, parser):
    assert thinking_bounds(parser, unmarked) is None
