"""``POST /tokenize`` and ``/detokenize`` in process: vLLM's shapes, the ids the completion endpoints use,
errors naming the parameter, API keys."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from http_helpers import MAX_MODEL_LEN, MODEL, EngineHarness
from tiny_tokenizers import build_byte_level

from scheduler_svc.tokenizer import Tokenizer

MESSAGES = [{"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def serve(tokenizer: Tokenizer, test: Callable[[httpx.AsyncClient, EngineHarness], Awaitable[None]], **harness: Any):
    async def main() -> None:
        async with EngineHarness(tokenizer, metrics_on=True, **harness) as served:
            transport = httpx.ASGITransport(app=served.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                await test(client, served)

    asyncio.run(main())


def test_tokenize_counts_what_the_completion_endpoints_feed_the_model(tokenizer):
    async def test(client, served):
        response = await client.post("/tokenize", json={"model": MODEL, "prompt": "Hello world"})
        assert response.status_code == 200, response.text
        tokens = tokenizer.encode("Hello world")
        assert response.json() == {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens}
        for path, body in (("/v1/completions", {"prompt": "Hello world"}), ("/v1/chat/completions",
                                                                             {"messages": MESSAGES})):
            counted = await client.post("/tokenize", json=body)
            usage = (await client.post(path, json={**body, "max_tokens": 1})).json()["usage"]
            assert counted.json()["count"] == usage["prompt_tokens"], path
        chat_ids = (await client.post("/tokenize", json={"messages": MESSAGES, "add_generation_prompt": True})).json()
        assert chat_ids["tokens"] == tokenizer.apply_chat_template(
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
        assert (await client.post("/tokenize", json={"prompt": ""})).status_code == 400
        metrics = (await client.get("/metrics")).text
        assert 'stepahead_scheduler_http_requests_total{route="/tokenize",status="200"}' in metrics
        assert 'stepahead_scheduler_http_requests_total{route="/tokenize",status="400"} 1.0' in metrics
        assert 'requests_failed_total{code="INVALID_ARGUMENT"}' not in metrics  # no generation was refused

    serve(tokenizer, test)


def test_detokenize_round_trips(tokenizer):
    async def test(client, served):
        tokens = tokenizer.encode("Hello world, café")
        response = await client.post("/detokenize", json={"tokens": tokens})
        assert response.status_code == 200 and response.json() == {"prompt": "Hello world, café"}
        templated = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
        kept = await client.post("/detokenize", json={"tokens": templated, "skip_special_tokens": False})
        assert kept.json()["prompt"] == tokenizer.decode(templated, skip_special_tokens=False)

    serve(tokenizer, test)


@pytest.mark.parametrize("path, body, status, param", [
    ("/tokenize", {}, 400, "prompt"),
    ("/tokenize", {"prompt": "hi", "messages": [{"role": "user", "content": "hi"}]}, 400, "prompt"),
    ("/tokenize", {"prompt": ""}, 400, "prompt"),
    ("/tokenize", {"prompt": 5}, 400, "prompt"),
    ("/tokenize", {"messages": []}, 400, "messages"),
    ("/tokenize", {"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages[0].role"),
    ("/tokenize", {"prompt": "hi", "add_special_tokens": False}, 400, "add_special_tokens"),
    ("/tokenize", {"prompt": "hi", "add_generation_prompt": True}, 400, "add_generation_prompt"),
    ("/tokenize", {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": "no"}, 400,
     "add_generation_prompt"),
    ("/tokenize", {"messages": [{"role": "user", "content": "hi"}], "continue_final_message": True}, 400,
     "continue_final_message"),
    ("/tokenize", {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"tools": []}}, 400,
     "chat_template_kwargs.tools"),
    ("/tokenize", {"messages": [{"role": "user", "content": "hi"}], "add_special_tokens": True}, 400,
     "add_special_tokens"),
    ("/tokenize", {"prompt": "hi", "return_token_strs": True}, 400, "return_token_strs"),
    ("/tokenize", {"prompt": "hi", "model": "other"}, 404, "model"),
    ("/detokenize", {}, 400, "tokens"),
    ("/detokenize", {"tokens": [5, 100_000]}, 400, "tokens[1]"),
    ("/detokenize", {"tokens": [5] * (MAX_MODEL_LEN + 1)}, 400, "tokens"),
    ("/detokenize", {"tokens": ["a"]}, 400, "tokens[0]"),
    ("/detokenize", {"tokens": [5], "model": "other"}, 404, "model"),
])
def test_a_bad_body_names_its_parameter(tokenizer, path, body, status, param):
    async def test(client, served):
        response = await client.post(path, json=body)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["param"] == param, error

    serve(tokenizer, test)


def test_both_need_the_api_key_when_one_is_set(tokenizer):
    async def test(client, served):
        for path, body in (("/tokenize", {"prompt": "hi"}), ("/detokenize", {"tokens": [5]})):
            refused = await client.post(path, json=body)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            allowed = await client.post(path, json=body, headers={"Authorization": "Bearer key-1"})
            assert allowed.status_code == 200, allowed.text

    serve(tokenizer, test, api_keys=("key-1",))
