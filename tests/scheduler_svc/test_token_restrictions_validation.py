"""The scheduler checks allowed_token_ids and bad_words before queuing a request, tokenizes bad words (as written and
after a space), and sends their token sequences to the executor with the request."""

from __future__ import annotations

import pytest
from tiny_tokenizers import build_byte_level, build_metaspace

from scheduler_svc.scheduler_output import ScheduledNewRequest, SchedulerOutput
from scheduler_svc.step_codec import to_step_request
from scheduler_svc.token_restrictions import MAX_BAD_WORD_CHARS, MAX_BAD_WORDS
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import InvalidRequestError, ModelLimits, build_request
from stepahead_proto import generation_pb2, sampling_pb2

SO = sampling_pb2.StructuredOutput


@pytest.fixture(scope="module", params=["byte_level", "metaspace"])
def tokenizer(request, tmp_path_factory) -> Tokenizer:
    build = build_byte_level if request.param == "byte_level" else build_metaspace
    return Tokenizer.from_dir(build(tmp_path_factory.mktemp(request.param)))


@pytest.fixture(scope="module")
def limits(tokenizer) -> ModelLimits:
    return ModelLimits("tiny", 128, tokenizer.vocab_size, frozenset({2}), 16)


def request_with(**sampling) -> generation_pb2.GenerateRequest:
    return generation_pb2.GenerateRequest(text="Hello world", sampling=sampling_pb2.SamplingParams(**sampling))


def refusal(tokenizer, limits, **sampling) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        build_request(request_with(**sampling), tokenizer, limits)
    return caught.value


def test_bad_words_become_the_token_sequences_of_each_word_as_written_and_after_a_space(tokenizer, limits):
    request = build_request(request_with(bad_words=["hello", "  big cat", "hello"]), tokenizer, limits)
    expected = []
    for text in ("hello", " hello", "big cat", " big cat"):
        ids = tuple(tokenizer.encode(text, add_special_tokens=False))
        if ids not in expected:
            expected.append(ids)
    assert list(request.bad_words) == expected
    assert build_request(request_with(), tokenizer, limits).bad_words == ()


def test_the_executor_receives_the_sequences_with_the_new_request(tokenizer, limits):
    request = build_request(request_with(bad_words=["cat"]), tokenizer, limits)
    output = SchedulerOutput(step_id=0, new_requests=[ScheduledNewRequest(request, [0], 0, 2)])
    sent = to_step_request(output).new_requests[0]
    assert [tuple(words.ids) for words in sent.bad_words] == list(request.bad_words)


def test_allowed_token_ids_pass_through_unchanged(tokenizer, limits):
    request = build_request(request_with(allowed_token_ids=[5, 3, 5]), tokenizer, limits)
    assert list(request.sampling.allowed_token_ids) == [5, 3, 5]


@pytest.mark.parametrize(("sampling", "field", "reason"), [
    ({"allowed_token_ids": [1, -1]}, "sampling.allowed_token_ids[1]", "outside the vocabulary"),
    ({"allowed_token_ids": [10**6]}, "sampling.allowed_token_ids[0]", "outside the vocabulary"),
    ({"allowed_token_ids": [3], "structured_output": SO(regex="a+")}, "sampling.allowed_token_ids",
     "structured_output"),
    ({"bad_words": ["ok", " "]}, "sampling.bad_words[1]", "empty or blank"),
    ({"bad_words": [""]}, "sampling.bad_words[0]", "empty or blank"),
    ({"bad_words": ["x" * (MAX_BAD_WORD_CHARS + 1)]}, "sampling.bad_words[0]", f"at most {MAX_BAD_WORD_CHARS}"),
    ({"bad_words": ["w"] * (MAX_BAD_WORDS + 1)}, "sampling.bad_words", f"at most {MAX_BAD_WORDS}"),
    ({"bad_words": ["cat"], "structured_output": SO(regex="a+")}, "sampling.bad_words", "structured_output"),
], ids=["negative", "too-large", "with-format", "blank", "empty", "long", "many", "words-with-format"])
def test_bad_values_are_refused_naming_the_field(tokenizer, limits, sampling, field, reason):
    error = refusal(tokenizer, limits, **sampling)
    assert error.field == field and reason in error.reason


def test_too_many_allowed_ids_are_refused(tokenizer, limits):
    error = refusal(tokenizer, limits, allowed_token_ids=[0] * (limits.vocab_size + 1))
    assert error.field == "sampling.allowed_token_ids" and "at most" in error.reason


def test_bad_words_that_forbid_every_allowed_token_are_refused_and_one_left_is_enough(tokenizer, limits):
    last_tokens = [tokenizer.encode(text, add_special_tokens=False)[-1] for text in ("cat", " cat")]
    error = refusal(tokenizer, limits, bad_words=["cat"], allowed_token_ids=last_tokens)
    assert error.field == "sampling.bad_words" and "nothing could be sampled" in error.reason
    spare = next(t for t in range(limits.vocab_size) if t not in last_tokens)
    build_request(request_with(bad_words=["cat"], allowed_token_ids=[*last_tokens, spare]), tokenizer, limits)
