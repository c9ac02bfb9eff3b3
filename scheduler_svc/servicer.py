"""The public Generation service: validates requests and streams their outputs from the engine."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc

from scheduler_svc.engine import AdmissionClosedError, EngineError
from scheduler_svc.engine_groups import ServingEngine
from scheduler_svc.lora_updates import LoraUpdateError, LoraUpdates
from scheduler_svc.prompt_work import prompt_chars, run_prompt_work
from scheduler_svc.request_errors import InvalidRequestError
from scheduler_svc.scheduler import DuplicateRequestError, QueueFullError
from scheduler_svc.tokenization import detokenize, tokenize
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits, build_request
from stepahead_common.version import package_version
from stepahead_proto import generation_pb2, generation_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]


# The generated servicer base is untyped (mypy skips the *_pb2_grpc modules).
class GenerationServicer(generation_pb2_grpc.GenerationServicer):  # type: ignore[misc]
    """Generate, Abort, GetModelInfo, Tokenize and Detokenize over the engine. Holds no scheduling logic of its
    own."""

    def __init__(self, engine: ServingEngine, tokenizer: Tokenizer, limits: ModelLimits,
                 lora_updates: LoraUpdates | None = None) -> None:
        """``lora_updates``: loads and unloads LoRA adapters (None: both refused)."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.limits = limits
        self.lora_updates = lora_updates or LoraUpdates([], limits.adapters, limits.model_name, allowed=False)

    async def Generate(
        self, request: generation_pb2.GenerateRequest, context: Context
    ) -> AsyncIterator[generation_pb2.GenerateResponse]:
        try:
            scheduled = await run_prompt_work(prompt_chars(request), build_request, request, self.tokenizer,
                                              self.limits)
            queue = self.engine.add_request(scheduled)
        except DuplicateRequestError as error:
            self.engine.metrics.count_error(grpc.StatusCode.ALREADY_EXISTS.name)
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, str(error))
        except AdmissionClosedError as error:
            self.engine.metrics.count_error(grpc.StatusCode.UNAVAILABLE.name)
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        except QueueFullError as error:
            self.engine.metrics.count_error(grpc.StatusCode.RESOURCE_EXHAUSTED.name)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        except ValueError as error:  # InvalidRequestError
            self.engine.metrics.count_error(grpc.StatusCode.INVALID_ARGUMENT.name)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        finished = False
        try:
            while not finished:
                item = await queue.get()
                if isinstance(item, EngineError):
                    finished = True
                    await context.abort(item.code, item.message)
                finished = item.finish_reason != generation_pb2.FINISH_REASON_UNSPECIFIED
                yield item
        finally:
            if not finished:  # the client went away or cancelled: free the request's blocks now
                self.engine.abort(scheduled.request_id)

    async def LoadLoraAdapter(self, request: generation_pb2.LoadLoraAdapterRequest, context: Context
                              ) -> generation_pb2.LoraAdaptersResponse:
        try:
            names = await self.lora_updates.load(request.lora_name, request.lora_path)
        except LoraUpdateError as error:
            await context.abort(error.code, error.message)
        return generation_pb2.LoraAdaptersResponse(lora_adapters=names)

    async def UnloadLoraAdapter(self, request: generation_pb2.UnloadLoraAdapterRequest, context: Context
                                ) -> generation_pb2.LoraAdaptersResponse:
        try:
            names = await self.lora_updates.unload(request.lora_name)
        except LoraUpdateError as error:
            await context.abort(error.code, error.message)
        return generation_pb2.LoraAdaptersResponse(lora_adapters=names)

    async def Abort(self, request: generation_pb2.AbortRequest, context: Context) -> generation_pb2.AbortResponse:
        if not request.request_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request_id: must be set")
        return generation_pb2.AbortResponse(aborted=self.engine.abort(request.request_id))

    async def GetModelInfo(
        self, request: generation_pb2.GetModelInfoRequest, context: Context
    ) -> generation_pb2.ModelInfo:
        load = self.engine.load()
        return generation_pb2.ModelInfo(
            model=self.limits.model_name,
            max_model_len=self.limits.max_model_len,
            vocab_size=self.limits.vocab_size,
            eos_token_ids=sorted(self.limits.eos_token_ids),
            block_size=self.engine.block_size,
            num_kv_blocks=load.num_kv_blocks,
            num_free_kv_blocks=load.num_free_kv_blocks,
            num_running=load.num_running,
            num_waiting=load.num_waiting,
            stats=self._stats(),
            server_version=package_version(),
            lora_adapters=self.limits.lora_adapters,
            max_loras=self.limits.adapters.max_loras,
            reasoning_parser=self.limits.reasoning_parser or "",
            format_after_thinking=self.limits.thinking_bounds is not None,
            tool_call_parser=self.limits.tool_call_parser or "",
        )

    async def Tokenize(
        self, request: generation_pb2.TokenizeRequest, context: Context
    ) -> generation_pb2.TokenizeResponse:
        try:
            return await run_prompt_work(prompt_chars(request), tokenize, request, self.tokenizer, self.limits)
        except InvalidRequestError as error:
            await self._refuse_invalid(context, error)

    async def Detokenize(
        self, request: generation_pb2.DetokenizeRequest, context: Context
    ) -> generation_pb2.DetokenizeResponse:
        try:
            return detokenize(request, self.tokenizer, self.limits)
        except InvalidRequestError as error:
            await self._refuse_invalid(context, error)

    async def _refuse_invalid(self, context: Context, error: InvalidRequestError) -> NoReturn:
        # Not counted in requests_failed_total: no generation was asked for (as GetModelInfo, it is not a request).
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))

    def _stats(self) -> generation_pb2.EngineStats:
        """The engine's counters, with the process's CPU time read now."""
        stats = generation_pb2.EngineStats()
        stats.CopyFrom(self.engine.stats)
        stats.scheduler_cpu_s = time.process_time()
        return stats
