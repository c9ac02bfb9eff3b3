"""Drives a running server with MT-Bench prompts at a fixed concurrency and records client-side latencies."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from client.async_client import AsyncClient
from client.types import SpecStats


@dataclass
class RequestRecord:
    """What one request looked like from the client."""

    sent_at: float
    token_times: list[float] = field(default_factory=list)
    num_tokens: int = 0
    prompt_tokens: int = 0
    finish_reason: str | None = None
    spec: SpecStats | None = None
    """The request's SpecStats when speculative decoding ran."""

    @property
    def ttft_s(self) -> float:
        return self.token_times[0] - self.sent_at

    @property
    def itl_samples(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (last token - first token) / (tokens - 1); None with fewer than
        two. Unlike the ITL samples it does not depend on how many tokens each stream message carries."""
        if self.num_tokens < 2 or len(self.token_times) < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (self.num_tokens - 1)

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


async def _one_request(
    client: AsyncClient, prompt: str, max_tokens: int, record: RequestRecord, ignore_eos: bool = False,
    model: str = "",
) -> None:
    stream = client.generate_stream(
        messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0, ignore_eos=ignore_eos,
        model=model,
    )
    async for chunk in stream:
        now = time.perf_counter()
        record.prompt_tokens = chunk.prompt_tokens or record.prompt_tokens
        for _ in chunk.token_ids:
            record.token_times.append(now)
        record.num_tokens += len(chunk.token_ids)
        if chunk.finish_reason is not None:
            record.finish_reason = chunk.finish_reason
            record.spec = chunk.spec


async def _run(
    address: str, prompts: list[str], concurrency: int, max_tokens: int, ignore_eos: bool = False, model: str = ""
) -> LoadResult:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for prompt in prompts:
        queue.put_nowait(prompt)
    records: list[RequestRecord] = []

    async def worker(client: AsyncClient) -> None:
        while not queue.empty():
            prompt = queue.get_nowait()
            record = RequestRecord(sent_at=time.perf_counter())
            records.append(record)
            await _one_request(client, prompt, max_tokens, record, ignore_eos, model)

    async with AsyncClient(address) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return LoadResult(concurrency=concurrency, wall_s=wall, records=records)


def run_load(
    address: str, prompts: list[str], concurrency: int, max_tokens: int, ignore_eos: bool = False, model: str = ""
) -> LoadResult:
    """Send every prompt (greedy, natural length up to max_tokens, or exactly max_tokens with ignore_eos)
    keeping `concurrency` in flight; ``model``: GenerateRequest.model (a LoRA adapter's name; "": the base model)."""
    return asyncio.run(_run(address, prompts, concurrency, max_tokens, ignore_eos, model))
