"""Loading and unloading LoRA adapters while serving (vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter):
every executor group loads the adapter or none does; an adapter is unloaded only when no request uses it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import grpc

from scheduler_svc.engine import Engine
from scheduler_svc.lora_adapters import ServedAdapters
from stepahead_proto import executor_pb2

logger = logging.getLogger(__name__)

UPDATES_OFF = "loading and unloading LoRA adapters is off: start the scheduler with --allow-runtime-lora-updating"
"""Why every change is refused without the flag (gRPC and HTTP say the same)."""
EXECUTOR_LOAD_TIMEOUT_S = 120.0
"""How long an executor may take to read and stack an adapter (it does so between steps)."""


class LoraUpdateError(Exception):
    """A load or unload refused: the gRPC status and a message naming the field."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class LoraUpdates:
    """Changes the adapters every executor group serves, one change at a time."""

    def __init__(self, engines: Sequence[Engine], adapters: ServedAdapters, model_name: str, allowed: bool) -> None:
        """``allowed``: the scheduler's --allow-runtime-lora-updating (otherwise every change is refused)."""
        self.engines = list(engines)
        self.adapters = adapters
        self.model_name = model_name
        self.allowed = allowed
        self._lock = asyncio.Lock()

    async def load(self, name: str, path: str) -> tuple[str, ...]:
        """Serve the adapter at ``path`` as ``name`` on every group; the served adapters after it."""
        self._check_allowed()
        _check_name(name, "lora_name")
        if not path.strip():
            raise LoraUpdateError(grpc.StatusCode.INVALID_ARGUMENT, "lora_path: must be set")
        async with self._lock:
            if name == self.model_name or name in self.adapters:
                raise LoraUpdateError(grpc.StatusCode.ALREADY_EXISTS,
                                      f"lora_name: {name!r} is already served; unload it first")
            if len(self.adapters.names) >= self.adapters.max_loras:
                raise LoraUpdateError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                      f"lora_name: the executors have {self.adapters.max_loras} adapter slots, all "
                                      "in use (start them with a larger --max-loras, or unload one)")
            request = executor_pb2.LoraAdapterRequest(name=name, path=path)
            loaded: list[Engine] = []
            for engine in self.engines:
                try:
                    await engine.executor.LoadLoraAdapter(request, timeout=EXECUTOR_LOAD_TIMEOUT_S)
                except grpc.aio.AioRpcError as error:
                    await self._unload_from(loaded, name)
                    raise LoraUpdateError(error.code(), f"lora_path: executor {engine.name}: {error.details()}"
                                          ) from None
                loaded.append(engine)
            self.adapters.add(name, path)
            logger.info("LoRA adapter %r loaded from %s", name, path)
            return self.adapters.names

    async def unload(self, name: str) -> tuple[str, ...]:
        """Stop serving ``name``; refused while a request uses it. The served adapters after it."""
        self._check_allowed()
        _check_name(name, "lora_name")
        async with self._lock:
            if name not in self.adapters:
                raise LoraUpdateError(grpc.StatusCode.NOT_FOUND, f"lora_name: {name!r} is not served; served: "
                                      f"{list(self.adapters.names)}")
            in_use = sum(engine.requests_using_adapter(name) for engine in self.engines)
            if in_use:
                raise LoraUpdateError(grpc.StatusCode.FAILED_PRECONDITION,
                                      f"lora_name: {in_use} unfinished requests use {name!r}; unload it after them")
            self.adapters.remove(name)  # new requests naming it are refused from here on
            await self._unload_from(self.engines, name)
            logger.info("LoRA adapter %r unloaded", name)
            return self.adapters.names

    def _check_allowed(self) -> None:
        if not self.allowed:
            raise LoraUpdateError(grpc.StatusCode.FAILED_PRECONDITION, UPDATES_OFF)

    async def _unload_from(self, engines: list[Engine], name: str) -> None:
        """Unload from each executor; one that does not answer has lost it anyway (a new process starts without
        it), so failures are only logged."""
        for engine in engines:
            try:
                await engine.executor.UnloadLoraAdapter(executor_pb2.LoraAdapterRequest(name=name),
                                                        timeout=EXECUTOR_LOAD_TIMEOUT_S)
            except grpc.aio.AioRpcError as error:
                logger.warning("executor %s could not unload LoRA adapter %r: %s", engine.name, name, error.details())


def _check_name(name: str, field: str) -> None:
    if not name or name != name.strip() or any(char.isspace() for char in name):
        raise LoraUpdateError(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{field}: must be a non-empty name without whitespace, got {name!r}")
