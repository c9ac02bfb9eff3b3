"""The Profile RPC's work: validate a ProfileRequest, measure with StepProfiler, answer a StepProfile;
and the fingerprint of the weights a cached profile must match."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from executor_svc.config import ExecutorConfig
from executor_svc.model_runner import ModelRunner
from executor_svc.step_profile import MAX_CYCLES, StepProfiler
from stepahead_proto import executor_pb2

DEFAULT_CONTEXT_LEN = 64
DEFAULT_CALIBRATION_TOKENS = 32
MAX_BATCH_SIZE = 4096
MAX_CALIBRATION_PROMPTS = 256


def _files_identity(path_name: str | None) -> list[str]:
    """Name, size and modification time of a file, or of every file directly inside a directory."""
    if not path_name:
        return []
    path = Path(path_name)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    return [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files if p.exists()]


def model_fingerprint(config: ExecutorConfig, eagle_dir: str | None = None) -> str:
    """A short hash of the target's and the drafter's files and the drafter's settings (``eagle_dir``: the
    EAGLE-style drafter in use, when spec_method auto or eagle found one)."""
    parts = [*_files_identity(config.model_dir), "|", *_files_identity(config.draft_model_dir), "|",
             *_files_identity(eagle_dir), "|",
             config.load_format, config.spec_method, f"ngram:{config.ngram_min_n}-{config.ngram_max_n}",
             f"cpu_weight_packing:{config.cpu_weight_packing}",  # step costs differ with and without the packs
             "cpu_matmul:timed-per-shape"]  # profiles from before CPU matmuls were chosen by timing are stale
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _check(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field_name}: {message}")


def validate(request: executor_pb2.ProfileRequest, vocab_size: int, max_model_len: int) -> None:
    """Raise ValueError naming the field of a request the profiler cannot run."""
    sizes = list(request.batch_sizes)
    _check(bool(sizes), "batch_sizes", "must not be empty")
    _check(sizes == sorted(set(sizes)) and sizes[0] >= 1 and sizes[-1] <= MAX_BATCH_SIZE, "batch_sizes",
           f"must be ascending, distinct and in [1, {MAX_BATCH_SIZE}], got {sizes}")
    _check(0 <= request.context_len <= max_model_len // 2, "context_len",
           f"must be in [0, {max_model_len // 2}], got {request.context_len}")
    _check(0 <= request.repeats <= 100, "repeats", f"must be in [0, 100], got {request.repeats}")
    _check(0 <= request.calibration_max_tokens <= 1024, "calibration_max_tokens",
           f"must be in [0, 1024], got {request.calibration_max_tokens}")
    prompts = request.calibration_prompts
    _check(len(prompts) <= MAX_CALIBRATION_PROMPTS, "calibration_prompts",
           f"at most {MAX_CALIBRATION_PROMPTS}, got {len(prompts)}")
    for index, prompt in enumerate(prompts):
        _check(0 < len(prompt.ids) <= max_model_len // 2, f"calibration_prompts[{index}]",
               f"must hold 1 to {max_model_len // 2} token ids, got {len(prompt.ids)}")
        _check(all(0 <= token < vocab_size for token in prompt.ids), f"calibration_prompts[{index}]",
               f"token ids must be in [0, {vocab_size})")


def run_profile(
    runner: ModelRunner, description: executor_pb2.ExecutorDescription, request: executor_pb2.ProfileRequest
) -> executor_pb2.StepProfile:
    """Measure the step-time grid (batch sizes that do not fit the cache skipped) and the acceptance."""
    validate(request, description.vocab_size, description.max_model_len)
    started = time.monotonic()
    profiler = StepProfiler(runner, description.num_kv_blocks)
    max_k = description.max_num_spec_tokens
    context_len = request.context_len or DEFAULT_CONTEXT_LEN
    repeats = request.repeats or MAX_CYCLES
    sizes = [size for size in request.batch_sizes if profiler.fits(size, max_k, context_len, repeats)]
    _check(bool(sizes), "batch_sizes", f"not even {request.batch_sizes[0]} requests fit the KV cache")
    prompts = [list(prompt.ids) for prompt in request.calibration_prompts]
    table = monotone(profiler.step_times_ms(sizes, max_k, context_len, repeats, texts=prompts))
    prior = [0.0] * max_k
    if max_k and prompts:
        tokens = request.calibration_max_tokens or DEFAULT_CALIBRATION_TOKENS
        fitting = _fitting_prompts(profiler, prompts, tokens, max_k)
        _check(bool(fitting), "calibration_prompts", "none fits the KV cache")
        prior = profiler.acceptance(fitting, max_k, tokens)
    profile = executor_pb2.StepProfile(batch_sizes=sizes, acceptance_prior=prior,
                                       profile_s=time.monotonic() - started)
    for row in table:
        profile.rows.add(step_ms=row)
    return profile


def monotone(table: list[list[float]]) -> list[list[float]]:
    """The table with noise spikes removed: a step is never slower than one with more requests or more
    drafts (a busy machine only ever adds time, so the smaller of two such measurements is kept)."""
    repaired = [list(row) for row in table]
    for i in range(len(repaired) - 1, -1, -1):
        for k in range(len(repaired[i]) - 1, -1, -1):
            if i + 1 < len(repaired):
                repaired[i][k] = min(repaired[i][k], repaired[i + 1][k])
            if k + 1 < len(repaired[i]):
                repaired[i][k] = min(repaired[i][k], repaired[i][k + 1])
    return repaired


def _fitting_prompts(profiler: StepProfiler, prompts: list[list[int]], tokens: int, max_k: int) -> list[list[int]]:
    """The longest prefix of ``prompts`` whose generations fit the KV cache together."""
    for count in range(len(prompts), 0, -1):
        longest = profiler.acceptance_tokens(max(len(p) for p in prompts[:count]), max_k, tokens)
        if count <= profiler.max_batch_size(longest):
            return prompts[:count]
    return []
