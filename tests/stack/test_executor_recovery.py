"""Executor loss: kill -9 the executor in the middle of 16 concurrent greedy generations and start a new one
at the same address; every request completes with exactly the tokens of an undisturbed run (sync, running
ahead, n-gram speculation, multi-step). Without a new executor every request ends with UNAVAILABLE within
--executor-recovery-timeout-s, and the scheduler keeps answering health and ModelInfo. A stopped (hung)
executor is detected by its failed health check and handled the same way."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from cpu_share import executor_threads
from serve_process import serve_process, wait_for_log_line

from client import AsyncClient, Client, UnavailableError

pytestmark = pytest.mark.stack

NUM_REQUESTS = 16
MAX_TOKENS = 160
"""Tokens per request: long enough that a kill or pause started once every request has streamed lands while they
still run, however loaded the machine (24 tokens could finish first)."""
VARIANTS = {
    "sync": ([], ["--max-inflight-steps", "1"]),
    "async": ([], ["--max-inflight-steps", "2"]),
    "ngram": (["--spec-method", "ngram", "--num-spec-tokens", "3"], ["--max-inflight-steps", "2"]),
    "multi_step": ([], ["--max-inflight-steps", "2", "--num-scheduler-steps", "4"]),
}


def requests(max_tokens: int = MAX_TOKENS) -> list[dict]:
    return [{"token_ids": [5 + i, 6, 7 + i % 5, 8], "max_tokens": max_tokens, "ignore_eos": True,
             "temperature": 0.0} for i in range(NUM_REQUESTS)]


async def generate_all(address: str, on_all_started=None, max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    """Every request's tokens; ``on_all_started`` (blocking, run in a thread) once each has streamed one."""
    outputs: list[list[int]] = [[] for _ in range(NUM_REQUESTS)]
    started = asyncio.Event()

    async def one(client: AsyncClient, index: int, params: dict) -> None:
        async for chunk in client.generate_stream(**params):
            outputs[index] += chunk.token_ids
            if all(outputs):
                started.set()

    async with AsyncClient(address, timeout=120) as client:
        tasks = [asyncio.create_task(one(client, i, p)) for i, p in enumerate(requests(max_tokens))]
        if on_all_started is not None:
            await started.wait()
            await asyncio.to_thread(on_all_started)
        await asyncio.gather(*tasks)
    return outputs


def kill_and_restart(stack) -> None:
    os.killpg(stack.executor.process.pid, signal.SIGKILL)
    stack.executor.process.wait(10)
    stack.restart_executor(timeout_s=300)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_requests_survive_a_killed_executor_token_for_token(variant, tiny_model_dir, launch_module_stack):
    executor_flags, scheduler_flags = VARIANTS[variant]
    stack = launch_module_stack.with_scheduler(tiny_model_dir, executor_flags, scheduler_flags)
    undisturbed = asyncio.run(generate_all(stack.address))
    disturbed = asyncio.run(generate_all(stack.address, lambda: kill_and_restart(stack)))
    assert disturbed == undisturbed
    assert all(len(tokens) == MAX_TOKENS for tokens in disturbed)
    with Client(stack.address) as client:
        info = client.model_info()
        assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == info.num_waiting == 0


def test_serve_restarts_a_crashed_executor_and_16_requests_complete_token_for_token(tiny_model_dir):
    import psutil

    serve = serve_process(tiny_model_dir, "--num-threads", executor_threads())

    def kill_executor() -> None:
        executors = [p for p in psutil.Process(serve.process.pid).children(recursive=True)
                     if "executor" in p.cmdline()]
        assert len(executors) == 1
        executors[0].kill()

    try:
        address = serve.start(r"stepahead serving \S+ on (\S+) ", timeout_s=300)
        undisturbed = asyncio.run(generate_all(address))
        assert asyncio.run(generate_all(address, kill_executor)) == undisturbed
        assert wait_for_log_line(serve, "restart 1 of 5", timeout_s=30) and serve.is_running()
    finally:
        serve.stop()


def test_serve_with_restarts_used_up_ends_requests_then_exits_1(tiny_model_dir):
    serve = serve_process(tiny_model_dir, "--num-threads", "1", "--executor-max-restarts", "0",
                          "--executor-recovery-timeout-s", "2")
    try:
        address = serve.start(r"stepahead serving \S+ on (\S+) ", timeout_s=300)
        with Client(address, timeout=30) as client:
            stream = client.generate_stream(**requests()[0])
            next(stream)
            import psutil

            for child in psutil.Process(serve.process.pid).children(recursive=True):
                if "executor" in child.cmdline():
                    child.kill()
            with pytest.raises(UnavailableError, match="executor-recovery-timeout-s 2"):
                list(stream)
            sent_while_down = time.monotonic()
            with pytest.raises(UnavailableError, match="executor-recovery-timeout-s 2"):
                client.generate(token_ids=[5, 6], max_tokens=2)
            assert time.monotonic() - sent_while_down < 5
            info = client.model_info()  # the scheduler still answers
            assert info.num_running == info.num_waiting == 0 and info.num_free_kv_blocks == info.num_kv_blocks
        assert serve.process.wait(timeout=30) == 1
        assert wait_for_log_line(serve, "--executor-max-restarts 0 are used up", timeout_s=10)
    finally:
        serve.stop()


def test_a_stopped_executor_is_given_up_and_its_requests_resume_or_end_unavailable(tiny_model_dir, launch_stack):
    """SIGSTOP breaks no connection: the failed health check makes the scheduler give up the Execute stream.
    Resumed within the recovery timeout, the requests finish token for token; stopped for longer, they end
    UNAVAILABLE within it while the scheduler still answers; resumed, the executor serves again."""
    stack = launch_stack(tiny_model_dir, [], ["--max-inflight-steps", "2", "--executor-recovery-timeout-s", "6"])
    pid = stack.executor.process.pid

    def pause(seconds: float) -> None:
        os.killpg(pid, signal.SIGSTOP)
        time.sleep(seconds)
        os.killpg(pid, signal.SIGCONT)

    try:
        # With nothing in flight when the pause begins there would be no stream to give up (MAX_TOKENS).
        undisturbed = asyncio.run(generate_all(stack.address))
        # 4 s: several missed health checks even on a loaded CI machine, well inside the 6 s recovery timeout.
        assert asyncio.run(generate_all(stack.address, lambda: pause(4.0))) == undisturbed
        assert wait_for_log_line(stack.scheduler, "executor unresponsive", timeout_s=10)
        with Client(stack.address, timeout=60) as client:
            stream = client.generate_stream(**requests()[0])
            next(stream)
            os.killpg(pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            with pytest.raises(UnavailableError, match="executor-recovery-timeout-s 6"):
                list(stream)
            assert time.monotonic() - stopped_at < 6 + 3
            info = client.model_info()  # the scheduler still answers
            assert info.num_running == info.num_waiting == 0 and info.num_free_kv_blocks == info.num_kv_blocks
            os.killpg(pid, signal.SIGCONT)
            assert list(client.generate(**requests()[1]).token_ids) == undisturbed[1]
    finally:
        os.killpg(pid, signal.SIGCONT)
