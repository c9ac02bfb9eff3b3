"""X-Request-Id: a client's header names its request (the response's id, each choice's engine request, the header
sent back), a random id otherwise; a bad header is a 400 and one naming a running request a 409, both naming it."""

from __future__ import annotations

import re

import pytest
from http_helpers import FakeExecutor, events, serve
from tiny_tokenizers import build_byte_level

from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import build_request
from stepahead_proto import generation_pb2

MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def test_without_the_header_the_id_is_random_and_sent_back(tokenizer):
    async def test(client, served):
        first = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3, "n": 2})
        second = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3})
        base = first.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", base) and base != second.headers["x-request-id"]
        assert first.json()["id"] == f"chatcmpl-{base}"
        assert {f"chatcmpl-{base}-0", f"chatcmpl-{base}-1"} <= set(served.executor.prompts)

    serve(tokenizer, test, executor=FakeExecutor(eos_after=5))


@pytest.mark.parametrize("route, body, response_id", [
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 3}, "chatcmpl-client-42"),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 3}, "cmpl-client-42"),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 3}, "resp_client-42"),
])
def test_the_client_s_header_names_the_response_its_requests_and_comes_back(tokenizer, route, body, response_id):
    async def test(client, served):
        headers = {"X-Request-Id": "client-42"}
        whole = await client.post(route, json=body, headers=headers)
        assert whole.status_code == 200, whole.text
        assert whole.headers["x-request-id"] == "client-42" and whole.json()["id"] == response_id
        assert f"{response_id}-0" in served.executor.prompts
        streamed = await client.post(route, json={**body, "stream": True}, headers=headers)
        assert streamed.headers["x-request-id"] == "client-42"
        if route == "/v1/responses":
            assert f'"id":"{response_id}"' in streamed.text
        else:
            assert all(chunk["id"] == response_id for chunk in events(streamed)[:-1])

    serve(tokenizer, test, executor=FakeExecutor(eos_after=5))


@pytest.mark.parametrize("value", [b"has space", b"x" * 201, "é".encode(), b""])
def test_a_bad_header_is_a_400_naming_it(tokenizer, value):
    async def test(client, served):
        response = await client.post("/v1/chat/completions", json={"messages": MESSAGES},
                                     headers={"X-Request-Id": value})
        assert response.status_code == 400 and response.json()["error"]["param"] == "X-Request-Id"

    serve(tokenizer, test)


def test_a_header_naming_a_running_request_is_a_409_naming_it(tokenizer):
    async def test(client, served):
        pb = generation_pb2.GenerateRequest(request_id="chatcmpl-busy-0", text="Hi")
        pb.stopping.max_tokens = 200
        pb.stopping.ignore_eos = True
        served.engine.add_request(build_request(pb, tokenizer, served.limits))
        response = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2},
                                     headers={"X-Request-Id": "busy"})
        assert response.status_code == 409 and response.json()["error"]["param"] == "X-Request-Id"
        assert response.headers["x-request-id"] == "busy"
        served.engine.abort("chatcmpl-busy-0")

    serve(tokenizer, test, executor=FakeExecutor(step_delay_s=0.01))
