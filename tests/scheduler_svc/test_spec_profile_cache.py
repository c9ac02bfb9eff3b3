"""The step-profile cache: measured once per key, reused while the key matches, re-measured when the
weights, drafter, dtype, device, threads, K_max or grid change (never a mismatched profile used);
and the K policy chosen from --num-spec-tokens."""

from __future__ import annotations

import asyncio
import json
import multiprocessing

import pytest
from tiny_tokenizers import build_byte_level

from scheduler_svc.config import SchedulerServiceConfig, SchedulingConfig
from scheduler_svc.dynamic_k import DynamicKPolicy, FixedK
from scheduler_svc.spec_policy_setup import speculation_policy
from scheduler_svc.spec_profile import ProfileKey, batch_grid, cached_or_measured, profile_request
from scheduler_svc.tokenizer import Tokenizer
from stepahead_common.stdlib_prompts import calibration_prompts, code_prompts
from stepahead_proto import executor_pb2

DESCRIPTION = executor_pb2.ExecutorDescription(
    model="m", model_fingerprint="abc", spec_method="ngram", dtype="float32", device="cpu", num_threads=2,
    max_num_spec_tokens=2, vocab_size=400, max_model_len=512, num_kv_blocks=100, block_size=16)


class FakeStub:
    """Answers Profile with a fixed table; counts the calls."""

    def __init__(self) -> None:
        self.requests: list[executor_pb2.ProfileRequest] = []

    async def Profile(self, request):
        self.requests.append(request)
        profile = executor_pb2.StepProfile(batch_sizes=request.batch_sizes, acceptance_prior=[0.9, 0.8], profile_s=1)
        for size in request.batch_sizes:
            profile.rows.add(step_ms=[10.0 * size, 11.0 * size, 30.0 * size])
        return profile


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def obtain(stub, tokenizer, description, cache_dir, grid=(1, 2, 4)):
    return asyncio.run(cached_or_measured(stub, tokenizer, description, grid, cache_dir))


def test_a_profile_is_measured_once_then_read_from_the_cache(tokenizer, tmp_path):
    stub = FakeStub()
    first = obtain(stub, tokenizer, DESCRIPTION, tmp_path)
    second = obtain(stub, tokenizer, DESCRIPTION, tmp_path)
    assert first == second and len(stub.requests) == 1
    document = json.loads(next(tmp_path.glob("profile-*.json")).read_text())
    assert document["key"]["batch_sizes"] == [1, 2, 4] and document["key"]["model_fingerprint"] == "abc"


class SlowStub(FakeStub):
    """A profile that takes a while, so a second scheduler starts while the first one measures."""

    async def Profile(self, request):
        await asyncio.sleep(0.3)
        return await super().Profile(request)


def _measure_in_a_process(tokenizer, cache_dir, results) -> None:
    stub = SlowStub()
    obtain(stub, tokenizer, DESCRIPTION, cache_dir)
    results.put(len(stub.requests))


def test_schedulers_starting_together_measure_once(tokenizer, tmp_path):
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [context.Process(target=_measure_in_a_process, args=(tokenizer, tmp_path, results))
                 for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert [process.exitcode for process in processes] == [0, 0]
    assert sorted(results.get(timeout=5) for _ in processes) == [0, 1]  # one measured, the other read its profile
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("profile-")] == []


@pytest.mark.parametrize("field, value", [
    ("model_fingerprint", "changed weights"), ("spec_method", "draft_model"), ("dtype", "bfloat16"),
    ("device", "cuda:0"), ("num_threads", 1)])
def test_a_changed_key_is_re_profiled(tokenizer, tmp_path, field, value):
    stub = FakeStub()
    obtain(stub, tokenizer, DESCRIPTION, tmp_path)
    changed = executor_pb2.ExecutorDescription()
    changed.CopyFrom(DESCRIPTION)
    setattr(changed, field, value)
    obtain(stub, tokenizer, changed, tmp_path)
    assert len(stub.requests) == 2


def test_keys_differ_in_every_field_and_the_grid():
    base = ProfileKey.of(DESCRIPTION, (1, 2))
    assert ProfileKey.of(DESCRIPTION, (1, 2, 4)).file_name() != base.file_name()
    changed = executor_pb2.ExecutorDescription()
    changed.CopyFrom(DESCRIPTION)
    changed.max_num_spec_tokens = 3
    assert ProfileKey.of(changed, (1, 2)).file_name() != base.file_name()


def test_a_tampered_cache_file_is_never_used(tokenizer, tmp_path):
    stub = FakeStub()
    obtain(stub, tokenizer, DESCRIPTION, tmp_path)
    path = next(tmp_path.glob("profile-*.json"))
    document = json.loads(path.read_text())
    document["key"]["dtype"] = "float16"  # a file whose content is not what its name promises
    path.write_text(json.dumps(document))
    obtain(stub, tokenizer, DESCRIPTION, tmp_path)
    path.write_text("{not json")
    obtain(stub, tokenizer, DESCRIPTION, tmp_path)
    assert len(stub.requests) == 3


def test_batch_grid_reaches_the_most_requests_running():
    assert batch_grid(1) == (1,)
    assert batch_grid(48) == (1, 2, 4, 8, 16, 32, 48)
    assert batch_grid(64) == (1, 2, 4, 8, 16, 32, 64)
    with pytest.raises(ValueError, match="max_num_seqs"):
        batch_grid(0)


def test_calibration_prompts_are_not_the_benchmarks(tokenizer):
    request = profile_request(tokenizer, DESCRIPTION, (1, 2))
    assert len(request.calibration_prompts) >= 8
    assert all(0 < len(p.ids) <= 128 and max(p.ids) < 400 for p in request.calibration_prompts)
    assert not set(calibration_prompts()) & set(code_prompts())
    assert all("documentation" in prompt for prompt in calibration_prompts())


def config(tmp_path, num_spec_tokens: str) -> SchedulerServiceConfig:
    return SchedulerServiceConfig(model_dir="m", executor_addresses=("127.0.0.1:1",), num_spec_tokens=num_spec_tokens,
                                  spec_profile_dir=str(tmp_path), scheduling=SchedulingConfig(max_num_seqs=4))


def test_num_spec_tokens_picks_the_policy(tokenizer, tmp_path):
    stub = FakeStub()

    def policy(value, description=DESCRIPTION):
        return asyncio.run(speculation_policy(config(tmp_path, value), stub, description, tokenizer))

    max_k, dynamic = policy("dynamic")
    assert max_k == 2 and isinstance(dynamic, DynamicKPolicy)
    assert list(stub.requests[0].batch_sizes) == [1, 2, 4]
    assert policy("auto")[0] == 2 and isinstance(policy("auto")[1], FixedK)
    assert policy("1")[1].choose(3) == 1
    with pytest.raises(ValueError, match="num_spec_tokens: 3 is more"):
        policy("3")
    no_drafter = executor_pb2.ExecutorDescription(spec_method="none")
    assert policy("dynamic", no_drafter)[0] == 0
    with pytest.raises(ValueError, match="num_spec_tokens"):
        config(tmp_path, "lots")
