"""The load generator through the OpenAI-compatible HTTP front: streamed chat completions over httpx.

The same prompts, greedy decoding and max_tokens as the gRPC load (load.py), so both APIs generate
the same tokens and their throughputs compare directly. Output tokens come from the usage chunk
(``stream_options.include_usage``); a chunk's arrival time stands for each of its tokens' (without
speculation an engine message carries one token, so chunks are tokens, but for a token whose text
is held back until the next one completes a character).
"""

from __future__ import annotations

import asyncio
import json
import time

from client.bench.load import LoadResult, RequestRecord

DATA = "data: "


async def _one_request(client, model: str, prompt: str, max_tokens: int, record: RequestRecord) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
        async for line in response.aiter_lines():
            if not line.startswith(DATA):
                continue
            payload = line[len(DATA):]
            if payload == "[DONE]":
                break
            now = time.perf_counter()
            chunk = json.loads(payload)
            if "error" in chunk:
                raise RuntimeError(f"stream failed: {chunk['error']}")
            for choice in chunk["choices"]:
                if choice["delta"].get("content"):
                    record.token_times.append(now)
                if choice.get("finish_reason"):
                    record.finish_reason = choice["finish_reason"]
            usage = chunk.get("usage")
            if usage:
                record.num_tokens = usage["completion_tokens"]
                record.prompt_tokens = usage["prompt_tokens"]


async def _run(base_url: str, prompts: list[str], concurrency: int, max_tokens: int) -> LoadResult:
    import httpx  # the dev extra's; only this load generator needs it

    queue: asyncio.Queue[str] = asyncio.Queue()
    for prompt in prompts:
        queue.put_nowait(prompt)
    records: list[RequestRecord] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=None, limits=limits) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]

        async def worker() -> None:
            while not queue.empty():
                prompt = queue.get_nowait()
                record = RequestRecord(sent_at=time.perf_counter())
                records.append(record)
                await _one_request(client, model, prompt, max_tokens, record)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return LoadResult(concurrency=concurrency, wall_s=wall, records=records)


def run_http_load(base_url: str, prompts: list[str], concurrency: int, max_tokens: int) -> LoadResult:
    """Send every prompt through POST /v1/chat/completions (streamed, greedy) keeping `concurrency` in flight."""
    return asyncio.run(_run(base_url, prompts, concurrency, max_tokens))
