"""SIGTERM drains: readiness goes off and new requests are refused (UNAVAILABLE) at once, running requests
finish within --shutdown-grace-s, those that cannot end with UNAVAILABLE, and the process exits 0; no client
stream is left hanging. The same through `stepahead serve`, which forwards SIGTERM and waits."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from serve_process import serve_process

from client import Client
from client.errors import UnavailableError

pytestmark = pytest.mark.stack

LONG = {"token_ids": [5, 6, 7], "max_tokens": 300, "ignore_eos": True, "temperature": 0.0}


def start_streams(address: str, count: int) -> tuple[list, list[threading.Thread]]:
    """`count` concurrent generations; each outcome is its token count or the error that ended it."""
    outcomes: list = [None] * count
    started = threading.Barrier(count + 1)

    def run(index: int) -> None:
        with Client(address) as client:
            stream = client.generate_stream(**LONG)
            try:
                tokens = list(next(stream).token_ids)
                started.wait()
                for chunk in stream:
                    tokens += chunk.token_ids
                outcomes[index] = len(tokens)
            except UnavailableError as error:
                outcomes[index] = error

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    started.wait(timeout=120)
    return outcomes, threads


def readiness(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service="stepahead.v1.Generation")
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status


def test_sigterm_lets_running_requests_finish_refuses_new_ones_and_exits_0(tiny_model_dir, launch_stack):
    stack = launch_stack.with_scheduler(tiny_model_dir, [], ["--shutdown-grace-s", "60"])
    outcomes, threads = start_streams(stack.address, 8)
    process = stack.scheduler.process
    process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while readiness(stack.address) != health_pb2.HealthCheckResponse.NOT_SERVING:
        assert time.monotonic() < deadline
    with Client(stack.address) as client, pytest.raises(UnavailableError, match="shutting down"):
        client.generate(token_ids=[5, 6], max_tokens=2)
    assert process.wait(timeout=60) == 0
    for thread in threads:
        thread.join(timeout=10)
    assert outcomes == [LONG["max_tokens"]] * 8  # every running request finished in full


def test_requests_still_running_after_the_grace_end_with_unavailable(tiny_model_dir, launch_stack):
    stack = launch_stack.with_scheduler(tiny_model_dir, [], ["--shutdown-grace-s", "0.2", "--max-num-seqs", "2"])
    outcomes, threads = start_streams(stack.address, 2)
    stack.scheduler.process.send_signal(signal.SIGTERM)
    assert stack.scheduler.process.wait(timeout=30) == 0
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()  # no stream left hanging
    assert all(isinstance(o, UnavailableError) and "shutdown grace" in str(o) for o in outcomes), outcomes


def test_serve_forwards_sigterm_and_exits_0(tiny_model_dir):
    serve = serve_process(tiny_model_dir, "--num-threads", "1", "--shutdown-grace-s", "60", "--metrics-port", "0")
    try:
        address = serve.start(r"stepahead serving \S+ on (\S+) ", timeout_s=300)
        metrics_address = serve.find(r"stepahead serving .* \(metrics on (\S+);")
        assert metrics_address is not None, serve.log()  # --metrics-port 0: serve says which port it got
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as response:
            assert b"stepahead_scheduler_requests_running" in response.read()
        outcomes, threads = start_streams(address, 2)
        os.kill(serve.process.pid, signal.SIGTERM)
        assert serve.process.wait(timeout=90) == 0, serve.log()
        for thread in threads:
            thread.join(timeout=10)
        assert outcomes == [LONG["max_tokens"]] * 2
    finally:
        serve.stop()
