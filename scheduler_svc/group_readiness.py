"""Readiness over several executor groups: each group has its own monitor and health status; the
scheduler is ready while at least one group is (a new request is placed on a group that answers)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from scheduler_svc.readiness import Publisher, ReadinessMonitor

GroupPublisher = Callable[[str, bool, str], Awaitable[None]]
"""Receives each change of one group's readiness: (group name, ready, reason)."""


class GroupReadiness:
    """Owns one ReadinessMonitor per group; publishes each group's changes and the overall readiness."""

    def __init__(self, group_names: Sequence[str], publish_overall: Publisher, publish_group: GroupPublisher) -> None:
        self._group_ready: dict[str, bool | None] = dict.fromkeys(group_names)
        self._publish_overall = publish_overall
        self._publish_group = publish_group
        self.monitors: list[ReadinessMonitor] = []
        self.ready: bool | None = None
        """The last published overall readiness (None before the first poll)."""

    def group_publisher(self, name: str) -> Publisher:
        """The publisher the monitor of group ``name`` reports to."""

        async def publish(ready: bool, reason: str) -> None:
            self._group_ready[name] = ready
            await self._publish_group(name, ready, reason)
            overall = any(value is True for value in self._group_ready.values())
            if overall != self.ready:
                self.ready = overall
                detail = f"executor group {name}: {reason}"
                await self._publish_overall(overall, detail if len(self._group_ready) > 1 else reason)

        return publish

    def add(self, monitor: ReadinessMonitor) -> None:
        self.monitors.append(monitor)

    async def poll_once(self) -> bool:
        """Poll every group once; returns the overall readiness."""
        for monitor in self.monitors:
            await monitor.poll_once()
        return self.ready is True

    async def run_forever(self) -> None:
        """Run every group's monitor until cancelled."""
        await asyncio.gather(*(monitor.run_forever() for monitor in self.monitors))

    async def shut_down(self, reason: str) -> None:
        """Not ready from now on (graceful shutdown), whatever the executors say."""
        for monitor in self.monitors:
            await monitor.shut_down(reason)
        if self.ready is not False:
            self.ready = False
            await self._publish_overall(False, reason)
