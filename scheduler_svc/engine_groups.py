"""Several executor groups behind one scheduler process: one Engine each, requests placed by free capacity.

Each group (a single executor or a tensor-parallel group reached through its rank 0) has its own KV
block pool, block manager, scheduler and Execute stream, and runs ahead on its own. A new request goes
to the group with the largest share of KV blocks still free once its waiting requests start; groups
whose executor is lost are skipped while another one answers. When a group's executor is lost, its
requests (requeued to be recomputed) move to the other groups instead of waiting for it to come back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import grpc

from scheduler_svc.engine import Engine, StreamItem
from scheduler_svc.engine_load import EngineLoad
from scheduler_svc.metrics import SchedulerMetrics
from scheduler_svc.prefix_hashes import extend_block_hashes, num_cacheable_blocks
from scheduler_svc.request import Request
from scheduler_svc.scheduler import DuplicateRequestError
from stepahead_proto import generation_pb2

logger = logging.getLogger(__name__)

CACHE_BALANCE_SHARE = 0.25
"""With prefix caching, a request goes to the group holding most of its prefix unless that group's free share of
KV blocks is this much below the freest group's (then load wins: the cache would only move the queue)."""


class EngineGroups:
    """The front the public APIs talk to, over one Engine per executor group (one group: a thin wrapper)."""

    def __init__(self, engines: Sequence[Engine], metrics: SchedulerMetrics) -> None:
        if not engines:
            raise ValueError("executor_addresses: at least one executor group is needed")
        self.engines = list(engines)
        self.metrics = metrics
        for engine in self.engines:
            engine.on_lost = self._move_requests_off
        metrics.bind_engine(self)

    # ---- requests ----------------------------------------------------------------------------
    def add_request(
        self, request: Request, queue: asyncio.Queue[StreamItem] | None = None
    ) -> asyncio.Queue[StreamItem]:
        """Queue a validated request on the group with the most free capacity (see Engine.add_request)."""
        if any(engine.has_request(request.request_id) for engine in self.engines):
            raise DuplicateRequestError(f"request_id: {request.request_id!r} is already running")
        return self.place(request).add_request(request, queue)

    def place(self, request: Request | None = None) -> Engine:
        """The group a new request goes to: among those whose executor answers (all, if none does), the largest
        free share of KV blocks after the queued work, then the fewest unfinished requests, then the first. With
        prefix caching, the group holding the most of the request's prefix first, among the groups whose free
        share is within CACHE_BALANCE_SHARE of the largest."""
        if len(self.engines) == 1:
            return self.engines[0]
        candidates = [engine for engine in self.engines if not engine.recovering] or self.engines
        if request is not None and self.engines[0].scheduler.block_manager.enable_prefix_caching:
            return self._place_by_prefix(request, candidates)
        return min(candidates, key=_placement_rank)  # min keeps the first of equals: ties go to the first group

    def _place_by_prefix(self, request: Request, candidates: list[Engine]) -> Engine:
        loads = [(engine, engine.load()) for engine in candidates]
        floor = max(load.free_share for _, load in loads) - CACHE_BALANCE_SHARE
        size = self.block_size
        usable = num_cacheable_blocks(request.num_tokens, size)
        hashes = extend_block_hashes([], request.all_token_ids[: usable * size], size, request.adapter_cache_key)

        def rank(entry: tuple[Engine, EngineLoad]) -> tuple[int, float, int]:
            engine, load = entry
            return (-len(engine.scheduler.block_manager.cached_prefix(hashes)), *_load_rank(load))

        return min((entry for entry in loads if entry[1].free_share >= floor), key=rank)[0]

    def abort(self, request_id: str) -> bool:
        """Abort the request in whichever group holds it."""
        return any(engine.abort(request_id) for engine in self.engines)

    def close_admission(self, reason: str) -> None:
        for engine in self.engines:
            engine.close_admission(reason)

    def fail_unfinished(self, code: grpc.StatusCode, message: str) -> None:
        for engine in self.engines:
            engine.fail_unfinished(code, message)

    @property
    def num_unfinished(self) -> int:
        return sum(engine.num_unfinished for engine in self.engines)

    # ---- state -------------------------------------------------------------------------------
    def load(self) -> EngineLoad:
        """KV blocks and requests of every group, summed."""
        return EngineLoad.total(engine.load() for engine in self.engines)

    @property
    def block_size(self) -> int:
        """Tokens per KV block (the same in every group)."""
        return self.engines[0].block_size

    def group_loads(self) -> list[tuple[str, EngineLoad]]:
        """(group name, its load) for each group."""
        return [(engine.name, engine.load()) for engine in self.engines]

    @property
    def stats(self) -> generation_pb2.EngineStats:
        """The engines' counters, summed."""
        total = generation_pb2.EngineStats()
        for engine in self.engines:
            for field, value in engine.stats.ListFields():
                setattr(total, field.name, getattr(total, field.name) + value)
        return total

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        for engine in self.engines:
            engine.start()

    async def stop(self) -> None:
        for engine in self.engines:
            await engine.stop()

    def _move_requests_off(self, lost: Engine) -> None:
        """A group lost its executor: its requests (all waiting now) move to the groups that still answer."""
        if not any(not engine.recovering for engine in self.engines if engine is not lost):
            return  # nowhere to go: they wait for this group's executor to come back
        moved = lost.detach_waiting()
        for item in moved:
            self.place(item.request).adopt(item)
        if moved:
            logger.warning("executor group %s lost: %d requests moved to the other groups", lost.name, len(moved))
            self.metrics.requests_moved.inc(len(moved))


def _placement_rank(engine: Engine) -> tuple[float, int]:
    """Lower is better: the larger free share of KV blocks, then the fewer unfinished requests."""
    return _load_rank(engine.load())


def _load_rank(load: EngineLoad) -> tuple[float, int]:
    return -load.free_share, load.num_unfinished


ServingEngine = Engine | EngineGroups
"""What the public APIs serve from: one Engine (tests, embedders) or the server's EngineGroups."""
