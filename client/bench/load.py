"""Drives a running server with MT-Bench prompts at a fixed concurrency and records client-side latencies."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from client.async_client import AsyncClient


@dataclass
class RequestRecord:
    """What one request looked like from the client."""

    sent_at: float
    token_times: list[float] = field(default_factory=list)
    num_tokens: int = 0
    prompt_tokens: int = 0
    finish_reason: str | None = None
    spec: object | None = None
    """The request's SpecStats when speculative decoding ran."""

    @property
    def ttft_s(self) -> float:
        return self.token_times[0] - self.sent_at

    @property
    def itl_samples(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

    @property
    def decode_contexts(self) -> list[int]:
        """Tokens in context when each output token after the first was computed (one per ITL sample)."""
        return [self.prompt_tokens + i for i in range(1, self.num_tokens)]


@dataclass
class LoadResult:
    """All requests of one load run and its wall time."""

    concurrency: int
    wall_s: float
    records: list[RequestRecord]


async def _one_request(client: AsyncClient, prompt: str, max_tokens: int, record: RequestRecord) -> None:
    stream = client.generate_stream(messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                                    temperature=0.0)
    async for chunk in stream:
        now = time.perf_counter()
        record.prompt_tokens = chunk.prompt_tokens or record.prompt_tokens
        for _ in chunk.token_ids:
            record.token_times.append(now)
        record.num_tokens += len(chunk.token_ids)
        if chunk.finish_reason is not None:
            record.finish_reason = chunk.finish_reason
            record.spec = chunk.spec


async def _run(address: str, prompts: list[str], concurrency: int, max_tokens: int) -> LoadResult:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for prompt in prompts:
        queue.put_nowait(prompt)
    records: list[RequestRecord] = []

    async def worker(client: AsyncClient) -> None:
        while not queue.empty():
            prompt = queue.get_nowait()
            record = RequestRecord(sent_at=time.perf_counter())
            records.append(record)
            await _one_request(client, prompt, max_tokens, record)

    async with AsyncClient(address) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return LoadResult(concurrency=concurrency, wall_s=wall, records=records)


def run_load(address: str, prompts: list[str], concurrency: int, max_tokens: int) -> LoadResult:
    """Send every prompt (greedy, natural length up to max_tokens) keeping `concurrency` in flight."""
    return asyncio.run(_run(address, prompts, concurrency, max_tokens))
