"""Token text and bytes for logprobs: byte-level tokens give their raw bytes, even part of a character."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_byte_level, build_metaspace

from scheduler_svc.http.logprobs import TokenTexts, completion_logprobs, echo_logprobs, prompt_logprobs
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


def _position(own: tuple[int, float], *top: tuple[int, float]) -> generation_pb2.PositionLogprobs:
    position = generation_pb2.PositionLogprobs(sampled=generation_pb2.TokenLogprob(token_id=own[0], logprob=own[1]))
    for token_id, logprob in top:
        position.top.add(token_id=token_id, logprob=logprob)
    return position


def test_prompt_logprobs_rank_the_prompt_token_among_the_alternatives_sent(byte_level):
    texts = TokenTexts(byte_level)
    positions = [
        _position((5, -0.125), (5, -0.125), (6, -2.0)),  # the most likely: rank 1, listed once
        _position((7, -1.0), (6, -0.5), (8, -0.75), (7, -1.0)),  # third, beyond max_top: still its rank, 3
        _position((9, float("-inf")), (6, -0.5), (8, -0.75)),  # not sent: one more than those sent
    ]
    entries = prompt_logprobs(texts, positions, max_top=2)
    assert entries[0] is None and len(entries) == 4

    def value(token_id: int, logprob: float, rank: int) -> dict:
        return {"logprob": logprob, "rank": rank, "decoded_token": texts.get(token_id)[0]}

    assert entries[1] == {"5": value(5, -0.125, 1), "6": value(6, -2.0, 2)}
    assert entries[2] == {"7": value(7, -1.0, 3), "6": value(6, -0.5, 1), "8": value(8, -0.75, 2)}
    assert entries[3] == {"9": value(9, -9999.0, 3), "6": value(6, -0.5, 1), "8": value(8, -0.75, 2)}
    assert list(entries[2]) == ["7", "6", "8"]  # the prompt's token first, as vLLM lists it
    assert prompt_logprobs(texts, positions, max_top=0)[2] == {"7": value(7, -1.0, 3)}


def test_echo_logprobs_start_with_the_unscored_first_token(byte_level):
    texts = TokenTexts(byte_level)
    ids = byte_level.encode("hello world", add_special_tokens=False)
    positions = [_position((token, -1.0), (token, -1.0), (3, -2.0)) for token in ids[1:]]
    logprobs = echo_logprobs(texts, ids[0], positions, max_top=1)
    assert "".join(logprobs["tokens"]) == "hello world"
    assert logprobs["token_logprobs"] == [None] + [-1.0] * (len(ids) - 1)
    assert logprobs["top_logprobs"][0] is None and all(len(top) == 1 for top in logprobs["top_logprobs"][1:])
    assert logprobs["text_offset"] == [len("".join(logprobs["tokens"][:i])) for i in range(len(ids))]
