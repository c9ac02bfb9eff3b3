"""Multi-LoRA serving over the OpenAI front, in process: a request's ``model`` may name a served LoRA adapter, which
its GenerateRequests carry (the executor gets it per request) and its responses and stream chunks echo; an unknown
name is a 404 listing the adapters; /v1/models lists them after the base model, vLLM-style; /tokenize and
/detokenize take their names too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from http_helpers import MAX_MODEL_LEN, MODEL, EngineHarness, FakeExecutor, events
from tiny_tokenizers import build_byte_level

from scheduler_svc.http.app import create_app
from scheduler_svc.http.conversion import chat_plan, check_model, completion_plan
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.protocol import ChatCompletionRequest, CompletionRequest
from scheduler_svc.lora_adapters import ServedAdapters
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import executor_pb2

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hello"}]
ADAPTERS = ("one", "two")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


@dataclass
class AdapterRecordingExecutor(FakeExecutor):
    """The fake executor, keeping the LoRA adapter each new request arrives with."""

    adapters: dict[str, str] = field(default_factory=dict)

    def run(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        for new in step.new_requests:
            self.adapters[new.request_id] = new.lora_adapter
        return super().run(step)


class LoraHarness(EngineHarness):
    """The HTTP app over an engine whose limits list ADAPTERS."""

    def __init__(self, tokenizer: Tokenizer, **harness: Any) -> None:
        super().__init__(tokenizer, executor=AdapterRecordingExecutor(), **harness)
        self.limits = replace(self.limits, adapters=ServedAdapters(ADAPTERS))
        self.context = replace(self.context, limits=self.limits)
        self.app = create_app(self.context)

    def adapters_seen(self) -> list[str]:
        """The adapters the executor's requests arrived with, in arrival order; then forgets them."""
        assert isinstance(self.executor, AdapterRecordingExecutor)
        seen = list(self.executor.adapters.values())
        self.executor.adapters.clear()
        return seen


def serve(tokenizer: Tokenizer, test: Callable[[httpx.AsyncClient, LoraHarness], Awaitable[None]]) -> None:
    async def main() -> None:
        async with LoraHarness(tokenizer) as served:
            transport = httpx.ASGITransport(app=served.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                await test(client, served)
                await served.wait_until_idle()

    asyncio.run(main())


def card(name: str, parent: str | None, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "stepahead", "root": name,
            "parent": parent, "max_model_len": MAX_MODEL_LEN}


def test_plans_carry_the_adapter_as_every_requests_model():
    chat = chat_plan(ChatCompletionRequest.model_validate({"model": "one", "messages": MESSAGES, "n": 2}), "m",
                     adapters=ADAPTERS)
    assert chat.model == "one" and [pb.model for pb in chat.requests] == ["one", "one"]
    completion = completion_plan(CompletionRequest(model="two", prompt=["a", "b"]), "m", ADAPTERS)
    assert completion.model == "two" and [pb.model for pb in completion.requests] == ["two", "two"]
    for base in (None, "", "m"):
        plan = completion_plan(CompletionRequest(model=base, prompt="a"), "m", ADAPTERS)
        assert plan.model == "m" and plan.requests[0].model == "m"


def test_check_model_names_the_adapters_only_when_there_are_some():
    assert [check_model(name, "m", ADAPTERS) for name in (None, "", "m", "one", "two")] == ["m", "m", "m", "one", "two"]
    with pytest.raises(ApiError) as refused:
        check_model("three", "m", ADAPTERS)
    assert refused.value.status == 404 and refused.value.error_code == "model_not_found"
    assert refused.value.message.endswith("serves 'm' and LoRA adapters ['one', 'two']")
    with pytest.raises(ApiError) as plain:
        check_model("one", "m")
    assert plain.value.message.endswith("serves 'm'")


def test_an_adapter_request_runs_with_it_and_the_response_names_it(tokenizer):
    async def test(client, served):
        response = await client.post(CHAT, json={"model": "one", "messages": MESSAGES, "max_tokens": 3, "n": 2})
        assert response.status_code == 200, response.text
        assert response.json()["model"] == "one" and served.adapters_seen() == ["one", "one"]
        response = await client.post(COMPLETIONS, json={"model": "two", "prompt": "hi", "max_tokens": 3})
        assert response.status_code == 200, response.text
        assert response.json()["model"] == "two" and served.adapters_seen() == ["two"]
        for base in ({}, {"model": MODEL}):
            response = await client.post(COMPLETIONS, json={**base, "prompt": "hi", "max_tokens": 2})
            assert response.json()["model"] == MODEL and served.adapters_seen() == [""]

    serve(tokenizer, test)


def test_every_streamed_chunk_names_the_adapter(tokenizer):
    async def test(client, served):
        for route, body in ((CHAT, {"messages": MESSAGES}), (COMPLETIONS, {"prompt": "hi"})):
            request = {**body, "model": "two", "max_tokens": 3, "stream": True,
                       "stream_options": {"include_usage": True}}
            chunks = events(await client.post(route, json=request))
            assert chunks[-1] == "[DONE]" and len(chunks) > 3
            assert {chunk["model"] for chunk in chunks[:-1]} == {"two"}, route
            assert served.adapters_seen() == ["two"]

    serve(tokenizer, test)


def test_an_unknown_model_is_404_listing_the_adapters(tokenizer):
    async def test(client, served):
        for method, path, body in (("POST", CHAT, {"model": "three", "messages": MESSAGES}),
                                   ("POST", COMPLETIONS, {"model": "three", "prompt": "hi"}),
                                   ("POST", "/tokenize", {"model": "three", "prompt": "hi"}),
                                   ("POST", "/detokenize", {"model": "three", "tokens": [5]}),
                                   ("GET", "/v1/models/three", None)):
            response = await client.request(method, path, json=body)
            assert response.status_code == 404, (path, response.text)
            error = response.json()["error"]
            assert error["code"] == "model_not_found" and error["param"] == "model"
            assert f"serves {MODEL!r} and LoRA adapters ['one', 'two']" in error["message"], path
        assert served.adapters_seen() == []

    serve(tokenizer, test)


def test_models_lists_the_base_model_then_each_adapter_with_its_parent(tokenizer):
    async def test(client, served):
        created = served.context.created
        listed = (await client.get("/v1/models")).json()
        assert listed == {"object": "list", "data": [card(MODEL, None, created), card("one", MODEL, created),
                                                     card("two", MODEL, created)]}
        for name, parent in ((MODEL, None), ("one", MODEL), ("two", MODEL)):
            response = await client.get(f"/v1/models/{name}")
            assert response.status_code == 200 and response.json() == card(name, parent, created)

    serve(tokenizer, test)


def test_tokenize_and_detokenize_accept_an_adapter_name(tokenizer):
    async def test(client, served):
        tokens = tokenizer.encode("Hello world")
        for model in ("one", MODEL):
            response = await client.post("/tokenize", json={"model": model, "prompt": "Hello world"})
            assert response.status_code == 200, response.text
            assert response.json()["tokens"] == tokens
            chat = await client.post("/tokenize", json={"model": model, "messages": MESSAGES})
            assert chat.status_code == 200 and chat.json()["tokens"] == tokenizer.apply_chat_template(MESSAGES)
            response = await client.post("/detokenize", json={"model": model, "tokens": tokens})
            assert response.status_code == 200 and response.json() == {"prompt": "Hello world"}

    serve(tokenizer, test)
