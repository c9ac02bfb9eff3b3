"""--reasoning-parser over gRPC: the engine splits a chat output's thinking from its answer once, for both fronts.
The SDK's result and stream carry the same thinking and answer as the HTTP message and deltas; a text prompt is left
whole unless it asks; a split no parser can make is refused naming split_reasoning; ModelInfo names the parser."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc
import httpx
import pytest
from http_helpers import EngineHarness, FakeExecutor
from tiny_tokenizers import build_thinking

from client import AsyncClient
from client.errors import InvalidArgumentError
from scheduler_svc.servicer import GenerationServicer
from scheduler_svc.tokenizer import Tokenizer
from stepahead_proto import generation_pb2_grpc

MESSAGES = [{"role": "user", "content": "Is 91 prime?"}]
THOUGHT = "<think>\n91 = 7 x 13, so no.\n</think>\n\nNo: 91 = 7 x 13."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_thinking(tmp_path_factory.mktemp("thinking")))


def run(tokenizer: Tokenizer, output: str, parser: str | None,
        test: Callable[[AsyncClient, httpx.AsyncClient], Awaitable[None]]) -> None:
    """``test`` against a gRPC server and the HTTP app over one engine whose executor always writes ``output``."""
    async def main() -> None:
        executor = FakeExecutor(script=tokenizer.encode(output, add_special_tokens=False))
        async with EngineHarness(tokenizer, executor, reasoning_parser=parser) as served:
            server = grpc.aio.server()
            generation_pb2_grpc.add_GenerationServicer_to_server(
                GenerationServicer(served.engine, tokenizer, served.limits), server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            try:
                transport = httpx.ASGITransport(app=served.app)
                async with AsyncClient(f"127.0.0.1:{port}") as sdk, httpx.AsyncClient(
                        transport=transport, base_url="http://test") as http:
                    await test(sdk, http)
                    await served.wait_until_idle()
            finally:
                await server.stop(None)
    asyncio.run(main())


@pytest.mark.parametrize(("parser", "output", "reasoning", "answer"), [
    ("qwen3", THOUGHT, "\n91 = 7 x 13, so no.\n", "\n\nNo: 91 = 7 x 13."),
    ("qwen3", "No: 91 = 7 x 13.", None, "No: 91 = 7 x 13."),
    ("qwen3", "<think></think>No.", "", "No."),
    ("deepseek_r1", "91 = 7 x 13.</think>No.", "91 = 7 x 13.", "No."),
    ("openai_gptoss", "<|channel|>analysis<|message|>7 x 13<|end|><|start|>assistant<|channel|>final<|message|>No.",
     "7 x 13", "No."),
])
def test_grpc_and_http_give_the_same_thinking_and_answer(tokenizer, parser, output, reasoning, answer):
    async def test(sdk: AsyncClient, http: httpx.AsyncClient) -> None:
        result = await sdk.generate(messages=MESSAGES, max_tokens=120)
        assert (result.reasoning, result.text) == (reasoning, answer)
        assert len(result.token_ids) == len(tokenizer.encode(output, add_special_tokens=False)) + 1  # and EOS
        async with sdk.generate_stream(messages=MESSAGES, max_tokens=120) as stream:
            chunks = [chunk async for chunk in stream]
        assert "".join(c.reasoning_text for c in chunks) == (reasoning or "")
        assert "".join(c.text for c in chunks) == answer and chunks[-1].thought == (reasoning is not None)
        body = (await http.post("/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES,
                                                              "max_tokens": 120})).json()
        message = body["choices"][0]["message"]
        assert (message["reasoning"], message["content"] or "") == (reasoning, answer)
        assert (await sdk.model_info()).reasoning_parser == parser
    run(tokenizer, output, parser, test)


def test_a_text_prompt_is_split_only_when_it_asks(tokenizer):
    async def test(sdk: AsyncClient, http: httpx.AsyncClient) -> None:
        whole = await sdk.generate("Is 91 prime?", max_tokens=120)
        assert (whole.reasoning, whole.text) == (None, THOUGHT)
        split = await sdk.generate("Is 91 prime?", max_tokens=120, split_reasoning=True)
        assert (split.reasoning, split.text) == ("\n91 = 7 x 13, so no.\n", "\n\nNo: 91 = 7 x 13.")
        kept = await sdk.generate(messages=MESSAGES, max_tokens=120, split_reasoning=False)
        assert (kept.reasoning, kept.text) == (None, THOUGHT)
        constrained = await sdk.generate(messages=MESSAGES, max_tokens=120, regex="[^!]*")
        # This tokenizer spells </think> out of pieces: the format cannot wait for it, and holds the whole output.
        assert constrained.reasoning is None and constrained.text == THOUGHT
        assert not (await sdk.model_info()).format_after_thinking
    run(tokenizer, THOUGHT, "qwen3", test)


def test_a_split_that_cannot_be_made_is_refused(tokenizer):
    async def test(sdk: AsyncClient, http: httpx.AsyncClient) -> None:
        with pytest.raises(InvalidArgumentError, match="split_reasoning: this server has no --reasoning-parser"):
            await sdk.generate(messages=MESSAGES, max_tokens=8, split_reasoning=True)
        plain = await sdk.generate(messages=MESSAGES, max_tokens=120)
        assert (plain.reasoning, plain.text) == (None, THOUGHT)
        assert (await sdk.model_info()).reasoning_parser == ""
    run(tokenizer, THOUGHT, None, test)
