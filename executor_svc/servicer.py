"""The Executor gRPC service: Describe, and the Execute step stream over the model runner."""

from __future__ import annotations

import logging
import threading

import grpc
from stepahead_proto import executor_pb2, executor_pb2_grpc

from executor_svc.model_runner import ModelRunner, StepError

logger = logging.getLogger(__name__)


class ExecutorServicer(executor_pb2_grpc.ExecutorServicer):
    """Serves one Execute stream at a time: the KV cache belongs to a single scheduler."""

    def __init__(self) -> None:
        self.runner: ModelRunner | None = None
        self.description: executor_pb2.ExecutorDescription | None = None
        self._stream_lock = threading.Lock()

    def set_ready(self, runner: ModelRunner, description: executor_pb2.ExecutorDescription) -> None:
        """Called once the model is loaded and warmed up; until then every RPC answers UNAVAILABLE."""
        self.runner = runner
        self.description = description

    def _require_ready(self, context: grpc.ServicerContext) -> None:
        if self.runner is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the executor is still loading its model")

    def Describe(self, request: executor_pb2.DescribeRequest, context: grpc.ServicerContext):
        self._require_ready(context)
        return self.description

    def Execute(self, request_iterator, context: grpc.ServicerContext):
        self._require_ready(context)
        if not self._stream_lock.acquire(blocking=False):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "another scheduler already holds the Execute stream")
        try:
            self.runner.reset()
            for step in request_iterator:
                try:
                    yield self.runner.execute(step)
                except StepError as error:
                    logger.error("bad step %d: %s", step.step_id, error)
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
        finally:
            self.runner.reset()
            self._stream_lock.release()
