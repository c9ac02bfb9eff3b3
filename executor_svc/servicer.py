"""The Executor gRPC service: Describe, and the Execute step stream over the model runner."""

from __future__ import annotations

import logging
import queue
import threading
import time

import grpc

from executor_svc.compute_loop import ComputeLoop
from executor_svc.lora.served_adapters import AdapterChange
from executor_svc.metrics import ExecutorMetrics
from executor_svc.model_runner import ModelRunner, StepError
from executor_svc.profile_service import run_profile
from stepahead_proto import executor_pb2, executor_pb2_grpc

logger = logging.getLogger(__name__)

_END = None


STREAM_HANDOVER_S = 5.0
"""How long a new Execute stream waits for the previous one to close before it is refused."""


class ExecutorServicer(executor_pb2_grpc.ExecutorServicer):
    """Serves one Execute stream at a time: the KV cache belongs to a single scheduler.

    Steps are read off the stream by a reader thread and queued on the compute loop as soon as they
    arrive, so step N+1 is already waiting when step N finishes; results are written in order. With
    deferred read-back, step N+1 can even launch before step N's tokens are read. A multi-step
    StepRequest (num_steps > 1) becomes one job per sub-step, each written as soon as it completes.
    """

    def __init__(self, compute: ComputeLoop, metrics: ExecutorMetrics | None = None) -> None:
        self.compute = compute
        self.metrics = metrics or ExecutorMetrics()
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

    def _loaded_runner(self) -> ModelRunner:
        if self.runner is None:
            raise RuntimeError("the executor's model is not loaded")  # callers check _require_ready first
        return self.runner

    def Describe(self, request: executor_pb2.DescribeRequest, context: grpc.ServicerContext):
        self._require_ready(context)
        return self.description

    def Profile(self, request: executor_pb2.ProfileRequest, context: grpc.ServicerContext):
        self._require_ready(context)
        if not self._stream_lock.acquire(blocking=False):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          "an Execute stream is open: profile before the scheduler starts stepping")
        runner = self._loaded_runner()
        try:
            return self.compute.call(run_profile, runner, self.description, request)
        except ValueError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        finally:
            self._stream_lock.release()

    def LoadLoraAdapter(self, request: executor_pb2.LoraAdapterRequest, context: grpc.ServicerContext):
        self._require_ready(context)
        runner = self._loaded_runner()
        return self._adapter_reply(self.compute.call(runner.load_lora_adapter, request.name, request.path), context)

    def UnloadLoraAdapter(self, request: executor_pb2.LoraAdapterRequest, context: grpc.ServicerContext):
        self._require_ready(context)
        runner = self._loaded_runner()
        return self._adapter_reply(self.compute.call(runner.unload_lora_adapter, request.name), context)

    def _adapter_reply(self, change: AdapterChange, context: grpc.ServicerContext) -> executor_pb2.LoraAdapterReply:
        """The reply to a load or unload, or its refusal; the description follows what is served."""
        if change.code != "OK":
            context.abort(getattr(grpc.StatusCode, change.code), change.message)
        if self.description is not None:
            del self.description.lora_adapters[:]
            self.description.lora_adapters.extend(change.adapters)
        return executor_pb2.LoraAdapterReply(lora_adapters=change.adapters)

    def Execute(self, request_iterator, context: grpc.ServicerContext):
        self._require_ready(context)
        # A scheduler that gave up a stream (this process was stopped, then resumed) reconnects at once,
        # while the old stream's handler is still winding down: wait for it a little before refusing.
        if not self._stream_lock.acquire(timeout=STREAM_HANDOVER_S):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "another scheduler already holds the Execute stream")
        runner = self._loaded_runner()
        pending: queue.SimpleQueue = queue.SimpleQueue()
        try:
            self.compute.call(runner.reset)
            threading.Thread(target=self._read_steps, args=(request_iterator, pending), daemon=True).start()
            while (item := pending.get()) is not _END:
                step, future, settled, received_s = item
                try:
                    result = future.result() if settled else self._result_of(future)
                except StepError as error:
                    logger.error("bad step %d: %s", step.step_id, error)
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
                result.received_s = received_s
                yield result
                self.metrics.observe_step(step, result)  # after the write: off the result's path
        finally:
            context.cancel()  # stops the reader if the stream ended early
            try:
                self.compute.call(runner.reset)
            except RuntimeError:
                pass  # shutting down: the state dies with the process
            self._stream_lock.release()

    def _result_of(self, future) -> executor_pb2.StepResult:
        """The step's result; a deferred step is completed on the compute loop once its tokens are
        on the host, so steps launched meanwhile run first."""
        runner = self._loaded_runner()
        if not runner.defer_readback:
            return future.result()
        launched = future.result()
        launched.wait_until_computed()
        return self.compute.call(runner.complete, launched)

    def _read_steps(self, request_iterator, pending: queue.SimpleQueue) -> None:
        try:
            runner = self._loaded_runner()
            run = runner.launch if runner.defer_readback else runner.execute
            for step in request_iterator:
                received_s = time.time()
                if step.num_steps > 1:  # one job per sub-step, each result written once it is done
                    for sub_step in range(step.num_steps):
                        job = self.compute.submit(runner.execute_sub_step, step, sub_step)
                        pending.put((step, job, True, received_s))
                else:
                    pending.put((step, self.compute.submit(run, step), False, received_s))
        except grpc.RpcError:
            pass  # the stream was cancelled
        finally:
            pending.put(_END)
