"""The engine requests of one HTTP request: added together, read as one stream, aborted together."""

from __future__ import annotations

import asyncio

import grpc

from scheduler_svc.engine import AdmissionClosedError, EngineError, StreamItem
from scheduler_svc.engine_groups import ServingEngine
from scheduler_svc.http.conversion import GenerationPlan
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.tracing import RequestTrace
from scheduler_svc.request import Request
from scheduler_svc.scheduler import DuplicateRequestError, QueueFullError
from stepahead_proto import generation_pb2


class EngineRun:
    """Choices 0..n-1 of one HTTP request as engine requests sharing one output queue.

    :meth:`next` returns (choice index, message) in arrival order, None once every choice has its
    final message; an executor failure raises ApiError (UNAVAILABLE). :meth:`abort` ends whatever
    has not finished and frees its KV blocks: call it when the client goes away.
    """

    def __init__(self, engine: ServingEngine, plan: GenerationPlan, trace: RequestTrace) -> None:
        self.engine = engine
        self.plan = plan
        self.trace = trace
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self._index: dict[str, int] = {}
        self._unfinished: set[str] = set()

    def start(self, requests: list[Request]) -> None:
        """Add every choice's request to the engine (all or none)."""
        try:
            for index, (request, pb) in enumerate(zip(requests, self.plan.requests)):
                with self.trace.engine_request(index, pb, self.plan.endpoint, self.plan.model):
                    self.engine.add_request(request, self._queue)
                self._index[request.request_id] = index
                self._unfinished.add(request.request_id)
        except DuplicateRequestError as error:
            self.abort()
            raise ApiError(grpc.StatusCode.ALREADY_EXISTS, str(error)) from None
        except AdmissionClosedError as error:
            self.abort()
            raise ApiError(grpc.StatusCode.UNAVAILABLE, str(error)) from None
        except QueueFullError as error:
            self.abort()
            raise ApiError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)) from None

    @property
    def finished(self) -> bool:
        """Whether every choice has its final message."""
        return not self._unfinished

    async def next(self) -> tuple[int, generation_pb2.GenerateResponse] | None:
        """The next message of any choice, or None when all have finished."""
        if not self._unfinished:
            return None
        item = await self._queue.get()
        if isinstance(item, EngineError):
            self.abort()
            raise ApiError(item.code, item.message)
        index = self._index[item.request_id]
        if item.finish_reason != generation_pb2.FINISH_REASON_UNSPECIFIED:
            self._unfinished.discard(item.request_id)
            self.trace.finished(index, item)
        return index, item

    def abort(self) -> None:
        """Abort every unfinished choice (their blocks are freed now). Safe to call again."""
        unfinished, self._unfinished = self._unfinished, set()
        for request_id in unfinished:
            self.engine.abort(request_id)
