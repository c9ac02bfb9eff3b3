"""Scheduler readiness: stall detection, the monitor's transitions, and the executor health probe."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from scheduler_svc.config import ReadinessConfig
from scheduler_svc.readiness import (
    EXECUTOR_SERVICE,
    ReadinessMonitor,
    StallDetector,
    Unanswered,
    executor_health_probe,
)


def test_stall_detector_needs_pending_work_and_no_progress():
    detector = StallDetector(timeout_s=5.0)
    assert not detector.is_stalled(steps_done=0, has_work=False, now=0.0)
    assert not detector.is_stalled(steps_done=0, has_work=False, now=100.0)  # idle is never a stall
    assert not detector.is_stalled(steps_done=0, has_work=True, now=103.0)  # clock started at the last idle poll
    assert not detector.is_stalled(steps_done=0, has_work=True, now=105.0)
    assert detector.is_stalled(steps_done=0, has_work=True, now=105.5)
    assert not detector.is_stalled(steps_done=1, has_work=True, now=106.0)  # a step result: progress again
    assert not detector.is_stalled(steps_done=2, has_work=True, now=110.0)
    assert detector.is_stalled(steps_done=2, has_work=True, now=115.5)


class FakeWorld:
    """A controllable executor probe, progress counter and clock; records what is published."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.steps = 0
        self.has_work = False
        self.now = 0.0
        self.published: list[tuple[bool, str]] = []

    async def probe(self) -> str | None:
        return self.reason

    async def publish(self, ready: bool, reason: str) -> None:
        self.published.append((ready, reason))

    def monitor(self, stall_timeout_s: float = 5.0, on_unanswered=None) -> ReadinessMonitor:
        config = ReadinessConfig(executor_stall_timeout_s=stall_timeout_s)
        return ReadinessMonitor(config, self.probe, lambda: (self.steps, self.has_work), self.publish, lambda: self.now,
                                on_unanswered)


def test_monitor_publishes_only_changes():
    world = FakeWorld()
    monitor = world.monitor()

    async def scenario() -> None:
        assert await monitor.poll_once()
        assert await monitor.poll_once()
        world.reason = "executor health check failed: UNAVAILABLE"
        assert not await monitor.poll_once()
        assert not await monitor.poll_once()
        world.reason = None
        assert await monitor.poll_once()

    asyncio.run(scenario())
    assert world.published == [
        (True, "executor ready"),
        (False, "executor health check failed: UNAVAILABLE"),
        (True, "executor ready"),
    ]


def test_only_an_unanswered_check_is_reported_as_unresponsive():
    world, unanswered = FakeWorld(), []
    monitor = world.monitor(on_unanswered=unanswered.append)

    async def scenario() -> None:
        for reason in (None, "executor not ready: NOT_SERVING", "executor health check failed: UNAVAILABLE",
                       Unanswered("executor health check failed: DEADLINE_EXCEEDED")):
            world.reason = reason
            await monitor.poll_once()

    asyncio.run(scenario())
    assert unanswered == ["executor health check failed: DEADLINE_EXCEEDED"]
    assert world.published[-1] == (False, "executor not ready: NOT_SERVING")  # readiness went off once


def test_monitor_turns_not_ready_when_steps_stop_with_work_pending():
    world = FakeWorld()
    monitor = world.monitor(stall_timeout_s=5.0)

    async def scenario() -> list[bool]:
        states = []
        world.has_work = True
        for now, steps in ((0.0, 1), (2.0, 2), (4.0, 2), (7.0, 2), (7.5, 2), (8.0, 3)):
            world.now, world.steps = now, steps
            states.append(await monitor.poll_once())
        return states

    assert asyncio.run(scenario()) == [True, True, True, True, False, True]
    assert world.published[1] == (False, "no step result for 5 s with requests pending")


def test_monitor_keeps_polling_after_a_failing_probe():
    world = FakeWorld()
    calls = []

    async def broken_probe() -> str | None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        raise asyncio.CancelledError

    config = ReadinessConfig(poll_interval_s=0.01)
    monitor = ReadinessMonitor(config, broken_probe, lambda: (0, False), world.publish)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(monitor.run_forever())
    assert len(calls) == 2


class HangingHealth(health_pb2_grpc.HealthServicer):
    """A health service that never answers, like a stopped process."""

    async def Check(self, request, context):
        await asyncio.Event().wait()


async def probe_against(servicer, timeout_s: float = 0.3) -> str | None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            return await executor_health_probe(channel, timeout_s)()
    finally:
        await server.stop(grace=None)


def test_probe_reads_the_executor_readiness_service():
    async def scenario() -> tuple:
        servicer = health.aio.HealthServicer()
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        await servicer.set(EXECUTOR_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        loading = await probe_against(servicer)
        await servicer.set(EXECUTOR_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        ready = await probe_against(servicer)
        return loading, ready

    loading, ready = asyncio.run(scenario())
    assert loading == "executor not ready: NOT_SERVING"
    assert ready is None


def test_probe_fails_on_a_silent_or_missing_executor():
    silent = asyncio.run(probe_against(HangingHealth()))
    assert silent == "executor health check failed: DEADLINE_EXCEEDED" and isinstance(silent, Unanswered)

    async def nobody_listening() -> str | None:
        async with grpc.aio.insecure_channel("127.0.0.1:1") as channel:
            return await executor_health_probe(channel, 0.5)()

    missing = asyncio.run(nobody_listening())
    assert missing == "executor health check failed: UNAVAILABLE" and not isinstance(missing, Unanswered)


def test_readiness_config_validation_names_the_field():
    with pytest.raises(ValueError, match="executor_stall_timeout_s"):
        ReadinessConfig(executor_stall_timeout_s=0)
    with pytest.raises(ValueError, match="check_timeout_s"):
        ReadinessConfig(check_timeout_s=-1)
