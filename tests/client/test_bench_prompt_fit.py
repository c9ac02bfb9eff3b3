"""Benchmark prompts left out when they cannot fit the served model's context."""

from __future__ import annotations

import json

import pytest

from client.bench.prompt_fit import fitting_prompts, model_context_length
from scheduler_svc.tokenizer import Tokenizer


def test_a_prompt_longer_than_the_context_is_left_out_and_counted(tiny_model_dir, capsys):
    limit = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    short = "hi"
    long = "word " * limit
    assert fitting_prompts([short, long, short], str(tiny_model_dir), None, 6) == [short, short]
    assert "1 of 3 prompts left out" in capsys.readouterr().out


def test_max_tokens_and_max_model_len_count_as_the_server_counts(tiny_model_dir):
    tokens = len(Tokenizer.from_dir(tiny_model_dir).apply_chat_template([{"role": "user", "content": "hi"}]))
    assert fitting_prompts(["hi"], str(tiny_model_dir), tokens + 6, 6) == ["hi"]
    with pytest.raises(ValueError, match="no benchmark prompt fits"):
        fitting_prompts(["hi"], str(tiny_model_dir), tokens + 5, 6)


def test_the_limit_is_the_models_positions_lowered_by_the_flag(tiny_model_dir, tmp_path):
    assert model_context_length(str(tiny_model_dir), 100) == 100
    positions = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    assert model_context_length(str(tiny_model_dir), None) == positions
    assert model_context_length(str(tiny_model_dir), positions + 100) == positions  # the executor caps the flag
    assert model_context_length(str(tmp_path), None) is None
    assert model_context_length(str(tmp_path), 100) == 100
