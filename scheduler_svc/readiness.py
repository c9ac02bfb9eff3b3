"""Scheduler readiness: ready only while its executor is ready and making progress.

Liveness is the health service's overall "" status (SERVING while the process runs); readiness is
the Generation service's own status. A monitor task polls the executor's readiness over
grpc.health.v1 and watches step progress: an executor that is unreachable, not ready, does not
answer within a deadline (e.g. a stopped process), or returns no step result for the stall timeout
while requests are queued or running, turns readiness off until it recovers. A check that gets no
answer at all is also reported to ``on_unanswered``: the engine then gives up the executor's Execute
stream and recovers its requests as after a crash (a hung process breaks no connection).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scheduler_svc.config import ReadinessConfig
from stepahead_proto import executor_pb2, generation_pb2

logger = logging.getLogger(__name__)

GENERATION_SERVICE = generation_pb2.DESCRIPTOR.services_by_name["Generation"].full_name
"""The scheduler's readiness service name in grpc.health.v1 ("" is liveness)."""
EXECUTOR_SERVICE = executor_pb2.DESCRIPTOR.services_by_name["Executor"].full_name
"""The executor's readiness service name in grpc.health.v1."""

class Unanswered(str):
    """A probe's failure reason that means the executor did not answer in time (stopped or hung)."""


ExecutorProbe = Callable[[], Awaitable[str | None]]
"""Returns None when the executor is ready, else why not."""
ProgressProbe = Callable[[], tuple[int, bool]]
"""Returns (step results received so far, whether requests are queued or running)."""
Publisher = Callable[[bool, str], Awaitable[None]]
"""Receives each change of readiness and its reason."""


class StallDetector:
    """Flags an executor that returned no step result for ``timeout_s`` while work was pending.

    The clock starts at the last step result, or at the last poll that saw no work (so a request
    arriving after an idle spell is not blamed on the idle time).
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._steps_seen = -1
        self._progress_at: float | None = None

    def is_stalled(self, steps_done: int, has_work: bool, now: float) -> bool:
        """Update with the latest progress counter and report whether the executor is stalled."""
        if not has_work or steps_done != self._steps_seen or self._progress_at is None:
            self._steps_seen = steps_done
            self._progress_at = now
            return False
        return now - self._progress_at > self.timeout_s


def executor_health_probe(channel: grpc.aio.Channel, timeout_s: float) -> ExecutorProbe:
    """A probe that asks the executor's health service for its readiness, with a deadline."""
    stub = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service=EXECUTOR_SERVICE)

    async def probe() -> str | None:
        try:
            reply = await stub.Check(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as error:
            reason = f"executor health check failed: {error.code().name}"
            return Unanswered(reason) if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED else reason
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            return f"executor not ready: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
        return None

    return probe


class ReadinessMonitor:
    """Polls the executor and step progress; publishes every change of the scheduler's readiness."""

    def __init__(
        self,
        config: ReadinessConfig,
        probe: ExecutorProbe,
        progress: ProgressProbe,
        publish: Publisher,
        clock: Callable[[], float] = time.monotonic,
        on_unanswered: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self._probe = probe
        self._on_unanswered = on_unanswered
        self._progress = progress
        self._publish = publish
        self._clock = clock
        self._stall = StallDetector(config.executor_stall_timeout_s)
        self.ready: bool | None = None
        """The last published readiness (None before the first poll)."""
        self._shutting_down = False

    async def shut_down(self, reason: str) -> None:
        """Not ready from now on, whatever the executor says (graceful shutdown)."""
        self._shutting_down = True
        if self.ready is not False:
            self.ready = False
            await self._publish(False, reason)

    async def poll_once(self) -> bool:
        """Check once, publish if readiness changed, and return it."""
        if self._shutting_down:
            return False
        reason = await self._probe()
        if isinstance(reason, Unanswered) and self._on_unanswered is not None:
            self._on_unanswered(reason)
        steps_done, has_work = self._progress()
        if self._stall.is_stalled(steps_done, has_work, self._clock()) and reason is None:
            reason = f"no step result for {self.config.executor_stall_timeout_s:g} s with requests pending"
        ready = reason is None
        if ready != self.ready:
            self.ready = ready
            await self._publish(ready, reason or "executor ready")
        return ready

    async def run_forever(self) -> None:
        """Poll every ``poll_interval_s`` until cancelled."""
        while True:
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a monitor that dies would freeze readiness at its last value
                logger.exception("readiness poll failed")
            await asyncio.sleep(self.config.poll_interval_s)
