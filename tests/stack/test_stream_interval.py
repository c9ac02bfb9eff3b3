"""--stream-interval through the stack: the same tokens and text as one message per step, in a first message of
one token and then messages of at least the interval (the last with the rest)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest

from client import Client

pytestmark = pytest.mark.stack

PROMPTS = [[5 + i, 6, 7 + i, 8] for i in range(6)]


def stream(address: str, token_ids: list[int]) -> list[tuple[list[int], str]]:
    with Client(address) as client:
        return [(list(chunk.token_ids), chunk.text) for chunk in client.generate_stream(
            token_ids=token_ids, max_tokens=21, ignore_eos=True, temperature=0.0)]


def test_a_stream_interval_sends_the_same_output_in_fewer_messages(tiny_model_dir, launch_stack):
    outputs = {}
    for interval in (1, 4):
        stack = launch_stack.with_scheduler(tiny_model_dir, [], ["--stream-interval", str(interval)])
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            outputs[interval] = list(pool.map(partial(stream, stack.address), PROMPTS))
    for one_each, paced in zip(outputs[1], outputs[4]):
        assert [t for ids, _ in paced for t in ids] == [t for ids, _ in one_each for t in ids]
        assert "".join(text for _, text in paced) == "".join(text for _, text in one_each)
        assert [len(ids) for ids, _ in one_each] == [1] * 21
        sizes = [len(ids) for ids, _ in paced]
        assert sizes[0] == 1 and all(size >= 4 for size in sizes[1:-1]) and len(sizes) <= 1 + 5 + 1
