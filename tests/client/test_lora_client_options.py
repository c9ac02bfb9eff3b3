"""LoRA adapters in the SDK and the CLI: ModelInfo lists the served adapters (sync and asyncio clients alike), a
generation's ``model`` names one, and `stepahead generate --lora-adapter NAME` sends it as GenerateRequest.model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from fake_servers import serving

from client import AsyncClient, Client, ModelInfo, cli
from client.requests import build_generate_request
from stepahead_proto import generation_pb2, generation_pb2_grpc

ADAPTERS = ["sql", "chat-v2"]


class LoraGeneration(generation_pb2_grpc.GenerationServicer):
    """Serves a model with ADAPTERS; answers every Generate with "ok" and keeps the request."""

    def __init__(self) -> None:
        self.requests: list[generation_pb2.GenerateRequest] = []

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.requests.append(request)
        yield generation_pb2.GenerateResponse(request_id="r-1", text="ok", token_ids=[5], prompt_tokens=3)
        yield generation_pb2.GenerateResponse(request_id="r-1", finish_reason=generation_pb2.FINISH_REASON_LENGTH,
                                              usage=generation_pb2.Usage(prompt_tokens=3, completion_tokens=1))

    def GetModelInfo(self, request, context):  # noqa: N802 - gRPC method name
        return generation_pb2.ModelInfo(model="base", max_model_len=64, lora_adapters=ADAPTERS)


@pytest.fixture()
def served() -> Iterator[tuple[str, LoraGeneration]]:
    servicer = LoraGeneration()
    with serving(servicer) as address:
        yield address, servicer


def test_model_info_from_proto_carries_the_adapters():
    info = ModelInfo.from_proto(generation_pb2.ModelInfo(model="base", lora_adapters=ADAPTERS))
    assert info.lora_adapters == ("sql", "chat-v2")
    assert json.loads(json.dumps(info.to_dict()))["lora_adapters"] == ADAPTERS
    assert ModelInfo.from_proto(generation_pb2.ModelInfo(model="base")).lora_adapters == ()


def test_both_clients_report_the_served_adapters(served):
    address, _ = served
    with Client(address) as client:
        assert client.model_info().lora_adapters == ("sql", "chat-v2")

    async def scenario() -> ModelInfo:
        async with AsyncClient(address) as async_client:
            return await async_client.model_info()

    assert asyncio.run(scenario()).lora_adapters == ("sql", "chat-v2")


def test_a_generations_model_option_names_the_adapter(served):
    assert build_generate_request("hi", model="sql").model == "sql"
    address, servicer = served
    with Client(address) as client:
        client.generate(token_ids=[1, 2], model="chat-v2", max_tokens=1)
    assert servicer.requests[-1].model == "chat-v2"


def test_the_cli_flag_sets_the_request_model(served, capsys):
    address, servicer = served
    cli.main(["generate", "Hi there", "--server", address, "--json", "--lora-adapter", "sql"])
    assert json.loads(capsys.readouterr().out)["text"] == "ok"
    cli.main(["generate", "Hi there", "--server", address, "--raw"])
    assert capsys.readouterr().out == "ok\n"
    assert [request.model for request in servicer.requests] == ["sql", ""]
