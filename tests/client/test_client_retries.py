"""`retries=N` on both clients: a call the server ends UNAVAILABLE before answering anything is tried again (gRPC's
retry policy, with backoff) and succeeds once the server answers; a stream that has sent output is never retried (its
output would repeat); without retries the first UNAVAILABLE is the caller's; a bad count is refused by name."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import grpc
import pytest
from fake_servers import serving

import client as sdk
from client import AsyncClient, Client, cli
from stepahead_proto import generation_pb2, generation_pb2_grpc


class FlakyGeneration(generation_pb2_grpc.GenerationServicer):
    """``flaky:N``: ends UNAVAILABLE, unanswered, the first N times; ``dropped``: one chunk, then UNAVAILABLE;
    anything else: "ok"."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        with self._lock:
            self.calls[request.text] += 1
            attempt = self.calls[request.text]
        if request.text.startswith("flaky:") and attempt <= int(request.text.removeprefix("flaky:")):
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        yield generation_pb2.GenerateResponse(request_id="r", text="ok", token_ids=[5], prompt_tokens=2)
        if request.text == "dropped":
            context.abort(grpc.StatusCode.UNAVAILABLE, "executor lost")
        yield generation_pb2.GenerateResponse(request_id="r", finish_reason=generation_pb2.FINISH_REASON_STOP,
                                              usage=generation_pb2.Usage(prompt_tokens=2, completion_tokens=1))


@pytest.fixture()
def flaky():
    servicer = FlakyGeneration()
    with serving(servicer) as address:
        yield address, servicer


def test_an_unanswered_unavailable_call_is_retried(flaky):
    address, servicer = flaky
    with Client(address, timeout=30, retries=2) as client:
        assert client.generate("flaky:2").text == "ok"
    assert servicer.calls["flaky:2"] == 3
    with Client(address, timeout=30, retries=1) as client, pytest.raises(sdk.UnavailableError):
        client.generate("flaky:5")
    assert servicer.calls["flaky:5"] == 2


def test_without_retries_the_first_unavailable_is_the_callers(flaky):
    address, servicer = flaky
    with Client(address, timeout=30) as client, pytest.raises(sdk.UnavailableError):
        client.generate("flaky:1")
    assert servicer.calls["flaky:1"] == 1


def test_a_stream_that_sent_output_is_never_retried(flaky):
    address, servicer = flaky
    with Client(address, timeout=30, retries=3) as client:
        stream = client.generate_stream("dropped")
        with pytest.raises(sdk.UnavailableError):
            chunks = [chunk.text for chunk in stream]
            assert chunks == ["ok"]
    assert servicer.calls["dropped"] == 1


def test_the_async_client_retries_too(flaky):
    address, servicer = flaky

    async def scenario() -> str:
        async with AsyncClient(address, timeout=30, retries=1) as client:
            return (await client.generate("flaky:1")).text

    assert asyncio.run(scenario()) == "ok" and servicer.calls["flaky:1"] == 2


@pytest.mark.parametrize("retries", [-1, 5, 1.5, True])
def test_a_bad_retry_count_is_refused_by_name(retries):
    with pytest.raises(ValueError, match="^retries: must be an integer in"):
        Client("127.0.0.1:1", retries=retries)


def test_the_generate_command_retries_with_its_flag(flaky, capsys):
    address, servicer = flaky
    cli.main(["generate", "flaky:1", "--server", address, "--raw", "--retries", "1"])
    assert capsys.readouterr().out == "ok\n" and servicer.calls["flaky:1"] == 2
    with pytest.raises(SystemExit) as refused:
        cli.main(["generate", "x", "--server", address, "--raw", "--retries", "9"])
    assert refused.value.code == 2 and "--retries" in capsys.readouterr().err
