"""The scheduler checks a request's structured output format before queuing it: every malformed or uncompilable
format is an InvalidRequestError naming the part that is wrong; good formats reach the executor unchanged."""

from __future__ import annotations

import json

import pytest
from tiny_tokenizers import build_byte_level, build_metaspace

from scheduler_svc.prompt_work import INLINE_PROMPT_CHARS, prompt_chars
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import InvalidRequestError, ModelLimits, build_request
from stepahead_common.structured_output import MAX_CHOICES, MAX_FORMAT_CHARS
from stepahead_proto import generation_pb2, sampling_pb2

SO = sampling_pb2.StructuredOutput
CHOICES = sampling_pb2.ChoiceList


@pytest.fixture(scope="module", params=["byte_level", "metaspace"])
def tokenizer(request, tmp_path_factory) -> Tokenizer:
    build = build_byte_level if request.param == "byte_level" else build_metaspace
    return Tokenizer.from_dir(build(tmp_path_factory.mktemp(request.param)))


@pytest.fixture(scope="module")
def limits(tokenizer) -> ModelLimits:
    return ModelLimits("tiny", 128, tokenizer.vocab_size, frozenset({2}), 16)


def request_with(format_: sampling_pb2.StructuredOutput) -> generation_pb2.GenerateRequest:
    return generation_pb2.GenerateRequest(text="Hello world",
                                          sampling=sampling_pb2.SamplingParams(structured_output=format_))


def _nested(depth: int) -> dict:
    schema: dict = {}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


GOOD = [
    SO(json_object=True),
    SO(json_schema=json.dumps({"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}}}})),
    SO(json_schema="true"),
    SO(regex=r"\d{3}-[a-z]+"),
    SO(grammar='start: "yes" | "no" | NUMBER\n%import common.NUMBER'),
    SO(grammar='root ::= "a" | "b"'),
    SO(choice=CHOICES(choices=["yes", "no", 'with "quotes" and \\ backslash'])),
]


@pytest.mark.parametrize("format_", GOOD, ids=[f.WhichOneof("kind") + str(i) for i, f in enumerate(GOOD)])
def test_good_formats_pass_to_the_request_unchanged(tokenizer, limits, format_):
    request = build_request(request_with(format_), tokenizer, limits)
    assert request.sampling.structured_output == format_


BAD = [
    (SO(), "sampling.structured_output", "set one of"),
    (SO(json_object=False), "sampling.structured_output.json_object", "must be true"),
    (SO(json_schema=""), "sampling.structured_output.json_schema", "must not be empty"),
    (SO(json_schema="{not json"), "sampling.structured_output.json_schema", "is not JSON"),
    (SO(json_schema="[1, 2]"), "sampling.structured_output.json_schema", "an object or a boolean"),
    (SO(json_schema="false"), "sampling.structured_output.json_schema", "accepts no value"),
    (SO(json_schema='{"type": "objec"}'), "sampling.structured_output.json_schema", "objec"),
    (SO(json_schema='{"type": "string", "format": "no-such-format"}'), "sampling.structured_output.json_schema",
     "no-such-format"),
    (SO(json_schema=json.dumps({"description": "x" * MAX_FORMAT_CHARS})), "sampling.structured_output.json_schema",
     f"at most {MAX_FORMAT_CHARS}"),
    (SO(json_schema="[" * 5000), "sampling.structured_output.json_schema", "nested too deeply"),
    (SO(json_schema=json.dumps(_nested(300))), "sampling.structured_output.json_schema", "recursion limit"),
    (SO(regex="[a-"), "sampling.structured_output.regex", "unclosed character class"),
    (SO(regex="   "), "sampling.structured_output.regex", "must not be empty"),
    (SO(grammar="start: undefined_rule"), "sampling.structured_output.grammar", "undefined_rule"),
    (SO(choice=CHOICES()), "sampling.structured_output.choice.choices", "at least one"),
    (SO(choice=CHOICES(choices=["a", ""])), "sampling.structured_output.choice.choices[1]", "must not be empty"),
    (SO(choice=CHOICES(choices=[str(i) for i in range(MAX_CHOICES + 1)])), "sampling.structured_output.choice.choices",
     f"at most {MAX_CHOICES}"),
]


@pytest.mark.parametrize("format_, field, words", BAD, ids=[f"{field}-{i}" for i, (_, field, _) in enumerate(BAD)])
def test_each_bad_format_is_refused_naming_its_field(tokenizer, limits, format_, field, words):
    with pytest.raises(InvalidRequestError) as caught:
        build_request(request_with(format_), tokenizer, limits)
    assert caught.value.field == field and words in caught.value.reason
    assert not caught.value.reason.startswith("sampling.")


def test_a_server_whose_executor_cannot_apply_formats_refuses_them(tokenizer, limits):
    without = ModelLimits("tiny", 128, tokenizer.vocab_size, frozenset({2}), 16, structured_output=False)
    with pytest.raises(InvalidRequestError, match="cannot apply structured output") as caught:
        build_request(request_with(SO(json_object=True)), tokenizer, without)
    assert caught.value.field == "sampling.structured_output"
    assert build_request(generation_pb2.GenerateRequest(text="hi"), tokenizer, without).prompt_token_ids


def test_a_format_is_checked_off_the_event_loop():
    plain = generation_pb2.GenerateRequest(text="Hello")
    assert prompt_chars(plain) == 5
    assert prompt_chars(request_with(SO(regex="a+"))) > INLINE_PROMPT_CHARS
    assert prompt_chars(generation_pb2.TokenizeRequest(text="Hello")) == 5
