"""uvicorn on the test's event loop (as in the scheduler) over a real Engine and a fake executor: a client
that goes away mid-stream or mid-request frees its KV blocks at once; TLS; port 0; stopping."""

from __future__ import annotations

import asyncio
import ssl

import httpx
import pytest
from http_helpers import MODEL, EngineHarness, FakeExecutor
from tiny_tokenizers import build_byte_level

from client.certs import make_certs
from scheduler_svc.http.front import HttpFront
from scheduler_svc.tokenizer import Tokenizer

LONG = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 200, "ignore_eos": True}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


async def busy(served: EngineHarness) -> None:
    """Wait until a request holds KV blocks."""
    blocks = served.scheduler.block_manager
    while blocks.num_free_blocks == blocks.num_total_blocks:
        await asyncio.sleep(0.01)


STREAMS = {
    "/v1/chat/completions": {**LONG, "stream": True},
    "/v1/responses": {"model": MODEL, "input": "hello", "max_output_tokens": 200, "stream": True},
    "/v1/messages": {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 200,
                     "stream": True},
}
"""A long stream of each streaming API (the fake executor writes no EOS unless told to)."""


@pytest.mark.parametrize("route", list(STREAMS))
def test_disconnect_mid_stream_aborts_and_frees_blocks(tokenizer, route):
    async def main():
        async with EngineHarness(tokenizer, FakeExecutor(step_delay_s=0.02)) as served:
            front = HttpFront(served.app, "127.0.0.1", 0)
            port = await front.start()
            assert port > 0 and front.url == f"http://127.0.0.1:{port}"
            try:
                async with httpx.AsyncClient(base_url=front.url) as client:
                    async with client.stream("POST", route, json=STREAMS[route]) as response:
                        assert response.status_code == 200
                        lines = 0
                        async for line in response.aiter_lines():
                            lines += bool(line)
                            if lines == 3:
                                break
                    await served.wait_until_idle(timeout_s=2.0)  # 200 steps would take 4 s
                    finished = served.engine.metrics.finished.labels(finish_reason="abort")._value.get()
                    assert finished == 1
                    # still serving
                    body = (await client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})).json()
                    assert body["usage"]["completion_tokens"] == 3
            finally:
                await front.stop()

    asyncio.run(main())


def test_disconnect_while_waiting_for_a_whole_response_aborts(tokenizer):
    async def main():
        async with EngineHarness(tokenizer, FakeExecutor(step_delay_s=0.02)) as served:
            front = HttpFront(served.app, "127.0.0.1", 0)
            await front.start()
            try:
                async with httpx.AsyncClient(base_url=front.url) as client:
                    request = asyncio.ensure_future(client.post("/v1/chat/completions", json=LONG))
                    await busy(served)
                    request.cancel()  # closes the connection
                    with pytest.raises(asyncio.CancelledError):
                        await request
                await served.wait_until_idle(timeout_s=2.0)
            finally:
                await front.stop()

    asyncio.run(main())


def test_stop_ends_open_streams_and_frees_their_blocks(tokenizer):
    async def main():
        async with EngineHarness(tokenizer, FakeExecutor(step_delay_s=0.02)) as served:
            front = HttpFront(served.app, "127.0.0.1", 0)
            await front.start()
            async with httpx.AsyncClient(base_url=front.url) as client:
                async def consume():
                    async with client.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as reply:
                        async for _ in reply.aiter_lines():
                            pass

                reader = asyncio.ensure_future(consume())
                await busy(served)
                await asyncio.wait_for(front.stop(), timeout=10)
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            await served.wait_until_idle(timeout_s=2.0)

    asyncio.run(main())


def test_tls_front_serves_https_and_refuses_plaintext(tokenizer, certs):
    async def main():
        async with EngineHarness(tokenizer) as served:
            front = HttpFront(served.app, "127.0.0.1", 0, str(certs.server), str(certs.server_key))
            port = await front.start()
            try:
                assert front.url == f"https://127.0.0.1:{port}"
                trusted = ssl.create_default_context(cafile=str(certs.ca))
                async with httpx.AsyncClient(base_url=front.url, verify=trusted) as client:
                    assert (await client.get("/health")).status_code == 200
                    reply = await client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
                    assert reply.json()["usage"]["completion_tokens"] == 2
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as plain:
                    with pytest.raises(httpx.TransportError):
                        await plain.get("/health")
                async with httpx.AsyncClient(base_url=front.url, verify=ssl.create_default_context()) as untrusting:
                    with pytest.raises(httpx.ConnectError):
                        await untrusting.get("/health")
            finally:
                await front.stop()

    asyncio.run(main())


def test_a_port_in_use_fails_start_naming_the_flag(tokenizer):
    async def main():
        async with EngineHarness(tokenizer) as served:
            first = HttpFront(served.app, "127.0.0.1", 0)
            port = await first.start()
            try:
                with pytest.raises(OSError, match="http_port"):
                    await HttpFront(served.app, "127.0.0.1", port).start()
            finally:
                await first.stop()

    asyncio.run(main())


def test_a_root_path_serves_requests_with_and_without_the_prefix(tokenizer):
    """--root-path: behind a proxy that forwards /llm/v1/... as it is, or strips /llm."""
    async def main():
        async with EngineHarness(tokenizer, FakeExecutor(eos_after=2)) as served:
            front = HttpFront(served.app, "127.0.0.1", 0, root_path="/llm")
            await front.start()
            try:
                async with httpx.AsyncClient(base_url=front.url) as client:
                    for path in ("/llm/v1/models", "/v1/models"):
                        listed = await client.get(path)
                        assert listed.status_code == 200 and listed.json()["data"][0]["id"] == MODEL, path
                    chat = await client.post("/llm/v1/chat/completions", json={**LONG, "max_tokens": 3,
                                                                              "ignore_eos": False})
                    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] is not None
                    assert (await client.get("/other/v1/models")).status_code == 404
            finally:
                await front.stop()
            await served.wait_until_idle(timeout_s=2.0)

    asyncio.run(main())
