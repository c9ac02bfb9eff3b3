"""OpenAI's predicted outputs over HTTP: ``prediction`` on both endpoints becomes every choice's
GenerateRequest.prediction (text parts joined), a prediction of another shape is a 400 naming its part, and usage
gains ``completion_tokens_details`` (accepted and rejected prediction tokens, summed over the choices) only when the
request had a prediction: in the whole response, the stream's usage chunk, asked or forced."""

from __future__ import annotations

import pytest
from http_helpers import FakeExecutor, events, serve
from tiny_tokenizers import build_byte_level

from scheduler_svc.http.conversion import chat_plan, completion_plan
from scheduler_svc.http.engine_run import EngineRun
from scheduler_svc.http.protocol import ChatCompletionRequest, CompletionRequest
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import generation_pb2

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hello"}]
BODIES = {CHAT: {"messages": MESSAGES}, COMPLETIONS: {"prompt": "hello"}}
PREDICTION = {"type": "content", "content": "def f():\n    return 1\n"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def test_a_prediction_reaches_every_choices_request_on_both_endpoints():
    chat = chat_plan(ChatCompletionRequest.model_validate({"messages": MESSAGES, "n": 2, "prediction": PREDICTION}),
                     "m")
    assert [pb.prediction for pb in chat.requests] == [PREDICTION["content"]] * 2
    parts = {"type": "content", "content": [{"type": "text", "text": "def f():"}, {"type": "text", "text": " pass"}]}
    completion = completion_plan(CompletionRequest.model_validate({"prompt": ["a", "b"], "prediction": parts}), "m")
    assert [pb.prediction for pb in completion.requests] == ["def f(): pass"] * 2


def test_a_null_or_empty_prediction_sets_none():
    for prediction in (None, {"type": "content", "content": ""}, {"type": "content", "content": []}):
        chat = chat_plan(ChatCompletionRequest.model_validate({"messages": MESSAGES, "prediction": prediction}), "m")
        completion = completion_plan(CompletionRequest.model_validate({"prompt": "a", "prediction": prediction}), "m")
        for pb in (*chat.requests, *completion.requests):
            assert not pb.HasField("prediction"), prediction


BAD = [
    ({"type": "url", "content": "x"}, "prediction.type"),
    ({"content": "x"}, "prediction.type"),
    ({"type": "content"}, "prediction.content"),
    ({"type": "content", "content": 5}, "prediction.content"),
    ({"type": "content", "content": {"text": "x"}}, "prediction.content"),
    ("def f(): pass", "prediction"),
    ({"type": "content", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}]},
     "prediction.content[1]"),
    ({"type": "content", "content": [{"type": "text"}]}, "prediction.content[0].text"),
    # a malformed part: named as a message's content is (pydantic's first union member is the string)
    ({"type": "content", "content": [{"text": "a"}]}, "prediction.content"),
    ({"type": "content", "content": [{"type": "text", "text": 5}]}, "prediction.content"),
    ({"type": "content", "content": "x", "weight": 2}, "prediction.weight"),
]


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
def test_a_prediction_of_another_shape_is_a_400_naming_its_part(tokenizer, route):
    async def test(client, served):
        for prediction, param in BAD:
            response = await client.post(route, json={**BODIES[route], "max_tokens": 2, "prediction": prediction})
            assert response.status_code == 400, (prediction, response.text)
            error = response.json()["error"]
            assert error["param"] == param and error["message"].startswith(f"{param}: "), (prediction, error)
        still = await client.post(route, json={**BODIES[route], "max_tokens": 2, "prediction": PREDICTION})
        assert still.status_code == 200, still.text

    serve(tokenizer, test)


def test_a_predicted_request_is_served_with_the_same_output_and_prediction_usage(tokenizer):
    async def test(client, served):
        for route, body in BODIES.items():
            plain = await client.post(route, json={**body, "max_tokens": 4})
            predicted = await client.post(route, json={**body, "max_tokens": 4, "prediction": PREDICTION})
            assert predicted.status_code == 200, predicted.text
            assert predicted.json()["choices"] == plain.json()["choices"]
            usage, plain_usage = predicted.json()["usage"], plain.json()["usage"]
            details = usage.pop("completion_tokens_details")
            assert usage == plain_usage and "completion_tokens_details" not in plain_usage
            assert set(details) == {"accepted_prediction_tokens", "rejected_prediction_tokens"}
            assert all(isinstance(count, int) and count >= 0 for count in details.values()), details

    serve(tokenizer, test)


def _filling_usage(monkeypatch):
    """Make the engine's final messages report prediction counts (choice i: 3 + i accepted, 2 rejected), as the
    scheduler does for a request with a prediction; the fake executor drafts nothing."""
    original = EngineRun.next

    async def next_with_counts(self):
        item = await original(self)
        if item is not None and item[1].finish_reason != generation_pb2.FINISH_REASON_UNSPECIFIED:
            index, message = item
            message.usage.accepted_prediction_tokens = 3 + index
            message.usage.rejected_prediction_tokens = 2
        return item

    monkeypatch.setattr(EngineRun, "next", next_with_counts)


DETAILS = {"accepted_prediction_tokens": 3 + 4, "rejected_prediction_tokens": 2 + 2}
"""What two choices of _filling_usage sum to."""


def test_usage_sums_the_prediction_counts_over_the_choices_only_with_a_prediction(tokenizer, monkeypatch):
    _filling_usage(monkeypatch)

    async def test(client, served):
        for route, body in BODIES.items():
            whole = (await client.post(route, json={**body, "max_tokens": 3, "n": 2, "prediction": PREDICTION})).json()
            assert whole["usage"]["completion_tokens_details"] == DETAILS
            assert whole["usage"]["completion_tokens"] == 6 and whole["usage"]["prompt_tokens_details"]
            plain = (await client.post(route, json={**body, "max_tokens": 3, "n": 2})).json()
            assert "completion_tokens_details" not in plain["usage"]

    serve(tokenizer, test, executor=FakeExecutor())


@pytest.mark.parametrize("forced", [False, True], ids=["asked", "forced"])
def test_the_streams_usage_chunk_carries_the_prediction_counts(tokenizer, monkeypatch, forced):
    _filling_usage(monkeypatch)
    asked = {} if forced else {"stream_options": {"include_usage": True}}

    async def test(client, served):
        for route, body in BODIES.items():
            fields = {**body, "max_tokens": 3, "n": 2, "stream": True, **asked}
            chunks = events(await client.post(route, json={**fields, "prediction": PREDICTION}))
            assert chunks[-1] == "[DONE]" and chunks[-2]["choices"] == []
            assert chunks[-2]["usage"]["completion_tokens_details"] == DETAILS
            assert all(chunk["usage"] is None for chunk in chunks[:-2])
            plain = events(await client.post(route, json=fields))
            assert "completion_tokens_details" not in plain[-2]["usage"]
            if not forced:  # without include_usage, no usage at all, prediction or not
                unasked = {key: value for key, value in fields.items() if key != "stream_options"}
                chunks = events(await client.post(route, json={**unasked, "prediction": PREDICTION}))
                assert all("usage" not in chunk for chunk in chunks[:-1])

    serve(tokenizer, test, force_include_usage=forced)


def test_continuous_usage_chunks_stay_vllms_and_the_final_one_has_the_counts(tokenizer, monkeypatch):
    _filling_usage(monkeypatch)

    async def test(client, served):
        options = {"include_usage": True, "continuous_usage_stats": True}
        chunks = events(await client.post(CHAT, json={**BODIES[CHAT], "max_tokens": 3, "n": 2, "stream": True,
                                                      "stream_options": options, "prediction": PREDICTION}))
        assert chunks[-2]["usage"]["completion_tokens_details"] == DETAILS
        assert all(set(chunk["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
                   for chunk in chunks[:-2])

    serve(tokenizer, test)
