"""Graceful shutdown on SIGTERM: readiness off and admission closed at once, running requests given
``grace_s`` to finish, the rest ended with UNAVAILABLE, then the server stops (the process exits 0)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import grpc

from scheduler_svc.engine_groups import ServingEngine
from scheduler_svc.group_readiness import GroupReadiness

logger = logging.getLogger(__name__)


class GracefulShutdown:
    """Drains the engine once ``begin()`` is called (from a signal handler); ``stop_server`` ends serving."""

    def __init__(
        self, engine: ServingEngine, monitor: GroupReadiness, stop_server: Callable[[], Awaitable[None]],
        grace_s: float,
    ) -> None:
        self.engine = engine
        self.monitor = monitor
        self.stop_server = stop_server
        self.grace_s = grace_s
        self._task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        """Start draining (a second call changes nothing)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        reason = "server shutting down"
        self.engine.close_admission(f"{reason}: not accepting new requests")
        await self.monitor.shut_down(reason)
        logger.info("SIGTERM: draining %d requests (grace %g s)", self.engine.num_unfinished, self.grace_s)
        deadline = time.monotonic() + self.grace_s
        while self.engine.num_unfinished and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.engine.num_unfinished:
            logger.warning("shutdown grace over: ending %d unfinished requests", self.engine.num_unfinished)
            self.engine.fail_unfinished(
                grpc.StatusCode.UNAVAILABLE,
                f"{reason}: the request did not finish within the shutdown grace of {self.grace_s:g} s",
            )
            await asyncio.sleep(0.1)  # let the servicers send the status before the server stops
        await self.stop_server()
