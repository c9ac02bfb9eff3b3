"""OpenAI bodies -> GenerateRequests: names, defaults, seeds of n samples, and validation errors renamed."""

from __future__ import annotations

import grpc
import pytest
from pydantic import ValidationError

from scheduler_svc.http.conversion import api_error, chat_plan, completion_plan
from scheduler_svc.http.errors import ApiError, from_validation_error, location_name
from scheduler_svc.http.protocol import ChatCompletionRequest, CompletionRequest
from scheduler_svc.validation import InvalidRequestError

MESSAGES = [{"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}]


def chat(**fields):
    return chat_plan(ChatCompletionRequest.model_validate({"messages": MESSAGES, **fields}), "m")


def test_chat_fields_map_onto_the_proto():
    plan = chat(model="m", max_tokens=5, max_completion_tokens=7, temperature=0.0, top_p=0.5, top_k=0, min_p=0.1,
                presence_penalty=0.5, frequency_penalty=-0.5, repetition_penalty=1.1, stop="END", seed=3,
                logprobs=True, top_logprobs=4, ignore_eos=True, min_tokens=1, skip_special_tokens=False,
                logit_bias={"12": -100, "7": 2.5})
    (pb,) = plan.requests
    assert [(m.role, m.content) for m in pb.chat.messages] == [("system", "be brief"), ("user", "hi there")]
    assert pb.stopping.max_tokens == 7 and plan.max_tokens_param == "max_completion_tokens"
    assert list(pb.stopping.stop) == ["END"] and pb.stopping.ignore_eos and pb.stopping.min_tokens == 1
    s = pb.sampling
    assert (s.temperature, s.top_p, s.top_k, s.seed, s.logprobs) == (0.0, 0.5, -1, 3, 4)
    assert s.repetition_penalty == pytest.approx(1.1) and s.min_p == pytest.approx(0.1)
    assert dict(s.logit_bias) == {12: -100.0, 7: 2.5}
    assert pb.HasField("skip_special_tokens") and not pb.skip_special_tokens
    assert plan.logprobs == 4 and plan.endpoint == "chat" and plan.model == "m"


def test_unset_fields_stay_unset():
    (pb,) = chat().requests
    for name in ("temperature", "top_p", "top_k", "seed", "logprobs", "repetition_penalty"):
        assert not pb.sampling.HasField(name), name
    assert not pb.stopping.HasField("max_tokens") and not pb.HasField("skip_special_tokens")
    assert chat(logprobs=True).requests[0].sampling.logprobs == 0


def test_n_samples_of_each_prompt_get_consecutive_seeds_wrapping_at_64_bits():
    plan = completion_plan(CompletionRequest(prompt=["a", "b"], n=3, seed=2**64 - 2), "m")
    assert [pb.sampling.seed for pb in plan.requests] == [2**64 - 2, 2**64 - 1, 0] * 2
    assert plan.prompt_index == [0, 0, 0, 1, 1, 1] and [pb.text for pb in plan.requests] == ["a"] * 3 + ["b"] * 3
    negative = completion_plan(CompletionRequest(prompt="a", n=2, seed=-1), "m")
    assert [pb.sampling.seed for pb in negative.requests] == [2**64 - 1, 0]


def test_token_prompts():
    plan = completion_plan(CompletionRequest(prompt=[[1, 2], [3]]), "m")
    assert [list(pb.token_ids.ids) for pb in plan.requests] == [[1, 2], [3]]


@pytest.mark.parametrize("field, endpoint, param", [
    ("sampling.temperature", "chat", "temperature"),
    ("sampling.logprobs", "chat", "top_logprobs"),
    ("sampling.logprobs", "completion", "logprobs"),
    ("sampling.logit_bias[7]", "chat", "logit_bias"),
    ("sampling.logit_bias", "completion", "logit_bias"),
    ("stopping.max_tokens", "chat", "max_completion_tokens"),
    ("stopping.stop[2]", "chat", "stop"),
    ("stopping.stop_token_ids[1]", "completion", "stop_token_ids[1]"),
    ("chat.messages[3].role", "chat", "messages[3].role"),
    ("chat", "chat", "messages"),
    ("prompt", "chat", "messages"),
    ("prompt", "completion", "prompt"),
    ("token_ids.ids[0]", "completion", "prompt"),
    ("text", "completion", "prompt"),
    ("model", "completion", "model"),
])
def test_validation_errors_name_the_openai_parameter(field, endpoint, param):
    plan = chat(max_completion_tokens=3) if endpoint == "chat" else completion_plan(CompletionRequest(prompt="a"), "m")
    error = api_error(InvalidRequestError(field, "is wrong"), plan)
    assert (error.status, error.param, error.message) == (400, param, f"{param}: is wrong")


def test_unknown_model_is_404_model_not_found():
    with pytest.raises(ApiError) as caught:
        chat(model="other")
    assert caught.value.status == 404 and caught.value.error_code == "model_not_found"


def test_pydantic_locations_become_parameter_paths():
    assert location_name(("messages", 0, "content", "list[TextPart]", 1, "type")) == "messages[0].content[1].type"
    assert location_name(("prompt", "list[int]", 3)) == "prompt[3]"
    assert location_name(("stop", "str")) == "stop"
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate({"messages": [{"role": 5}]})
    error = from_validation_error(caught.value)
    assert error.param == "messages[0].role" and error.status == 400


@pytest.mark.parametrize("code, status", [
    (grpc.StatusCode.INVALID_ARGUMENT, 400), (grpc.StatusCode.UNAUTHENTICATED, 401), (grpc.StatusCode.NOT_FOUND, 404),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, 429), (grpc.StatusCode.UNAVAILABLE, 503), (grpc.StatusCode.INTERNAL, 500),
])
def test_grpc_codes_map_to_http_statuses_and_openai_types(code, status):
    error = ApiError(code, "x")
    assert error.status == status
    body = error.body()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    expected = "server_error" if status >= 500 else "rate_limit_error" if status == 429 else "invalid_request_error"
    assert body["type"] == expected


def test_each_prompt_is_tokenized_once_whatever_n(tmp_path):
    from tiny_tokenizers import build_byte_level

    from scheduler_svc.http.conversion import build_engine_requests
    from scheduler_svc.tokenizer import Tokenizer
    from scheduler_svc.validation import ModelLimits

    tokenizer = Tokenizer.from_dir(build_byte_level(tmp_path))
    encoded: list[str] = []
    encode = tokenizer.encode
    tokenizer.encode = lambda text, add_special_tokens=True: encoded.append(text) or encode(text, add_special_tokens)
    limits = ModelLimits("m", 256, tokenizer.vocab_size, frozenset({2}), 16)
    plan = completion_plan(CompletionRequest(prompt=["hello world", "the lazy dog"], n=4, seed=1), "m")
    requests = build_engine_requests(plan, tokenizer, limits)
    assert encoded == ["hello world", "the lazy dog"]
    assert [r.prompt_token_ids for r in requests] == [encode("hello world")] * 4 + [encode("the lazy dog")] * 4
    assert len({id(r.prompt_token_ids) for r in requests}) == 8  # each request owns its list
    assert [r.sampling.seed for r in requests] == [1, 2, 3, 4] * 2
