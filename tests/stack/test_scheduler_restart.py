"""One executor driven by successive schedulers (LocalStack.restart_scheduler, what the stack tests' with_scheduler
uses): the next scheduler gets the same tokens from it, with every KV block free, even after the previous scheduler
was killed with a request running."""

from __future__ import annotations

import pytest

from client import Client

pytestmark = pytest.mark.stack


def generate(address: str) -> list[int]:
    with Client(address) as client:
        return list(client.generate(token_ids=[5, 6, 7, 8], max_tokens=12, temperature=0.0, ignore_eos=True).token_ids)


def test_a_new_scheduler_drives_the_same_executor(tiny_model_dir, launch_stack):
    stack = launch_stack.with_scheduler(tiny_model_dir)
    executor_pid = stack.executor.process.pid
    first = generate(stack.address)
    with Client(stack.address) as client:
        stream = client.generate_stream(token_ids=[9, 10, 11], max_tokens=200, ignore_eos=True)
        next(stream)
        stack.scheduler.process.kill()  # no drain: the executor still holds the request's state
    again = launch_stack.with_scheduler(tiny_model_dir, [], ["--max-inflight-steps", "2"])
    assert again is stack and again.executor.process.pid == executor_pid
    assert generate(again.address) == first
    with Client(again.address) as client:
        info = client.model_info()
    assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0
