"""The Profile RPC over a real tiny runner: a grid of step times and an acceptance prior, batch sizes
that do not fit the cache skipped, bad requests refused naming the field, never while a stream is open."""

from __future__ import annotations

import os
import shutil
import threading

import grpc
import pytest
from tiny_models import make_tiny_llama

from executor_svc.compute_loop import ComputeLoop
from executor_svc.config import ExecutorConfig
from executor_svc.profile_service import model_fingerprint
from executor_svc.server import build_runner
from executor_svc.servicer import ExecutorServicer
from stepahead_proto import executor_pb2


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.code = None

    def abort(self, code, details):
        self.code, self.details = code, details
        raise Aborted(details)


@pytest.fixture(scope="module")
def servicer(tmp_path_factory):
    model_dir = make_tiny_llama(tmp_path_factory.mktemp("target"), seed=3)
    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=60, spec_method="ngram", num_spec_tokens=2)
    runner, description = build_runner(config)
    compute = ComputeLoop()
    worker = threading.Thread(target=compute.run_forever, daemon=True)
    worker.start()
    servicer = ExecutorServicer(compute)
    servicer.set_ready(runner, description)
    yield servicer
    compute.stop()
    worker.join(timeout=10)


def test_profile_measures_the_grid_and_the_acceptance(servicer):
    request = executor_pb2.ProfileRequest(batch_sizes=[1, 2, 500], context_len=16, repeats=1,
                                          calibration_max_tokens=8)
    request.calibration_prompts.add(ids=[5, 6, 7, 8] * 5)
    request.calibration_prompts.add(ids=[9, 10, 11] * 6)
    profile = servicer.Profile(request, FakeContext())
    assert list(profile.batch_sizes) == [1, 2]  # 500 requests do not fit 60 blocks: skipped
    assert [len(row.step_ms) for row in profile.rows] == [3, 3]
    assert all(ms > 0 for row in profile.rows for ms in row.step_ms)
    assert len(profile.acceptance_prior) == 2 and all(0 <= a <= 1 for a in profile.acceptance_prior)
    assert profile.acceptance_prior[0] > 0  # the prompts repeat themselves: n-gram drafts get accepted
    assert servicer.runner.requests == {}


@pytest.mark.parametrize("request_fields, field", [
    ({"batch_sizes": []}, "batch_sizes"),
    ({"batch_sizes": [4, 2]}, "batch_sizes"),
    ({"batch_sizes": [1], "repeats": -1}, "repeats"),
    ({"batch_sizes": [1], "calibration_prompts": [executor_pb2.TokenIds(ids=[10**6])]}, "calibration_prompts"),
])
def test_bad_requests_are_refused_naming_the_field(servicer, request_fields, field):
    context = FakeContext()
    with pytest.raises(Aborted, match=field):
        servicer.Profile(executor_pb2.ProfileRequest(**request_fields), context)
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT


def test_no_profile_while_a_stream_holds_the_executor(servicer):
    context = FakeContext()
    with servicer._stream_lock, pytest.raises(Aborted):
        servicer.Profile(executor_pb2.ProfileRequest(batch_sizes=[1]), context)
    assert context.code == grpc.StatusCode.FAILED_PRECONDITION


def test_the_fingerprint_changes_with_the_weights_and_the_drafter(tmp_path):
    model_dir = make_tiny_llama(tmp_path / "m", seed=1)
    config = ExecutorConfig(model_dir=str(model_dir))
    first = model_fingerprint(config)
    assert model_fingerprint(config) == first
    assert model_fingerprint(ExecutorConfig(model_dir=str(model_dir), spec_method="ngram")) != first
    (model_dir / "model.safetensors").write_bytes(b"other weights")
    assert model_fingerprint(config) != first


@pytest.mark.parametrize("spec_method", ["eagle", "eagle_ngram"])
def test_the_fingerprint_changes_with_the_eagle_head(spec_method, tiny_model_dir, tiny_eagle_dir, tmp_path):
    other_head = tmp_path / "other_head"
    shutil.copytree(tiny_eagle_dir, other_head)

    def fingerprint(head_dir) -> str:
        config = ExecutorConfig(model_dir=str(tiny_model_dir), num_kv_blocks=40, spec_method=spec_method,
                                num_spec_tokens=2, eagle_dir=str(head_dir))
        return build_runner(config)[1].model_fingerprint

    first = fingerprint(tiny_eagle_dir)
    assert fingerprint(other_head) == first  # the same files: the same profile
    weights = other_head / "model.safetensors"
    # A retrained head: same names and sizes, a newer modification time.
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert fingerprint(other_head) != first


def test_a_noise_spike_is_repaired_from_larger_steps():
    from executor_svc.profile_service import monotone

    table = [[20.0, 21.0, 22.0], [3000.0, 60.0, 50.0], [40.0, 70.0, 80.0]]
    assert monotone(table) == [[20.0, 21.0, 22.0], [40.0, 50.0, 50.0], [40.0, 70.0, 80.0]]
