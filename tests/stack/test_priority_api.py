"""Priority scheduling through real processes (--scheduling-policy priority, one sequence at a time): a request of
higher priority overtakes the running and the queued ones of lower priority, preempting the running one, and every
request still gets the tokens it gets alone."""

from __future__ import annotations

import asyncio

import pytest

from client import AsyncClient, Client

pytestmark = pytest.mark.stack

PROMPTS = {"low-running": [5, 9, 11, 3], "low-queued": [17, 40, 41], "urgent": [7, 8, 12, 60, 61]}
MAX_TOKENS = {"low-running": 160, "low-queued": 24, "urgent": 24}


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack):
    return launch_module_stack.with_scheduler(tiny_model_dir, [],
                                              ["--scheduling-policy", "priority", "--max-num-seqs", "1"])


async def _overtaken(address: str) -> tuple[list[str], dict[str, list[int]], dict[str, int]]:
    finished: list[str] = []
    tokens: dict[str, list[int]] = {}
    preemptions: dict[str, int] = {}
    async with AsyncClient(address) as client:
        running = asyncio.Event()

        async def one(name: str, priority: int) -> None:
            tokens[name] = []
            async for chunk in client.generate_stream(token_ids=PROMPTS[name], max_tokens=MAX_TOKENS[name],
                                                      ignore_eos=True, temperature=0.0, priority=priority):
                tokens[name] += chunk.token_ids
                running.set()
                if chunk.usage is not None:
                    preemptions[name] = chunk.usage.num_preemptions
            finished.append(name)

        low_running = asyncio.create_task(one("low-running", 5))
        await running.wait()  # it holds the only seat
        low_queued = asyncio.create_task(one("low-queued", 5))
        await asyncio.sleep(0.05)
        await asyncio.gather(low_running, low_queued, one("urgent", 0))
    return finished, tokens, preemptions


def test_a_higher_priority_request_overtakes_running_and_queued_ones_and_outputs_stay_exact(stack):
    finished, tokens, preemptions = asyncio.run(_overtaken(stack.address))
    assert finished == ["urgent", "low-running", "low-queued"]
    assert preemptions["low-running"] >= 1 and preemptions["urgent"] == 0
    with Client(stack.address) as client:
        for name, prompt in PROMPTS.items():  # alone, one after another: nothing to overtake or preempt
            alone = client.generate(token_ids=prompt, max_tokens=MAX_TOKENS[name], ignore_eos=True, temperature=0.0)
            assert list(alone.token_ids) == tokens[name], name
        assert client.model_info().num_free_kv_blocks == client.model_info().num_kv_blocks
