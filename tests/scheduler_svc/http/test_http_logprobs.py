"""Token text and bytes for logprobs: byte-level tokens give their raw bytes, even part of a character."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_byte_level, build_metaspace

from scheduler_svc.http.logprobs import TokenTexts, completion_logprobs
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import generation_pb2


@pytest.fixture(scope="module")
def byte_level(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("bl")))


def test_byte_level_tokens_give_their_bytes_and_join_to_the_text(byte_level):
    texts = TokenTexts(byte_level)
    ids = byte_level.encode("naïve café ü", add_special_tokens=False)
    assert b"".join(bytes(texts.get(token)[1]) for token in ids).decode() == "naïve café ü"
    single = [token for token in ids if len(texts.get(token)[1]) == 1 and texts.get(token)[1][0] >= 0x80]
    for token in single:  # half of a two-byte character: its text cannot show it, its bytes do
        assert texts.get(token)[0] == "\ufffd"


def test_byte_fallback_tokens_give_their_byte(tmp_path):
    tokenizer = Tokenizer.from_dir(build_metaspace(tmp_path))
    texts = TokenTexts(tokenizer)
    for token in tokenizer.encode("日本", add_special_tokens=False):
        if tokenizer.is_byte_fallback(token):
            assert len(texts.get(token)[1]) == 1


def test_completion_offsets_are_cumulative_token_lengths(byte_level):
    texts = TokenTexts(byte_level)
    ids = byte_level.encode("hello world", add_special_tokens=False)
    positions = [generation_pb2.PositionLogprobs(sampled=generation_pb2.TokenLogprob(token_id=t, logprob=float("-inf")))
                 for t in ids]
    logprobs = completion_logprobs(texts, positions, 7)
    assert "".join(logprobs["tokens"]) == "hello world"
    assert logprobs["text_offset"][0] == 7 and logprobs["token_logprobs"][0] == -9999.0
