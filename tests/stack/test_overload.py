"""Overload through the stack: beyond --max-queued-requests Generate is refused with RESOURCE_EXHAUSTED (HTTP
429) saying how many are queued; --max-queue-wait-s ends a request that cannot start in time; a client
deadline aborts its request and frees its blocks; a burst of 10x the admission limit leaves correct outputs,
no leaked block and no memory growth."""

from __future__ import annotations

import asyncio
import time

import grpc
import openai
import psutil
import pytest

from client import AsyncClient, Client
from client.errors import DeadlineExceededError, ResourceExhaustedError

pytestmark = pytest.mark.stack

LONG = {"token_ids": [5, 6, 7], "max_tokens": 480, "ignore_eos": True, "temperature": 0.0}


def wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def assert_idle(client: Client) -> None:
    """Every KV block free, nothing running or waiting (the engine may take a moment to settle)."""
    def idle() -> bool:
        info = client.model_info()
        return info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0 and info.num_waiting == 0
    wait_for(idle, 10.0)


def test_a_full_queue_refuses_with_resource_exhausted_and_http_429(tiny_model_dir, launch_stack):
    stack = launch_stack.with_scheduler(tiny_model_dir, [],
                         ["--max-num-seqs", "1", "--max-queued-requests", "1", "--http-port", "0"])
    with Client(stack.address) as client:
        running = client.generate_stream(**LONG)
        next(running)  # started: it holds the only running slot
        queued = client.generate_stream(**LONG)
        wait_for(lambda: client.model_info().num_waiting == 1)
        with pytest.raises(ResourceExhaustedError, match=r"1 requests are queued, the limit is 1"):
            client.generate(token_ids=[5, 6], max_tokens=2)
        http = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.RateLimitError, match="max-queued-requests"):
            http.completions.create(model=client.model_info().model, prompt=[5, 6], max_tokens=2)
        running.cancel()
        queued.cancel()
        assert_idle(client)
        again = client.generate(token_ids=[5, 6], max_tokens=2, ignore_eos=True)
        assert again.finish_reason == "length"  # serving again


def test_a_request_that_cannot_start_in_time_ends_with_resource_exhausted(tiny_model_dir, launch_stack):
    stack = launch_stack.with_scheduler(tiny_model_dir, [], ["--max-num-seqs", "1", "--max-queue-wait-s", "0.3"])
    with Client(stack.address) as client:
        running = client.generate_stream(**LONG)
        next(running)
        with pytest.raises(ResourceExhaustedError, match=r"waited \d+\.\d s without starting"):
            client.generate(token_ids=[5, 6], max_tokens=2)
        running.cancel()
        assert_idle(client)


def test_a_client_deadline_aborts_the_request_and_frees_its_blocks(tiny_model_dir, launch_stack):
    stack = launch_stack.with_scheduler(tiny_model_dir, [], [])
    with Client(stack.address) as client:
        with pytest.raises(DeadlineExceededError):
            client.generate(**LONG, timeout=0.2)
        assert_idle(client)


def test_a_burst_of_ten_times_the_limit(tiny_model_dir, launch_stack):
    limit, num_requests = 4, 60  # running (2) + queued (4) admitted at once; 10x the queue limit and more
    stack = launch_stack.with_scheduler(tiny_model_dir, [],
                                        ["--max-num-seqs", "2", "--max-queued-requests", str(limit)])
    prompts = [[5 + i % 8, 6, 7] for i in range(num_requests)]
    processes = [psutil.Process(stack.executor.process.pid), psutil.Process(stack.scheduler.process.pid)]

    async def burst() -> list:
        async with AsyncClient(stack.address) as client:
            calls = [client.generate(token_ids=p, max_tokens=8, temperature=0.0) for p in prompts]
            return await asyncio.gather(*calls, return_exceptions=True)

    with Client(stack.address) as client:
        reference = {tuple(p): client.generate(token_ids=p, max_tokens=8, temperature=0.0).token_ids
                     for p in prompts[:8]}
        asyncio.run(burst())  # warm-up: the steady state the RSS is compared with
        steady = [p.memory_info().rss for p in processes]
        outcomes = asyncio.run(burst())
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert refused and all(isinstance(o, ResourceExhaustedError) for o in refused), refused[:3]
        assert all(o.code == grpc.StatusCode.RESOURCE_EXHAUSTED for o in refused)
        completed = [(p, o) for p, o in zip(prompts, outcomes) if not isinstance(o, BaseException)]
        assert len(completed) >= limit
        assert all(o.token_ids == reference[tuple(p)] for p, o in completed)
        assert_idle(client)
        after = [p.memory_info().rss for p in processes]
        assert all(a <= 1.2 * s for a, s in zip(after, steady)), (steady, after)
