"""Checks of the sampling fields that forbid tokens (allowed_token_ids, bad_words), and bad words' tokenization.

Both are refused together with structured output: a format may allow only tokens they forbid, and a row with no
token left has nothing to sample. Together with each other, some allowed token must never be forbidden by a bad word.
"""

from __future__ import annotations

from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import sampling_pb2

MAX_BAD_WORDS = 128
MAX_BAD_WORD_CHARS = 256


def check_allowed_token_ids(p: sampling_pb2.SamplingParams, vocab_size: int) -> None:
    """InvalidRequestError naming the field unless allowed_token_ids are inside the vocabulary, at most its size,
    and not combined with structured output."""
    field = "sampling.allowed_token_ids"
    count = len(p.allowed_token_ids)
    if not count:
        return
    if count > vocab_size:
        raise InvalidRequestError(field, f"{count} ids; at most the vocabulary's {vocab_size}")
    for index, token_id in enumerate(p.allowed_token_ids):
        if not 0 <= token_id < vocab_size:
            raise InvalidRequestError(f"{field}[{index}]",
                                        f"{token_id} is outside the vocabulary [0, {vocab_size})")
    if p.HasField("structured_output"):
        raise InvalidRequestError(field, "cannot be combined with structured_output (both restrict the "
                                           "vocabulary, and what both allow could be nothing)")


def bad_word_token_ids(p: sampling_pb2.SamplingParams, tokenizer: Tokenizer) -> tuple[tuple[int, ...], ...]:
    """The token sequences bad_words forbid: each word without its leading whitespace, as written and after one
    space (an output's first word and a later one tokenize differently), without repeats. InvalidRequestError
    naming the field for too many or too long words, a blank one, structured output, or an allowed_token_ids every
    token of which a word forbids."""
    field = "sampling.bad_words"
    if not p.bad_words:
        return ()
    if len(p.bad_words) > MAX_BAD_WORDS:
        raise InvalidRequestError(field, f"{len(p.bad_words)} words; at most {MAX_BAD_WORDS}")
    if p.HasField("structured_output"):
        raise InvalidRequestError(field, "cannot be combined with structured_output (its format may force a "
                                           "forbidden token)")
    sequences: dict[tuple[int, ...], None] = {}
    for index, word in enumerate(p.bad_words):
        _check_word(word, f"{field}[{index}]")
        for text in (word.lstrip(), " " + word.lstrip()):
            ids = tuple(tokenizer.encode(text, add_special_tokens=False))
            if ids:
                sequences[ids] = None
    words = tuple(sequences)
    if p.allowed_token_ids and set(p.allowed_token_ids) <= {ids[-1] for ids in words}:
        raise InvalidRequestError(field, "forbid every token allowed_token_ids allows: nothing could be sampled")
    return words


def _check_word(word: str, field: str) -> None:
    if not word.strip():
        raise InvalidRequestError(field, "a bad word must not be empty or blank")
    if len(word) > MAX_BAD_WORD_CHARS:
        raise InvalidRequestError(field, f"{len(word)} characters; at most {MAX_BAD_WORD_CHARS}")
