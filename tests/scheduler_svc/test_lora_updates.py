"""Loading and unloading LoRA adapters while serving: every group loads an adapter or none keeps it, an adapter in use
is not unloaded, a name loaded again gets a new prefix-cache key, and the flag gates it all."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc
import pytest

from scheduler_svc.lora_adapters import ServedAdapters
from scheduler_svc.lora_updates import LoraUpdateError, LoraUpdates


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


@dataclass
class FakeExecutor:
    refuse: grpc.aio.AioRpcError | None = None
    loaded: dict[str, str] = field(default_factory=dict)

    async def LoadLoraAdapter(self, request, timeout=None):  # noqa: N802 - the gRPC method's name
        if self.refuse is not None:
            raise self.refuse
        self.loaded[request.name] = request.path

    async def UnloadLoraAdapter(self, request, timeout=None):  # noqa: N802
        self.loaded.pop(request.name, None)


@dataclass
class FakeEngine:
    name: str
    executor: FakeExecutor
    using: dict[str, int] = field(default_factory=dict)

    def requests_using_adapter(self, name: str) -> int:
        return self.using.get(name, 0)


def updates(*executors: FakeExecutor, slots: int = 2, allowed: bool = True) -> LoraUpdates:
    engines = [FakeEngine(f"group{i}", executor) for i, executor in enumerate(executors)]
    return LoraUpdates(engines, ServedAdapters((), slots), "base", allowed)  # type: ignore[arg-type]


def refusal(call) -> LoraUpdateError:
    with pytest.raises(LoraUpdateError) as error:
        asyncio.run(call)
    return error.value


def test_every_group_loads_the_adapter_and_it_is_served():
    first, second = FakeExecutor(), FakeExecutor()
    lora = updates(first, second)
    assert asyncio.run(lora.load("sql", "/a/sql")) == ("sql",)
    assert first.loaded == second.loaded == {"sql": "/a/sql"}
    assert lora.adapters.loaded_while_serving == {"sql": "/a/sql"}


def test_a_group_refusing_rolls_the_others_back_and_nothing_is_served():
    first = FakeExecutor()
    second = FakeExecutor(refuse=rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "adapter_config.json is missing"))
    lora = updates(first, second)
    error = refusal(lora.load("sql", "/a/sql"))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.message == "lora_path: executor group1: adapter_config.json is missing"
    assert first.loaded == {} and "sql" not in lora.adapters


@pytest.mark.parametrize(("name", "path", "code", "text"), [
    ("", "/p", grpc.StatusCode.INVALID_ARGUMENT, "lora_name: must be a non-empty name"),
    ("a b", "/p", grpc.StatusCode.INVALID_ARGUMENT, "lora_name: must be a non-empty name"),
    ("sql", " ", grpc.StatusCode.INVALID_ARGUMENT, "lora_path: must be set"),
    ("base", "/p", grpc.StatusCode.ALREADY_EXISTS, "lora_name: 'base' is already served"),
])
def test_bad_loads_are_refused_naming_the_field(name, path, code, text):
    error = refusal(updates(FakeExecutor()).load(name, path))
    assert error.code == code and text in error.message


def test_slots_bound_the_adapters_and_unloading_frees_one():
    lora = updates(FakeExecutor(), slots=1)
    asyncio.run(lora.load("sql", "/a/sql"))
    assert refusal(lora.load("fr", "/a/fr")).code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refusal(lora.load("sql", "/a/sql")).code == grpc.StatusCode.ALREADY_EXISTS
    assert asyncio.run(lora.unload("sql")) == ()
    assert asyncio.run(lora.load("fr", "/a/fr")) == ("fr",)


def test_an_adapter_in_use_is_not_unloaded_and_an_unknown_one_is_not_found():
    executor = FakeExecutor()
    lora = updates(executor)
    asyncio.run(lora.load("sql", "/a/sql"))
    lora.engines[0].using["sql"] = 2  # type: ignore[attr-defined]
    error = refusal(lora.unload("sql"))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and "2 unfinished requests use 'sql'" in error.message
    assert executor.loaded == {"sql": "/a/sql"}
    assert refusal(lora.unload("fr")).code == grpc.StatusCode.NOT_FOUND


def test_without_the_flag_every_change_is_refused_naming_it():
    error = refusal(updates(FakeExecutor(), allowed=False).load("sql", "/a/sql"))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and "--allow-runtime-lora-updating" in error.message


def test_a_name_loaded_again_gets_a_new_cache_key_and_start_up_adapters_are_not_resent():
    adapters = ServedAdapters(("static",), max_loras=3)
    assert adapters.cache_key("") == "" and adapters.loaded_while_serving == {}
    adapters.add("sql", "/a")
    first = adapters.cache_key("sql")
    adapters.remove("sql")
    adapters.add("sql", "/b")
    assert adapters.cache_key("sql") != first and adapters.names == ("static", "sql")
    assert adapters.loaded_while_serving == {"sql": "/b"}


def test_a_request_built_before_its_adapter_was_unloaded_or_reloaded_is_refused_when_queued(tmp_path):
    from dataclasses import replace

    from tiny_tokenizers import build_byte_level

    from scheduler_svc.block_manager import KVBlockManager
    from scheduler_svc.config import SchedulingConfig
    from scheduler_svc.engine import Engine
    from scheduler_svc.request import Request, StopParams
    from scheduler_svc.request_errors import InvalidRequestError
    from scheduler_svc.scheduler import Scheduler
    from scheduler_svc.tokenizer import Tokenizer
    from stepahead_proto import sampling_pb2

    adapters = ServedAdapters(("sql",))
    scheduler = Scheduler(SchedulingConfig(), KVBlockManager(64, 16), max_model_len=1024)
    tokenizer = Tokenizer.from_dir(build_byte_level(tmp_path))
    engine = Engine(scheduler, tokenizer, None, max_model_len=1024, max_inflight_steps=1,  # type: ignore[arg-type]
                    adapters=adapters)
    request = Request("r", [5, 6, 7], sampling_pb2.SamplingParams(), StopParams(max_tokens=4), lora_adapter="sql",
                      adapter_cache_key=adapters.cache_key("sql"))
    adapters.remove("sql")
    with pytest.raises(InvalidRequestError, match="model: LoRA adapter 'sql' was unloaded"):
        engine.add_request(request)
    adapters.add("sql", "/other")  # the same name, other weights: its cached blocks are not the request's
    with pytest.raises(InvalidRequestError, match="was unloaded"):
        engine.add_request(request)
    assert engine.requests_using_adapter("sql") == 0
    engine.add_request(replace(request, adapter_cache_key=adapters.cache_key("sql")))
    assert engine.requests_using_adapter("sql") == 1
