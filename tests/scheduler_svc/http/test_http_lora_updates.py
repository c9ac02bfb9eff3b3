"""vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter over the OpenAI front, in process: a real LoraUpdates over
the engine, whose fake executor records the adapters it loads and each new request's adapter. A loaded adapter is
listed by /v1/models and runs as a request's model until unloaded; refusals have OpenAI's error shape naming the
field; without --allow-runtime-lora-updating both routes are 404 saying so; both need the API key."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import grpc
import httpx
import pytest
from http_helpers import MODEL, EngineHarness, FakeExecutor
from tiny_tokenizers import build_byte_level

from scheduler_svc.http.app import create_app
from scheduler_svc.lora_adapters import ServedAdapters
from scheduler_svc.lora_updates import LoraUpdates
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import executor_pb2

LOAD = "/v1/load_lora_adapter"
UNLOAD = "/v1/unload_lora_adapter"
COMPLETIONS = "/v1/completions"
EXECUTOR_NAME = "executor-0"
MISSING = "/no/such/adapter"
"""A path the fake executor refuses, as the real one refuses a directory without adapter_config.json."""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


@dataclass
class UpdatableExecutor(FakeExecutor):
    """The fake executor with LoadLoraAdapter/UnloadLoraAdapter, keeping the adapters loaded and the adapter each new
    request arrives with."""

    loaded: dict[str, str] = field(default_factory=dict)
    arrived_with: list[str] = field(default_factory=list)

    async def LoadLoraAdapter(self, request: executor_pb2.LoraAdapterRequest, timeout: float) -> None:
        if request.path == MISSING:
            raise grpc.aio.AioRpcError(grpc.StatusCode.INVALID_ARGUMENT, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       details=f"no adapter_config.json in {request.path}")
        self.loaded[request.name] = request.path

    async def UnloadLoraAdapter(self, request: executor_pb2.LoraAdapterRequest, timeout: float) -> None:
        self.loaded.pop(request.name, None)

    def run(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        self.arrived_with.extend(new.lora_adapter for new in step.new_requests)
        return super().run(step)


class UpdatesHarness(EngineHarness):
    """The HTTP app over an engine serving no adapter at first and ``max_loras`` slots. ``updates``: "on" (the
    scheduler runs with --allow-runtime-lora-updating), "none" (without: no LoraUpdates) or "refusing" (a LoraUpdates
    that refuses every change)."""

    def __init__(self, tokenizer: Tokenizer, updates: str = "on", max_loras: int = 2, **harness: Any) -> None:
        super().__init__(tokenizer, executor=UpdatableExecutor(**harness.pop("executor_options", {})), **harness)
        adapters = ServedAdapters((), max_loras)
        self.engine.name = EXECUTOR_NAME
        self.engine.adapters = adapters
        self.limits = replace(self.limits, adapters=adapters)
        self.updates = (None if updates == "none"
                        else LoraUpdates([self.engine], adapters, MODEL, allowed=updates == "on"))
        self.context = replace(self.context, limits=self.limits, lora_updates=self.updates)
        self.app = create_app(self.context)

    @property
    def fake(self) -> UpdatableExecutor:
        assert isinstance(self.executor, UpdatableExecutor)
        return self.executor


def serve(tokenizer: Tokenizer, test: Callable[[httpx.AsyncClient, UpdatesHarness], Awaitable[None]],
          **harness: Any) -> None:
    async def main() -> None:
        served = UpdatesHarness(tokenizer, **harness)
        async with served:
            transport = httpx.ASGITransport(app=served.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                await test(client, served)
                await served.wait_until_idle()

    asyncio.run(main())


async def listed(client: httpx.AsyncClient, **headers: str) -> list[str]:
    response = await client.get("/v1/models", headers=headers)
    assert response.status_code == 200, response.text
    return [card["id"] for card in response.json()["data"]]


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_a_loaded_adapter_is_listed_and_served_until_unloaded(tokenizer):
    async def test(client, served):
        response = await client.post(LOAD, json={"lora_name": "sql", "lora_path": "/adapters/sql"})
        assert response.status_code == 200, response.text
        assert response.text == "Success: LoRA adapter 'sql' added successfully."
        assert response.headers["content-type"].startswith("text/plain")
        assert served.fake.loaded == {"sql": "/adapters/sql"}
        assert await listed(client) == [MODEL, "sql"]
        card = (await client.get("/v1/models/sql")).json()
        assert card["parent"] == MODEL and card["root"] == "sql"

        response = await client.post(COMPLETIONS, json={"model": "sql", "prompt": "hi", "max_tokens": 3})
        assert response.status_code == 200, response.text
        assert response.json()["model"] == "sql" and served.fake.arrived_with == ["sql"]

        response = await client.post(UNLOAD, json={"lora_name": "sql"})
        assert response.status_code == 200, response.text
        assert response.text == "Success: LoRA adapter 'sql' removed successfully."
        assert served.fake.loaded == {} and await listed(client) == [MODEL]
        response = await client.post(COMPLETIONS, json={"model": "sql", "prompt": "hi", "max_tokens": 3})
        assert error_of(response, 404)["code"] == "model_not_found"
        assert served.fake.arrived_with == ["sql"]

        # loaded again (the same name from other files) it is served again
        response = await client.post(LOAD, json={"lora_name": "sql", "lora_path": "/adapters/sql-v2"})
        assert response.status_code == 200, response.text
        response = await client.post(COMPLETIONS, json={"model": "sql", "prompt": "hi", "max_tokens": 3})
        assert response.status_code == 200 and served.fake.arrived_with == ["sql", "sql"]

    serve(tokenizer, test)


def test_refused_loads_name_the_field_and_change_nothing(tokenizer):
    async def test(client, served):
        assert (await client.post(LOAD, json={"lora_name": "a", "lora_path": "/adapters/a"})).status_code == 200
        for body, status, param, words in (
            ({"lora_name": "a", "lora_path": "/adapters/other"}, 400, "lora_name", "already served"),
            ({"lora_name": MODEL, "lora_path": "/adapters/b"}, 400, "lora_name", "already served"),
            ({"lora_name": "", "lora_path": "/adapters/b"}, 400, "lora_name", "non-empty name"),
            ({"lora_name": "b c", "lora_path": "/adapters/b"}, 400, "lora_name", "without whitespace"),
            ({"lora_name": "b", "lora_path": " "}, 400, "lora_path", "must be set"),
            ({"lora_name": "b", "lora_path": MISSING}, 400, "lora_path", f"executor {EXECUTOR_NAME}: no adapter_"),
        ):
            error = error_of(await client.post(LOAD, json=body), status)
            assert error["param"] == param and error["type"] == "invalid_request_error", body
            assert error["message"].startswith(f"{param}: ") and words in error["message"], error
        assert served.fake.loaded == {"a": "/adapters/a"} and await listed(client) == [MODEL, "a"]

        assert (await client.post(LOAD, json={"lora_name": "b", "lora_path": "/adapters/b"})).status_code == 200
        error = error_of(await client.post(LOAD, json={"lora_name": "c", "lora_path": "/adapters/c"}), 429)
        assert error["param"] == "lora_name" and "2 adapter slots, all in use" in error["message"]
        assert await listed(client) == [MODEL, "a", "b"]

    serve(tokenizer, test)


def test_unloading_an_adapter_not_served_is_404(tokenizer):
    async def test(client, served):
        for name in ("nope", MODEL):
            error = error_of(await client.post(UNLOAD, json={"lora_name": name}), 404)
            assert error["param"] == "lora_name" and f"{name!r} is not served" in error["message"]

    serve(tokenizer, test)


def test_an_adapter_in_use_is_not_unloaded(tokenizer):
    async def test(client, served):
        assert (await client.post(LOAD, json={"lora_name": "sql", "lora_path": "/adapters/sql"})).status_code == 200
        running = asyncio.create_task(client.post(COMPLETIONS, json={"model": "sql", "prompt": "hi", "max_tokens": 8}))
        while not served.engine.requests_using_adapter("sql"):
            await asyncio.sleep(0.005)
        error = error_of(await client.post(UNLOAD, json={"lora_name": "sql"}), 400)
        assert error["param"] == "lora_name" and "1 unfinished requests use 'sql'" in error["message"]
        assert served.fake.loaded == {"sql": "/adapters/sql"} and await listed(client) == [MODEL, "sql"]
        response = await running
        assert response.status_code == 200 and response.json()["model"] == "sql"
        assert (await client.post(UNLOAD, json={"lora_name": "sql"})).status_code == 200

    serve(tokenizer, test, executor_options={"step_delay_s": 0.02})


@pytest.mark.parametrize("updates", ["none", "refusing"])
def test_without_runtime_updating_both_routes_are_404_saying_how_to_turn_them_on(tokenizer, updates):
    async def test(client, served):
        for path, body in ((LOAD, {"lora_name": "sql", "lora_path": "/adapters/sql"}), (UNLOAD, {"lora_name": "sql"})):
            error = error_of(await client.post(path, json=body), 404)
            assert "--allow-runtime-lora-updating" in error["message"] and error["param"] is None
        assert served.fake.loaded == {} and await listed(client) == [MODEL]

    serve(tokenizer, test, updates=updates)


def test_both_routes_need_the_api_key(tokenizer):
    async def test(client, served):
        key = {"authorization": "Bearer secret"}
        for path, body, before, after in ((LOAD, {"lora_name": "sql", "lora_path": "/adapters/sql"}, [], ["sql"]),
                                          (UNLOAD, {"lora_name": "sql"}, ["sql"], [])):
            for headers in ({}, {"authorization": "Bearer wrong"}):
                response = await client.post(path, json=body, headers=headers)
                assert error_of(response, 401)["code"] == "invalid_api_key"
                assert response.headers["www-authenticate"] == "Bearer"
            assert list(served.fake.loaded) == before and await listed(client, **key) == [MODEL, *before]
            assert (await client.post(path, json=body, headers=key)).status_code == 200
            assert list(served.fake.loaded) == after and await listed(client, **key) == [MODEL, *after]

    serve(tokenizer, test, api_keys=("secret",))


def test_a_bad_body_is_400_naming_the_field(tokenizer):
    async def test(client, served):
        for path, body, param, words in (
            (LOAD, {"lora_name": "sql"}, "lora_path", "is required"),
            (LOAD, {"lora_path": "/adapters/sql"}, "lora_name", "is required"),
            (LOAD, {"lora_name": 5, "lora_path": "/adapters/sql"}, "lora_name", "string"),
            (LOAD, {"lora_name": "sql", "lora_path": "/adapters/sql", "load_inplace": True}, "load_inplace",
             "unrecognized request argument"),
            (UNLOAD, {}, "lora_name", "is required"),
            (UNLOAD, {"lora_name": "sql", "lora_int_id": "one"}, "lora_int_id", "integer"),
            (UNLOAD, {"lora_name": "sql", "base_model_name": MODEL}, "base_model_name",
             "unrecognized request argument"),
        ):
            error = error_of(await client.post(path, json=body), 400)
            assert error["param"] == param and words in error["message"], (body, error)
        for path in (LOAD, UNLOAD):
            assert error_of(await client.post(path, content=b"{"), 400)["param"] is None
            assert "JSON object" in error_of(await client.post(path, json=["sql"]), 400)["message"]
        assert served.fake.loaded == {}

        # neutral unknown fields and vLLM's lora_int_id are accepted
        body = {"lora_name": "sql", "lora_path": "/adapters/sql", "load_inplace": False}
        assert (await client.post(LOAD, json=body)).status_code == 200
        assert (await client.post(UNLOAD, json={"lora_name": "sql", "lora_int_id": 1})).status_code == 200

    serve(tokenizer, test)
